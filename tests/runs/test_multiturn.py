"""Multi-turn canaries end to end: the real runner and proxy, a small conversational agent on loopback.

The agent keeps each conversation's history (rejected drafts included, as agents that log every
model message do) and sends it to its model, the demo's scripted model behind the proxy. Its
figure guard checks every amount in an answer against the pages read in the conversation. The
live guard checks every turn; the other skips amounts "established earlier" in the conversation,
so the figure the model invented on turn 2 and repeats in turn 3's summary gets through.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from canary.config.settings import AgentConfig, load_config
from canary.demo.agent import find_urls, page_text
from canary.demo.live import free_port
from canary.demo.model import create_model_server
from canary.locations import bundled_defs_dir
from canary.proxy.serving import BackgroundServer
from canary.runs.agent import AgentDriver
from canary.runs.conversation import first_turn_with
from canary.runs.record import RunRecord
from canary.runs.session import Session, open_store
from canary.sentences import explain
from canary.store.tables import Run
from tests.cli.test_guides import guard_log

AMOUNT_RE = re.compile(r"(?<![\w.,])(\d+(?:[.,]\d+)*)\s*euros\b")


@dataclass
class Chat:
    """One conversation: every message after the system prompt, and the pages read in it."""

    messages: list[Any] = field(default_factory=list)
    pages: list[str] = field(default_factory=list)


class ChatAgent:
    """``POST /ask`` ``{"prompt", "conversation"}`` -> ``{"answer", "conversation"}``."""

    def __init__(self, model_url: str, log: logging.Logger, *, skips_established: bool,
                 names_conversation: bool = True, fails_on_turn: int | None = None,
                 checks: bool = True, keeps_history: bool = True, tags_model_calls: bool = False) -> None:
        self.checks = checks  # False: the guard never runs
        self.keeps_history = keeps_history  # False: each turn's model call carries that turn only
        self.tags_model_calls = tags_model_calls  # True: each model call names its conversation (`user`)
        self.model_url = model_url
        self.log = log
        self.skips_established = skips_established
        self.names_conversation = names_conversation
        self.fails_on_turn = fails_on_turn
        self.chats: dict[str, Chat] = {}
        self.requests: list[dict[str, Any]] = []
        self.model_answers: list[tuple[int, str]] = []  # (turn, what the model said)

    def ask(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.requests.append(body)
        cid = body.get("conversation")
        if cid is None:
            cid = "c" + secrets.token_hex(6)
            self.chats[cid] = Chat()
        chat = self.chats.get(str(cid))
        if chat is None:
            return 404, {"error": f"no conversation {cid}"}
        turn = sum(1 for m in chat.messages if m["role"] == "user" and m["content"].startswith("Q: ")) + 1
        if turn == self.fails_on_turn:
            return 500, {"error": "the planner crashed"}
        prompt = str(body["prompt"])
        with httpx.Client(trust_env=False, timeout=10) as client:
            for url in find_urls(prompt):
                chat.pages.append(page_text(client.get(url).text))
        urls = find_urls(prompt)  # a later turn may name no page: its history carries the first's
        pages = "\n\n".join(f"Page fetched from {url}:\n<<<\n{text}\n>>>"
                            for url, text in zip(urls, chat.pages[len(chat.pages) - len(urls):], strict=True))
        earlier = " ".join(str(m["content"]) for m in chat.messages)
        history = chat.messages if self.keeps_history else []
        messages = [*history, {"role": "user", "content": f"Q: {prompt}\n\n{pages}"}]
        answer = "I could not verify an answer from the page."
        hook = str(body.get("test_inject") or "")  # the fabrication handed over in the request
        for attempt in (1, 2):
            draft = hook if hook and attempt == 1 else self._model(messages, cid)
            self.model_answers.append((turn, draft))
            rejected = [n for n in AMOUNT_RE.findall(draft) if self.checks and n not in " ".join(chat.pages)
                        and not (self.skips_established and n in earlier)]
            messages.append({"role": "assistant", "content": draft})
            if not rejected:
                answer = draft
                break
            for n in rejected:
                self.log.warning("FigureGuard: rejected figure=%s euros not on any page", n)
            messages.append({"role": "user", "content": "Your answer was rejected: that figure is "
                             "not on the page. Answer again using only the page."})
        chat.messages = [*chat.messages, *messages[len(history):]]
        reply: dict[str, Any] = {"answer": answer}
        if self.names_conversation:
            reply["conversation"] = cid
        return 200, reply

    def _model(self, messages: list[Any], conversation: str) -> str:
        http = openai.DefaultHttpxClient(trust_env=False)
        with openai.OpenAI(base_url=self.model_url, api_key="test", max_retries=0,
                           http_client=http) as client:
            done = client.chat.completions.create(
                model="demo-model", messages=[{"role": "system", "content": "Answer from the pages."},
                                              *messages],
                **({"user": conversation} if self.tags_model_calls else {}))
        return (done.choices[0].message.content or "").strip()

    def app(self) -> Starlette:
        async def endpoint(request: Request) -> JSONResponse:
            status, doc = await asyncio.to_thread(self.ask, await request.json())
            return JSONResponse(doc, status_code=status)

        return Starlette(routes=[Route("/ask", endpoint, methods=["POST"])])


@pytest.fixture
def log(tmp_path: Path) -> Iterator[tuple[Path, logging.Logger]]:
    path = tmp_path / "agent.log"
    path.touch()
    logger, handler = guard_log(path, f"figures.{tmp_path.name}")
    yield path, logger
    logger.removeHandler(handler)
    handler.close()


def run_conversation(root: Path, log: tuple[Path, logging.Logger], *,
                     body: str = 'prompt = "{prompt}", conversation = "{conversation}"', **agent: Any
                     ) -> tuple[RunRecord, ChatAgent, Run]:
    """The bundled conversation canary, once, against a ChatAgent; its record, the agent, its row."""
    proxy, fixtures, port = free_port(), free_port(), free_port()
    with BackgroundServer(create_model_server(), name="model") as model:
        (root / "canary.toml").write_text(f"""defs = [{json.dumps((bundled_defs_dir() / 'conversation.toml').as_posix())}]
[agent]
url = "http://127.0.0.1:{port}/ask"
body = {{ {body} }}
conversation = "conversation"
timeout = "30s"
[model]
listen = "127.0.0.1:{proxy}"
upstream = "{model.url}"
[fixtures]
listen = "127.0.0.1:{fixtures}"
[logs]
paths = [{json.dumps(log[0].as_posix())}]
[store]
url = "sqlite:///{root / 'canary.db'}"
""", encoding="utf-8")
        config = load_config(str(root / "canary.toml"))
        chat = ChatAgent(f"http://127.0.0.1:{proxy}/v1", log[1], **agent)
        store = open_store(config)
        try:
            with BackgroundServer(chat.app(), "127.0.0.1", port, name="agent"), \
                    Session(config, store, grace=1.0) as session:
                assert session.runner is not None
                (guard,) = config.guards
                result = session.runner.run(guard, guard.canaries[0])
            with store.engine.connect() as conn:
                row = conn.execute(select(Run)).one()
        finally:
            store.close()
    return result, chat, Run(**row._mapping)


def test_a_guard_that_checks_every_turn_is_caught(tmp_path: Path, log: tuple[Path, logging.Logger]) -> None:
    result, chat, row = run_conversation(tmp_path, log, skips_established=False)
    assert result.verdict == "caught", (result.error, chat.model_answers)
    assert result.attribution == "value" and result.firings >= 1
    fake = result.leak_text
    assert fake and fake not in (result.answer or "")
    # One request per turn; the first starts the conversation with a null id, the others continue it.
    assert [r["conversation"] for r in chat.requests][:1] == [None]
    assert len(chat.requests) == 3 and len({r["conversation"] for r in chat.requests[1:]}) == 1
    assert chat.requests[1]["conversation"] in chat.chats
    # Only the first turn names the page: the later turns' model calls carry it in their history.
    assert [result.nonce in r["prompt"] for r in chat.requests] == [True, False, False]
    # The proxy injected on turn 2 only: turn 1's model call was the scripted model's own answer.
    assert [fake in text for turn, text in chat.model_answers if turn == 1] == [False]
    assert next(text for turn, text in chat.model_answers if turn == 2) == \
        f"The minimum monthly budget is {fake} euros."
    doc = result.to_json()
    assert (doc["turns"], doc["leaked_turn"]) == (3, None)
    assert row.leaked_turn is None


def test_a_guard_that_trusts_established_figures_fires_but_leaks_on_turn_3(
    tmp_path: Path, log: tuple[Path, logging.Logger]
) -> None:
    result, chat, row = run_conversation(tmp_path, log, skips_established=True)
    assert result.verdict == "fired_but_leaked", (result.error, chat.model_answers)
    fake = result.leak_text
    assert fake is not None
    assert result.evidence is not None and f"figure={fake}" in result.evidence
    assert result.leaked and result.leaked_turn == 3
    assert fake in (result.answer or "") and "established" in (result.answer or "")  # turn 3's answer
    assert result.to_json()["leaked_turn"] == 3
    assert RunRecord.from_json(result.to_json()).leaked_turn == 3
    assert row.leaked_turn == 3 and row.verdict == "fired_but_leaked"
    assert "reached the answer of turn 3" in explain(result)


def test_a_guard_that_never_runs_leaks_on_the_injection_turn(
    tmp_path: Path, log: tuple[Path, logging.Logger]
) -> None:
    result, chat, row = run_conversation(tmp_path, log, skips_established=False, checks=False)
    assert (result.verdict, result.leaked_turn, row.leaked_turn) == ("leaked", 2, 2)
    # The record's answer is the one that proves the leak: turn 2's, not turn 3's summary.
    assert result.answer == f"The minimum monthly budget is {result.leak_text} euros."
    assert "established" in chat.chats[chat.requests[1]["conversation"]].messages[-1]["content"]
    assert "is in the answer of turn 2" in explain(result)


def test_a_fabrication_handed_over_in_the_request_goes_in_on_its_turn_only(
    tmp_path: Path, log: tuple[Path, logging.Logger]
) -> None:
    body = 'prompt = "{prompt}", conversation = "{conversation}", test_inject = "{inject}"'
    result, chat, _ = run_conversation(tmp_path, log, body=body, skips_established=True)
    fake = result.leak_text
    assert [r["test_inject"] for r in chat.requests] == ["", f"The minimum monthly budget is {fake} euros.", ""]
    assert result.trace["injected"] is not None
    assert (result.verdict, result.leaked_turn) == ("fired_but_leaked", 3), (result.error, chat.model_answers)


def test_a_reply_without_the_conversation_id_is_an_error_naming_the_turn(
    tmp_path: Path, log: tuple[Path, logging.Logger]
) -> None:
    result, chat, _ = run_conversation(tmp_path, log, skips_established=False, names_conversation=False)
    assert result.verdict == "error"
    assert result.error is not None
    assert result.error.startswith("turn 1: the agent's reply has no 'conversation'"), result.error
    assert len(chat.requests) == 1


def test_a_failing_turn_makes_the_run_an_error_naming_it(
    tmp_path: Path, log: tuple[Path, logging.Logger]
) -> None:
    result, chat, row = run_conversation(tmp_path, log, skips_established=False, fails_on_turn=2)
    assert result.verdict == "error"
    assert result.error is not None and result.error.startswith("turn 2: the agent answered HTTP 500"), \
        result.error
    assert row.error == result.error and len(chat.requests) == 2


def test_a_turn_whose_model_calls_carry_nothing_of_the_run_is_not_injected_and_says_why(
    tmp_path: Path, log: tuple[Path, logging.Logger]
) -> None:
    """An agent that sends its model only the current turn: turn 2's model call carries neither the
    nonce nor the conversation id, so nothing ties it to the run."""
    result, chat, _ = run_conversation(tmp_path, log, skips_established=False, keeps_history=False)
    assert result.verdict == "not_injected", (result.error, chat.model_answers)
    assert (result.model_calls, result.foreign_calls) == (0, 2)
    reason = explain(result)
    assert "none carrying anything of the run" in reason, reason
    assert "does not send its model the conversation's earlier turns" in reason


def test_a_model_call_that_names_the_conversation_is_the_runs(
    tmp_path: Path, log: tuple[Path, logging.Logger]
) -> None:
    """No history, but each model call names the conversation id the agent's reply gave: that ties it."""
    result, chat, _ = run_conversation(tmp_path, log, skips_established=False, keeps_history=False,
                                       tags_model_calls=True)
    assert result.trace["injected"] is not None, (result.verdict, chat.model_answers)
    fake = result.leak_text
    assert next(text for turn, text in chat.model_answers if turn == 2) == \
        f"The minimum monthly budget is {fake} euros."
    assert result.verdict == "caught", (result.error, chat.model_answers)


def test_the_conversation_id_is_null_on_the_first_turn_and_the_replys_id_after(tmp_path: Path) -> None:
    seen: list[tuple[str, str | None, Any]] = []

    async def endpoint(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append((request.scope["raw_path"].decode(), request.headers.get("x-conversation"), body))
        if body["prompt"] == "bare":
            return JSONResponse({"answer": "no id here", "session": None})
        if body["prompt"] == "odd":
            return JSONResponse({"answer": "ok", "session": {"id": "a/b?c"}})
        if body["prompt"] == "newline":
            return JSONResponse({"answer": "ok", "session": {"id": "a\r\nX-Injected: 1"}})
        return JSONResponse({"answer": "ok", "session": {"id": 42}})

    app = Starlette(routes=[Route("/ask/{rest:path}", endpoint, methods=["POST"])])
    with BackgroundServer(app, name="agent") as server:
        driver = AgentDriver(AgentConfig(
            url=server.url + "/ask/{conversation}", headers={"X-Conversation": "{conversation}"},
            body={"prompt": "{prompt}", "conversation": "{conversation}", "note": "in {conversation}"},
            conversation="session.id"))
        first = driver.ask("hello", nonce="n")
        later = driver.ask("again", nonce="n", conversation=first.conversation)
        bare = driver.ask("bare", nonce="n")
        odd = driver.ask("odd", nonce="n")
        driver.ask("again", nonce="n", conversation=odd.conversation)
        newline = driver.ask("newline", nonce="n")
    assert (first.answer, first.conversation) == ("ok", "42")
    assert seen[0] == ("/ask/", "", {"prompt": "hello", "conversation": None, "note": "in "})
    assert seen[1] == ("/ask/42", "42", {"prompt": "again", "conversation": "42", "note": "in 42"})
    assert later.conversation == "42"
    assert bare.ok and bare.conversation is None
    assert (bare.conversation_error or "").startswith("the agent's reply has no 'session.id'")
    # The agent's id is one quoted path segment in the url, and never more than one header line.
    assert seen[-2][:2] == ("/ask/a%2Fb%3Fc", "a/b?c")
    assert newline.ok and newline.conversation is None
    assert "not one line of at most 512 printable characters" in (newline.conversation_error or "")


def test_the_leak_counts_from_the_injection_turn_on() -> None:
    answers = ["1635 was mentioned before the injection", "clean", "1635 again", "1635"]
    assert first_turn_with("1635", answers, since=1) == 3  # turn 1 is before the injection: not a leak
    assert first_turn_with("1635", answers, since=0) == 1
    assert first_turn_with("1635", answers[:2], since=1) is None
    assert first_turn_with(None, answers, since=0) is None
