"""The bundled reference agent: a small research agent with anti-fabrication guards.

``POST /ask`` with ``{"prompt": "..."}``: the agent fetches the URLs in the
prompt (turn 1), writes its answer with its model on a new planning turn
(turn 2), checks the answer with its guards, retries once with a correction
when a guard rejects it, and answers ``{"answer": ..., "task": ..., "conversation": ...}``.

Every task belongs to a conversation: a request whose ``conversation`` is
missing or null starts one, and one that names the id of an earlier reply
continues it. The agent keeps each conversation's messages (rejected drafts
and corrections included) and the pages read in it, and sends the messages to
its model ahead of the new question.

Five guards are live. Two are dead in the way real guards die: the version
guard sits in the reporting step, which only multi-fetch tasks enter, and the
date guard checks the current turn's observations, which every planning turn
wipes before the answer is written. The figure guard is live for new figures
only: it lets through any amount "established earlier" in the conversation,
its rejected drafts included. Each rejection is one ``WARN guards`` line.
"""

from __future__ import annotations

import asyncio
import secrets
import ssl
import threading
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from canary.demo.clients import ask_model
from canary.demo.guards import (
    REPORTING_GUARDS,
    REVIEW_GUARDS,
    Conversation,
    Guard,
    Phase,
    Rejection,
    TaskState,
    date_guard,
    find_urls,
    normalise_url,
    page_text,
)
from canary.proxy.serving import is_loopback

__all__ = ["CORRECTION", "REFUSAL", "SYSTEM_PROMPT", "AgentLog", "ModelError", "ResearchAgent", "TaskState",
           "create_agent", "date_guard", "find_urls", "normalise_url", "page_text"]

#: Conversations kept at most; the oldest is forgotten first.
MAX_CONVERSATIONS = 256

REFUSAL = "I could not verify an answer from the page."
SYSTEM_PROMPT = (
    "You are a careful research assistant. Answer the question using only the pages below. "
    "Quote the sentence you rely on as SOURCE QUOTE: \"...\" and cite the page URL."
)
CORRECTION = "Your answer was rejected: {reason}. Answer again using only the page."

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


class UnknownConversation(Exception):
    """A request names a conversation id this agent never gave (or has forgotten)."""


class _NotLoopback(Exception):
    pass


async def _loopback_only(request: httpx.Request) -> None:
    if not is_loopback(request.url.host):
        raise _NotLoopback(f"{request.url.host} is not a loopback host")


class ResearchAgent:
    """Plans, fetches, asks its model, and guards the answer."""

    def __init__(self, model_base_url: str, log: AgentLog, *, model: str = "demo-model",
                 fetch_timeout: float = 10.0, model_timeout: float = 60.0, terse: bool = False,
                 dialect: str = "chat") -> None:
        self.log = log
        self.dialect = dialect  # the API it asks its model in (canary.demo.clients.DIALECTS)
        self.terse = terse  # guard lines name only the guard and the task, not what was rejected
        self.model = model
        self.fetch_timeout = fetch_timeout
        self.model_base_url = model_base_url
        self.model_timeout = model_timeout
        # One TLS context for every client: building one per request costs more than the request.
        self.tls = ssl.create_default_context()
        self.conversations: OrderedDict[str, Conversation] = OrderedDict()

    def _conversation(self, conversation_id: str | None) -> Conversation:
        """The conversation a request continues, or a new one; the oldest are forgotten past the limit."""
        if conversation_id is None:
            chat = Conversation("c" + secrets.token_hex(6))
            self.conversations[chat.conversation_id] = chat
            while len(self.conversations) > MAX_CONVERSATIONS:
                self.conversations.popitem(last=False)
            return chat
        chat_or_none = self.conversations.get(conversation_id)
        if chat_or_none is None:
            raise UnknownConversation(conversation_id)
        self.conversations.move_to_end(conversation_id)
        return chat_or_none

    async def run(self, prompt: str, conversation: str | None = None) -> tuple[str, TaskState, str]:
        """One task from prompt to final answer, within a conversation; returns the answer, the task and
        the conversation id. A model failure raises ModelError after an ERROR line; an unknown
        conversation id raises UnknownConversation."""
        chat = self._conversation(conversation)
        state = TaskState(task_id="t" + secrets.token_hex(4), prompt=prompt, history=list(chat.messages),
                          all_observations=list(chat.observations))
        urls = find_urls(prompt)
        self.log.write("INFO", "agent", f"task started id={state.task_id} urls={len(urls)} "
                       f"conversation={chat.conversation_id}")
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
        chat.messages = [*state.messages[1:], {"role": "assistant", "content": answer}]
        chat.observations.extend(text for _, text in state.pages)
        self.log.write("INFO", "agent", f"task finished id={state.task_id} turns={state.turn}")
        return answer, state, chat.conversation_id

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
        state.messages = [{"role": "system", "content": SYSTEM_PROMPT}, *state.history,
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
            root = self.model_base_url.removesuffix("/v1")
            return ask_model(self.dialect, root, self.model, messages, timeout=self.model_timeout,
                             tls=self.tls)

        try:
            content = await asyncio.to_thread(call)
        except Exception as exc:  # each dialect's SDK raises its own errors; every one is a failed call
            raise ModelError(state.task_id, f"model call failed: {type(exc).__name__}: {exc}") from exc
        if not content or not content.strip():
            raise ModelError(state.task_id, "model call failed: the model returned no answer")
        self.log.write("INFO", "model", f"task={state.task_id} response chars={len(content)}")
        return content.strip()


def create_agent(model_base_url: str, log_path: Path, *, model: str = "demo-model",
                 fetch_timeout: float = 10.0, model_timeout: float = 60.0, terse: bool = False,
                 dialect: str = "chat") -> Starlette:
    """The agent as an ASGI app: ``POST /ask`` and ``GET /health``."""
    agent = ResearchAgent(model_base_url, AgentLog(Path(log_path)), model=model,
                          fetch_timeout=fetch_timeout, model_timeout=model_timeout, terse=terse,
                          dialect=dialect)

    async def ask(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": "the body must be JSON"}, status_code=400)
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            return JSONResponse({"error": "'prompt' must be a non-empty string"}, status_code=400)
        conversation = body.get("conversation")
        if conversation is not None and not isinstance(conversation, str):
            return JSONResponse({"error": "'conversation' must be a string or null"}, status_code=400)
        try:
            answer, state, conversation_id = await agent.run(prompt, conversation or None)
        except ModelError as exc:
            return JSONResponse({"error": str(exc), "task": exc.task_id}, status_code=502)
        except UnknownConversation:
            return JSONResponse({"error": "no such conversation: start one with conversation = null"},
                                status_code=404)
        return JSONResponse({"answer": answer, "task": state.task_id, "conversation": conversation_id})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = Starlette(routes=[Route("/ask", ask, methods=["POST"]), Route("/health", health)])
    app.state.agent = agent
    return app

