"""What every dialect family shares: the questions each answers, the request and answer types, framing.

A family is one API's way of talking: which paths are its model calls, whether a call streams,
where its messages and tools are, how a text answer and a tool call are written (whole and
streamed), what its error bodies look like and whether a call asked for extended thinking.
Scripted answers take the clock and the random id as parameters, so the same inputs give the
same bytes.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from canary.proxy.framing import (
    JSON_HEADERS,
    NDJSON_HEADERS,
    SSE_HEADERS,
    Headers,
    Scripted,
    dump,
    json_body,
    ndjson,
    sse,
    typed_sse,
)

__all__ = [
    "JSON_HEADERS", "NDJSON_HEADERS", "SSE_HEADERS", "AnswerRequest", "Family", "Headers", "OneShape",
    "Scripted", "ToolCall", "chat_messages", "dump", "estimate_tokens", "json_body", "ndjson", "new_token",
    "parse_object", "requested_stream", "sse", "text_of", "token_usage", "tools_listed", "typed_sse",
]

_JSON_SPACE = b" \t\r\n"
_STREAM_KEY = b'"stream'


@dataclass(frozen=True)
class AnswerRequest:
    """What a scripted answer needs to know about the request it answers."""

    model: str
    stream: bool
    include_usage: bool = False
    prompt_tokens: int = 0
    raw: bool = False  # Ollama generate in raw mode has no ``context``
    array: bool = False  # Gemini streamed without ``alt=sse``: one JSON array of responses


@dataclass(frozen=True)
class ToolCall:
    """One fabricated tool call: the tool's name, its JSON arguments and the call's id."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    call_id: str = "call_0"

    @property
    def arguments_json(self) -> str:
        """The arguments as the OpenAI dialects carry them: a JSON-encoded string."""
        return json.dumps(self.arguments, ensure_ascii=False)

    @property
    def as_text(self) -> str:
        """The call as JSON text, for endpoints that have no tool calls."""
        return json.dumps({"name": self.name, "arguments": self.arguments}, ensure_ascii=False)


class Family:
    """One dialect family: the questions the proxy asks of a model call, answered for one API.

    The defaults fit a JSON API whose body carries ``"stream"`` and a ``tools`` list; a family
    overrides what differs.
    """

    #: The dialect's name, as runs and traces show it.
    name: str = ""
    #: The exact request paths of its model calls.
    paths: tuple[str, ...] = ()
    #: The stream mode when the request says nothing.
    default_stream: bool = False
    #: Whether its requests can offer tools; a family without them gets a call as JSON text.
    has_tools: bool = True

    def matches(self, path: str) -> bool:
        """Whether ``path`` is one of its model calls beyond the exact ``paths`` (a path pattern)."""
        return False

    def stream(self, path: str, body: bytes) -> bool:
        """The stream mode the client asked for, read without parsing the JSON."""
        return requested_stream(body, self.default_stream)

    def read_request(self, path: str, body: bytes, query: bytes = b"") -> AnswerRequest:
        """Parse the request just enough to answer it; a body that is not a JSON object gets defaults."""
        data = parse_object(body)
        model = data.get("model")
        stream = data.get("stream")
        options = data.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        return AnswerRequest(
            model=model if isinstance(model, str) else "",
            stream=stream if isinstance(stream, bool) else self.default_stream,
            include_usage=include_usage,
            prompt_tokens=estimate_tokens(len(body)),
            raw=data.get("raw") is True,
        )

    def offers_tools(self, body: bytes) -> bool:
        """Whether the request can take a tool call: it offers tools, or the family has none at all."""
        if not self.has_tools:
            return True
        return tools_listed(body, b'"tools"', lambda data: data.get("tools"))

    def messages(self, path: str, body: bytes) -> list[dict[str, str]]:
        """The conversation the call carries, as ``{"role", "content"}`` text messages."""
        return chat_messages(parse_object(body).get("messages"))

    def asks_thinking(self, path: str, body: bytes) -> bool:
        """Whether the call asked for extended thinking, whose turns the upstream checks."""
        return False

    def text(self, text: str, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """The scripted ``text`` as this family answers it, in the request's stream mode."""
        raise NotImplementedError

    def tool(self, call: ToolCall, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """The fabricated ``call`` as this family writes a tool call, in the request's stream mode."""
        return self.text(call.as_text, request, now=now, token=token)

    def error(self, status: int, kind: str, message: str) -> bytes:
        """An error body the family's SDK reads its message from (OpenAI style by default)."""
        return dump({"error": {"message": message, "type": kind, "param": None, "code": None}})


class OneShape(Family):
    """A family that writes a text answer and a tool call through one function of the answer."""

    def text(self, text: str, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """The text, as :meth:`answer` writes it."""
        return self.answer(text, request, token)

    def tool(self, call: ToolCall, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """The call, as :meth:`answer` writes it."""
        return self.answer(call, request, token)

    def answer(self, answer: str | ToolCall, request: AnswerRequest, token: str) -> Scripted:
        """The text or the call in the request's stream mode."""
        raise NotImplementedError


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts (nested tool results too)."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return ""
    pieces = []
    for part in content:
        if isinstance(part, str):
            pieces.append(part)
        elif isinstance(part, dict):
            value = part.get("text", part.get("content"))
            pieces.append(text_of(value) if value is not None else "")
    return "\n".join(p for p in pieces if p)


def chat_messages(messages: Any, *, system: Any = None) -> list[dict[str, str]]:
    """Chat-style messages (``role``, ``content``) as text, ``system`` first when given."""
    found = [{"role": "system", "content": text_of(system)}] if system else []
    if isinstance(messages, list):
        found += [{"role": str(m.get("role") or "user"), "content": text_of(m.get("content"))}
                  for m in messages if isinstance(m, dict)]
    return found


def new_token() -> str:
    """A fresh random suffix for response ids (``chatcmpl-<token>``)."""
    return secrets.token_hex(12)


def estimate_tokens(size: int) -> int:
    """A rough token count for ``size`` bytes of text (about four bytes a token)."""
    return (size + 3) // 4


def token_usage(text: str, request: AnswerRequest, prompt: str = "prompt_tokens",
                completion: str = "completion_tokens") -> dict[str, int]:
    """The usage counts of a scripted answer, under the API's names for the prompt and the completion."""
    size = estimate_tokens(len(text.encode()))
    return {prompt: request.prompt_tokens, completion: size, "total_tokens": request.prompt_tokens + size}


def parse_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object; anything else is an empty one."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        data = None
    return data if isinstance(data, dict) else {}


def tools_listed(body: bytes, key: bytes, pick: Any) -> bool:
    """Whether ``pick(body)`` is a non-empty list; the body is parsed only when ``key`` occurs in it."""
    if key not in body:
        return False
    try:
        tools = pick(json.loads(body))
    except (ValueError, AttributeError, TypeError):
        return False
    return isinstance(tools, list) and bool(tools)


def requested_stream(body: bytes, default: bool) -> bool:
    """The request's ``"stream": true|false`` read from the raw bytes, without parsing the JSON.

    The search runs from the end, where the SDKs put ``stream`` (after ``messages``), so it
    usually stops at once; a ``"stream`` preceded by a backslash sits inside a string, and one
    not followed by ``: true|false`` is some other value, so both are skipped. A flag nested in
    an object after the top-level one would win; the scripted answer parses the JSON anyway.
    """
    end = len(body)
    while (start := body.rfind(_STREAM_KEY, 0, end)) >= 0:
        value = _flag_at(body, start)
        if value is not None:
            return value
        end = start
    return default


def _flag_at(body: bytes, start: int) -> bool | None:
    at = start + len(_STREAM_KEY)
    if body[at : at + 1] != b'"' or (start and body[start - 1] == 0x5C):
        return None
    size = len(body)
    at += 1
    while at < size and body[at] in _JSON_SPACE:
        at += 1
    if body[at : at + 1] != b":":
        return None
    at += 1
    while at < size and body[at] in _JSON_SPACE:
        at += 1
    if body.startswith(b"true", at):
        return True
    if body.startswith(b"false", at):
        return False
    return None
