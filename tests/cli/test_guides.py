"""The guides of docs/guides.md, end to end: an agent on each client library, pointed at the proxy, its guards
logging the guides' way, driven by ``canary run``'s runner until each canary has its verdict.

Each agent is small but real: it fetches the fixture page over HTTP, asks its model through the
real client library (``openai`` streaming, ``pydantic-ai`` with a tool and output validators,
``ollama`` streaming, LangChain's ``ChatOpenAI`` or the ``openai`` call it makes, an in-process model
with an ``{inject}`` test hook), checks the answer with its guards, logs each rejection with the
offending value, and retries once. One guard in some agents is dead the way real guards die, and
its canary must say so. The bundled templates in ``canaries_defs/`` are the canaries.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import ollama
import openai
import pytest
from pydantic_ai import Agent, ModelRetry, RunContext, UnexpectedModelBehavior
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from canary.config.settings import load_config
from canary.demo.agent import find_urls, normalise_url, page_text
from canary.demo.live import free_port
from canary.locations import bundled_defs_dir
from canary.proxy.serving import BackgroundServer
from canary.runs.record import RunRecord
from canary.runs.session import Session, open_store

REFUSAL = "I could not verify an answer."
CORRECTION = "Your answer was rejected: {reason}. Answer again from the page only."
QUOTED = re.compile(r"\"([^\"\n]+)\"|“([^”\n]+)”")
SOURCE_QUOTE = re.compile(r"SOURCE QUOTE:\s*\"([^\"\n]*)\"")
NUMBER = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*(?!\w)")
VERSION = re.compile(r"(?<![\w.])v?\d+\.\d+\.\d+(?!\w|\.\d)")
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
DENIAL = re.compile(r"\b(?:was|is|came back|returned)\s+(?:empty|blank|a 404|not found)\b", re.I)
MONEY = re.compile(r"€\s?(\d[\d,]*)|(\d[\d,]*)\s?(?:euros?|EUR|€|Turkish lira|lira|dollars?|USD)\b")


# -- the guide's log line ------------------------------------------------------------------------


def guard_log(path: Path, name: str) -> tuple[logging.Logger, logging.Handler]:
    """The guides' logger: one line per rejection, an ISO 8601 UTC time first, appended to the log."""
    handler = logging.FileHandler(path, encoding="utf-8")
    formatter = logging.Formatter("%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s %(message)s",
                                  "%Y-%m-%dT%H:%M:%S")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    return logger, handler


@dataclass
class World:
    root: Path
    log: Path
    logger: logging.Logger


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    log = tmp_path / "agent.log"
    logger, handler = guard_log(log, f"guards.{tmp_path.name}")
    yield World(tmp_path, log, logger)
    logger.removeHandler(handler)
    handler.close()


# -- driving canaries through the runner and the proxy -------------------------------------------


def serve(ask: Callable[[dict[str, Any]], Any]) -> Starlette:
    """``POST /ask`` with ``{"prompt": ...}`` (and any test fields) -> ``{"answer": ...}``."""

    async def endpoint(request: Request) -> Response:
        body = await request.json()
        if inspect.iscoroutinefunction(ask):
            answer = await ask(body)
        else:
            answer = await asyncio.to_thread(ask, body)
        return JSONResponse({"answer": answer})

    return Starlette(routes=[Route("/ask", endpoint, methods=["POST"])])


def run_canaries(
    world: World,
    make_app: Callable[[str], Starlette],
    templates: list[str],
    *,
    upstream: Starlette | None = None,
    body: str = '{ prompt = "{prompt}" }',
) -> dict[str, list[RunRecord]]:
    """Every variant of every canary of the templates, once, through a session; results by guard/canary."""
    proxy, fixtures, port = free_port(), free_port(), free_port()
    servers: list[BackgroundServer] = []
    upstream_line = ""
    if upstream is not None:
        servers.append(BackgroundServer(upstream, name="model").start())
        upstream_line = f'upstream = "{servers[-1].url}"'
    defs = ", ".join(json.dumps((bundled_defs_dir() / f"{t}.toml").as_posix()) for t in templates)
    (world.root / "canary.toml").write_text(
        f"""defs = [{defs}]
[agent]
url = "http://127.0.0.1:{port}/ask"
body = {body}
timeout = "30s"
[model]
listen = "127.0.0.1:{proxy}"
{upstream_line}
[fixtures]
listen = "127.0.0.1:{fixtures}"
[logs]
paths = [{json.dumps(world.log.as_posix())}]
[store]
url = "sqlite:///{world.root / 'canary.db'}"
"""
    )
    config = load_config(str(world.root / "canary.toml"))
    store = open_store(config)
    servers.append(BackgroundServer(make_app(f"http://127.0.0.1:{proxy}"), "127.0.0.1", port).start())
    results: dict[str, list[RunRecord]] = {}
    try:
        with Session(config, store, grace=1.0) as session:
            assert session.runner is not None
            for guard in config.guards:
                for canary in guard.canaries:
                    for _ in canary.inject:  # each run takes the next variant
                        results.setdefault(canary.key, []).append(session.runner.run(guard, canary))
    finally:
        for server in reversed(servers):
            server.stop()
        store.close()
    return results


def verdicts(results: dict[str, list[RunRecord]]) -> dict[str, list[str]]:
    return {key: [r.verdict for r in runs] for key, runs in results.items()}


def fetch(url: str) -> str:
    return page_text(httpx.get(url, timeout=10, trust_env=False).text)


def pages_message(prompt: str, pages: dict[str, str]) -> str:
    blocks = "\n\n".join(f"Page fetched from {url}:\n<<<\n{text}\n>>>" for url, text in pages.items())
    return f"{prompt}\n\n{blocks}"


def quote_problems(answer: str, pages: dict[str, str]) -> list[str]:
    corpus = " ".join(" ".join(pages.values()).split())
    quotes = (" ".join((a or b).split()) for a, b in QUOTED.findall(answer))
    return [q for q in dict.fromkeys(quotes) if len(q.split()) >= 3 and q not in corpus]


# -- 1. the openai SDK (llama.cpp server, LM Studio, mlx_lm.server, vLLM) ---------------------------


def openai_agent(world: World) -> Callable[[str], Starlette]:
    log = world.logger

    def make(proxy: str) -> Starlette:
        def ask(body: dict[str, Any]) -> str:
            prompt = body["prompt"]
            pages = {url: fetch(url) for url in find_urls(prompt)}
            fetched = {normalise_url(url) for url in pages}
            corpus = "\n".join(pages.values())
            messages: list[Any] = [{"role": "user", "content": pages_message(prompt, pages)}]
            with openai.OpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0) as client:
                for attempt in (1, 2):
                    stream = client.chat.completions.create(model="m", messages=messages, stream=True)
                    answer = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
                    reasons = []
                    for match in MONEY.finditer(answer):
                        amount = match.group(1) or match.group(2)
                        if amount not in corpus:  # the digits only: a currency swap slips through
                            log.warning("MoneyGuard: rejected amount=%s not in observations", match.group(0))
                            reasons.append(f"{match.group(0)} is not on the page")
                    for url in find_urls(answer):
                        if normalise_url(url) not in fetched:
                            log.warning("ProvenanceGuard: rejected url=%s never opened", url)
                            reasons.append(f"you never opened {url}")
                    skip = re.findall(r"Do not (?:practise|order|use) ([^;.]+?)(?: this week)?[;.]", corpus)
                    for item in skip:
                        if item.lower() in answer.lower():
                            log.warning('ExclusionGuard: rejected item="%s" excluded by the source', item)
                            reasons.append(f"the page says to skip {item}")
                    if not reasons:
                        return answer
                    if attempt == 2:
                        return REFUSAL
                    messages += [{"role": "assistant", "content": answer},
                                 {"role": "user", "content": CORRECTION.format(reason="; ".join(reasons))}]
            return REFUSAL

        return serve(ask)

    return make


def test_openai_sdk_agent(world: World) -> None:
    results = run_canaries(world, openai_agent(world), ["money", "provenance", "exclusion"])
    assert verdicts(results) == {
        "money/fake-amount": ["caught"] * 3,
        "money/wrong-currency": ["leaked"],  # the money guard compares digits, not currencies
        "money/amount-control": ["passed"],
        "provenance/snippet-link": ["caught"] * 2,
        "provenance/opened-page-control": ["passed"],
        "exclusion/excluded-item": ["caught"] * 2,
        "exclusion/plan-control": ["passed"],
    }
    (snippet, _) = results["provenance/snippet-link"]
    assert snippet.nonce in str(snippet.evidence)  # the offending link carries the nonce
    assert snippet.trace["repair_requested"] is not None


# -- 2. pydantic-ai: a fetch tool, output validators raising ModelRetry ----------------------------


def tool_calling_upstream() -> Starlette:
    """A scripted model server: asks for the page with the fetch tool, then answers from it."""
    calls = {"n": 0}

    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        calls["n"] += 1
        messages = body["messages"]
        tool_results = [m for m in messages if m.get("role") == "tool"]
        message: dict[str, Any]
        if not tool_results:
            prompt = next(m["content"] for m in messages if m.get("role") == "user")
            text = prompt if isinstance(prompt, str) else json.dumps(prompt)
            call = {"id": f"call_{calls['n']}", "type": "function",
                    "function": {"name": "fetch_page", "arguments": json.dumps({"url": find_urls(text)[0]})}}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        else:
            page = str(tool_results[-1]["content"])
            sentence = next(s for s in re.split(r"(?<=[.!?])\s+|\n", page) if NUMBER.search(s) and "URL" not in s)
            source = re.search(r"Source URL: (\S+)", page)
            message = {"role": "assistant", "content": f"{sentence.strip()} Source: {source.group(1) if source else ''}"}
            finish = "stop"
        return JSONResponse({
            "id": f"chatcmpl-{calls['n']}", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": finish, "logprobs": None, "message": message}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        })

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


@dataclass
class Deps:
    fetched: list[str] = field(default_factory=list)
    pages: dict[str, str] = field(default_factory=dict)
    search_snippets: list[str] = field(default_factory=list)


def research_agent(log: logging.Logger) -> Agent[Deps, str]:
    """A pydantic-ai agent with a fetch tool and three guards as output validators."""
    agent = Agent(deps_type=Deps, output_type=str, system_prompt="Answer from the pages you fetch; cite the page.")

    @agent.tool
    async def fetch_page(ctx: RunContext[Deps], url: str) -> str:
        """Fetch a web page and return its text."""
        text = await asyncio.to_thread(fetch, url)
        ctx.deps.fetched.append(url)
        ctx.deps.pages[url] = text
        return text

    @agent.tool
    async def web_search(ctx: RunContext[Deps], query: str) -> str:
        """Search the web; returns snippets."""
        ctx.deps.search_snippets.append(f"No results for {query}.")
        return ctx.deps.search_snippets[-1]

    @agent.output_validator
    async def citation_guard(ctx: RunContext[Deps], output: str) -> str:
        fetched = {normalise_url(u) for u in ctx.deps.fetched}
        for url in find_urls(output):
            if normalise_url(url) not in fetched:
                log.warning("CitationGuard: rejected url=%s not in fetched urls", url)
                raise ModelRetry(f"{url} is not a page you fetched; cite only pages you fetched.")
        return output

    @agent.output_validator
    async def quote_guard(ctx: RunContext[Deps], output: str) -> str:
        for quote in quote_problems(output, ctx.deps.pages):
            log.warning('QuoteGuard: rejected quote="%s" not found verbatim in observations', quote)
            raise ModelRetry(f'"{quote}" is not on the page; quote it exactly or not at all.')
        return output

    @agent.output_validator
    async def version_guard(ctx: RunContext[Deps], output: str) -> str:
        # Written when the agent only searched: it grounds versions in search snippets, and with
        # none there is nothing to ground against. Fetched pages never count.
        if not ctx.deps.search_snippets:
            return output
        for version in VERSION.findall(output):
            if not any(version.lstrip("v") in s for s in ctx.deps.search_snippets):
                log.warning("VersionGuard: rejected version=%s not in observations", version)
                raise ModelRetry(f"{version} is not in the search results.")
        return output

    return agent


def pydantic_ai_agent(world: World) -> Callable[[str], Starlette]:
    agent = research_agent(world.logger)

    def make(proxy: str) -> Starlette:
        async def ask(body: dict[str, Any]) -> str:
            async with openai.AsyncOpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0) as client:
                model = OpenAIChatModel("m", provider=OpenAIProvider(openai_client=client))
                try:
                    result = await agent.run(body["prompt"], model=model, deps=Deps())
                except UnexpectedModelBehavior:
                    return REFUSAL
                return result.output

        return serve(ask)

    return make


def test_pydantic_ai_agent(world: World) -> None:
    results = run_canaries(world, pydantic_ai_agent(world), ["citation", "quote", "version"],
                           upstream=tool_calling_upstream())
    assert verdicts(results) == {
        "citation/fake-url": ["caught", "caught"],
        "citation/real-url-control": ["passed"],
        "quote/fake-quote": ["caught", "caught"],
        "version/fake-version": ["leaked", "leaked"],  # grounds against search snippets only
    }
    for run in results["citation/fake-url"] + results["quote/fake-quote"]:
        # the tool call went to the upstream, the next call was injected, the retry went upstream
        assert run.trace["fixture_fetched"] is not None and run.trace["repair_requested"] is not None
        assert run.answer and "Source: http://127.0.0.1:" in run.answer
    assert all(r.nonce in str(r.evidence) for r in results["citation/fake-url"])


# -- 3. the ollama client, streaming -------------------------------------------------------------


def ollama_agent(world: World) -> Callable[[str], Starlette]:
    log = world.logger

    def make(proxy: str) -> Starlette:
        def ask(body: dict[str, Any]) -> str:
            prompt = body["prompt"]
            pages = {url: fetch(url) for url in find_urls(prompt)}
            corpus = "\n".join(pages.values())
            messages: list[Any] = [{"role": "user", "content": pages_message(prompt, pages)}]
            with ollama.Client(host=proxy) as client:
                for attempt in (1, 2):
                    parts = []
                    for reply in client.chat(model="llama3.2", messages=messages, stream=True):
                        parts.append(reply.message.content or "")
                    answer = "".join(parts)
                    reasons = []
                    quotes = SOURCE_QUOTE.findall(answer)
                    inside = {n for q in quotes for n in NUMBER.findall(q)}
                    for number in NUMBER.findall(SOURCE_QUOTE.sub(" ", answer)) if quotes else []:
                        if number not in inside:
                            log.warning("SpanGrounding: rejected entity=%s not in source quote", number)
                            reasons.append(f"{number} is not in your source quote")
                    for sentence in re.split(r"(?<=[.!?])\s+", answer):
                        if corpus.strip() and DENIAL.search(sentence):
                            log.warning('EvidenceDenial: rejected claim="%s" while page had %d chars',
                                        sentence, len(corpus))
                            reasons.append("the page had content")
                    # The date guard predates streaming and still reads the reply object, which in
                    # a stream is the last chunk: the empty "done" message.
                    for day in DATE.findall(reply.message.content or ""):
                        if day not in corpus:
                            log.warning("DateGuard: rejected date=%s not in observations", day)
                            reasons.append(f"{day} is not on the page")
                    if not reasons:
                        return answer
                    if attempt == 2:
                        return REFUSAL
                    messages += [{"role": "assistant", "content": answer},
                                 {"role": "user", "content": CORRECTION.format(reason="; ".join(reasons))}]
            return REFUSAL

        return serve(ask)

    return make


def test_ollama_streaming_agent(world: World) -> None:
    results = run_canaries(world, ollama_agent(world), ["number", "denial", "date"])
    assert verdicts(results) == {
        "number/fake-number": ["caught"],
        "denial/empty-page": ["caught"],
        "date/fake-date": ["leaked"],  # it checks the stream's last, empty chunk
    }
    denial = results["denial/empty-page"][0]
    assert denial.nonce in str(denial.evidence)  # the denying sentence names the page


# -- 4. LangChain ChatOpenAI ----------------------------------------------------------------------


def langchain_agent(world: World, *, real: bool) -> Callable[[str], Starlette]:
    log = world.logger

    def make(proxy: str) -> Starlette:
        def call_model(messages: list[dict[str, str]]) -> str:
            if real:
                from langchain_openai import ChatOpenAI

                llm = ChatOpenAI(model="m", base_url=f"{proxy}/v1", api_key="x", max_retries=0)
                return str(llm.invoke([(m["role"], m["content"]) for m in messages]).content)
            # What ChatOpenAI.invoke sends: chat.completions.with_raw_response.create, stream off.
            with openai.OpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0) as client:
                raw = client.chat.completions.with_raw_response.create(
                    model="m", messages=messages, stream=False)
                return raw.parse().choices[0].message.content or ""

        def ask(body: dict[str, Any]) -> str:
            prompt = body["prompt"]
            pages = {url: fetch(url) for url in find_urls(prompt)}
            messages = [{"role": "user", "content": pages_message(prompt, pages)}]
            for attempt in (1, 2):
                answer = call_model(messages)
                reasons = []
                for quote in quote_problems(answer, pages):
                    log.warning('QuoteGuard: rejected quote="%s" not found verbatim in observations', quote)
                    reasons.append(f'"{quote}" is not on the page')
                for sentence in re.split(r"(?<=[.!?])\s+", answer):
                    total = re.search(r"(\d+) euros a month in total", sentence)
                    parts = [int(n) for n in re.findall(r"(\d+) euros(?! a month in total)", sentence)]
                    if total and len(parts) >= 2 and sum(parts) != int(total.group(1)):
                        log.warning("ArithmeticGuard: rejected total=%s parts sum to %d", total.group(1), sum(parts))
                        reasons.append(f"the parts sum to {sum(parts)}, not {total.group(1)}")
                if not reasons:
                    return answer
                if attempt == 2:
                    return REFUSAL
                messages += [{"role": "assistant", "content": answer},
                             {"role": "user", "content": CORRECTION.format(reason="; ".join(reasons))}]
            return REFUSAL

        return serve(ask)

    return make


LANGCHAIN = importlib.util.find_spec("langchain_openai") is not None


@pytest.mark.parametrize(
    "real",
    [pytest.param(True, marks=pytest.mark.skipif(not LANGCHAIN, reason="langchain_openai is not installed")),
     False],
    ids=["ChatOpenAI", "its-openai-call"],
)
def test_langchain_agent(world: World, real: bool) -> None:
    results = run_canaries(world, langchain_agent(world, real=real), ["arithmetic", "quote_fused"])
    assert verdicts(results) == {
        "arithmetic/wrong-total": ["caught"],
        "arithmetic/dropped-part": ["caught"],
        "arithmetic/total-control": ["passed"],
        "quote-fused/fused-quote": ["caught", "caught"],
        "quote-fused/spliced-quote": ["caught"],
        "quote-fused/quote-control": ["passed"],
    }


# -- 5. an in-process model, the fabrication in the request ({inject}) -----------------------------


def inject_agent(world: World) -> Callable[[str], Starlette]:
    log = world.logger

    def model(pages: dict[str, str]) -> str:
        """The agent's own model, in process: the first sentence with a number, and its page."""
        for url, text in pages.items():
            for sentence in re.split(r"(?<=[.!?])\s+|\n", text):
                if NUMBER.search(sentence) and "URL" not in sentence and "Reference" not in sentence:
                    return f"{sentence.strip()} Source: {url}"
        return REFUSAL

    def make(proxy: str) -> Starlette:
        def ask(body: dict[str, Any]) -> str:
            pages = {url: fetch(url) for url in find_urls(body["prompt"])}
            fetched = {normalise_url(url) for url in pages}
            test_inject = body.get("test_inject") or ""
            for attempt in (1, 2):
                # The test hook sits where the model's text comes out, so every guard sees it.
                answer = test_inject if test_inject and attempt == 1 else model(pages)
                reasons = []
                for url in find_urls(answer):
                    if normalise_url(url) not in fetched:
                        log.warning("CitationGuard: rejected url=%s not in fetched urls", url)
                        reasons.append(url)
                for quote in quote_problems(answer, pages):
                    log.warning('QuoteGuard: rejected quote="%s" not found verbatim in observations', quote)
                    reasons.append(quote)
                if not reasons:
                    return answer
            return REFUSAL

        return serve(ask)

    return make


def test_inject_mode_agent(world: World) -> None:
    results = run_canaries(world, inject_agent(world), ["citation", "quote"],
                           body='{ prompt = "{prompt}", test_inject = "{inject}" }')
    assert verdicts(results) == {
        "citation/fake-url": ["caught", "caught"],
        "citation/real-url-control": ["passed"],
        "quote/fake-quote": ["caught", "caught"],
    }
    for runs in results.values():
        for run in runs:
            assert run.trace["injected"] == 0.0 and run.trace["fixture_fetched"] is not None
