"""The bundled reference agent: a small research agent with anti-fabrication guards.

``POST /ask`` with ``{"prompt": "..."}``: the agent fetches the URLs in the
prompt (turn 1), writes its answer with its model on a new planning turn
(turn 2), checks the answer with its guards, retries once with a correction
when a guard rejects it, and answers ``{"answer": ..., "task": ...}``.

Four guards are live. Two are dead in the way real guards die: the version
guard sits in the reporting step, which only multi-fetch tasks enter, and the
date guard checks the current turn's observations, which every planning turn
wipes before the answer is written. Each rejection is one ``WARN guards`` line.
"""

from __future__ import annotations

import asyncio
import calendar
import html
import re
import secrets
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import openai
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from canary.proxy.serving import is_loopback

REFUSAL = "I could not verify an answer from the page."
SYSTEM_PROMPT = (
    "You are a careful research assistant. Answer the question using only the pages below. "
    "Quote the sentence you rely on as SOURCE QUOTE: \"...\" and cite the page URL."
)
CORRECTION = "Your answer was rejected: {reason}. Answer again using only the page."

URL_RE = re.compile(r"https?://[^\s<>\"'()\[\]{}]+")
NUMBER_RE = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*(?!\w)")
QUOTED_RE = re.compile(r"\"([^\"\n]+)\"|“([^”\n]+)”")
SOURCE_QUOTE_RE = re.compile(r"SOURCE QUOTE:\s*(?:\"([^\"\n]*)\"|“([^”\n]*)”)")
VERSION_RE = re.compile(r"(?<![\w.])(v?)(\d+(?:\.\d+)+)(?!\w|\.\d)")
_MONTH_RE = r"(Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|" \
            r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
DATE_RES = (
    re.compile(r"\b(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})\b"),
    re.compile(rf"\b(?P<d>\d{{1,2}})\s+(?P<mn>{_MONTH_RE})\.?,?\s+(?P<y>\d{{4}})\b", re.I),
    re.compile(rf"\b(?P<mn>{_MONTH_RE})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<y>\d{{4}})\b", re.I),
)
DENIAL_RE = re.compile(
    r"\b(?:was|is|were|came back|returned|appears|appeared|seems|seemed)\s+(?:completely\s+|entirely\s+)?"
    r"(?:empty|blank|a 404|404|not found|unavailable)\b"
    r"|\b(?:had|has|contained|contains|with)\s+no\s+(?:content|text|information)\b"
    r"|\bcould(?: not|n't) be found\b|\bpage not found\b",
    re.I,
)
DENIAL_SUBJECT_RE = re.compile(r"\b(?:page|site|document|article|url|link|source|it)\b|https?://", re.I)


class Phase(StrEnum):
    """Where a task is in its life."""

    PLANNING = "planning"
    EXECUTING = "executing"
    REVIEWING = "reviewing"
    REPORTING = "reporting"
    COMPLETED = "completed"


@dataclass
class TaskState:
    """Everything the agent knows about one task."""

    task_id: str
    prompt: str
    phase: Phase = Phase.PLANNING
    turn: int = 0
    tool_calls: int = 0
    fetched_urls: list[str] = field(default_factory=list)
    page_chars: dict[str, int] = field(default_factory=dict)
    turn_observations: list[str] = field(default_factory=list)
    all_observations: list[str] = field(default_factory=list)
    pages: list[tuple[str, str]] = field(default_factory=list)
    messages: list[ChatCompletionMessageParam] = field(default_factory=list)


@dataclass(frozen=True)
class Rejection:
    """One guard's verdict against an answer: the line it logs and the reason the model is told."""

    guard: str
    line: str
    reason: str


class ModelError(Exception):
    """The model server could not be reached or gave no usable answer."""

    def __init__(self, task_id: str, message: str) -> None:
        super().__init__(message)
        self.task_id = task_id


class AgentLog:
    """Appends ``<ts> <LEVEL> <component> <message>`` lines, each whole in one write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, level: str, component: str, message: str) -> None:
        """Append one line stamped with the current UTC time in milliseconds."""
        now = datetime.now(UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
        flat = message.replace("\r", " ").replace("\n", " ")
        data = f"{stamp} {level:<5} {component} {flat}\n".encode()
        with self._lock, open(self.path, "ab", buffering=0) as handle:
            handle.write(data)


_HIDDEN_RE = re.compile(r"<(script|style)\b.*?</\1\s*>|<!--.*?-->", re.S | re.I)
_BLOCK_RE = re.compile(r"</?(?:p|div|br|li|ul|ol|h[1-6]|tr|td|section|article|header|footer|title|pre|table|"
                       r"blockquote)\b[^>]*>", re.I)
_TAG_RE = re.compile(r"<[^>]*>")


def page_text(body: str, content_type: str = "text/html") -> str:
    """The readable text of a page: one line per block, whitespace collapsed."""
    text = body
    if "html" in content_type or body.lstrip().startswith("<"):
        text = html.unescape(_TAG_RE.sub("", _BLOCK_RE.sub("\n", _HIDDEN_RE.sub(" ", body))))
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def find_urls(text: str) -> list[str]:
    """The URLs in a text, in order, without repeats or trailing punctuation."""
    return list(dict.fromkeys(match.group(0).rstrip(".,;:!?") for match in URL_RE.finditer(text)))


def normalise_url(url: str) -> str:
    """A URL compared without case in the host, a leading ``www.``, a trailing slash or a fragment."""
    try:
        parts = urlsplit(url.rstrip(".,;:!?"))
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return url.lower().rstrip("/")
    host = (parts.hostname or "").lower().removeprefix("www.")
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme.lower()}://{host}{port}{parts.path.rstrip('/')}{query}"


def _sentences(text: str) -> list[str]:
    return [s for line in text.splitlines() for s in re.split(r"(?<=[.!?])\s+", line) if s.strip()]


def find_dates(text: str) -> list[tuple[str, date]]:
    """Every date written as ``2026-11-29``, ``29 November 2026`` or ``November 29, 2026``."""
    found: list[tuple[str, date]] = []
    for pattern in DATE_RES:
        for match in pattern.finditer(text):
            parts = match.groupdict()
            month = int(parts["m"]) if parts.get("m") else _month_number(parts["mn"])
            try:
                found.append((match.group(0), date(int(parts["y"]), month, int(parts["d"]))))
            except ValueError:
                continue
    return found


def _month_number(name: str) -> int:
    return list(calendar.month_abbr).index(name[:3].title())


def find_versions(text: str) -> list[str]:
    """Version-shaped numbers as written: ``1.2.3``, ``v0.31.6``, ``v2.1``."""
    return [m.group(0) for m in VERSION_RE.finditer(text) if m.group(1) or m.group(2).count(".") >= 2]


Guard = Callable[[TaskState, str], list[Rejection]]


def citation_guard(state: TaskState, answer: str) -> list[Rejection]:
    """Every URL in the answer must be one the agent fetched."""
    fetched = {normalise_url(url) for url in state.fetched_urls}
    return [
        Rejection("citation", f"CitationGuard: rejected url={url} not in fetched urls",
                  f"the URL {url} is not a page you read")
        for url in find_urls(answer) if normalise_url(url) not in fetched
    ]


def quote_guard(state: TaskState, answer: str) -> list[Rejection]:
    """Every double-quoted sentence in the answer must appear verbatim in what was fetched."""
    corpus = " ".join("\n".join(state.all_observations).split())
    quotes = (" ".join((a or b).split()) for a, b in QUOTED_RE.findall(answer))
    return [
        Rejection("quote", f'QuoteGuard: rejected quote="{quote}" not found verbatim in observations',
                  f'the quote "{quote}" is not on the page')
        for quote in dict.fromkeys(quotes) if len(quote.split()) >= 3 and quote not in corpus
    ]


def number_guard(state: TaskState, answer: str) -> list[Rejection]:
    """With a ``SOURCE QUOTE``, every number outside the quote must appear inside it."""
    quotes = [a or b for a, b in SOURCE_QUOTE_RE.findall(answer)]
    if not quotes:
        return []
    inside = {n.replace(",", "") for quote in quotes for n in NUMBER_RE.findall(URL_RE.sub(" ", quote))}
    outside = NUMBER_RE.findall(URL_RE.sub(" ", SOURCE_QUOTE_RE.sub(" ", answer)))
    return [
        Rejection("number", f"SpanGrounding: rejected entity={n} not in source quote",
                  f"the number {n} is not in your source quote")
        for n in dict.fromkeys(outside) if n.replace(",", "") not in inside
    ]


def denial_guard(state: TaskState, answer: str) -> list[Rejection]:
    """The answer may not call a page empty or missing when the agent read content from it."""
    chars = sum(state.page_chars.values())
    if not chars:
        return []
    return [
        Rejection("denial", f'EvidenceDenial: rejected claim="{sentence}" while page had {chars} chars',
                  f"the page had {chars} characters of content, it was not empty or missing")
        for sentence in _sentences(answer)
        if DENIAL_RE.search(sentence) and DENIAL_SUBJECT_RE.search(sentence)
    ]


def date_guard(state: TaskState, answer: str) -> list[Rejection]:
    """Every date in the answer must appear in the observations."""
    # Only check when this turn has observations: with no tool output in the turn there is
    # nothing to ground a date against, and rejecting every date would be a false alarm.
    if not state.turn_observations:
        return []
    seen = {when for _, when in find_dates("\n".join(state.turn_observations))}
    return [
        Rejection("date", f"DateGuard: rejected date={text} not in observations",
                  f"the date {text} is not on the page")
        for text, when in find_dates(URL_RE.sub(" ", answer)) if when not in seen
    ]


def version_guard(state: TaskState, answer: str) -> list[Rejection]:
    """Every version number in the answer must appear in the observations."""
    seen = {v.lstrip("v") for v in find_versions("\n".join(state.all_observations))}
    return [
        Rejection("version", f"VersionGuard: rejected version={v} not in observations",
                  f"the version {v} is not on the page")
        for v in dict.fromkeys(find_versions(URL_RE.sub(" ", answer))) if v.lstrip("v") not in seen
    ]


REVIEW_GUARDS: tuple[Guard, ...] = (citation_guard, quote_guard, number_guard, denial_guard, date_guard)
REPORTING_GUARDS: tuple[Guard, ...] = (version_guard,)


class _NotLoopback(Exception):
    pass


async def _loopback_only(request: httpx.Request) -> None:
    if not is_loopback(request.url.host):
        raise _NotLoopback(f"{request.url.host} is not a loopback host")


class ResearchAgent:
    """Plans, fetches, asks its model, and guards the answer."""

    def __init__(self, model_base_url: str, log: AgentLog, *, model: str = "demo-model",
                 fetch_timeout: float = 10.0, model_timeout: float = 60.0, terse: bool = False) -> None:
        self.log = log
        self.terse = terse  # guard lines name only the guard and the task, not what was rejected
        self.model = model
        self.fetch_timeout = fetch_timeout
        self.model_base_url = model_base_url
        self.model_timeout = model_timeout
        # One TLS context for every client: building one per request costs more than the request.
        self.tls = ssl.create_default_context()

    async def run(self, prompt: str) -> tuple[str, TaskState]:
        """One task from prompt to final answer; a model failure raises ModelError after an ERROR line."""
        state = TaskState(task_id="t" + secrets.token_hex(4), prompt=prompt)
        urls = find_urls(prompt)
        self.log.write("INFO", "agent", f"task started id={state.task_id} urls={len(urls)}")
        try:
            self._begin_turn(state)
            self.log.write("INFO", "planner", f"task={state.task_id} plan web_fetch x{len(urls)}")
            self._enter(state, Phase.EXECUTING)
            await self._execute(state, urls)
            self._begin_turn(state)
            answer = await self._compose(state)
        except ModelError as exc:
            self.log.write("ERROR", "agent", f"task failed id={state.task_id} error={exc}")
            raise
        self._enter(state, Phase.COMPLETED)
        self.log.write("INFO", "agent", f"task finished id={state.task_id} turns={state.turn}")
        return answer, state

    def _begin_turn(self, state: TaskState) -> None:
        state.turn += 1
        dropped = len(state.turn_observations)
        state.turn_observations.clear()
        self.log.write("DEBUG", "observations",
                       f"cleared task={state.task_id} turn={state.turn} dropped={dropped}")
        self._enter(state, Phase.PLANNING)

    def _enter(self, state: TaskState, phase: Phase) -> None:
        state.phase = phase
        self.log.write("INFO", "planner", f"task={state.task_id} turn={state.turn} state={phase}")

    async def _execute(self, state: TaskState, urls: list[str]) -> None:
        async with httpx.AsyncClient(timeout=self.fetch_timeout, follow_redirects=True, trust_env=False,
                                     verify=self.tls, event_hooks={"request": [_loopback_only]}) as client:
            for url in urls:
                state.tool_calls += 1
                observation = await self._fetch(client, state, url)
                state.pages.append((url, observation))
                state.turn_observations.append(observation)
                state.all_observations.append(observation)

    async def _fetch(self, client: httpx.AsyncClient, state: TaskState, url: str) -> str:
        try:
            response = await client.get(url)
        except (httpx.HTTPError, _NotLoopback) as exc:
            reason = str(exc) or type(exc).__name__
            self.log.write("WARN", "tools",
                           f"task={state.task_id} web_fetch url={url} fetch failed: {reason}")
            return f"fetch failed: {reason}"
        state.fetched_urls.extend(dict.fromkeys([url, str(response.url)]))
        if response.status_code >= 400:
            self.log.write("WARN", "tools", f"task={state.task_id} web_fetch url={url} "
                           f"status={response.status_code} fetch failed")
            return f"fetch failed: HTTP {response.status_code} {response.reason_phrase}".rstrip()
        text = page_text(response.text, response.headers.get("content-type", ""))
        state.page_chars[url] = len(text)
        self.log.write("INFO", "tools", f"task={state.task_id} web_fetch url={url} "
                       f"status={response.status_code} chars={len(text)}")
        return text

    def _user_message(self, state: TaskState) -> str:
        blocks = [f"Page fetched from {url}:\n<<<\n{text}\n>>>" for url, text in state.pages]
        return f"Question: {state.prompt}\n\n" + ("\n\n".join(blocks) or "(No pages were fetched.)")

    async def _compose(self, state: TaskState) -> str:
        state.messages = [{"role": "system", "content": SYSTEM_PROMPT},
                          {"role": "user", "content": self._user_message(state)}]
        for attempt in (1, 2):
            answer = await self._ask_model(state)
            rejections = self._handle_reviewing(state, answer)
            if not rejections and state.tool_calls > 1:
                rejections = self._handle_reporting(state, answer)
            if not rejections:
                return answer
            if attempt == 2:
                self.log.write("WARN", "agent", f"task={state.task_id} retry rejected too, refusing")
                return REFUSAL
            reason = "; ".join(r.reason for r in rejections)
            self.log.write("INFO", "agent", f"task={state.task_id} retrying rejections={len(rejections)}")
            state.messages.append({"role": "assistant", "content": answer})
            state.messages.append({"role": "user", "content": CORRECTION.format(reason=reason)})
            self._begin_turn(state)
        raise AssertionError("unreachable")  # pragma: no cover

    def _handle_reviewing(self, state: TaskState, answer: str) -> list[Rejection]:
        self._enter(state, Phase.REVIEWING)
        return self._apply(state, REVIEW_GUARDS, answer)

    def _handle_reporting(self, state: TaskState, answer: str) -> list[Rejection]:
        self._enter(state, Phase.REPORTING)
        return self._apply(state, REPORTING_GUARDS, answer)

    def _apply(self, state: TaskState, guards: tuple[Guard, ...], answer: str) -> list[Rejection]:
        rejections = [rejection for guard in guards for rejection in guard(state, answer)]
        for rejection in rejections:
            line = " ".join(rejection.line.split(" ")[:2]) if self.terse else rejection.line
            self.log.write("WARN", "guards", f"{line} task={state.task_id}")
        if not rejections:
            self.log.write("DEBUG", "guards", f"task={state.task_id} passed checks={len(guards)}")
        return rejections

    async def _ask_model(self, state: TaskState) -> str:
        chars = sum(len(str(m.get("content") or "")) for m in state.messages)
        self.log.write("DEBUG", "model", f"task={state.task_id} request model={self.model} "
                       f"messages={len(state.messages)} chars={chars}")
        messages = list(state.messages)

        def call() -> str | None:
            http = openai.DefaultHttpxClient(trust_env=False, verify=self.tls)
            with OpenAI(base_url=self.model_base_url, api_key="demo", timeout=self.model_timeout,
                        max_retries=1, http_client=http) as client:
                completion = client.chat.completions.create(model=self.model, messages=messages, stream=False)
            return completion.choices[0].message.content if completion.choices else None

        try:
            content = await asyncio.to_thread(call)
        except openai.OpenAIError as exc:
            raise ModelError(state.task_id, f"model call failed: {type(exc).__name__}: {exc}") from exc
        if not content or not content.strip():
            raise ModelError(state.task_id, "model call failed: the model returned no answer")
        self.log.write("INFO", "model", f"task={state.task_id} response chars={len(content)}")
        return content.strip()


def create_agent(model_base_url: str, log_path: Path, *, model: str = "demo-model",
                 fetch_timeout: float = 10.0, model_timeout: float = 60.0, terse: bool = False) -> Starlette:
    """The agent as an ASGI app: ``POST /ask`` and ``GET /health``."""
    agent = ResearchAgent(model_base_url, AgentLog(Path(log_path)), model=model,
                          fetch_timeout=fetch_timeout, model_timeout=model_timeout, terse=terse)

    async def ask(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": "the body must be JSON"}, status_code=400)
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            return JSONResponse({"error": "'prompt' must be a non-empty string"}, status_code=400)
        try:
            answer, state = await agent.run(prompt)
        except ModelError as exc:
            return JSONResponse({"error": str(exc), "task": exc.task_id}, status_code=502)
        return JSONResponse({"answer": answer, "task": state.task_id})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = Starlette(routes=[Route("/ask", ask, methods=["POST"]), Route("/health", health)])
    app.state.agent = agent
    return app

