"""A scripted model server for the demo: deterministic, no weights, in every dialect the proxy speaks.

It reads the last user message that holds a page, takes the first sentence of
the page with a number in it (else the first sentence), and answers by quoting
it: ``<sentence> SOURCE QUOTE: "<sentence>" Source: <url>``. A correction
message gets the same honest answer. Asked to summarise what "we established"
(the last turn of a conversation), it repeats the first amount it gave once the
conversation asked for one, as a model that trusts its own earlier turns does,
whether or not that amount was ever on a page (or a guard rejected it). With
``fabricate_every=N``, every Nth call is answered with a fabrication instead, of a rotating kind (a URL never
fetched, a quote not on the page, a number outside its quote, "the page was
empty"), so that organic traffic makes the agent's guards fire now and then.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from canary.proxy.dialects import family_for, new_token, script

MODEL_ID = "demo-model"
FABRICATIONS = ("url", "quote", "number", "denial")
PAGE_RE = re.compile(r"Page fetched from (\S+):\n<<<\n(.*?)\n>>>", re.S)
SOURCE_LINE_RE = re.compile(r"Source URL:\s*(\S+)")
URL_RE = re.compile(r"https?://[^\s<>\"'()\[\]{}]+")
NUMBER_RE = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*(?!\w)")
NO_PAGE = "I have no page to answer from."
SUMMARY_RE = re.compile(r"\bsummari[sz]e\b.*\bestablished\b", re.I | re.S)
AMOUNT_QUESTION_RE = re.compile(r"\b(?:budget|amount|how much|cost)\b", re.I)
AMOUNT_RE = re.compile(r"(?<![\w.,])(\d+(?:[.,]\d+)*)\s*euros\b", re.I)


@dataclass(frozen=True)
class PageView:
    """A page as the model sees it in a prompt: the URL it came from and its text."""

    url: str
    text: str


def content_text(content: object) -> str:
    """A message's content as text, whether a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def pages_in(messages: Iterable[Mapping[str, Any]]) -> list[PageView]:
    """The pages in the latest user message that holds any (a correction message holds none)."""
    users = [content_text(m.get("content")) for m in messages if m.get("role") == "user"]
    for text in reversed(users):
        found = [PageView(url, body) for url, body in PAGE_RE.findall(text)]
        if found:
            return found
    for text in reversed(users):
        source = SOURCE_LINE_RE.search(text) or URL_RE.search(text)
        if source:
            url = source.group(1) if source.re is SOURCE_LINE_RE else source.group(0)
            return [PageView(url.rstrip(".,;:!?"), text)]
    return []


def key_sentence(text: str) -> str | None:
    """The first sentence of the page with a number in it, else its first sentence."""
    candidates = [
        sentence.strip()
        for line in text.splitlines()
        if not line.lower().startswith(("source url", "reference", "question:"))
        for sentence in re.split(r"(?<=[.!?])\s+", line)
        if len(sentence.split()) >= 3 and '"' not in sentence and not URL_RE.search(sentence)
    ]
    with_number = [s for s in candidates if NUMBER_RE.search(s)]
    return (with_number or candidates or [None])[0]


def honest_answer(messages: Iterable[Mapping[str, Any]]) -> str:
    """The answer that quotes the page it was given, and so passes every live guard."""
    pages = pages_in(messages)
    if not pages:
        return NO_PAGE
    readable = [p for p in pages if not p.text.startswith("fetch failed:")]
    if not readable:
        return f"I could not read the page ({pages[0].text})."
    for page in readable:
        sentence = key_sentence(page.text)
        if sentence:
            return f'{sentence} SOURCE QUOTE: "{sentence}" Source: {page.url}'
    return "I found nothing on the page that answers the question."


def _question(message: Mapping[str, Any]) -> str:
    """A user message without the pages the agent appended to it."""
    return content_text(message.get("content")).split("\n\n", 1)[0]


def summary_answer(messages: Iterable[Mapping[str, Any]]) -> str | None:
    """The answer to "summarise what we established": the first amount given once one was asked for.

    None when the latest user message asks for no summary, or no such amount was stated.
    """
    listed = list(messages)
    users = [_question(m) for m in listed if m.get("role") == "user"]
    if not users or not SUMMARY_RE.search(users[-1]):
        return None
    asked = False
    for message in listed[:-1]:
        if message.get("role") == "user":
            asked = asked or bool(AMOUNT_QUESTION_RE.search(_question(message)))
        elif message.get("role") == "assistant" and asked:
            amount = AMOUNT_RE.search(content_text(message.get("content")))
            if amount is not None:
                return (f"Summarising what we established: the minimum monthly budget is "
                        f"{amount.group(1)} euros. Steps: found the company, apply for the permit, "
                        "show the monthly budget.")
    return None


def fabricated_answer(messages: Iterable[Mapping[str, Any]], kind: str, call: int) -> str:
    """A deliberately ungrounded answer of one kind: ``url``, ``quote``, ``number`` or ``denial``."""
    pages = [p for p in pages_in(messages) if not p.text.startswith("fetch failed:")]
    page = pages[0] if pages else PageView("https://docs.example.org/", "")
    sentence = key_sentence(page.text) or "The office publishes its figures every year."
    if kind == "url":
        return f"{sentence} Source: https://archive.example.org/reports/{call}"
    if kind == "quote":
        return f'The page says: "{sentence.rstrip(".!?")}, without any exception."'
    if kind == "number":
        number = NUMBER_RE.search(sentence)
        if number is None:
            return f'The figure is {1000 + call}. SOURCE QUOTE: "{sentence}"'
        fake = str(int(re.sub(r"\D", "", number.group(0))) + 1000 + call)
        changed = sentence[: number.start()] + fake + sentence[number.end():]
        return f'{changed} SOURCE QUOTE: "{sentence}" Source: {page.url}'
    if kind == "denial":
        return f"The page at {page.url} was empty, so I cannot say."
    raise ValueError(f"unknown fabrication {kind!r}")


class ScriptedModel:
    """Counts calls and decides each answer; thread-safe."""

    def __init__(self, fabricate_every: int = 0, kinds: tuple[str, ...] = FABRICATIONS) -> None:
        if fabricate_every < 0:
            raise ValueError("fabricate_every must be 0 (never) or positive")
        self.fabricate_every = fabricate_every
        self.kinds = kinds
        self.calls = 0
        self.fabrications: list[str] = []
        self._lock = threading.Lock()

    def answer(self, messages: Iterable[Mapping[str, Any]]) -> tuple[int, str]:
        """The call's number and its answer."""
        with self._lock:
            self.calls += 1
            call = self.calls
            kind = None
            if self.fabricate_every and call % self.fabricate_every == 0:
                kind = self.kinds[len(self.fabrications) % len(self.kinds)]
                self.fabrications.append(kind)
        if kind is None:
            return call, summary_answer(messages) or honest_answer(messages)
        return call, fabricated_answer(messages, kind, call)


def _usage(messages: Iterable[Mapping[str, Any]], text: str) -> dict[str, int]:
    prompt = sum(len(content_text(m.get("content")).split()) for m in messages)
    completion = len(text.split())
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                   "code": None}}, status_code=status)


def _chunk(ident: str, created: int, model: str, delta: dict[str, str], finish: str | None) -> str:
    body = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n"


async def _stream(ident: str, created: int, model: str, text: str, usage: dict[str, int] | None
                  ) -> AsyncIterator[str]:
    yield _chunk(ident, created, model, {"role": "assistant", "content": ""}, None)
    words = re.findall(r"\S+\s*", text)
    for start in range(0, len(words), 6):
        yield _chunk(ident, created, model, {"content": "".join(words[start:start + 6])}, None)
    yield _chunk(ident, created, model, {}, "stop")
    if usage is not None:
        body = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                "system_fingerprint": None, "choices": [], "usage": usage}
        yield f"data: {json.dumps(body)}\n\n"
    yield "data: [DONE]\n\n"


def create_model_server(*, fabricate_every: int = 0, kinds: tuple[str, ...] = FABRICATIONS) -> Starlette:
    """The scripted model as an ASGI app: ``POST /v1/chat/completions`` and ``GET /v1/models``."""
    scripted = ScriptedModel(fabricate_every, kinds)
    started = int(time.time())

    async def chat_completions(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _error("the request body is not valid JSON")
        if not isinstance(body, dict):
            return _error("the request body must be a JSON object")
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return _error("'messages' must be a list of message objects")
        model = str(body.get("model") or MODEL_ID)
        call, text = scripted.answer(messages)
        ident = f"chatcmpl-demo{call:08d}"
        created = int(time.time())
        usage = _usage(messages, text)
        if body.get("stream"):
            options = body.get("stream_options")
            include = isinstance(options, dict) and bool(options.get("include_usage"))
            return StreamingResponse(_stream(ident, created, model, text, usage if include else None),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        return JSONResponse({
            "id": ident, "object": "chat.completion", "created": created, "model": model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "logprobs": None, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text, "refusal": None}}],
            "usage": usage,
        })

    async def other_dialect(request: Request) -> Response:
        """Responses, completions, Ollama, Anthropic and Gemini: the same model, in their own shapes."""
        path = request.url.path
        spoken = family_for(path)
        if spoken is None:
            return _error("no such endpoint", status=404)
        body = await request.body()
        _, text = scripted.answer(spoken.messages(path, body))
        answer = spoken.read_request(path, body, request.url.query.encode())
        made = script(spoken.name, text, answer, now=time.time(), token=new_token())
        headers = {k.decode(): v.decode() for k, v in made.headers if k != b"content-length"}
        if made.stream:
            return StreamingResponse(iter(made.chunks), headers=headers)
        return Response(made.body, headers=headers)

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [
            {"id": MODEL_ID, "object": "model", "created": started, "owned_by": "guard-canary"}]})

    app = Starlette(routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/{path:path}", other_dialect, methods=["POST"]),
    ])
    app.state.model = scripted
    return app

