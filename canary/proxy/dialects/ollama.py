"""Ollama native (``/api/chat``, ``/api/generate``): NDJSON when streamed, which is the REST default.

A chat tool call is ``message.tool_calls`` with the arguments as an object, whole in one object;
generate has no tool calls and gets the call as JSON text. Durations are integer nanoseconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from canary.proxy.dialects import base
from canary.proxy.dialects.base import (
    AnswerRequest,
    Family,
    Scripted,
    ToolCall,
    estimate_tokens,
    ndjson,
)

__all__ = [
    "OLLAMA_CHAT", "OLLAMA_GENERATE", "ollama_chat_body", "ollama_chat_stream", "ollama_chat_tool_body",
    "ollama_chat_tool_stream", "ollama_generate_body", "ollama_generate_stream", "ollama_timestamp",
]

# Scripted answers claim a quick, plausible run.
_DURATIONS = {
    "total_duration": 1_000_000,
    "load_duration": 1_000,
    "prompt_eval_duration": 1_000,
    "eval_duration": 1_000,
}


def ollama_timestamp(now: float) -> str:
    """Ollama's ``created_at``: RFC 3339 in UTC with microseconds."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _final(text: str, request: AnswerRequest) -> dict[str, Any]:
    return {
        "done": True,
        "done_reason": "stop",
        "total_duration": _DURATIONS["total_duration"],
        "load_duration": _DURATIONS["load_duration"],
        "prompt_eval_count": request.prompt_tokens,
        "prompt_eval_duration": _DURATIONS["prompt_eval_duration"],
        "eval_count": estimate_tokens(len(text.encode())),
        "eval_duration": _DURATIONS["eval_duration"],
    }


def ollama_chat_body(text: str, request: AnswerRequest, *, created_at: str) -> dict[str, Any]:
    """The single ``/api/chat`` object of a ``"stream": false`` request."""
    return {
        "model": request.model,
        "created_at": created_at,
        "message": {"role": "assistant", "content": text},
        **_final(text, request),
    }


def ollama_chat_stream(text: str, request: AnswerRequest, *, created_at: str) -> Iterator[dict[str, Any]]:
    """``/api/chat`` NDJSON objects: the content, then the ``done`` object with counts and durations."""
    head = {"model": request.model, "created_at": created_at}
    if text:
        yield {**head, "message": {"role": "assistant", "content": text}, "done": False}
    yield {**head, "message": {"role": "assistant", "content": ""}, **_final(text, request)}


def _tool_message(call: ToolCall) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": call.name, "arguments": dict(call.arguments)}}],
    }


def ollama_chat_tool_body(call: ToolCall, request: AnswerRequest, *, created_at: str) -> dict[str, Any]:
    """The single ``/api/chat`` object of a ``"stream": false`` request, carrying the tool call."""
    return {
        "model": request.model,
        "created_at": created_at,
        "message": _tool_message(call),
        **_final(call.as_text, request),
    }


def ollama_chat_tool_stream(
    call: ToolCall, request: AnswerRequest, *, created_at: str
) -> Iterator[dict[str, Any]]:
    """``/api/chat`` NDJSON objects: the tool call whole in one object, then the ``done`` object."""
    head = {"model": request.model, "created_at": created_at}
    yield {**head, "message": _tool_message(call), "done": False}
    yield {**head, "message": {"role": "assistant", "content": ""}, **_final(call.as_text, request)}


def ollama_generate_body(text: str, request: AnswerRequest, *, created_at: str) -> dict[str, Any]:
    """The single ``/api/generate`` object of a ``"stream": false`` request."""
    body: dict[str, Any] = {
        "model": request.model, "created_at": created_at, "response": text, **_final(text, request)
    }
    if not request.raw:
        body["context"] = []
    return body


def ollama_generate_stream(
    text: str, request: AnswerRequest, *, created_at: str
) -> Iterator[dict[str, Any]]:
    """``/api/generate`` NDJSON objects: the text, then the ``done`` object."""
    head = {"model": request.model, "created_at": created_at}
    if text:
        yield {**head, "response": text, "done": False}
    final: dict[str, Any] = {**head, "response": "", **_final(text, request)}
    if not request.raw:
        final["context"] = []
    yield final


class _Ollama(Family):
    default_stream = True  # the REST API streams unless told ``"stream": false``

    def error(self, status: int, kind: str, message: str) -> bytes:
        """Ollama's own error body: ``{"error": "..."}``."""
        return base.dump({"error": message})


class OllamaChat(_Ollama):
    """``/api/chat``."""

    name = "ollama-chat"
    paths = ("/api/chat",)

    def text(self, text: str, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """The text as one ``/api/chat`` object, or NDJSON objects."""
        stamp = ollama_timestamp(now)
        if request.stream:
            return ndjson(ollama_chat_stream(text, request, created_at=stamp))
        return base.json_body(ollama_chat_body(text, request, created_at=stamp))

    def tool(self, call: ToolCall, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """The call as ``message.tool_calls``, whole in one object."""
        stamp = ollama_timestamp(now)
        if request.stream:
            return ndjson(ollama_chat_tool_stream(call, request, created_at=stamp))
        return base.json_body(ollama_chat_tool_body(call, request, created_at=stamp))


class OllamaGenerate(_Ollama):
    """``/api/generate``: a tool call goes out as JSON text."""

    name = "ollama-generate"
    paths = ("/api/generate",)
    has_tools = False

    def messages(self, path: str, body: bytes) -> list[dict[str, str]]:
        """``system`` and ``prompt``."""
        data = base.parse_object(body)
        prompt = [{"role": "user", "content": data.get("prompt")}]
        return base.chat_messages(prompt, system=data.get("system"))

    def text(self, text: str, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """The text as one ``/api/generate`` object, or NDJSON objects."""
        stamp = ollama_timestamp(now)
        if request.stream:
            return ndjson(ollama_generate_stream(text, request, created_at=stamp))
        return base.json_body(ollama_generate_body(text, request, created_at=stamp))


OLLAMA_CHAT = OllamaChat()
OLLAMA_GENERATE = OllamaGenerate()
