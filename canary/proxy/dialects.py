"""Scripted model answers in every dialect the proxy speaks, as whole bodies and as streams.

Each answer carries every field the strict clients require (openai, pydantic-ai,
smolagents, ollama), in the stream mode the request asked for. The clock and the
random id are parameters, so the same inputs give the same bytes.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from canary.proxy.framing import Scripted, dump, json_body, ndjson, sse, typed_sse

if TYPE_CHECKING:
    from canary.proxy.toolcalls import ToolCall

Dialect = Literal["chat", "completions", "responses", "ollama-chat", "ollama-generate"]
#: Builds an answer's body from the request and its stamps (``created`` and ``token``, or ``created_at``).
Body = Callable[..., dict[str, Any]]
#: Builds an answer's stream of events, likewise.
Stream = Callable[..., Iterator[dict[str, Any]]]

#: The stream mode each dialect uses when the request says nothing (Ollama's REST API streams).
DEFAULT_STREAM: dict[Dialect, bool] = {
    "chat": False,
    "completions": False,
    "responses": False,
    "ollama-chat": True,
    "ollama-generate": True,
}

# Ollama reports durations in integer nanoseconds; scripted answers claim a quick, plausible run.
_OLLAMA_DURATIONS = {
    "total_duration": 1_000_000,
    "load_duration": 1_000,
    "prompt_eval_duration": 1_000,
    "eval_duration": 1_000,
}


@dataclass(frozen=True)
class AnswerRequest:
    """What a scripted answer needs to know about the request it answers."""

    model: str
    stream: bool
    include_usage: bool = False
    prompt_tokens: int = 0
    raw: bool = False  # Ollama generate in raw mode has no ``context``


def new_token() -> str:
    """A fresh random suffix for response ids (``chatcmpl-<token>``)."""
    return secrets.token_hex(12)


def read_request(dialect: Dialect, body: bytes) -> AnswerRequest:
    """Parse the request body just enough to answer it; a body that is not a JSON object gets defaults."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):
        data = {}
    model = data.get("model")
    stream = data.get("stream")
    options = data.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    return AnswerRequest(
        model=model if isinstance(model, str) else "",
        stream=stream if isinstance(stream, bool) else DEFAULT_STREAM[dialect],
        include_usage=include_usage,
        prompt_tokens=estimate_tokens(len(body)),
        raw=data.get("raw") is True,
    )


def estimate_tokens(size: int) -> int:
    """A rough token count for ``size`` bytes of text (about four bytes a token)."""
    return (size + 3) // 4


def script(
    dialect: Dialect, text: str | ToolCall, request: AnswerRequest, *, now: float, token: str
) -> Scripted:
    """The scripted ``text`` (or tool call) as ``dialect`` answers it, in the request's stream mode."""
    if not isinstance(text, str):
        from canary.proxy.toolcalls import script_tool

        return script_tool(dialect, text, request, now=now, token=token)
    body, stream = _TEXT[dialect]
    return framed(dialect, request, partial(body, text), partial(stream, text), now=now, token=token)


def framed(
    dialect: Dialect, request: AnswerRequest, body: Body, stream: Stream, *, now: float, token: str
) -> Scripted:
    """The answer ``body`` builds (``stream``, for a streaming request), framed as ``dialect`` sends
    it: one JSON body, SSE events ending in ``[DONE]``, Responses' typed events, or Ollama's NDJSON."""
    ollama = dialect in ("ollama-chat", "ollama-generate")
    stamps: dict[str, Any] = (
        {"created_at": ollama_timestamp(now)} if ollama else {"created": int(now), "token": token}
    )
    if not request.stream:
        return json_body(body(request, **stamps))
    events = stream(request, **stamps)
    if ollama:
        return ndjson(events)
    if dialect == "responses":
        return typed_sse(events)
    return sse(events, done=True)


def error_body(message: str, kind: str, *, ollama: bool) -> bytes:
    """An error body the client's SDK understands: OpenAI style, or Ollama's ``{"error": ...}``."""
    if ollama:
        return dump({"error": message})
    return dump({"error": {"message": message, "type": kind, "param": None, "code": None}})


# -- OpenAI chat completions (§2) --------------------------------------------------------------


def _usage(text: str, request: AnswerRequest) -> dict[str, int]:
    """Chat and legacy completions' usage: the prompt's tokens and ``text``'s."""
    completion = estimate_tokens(len(text.encode()))
    return {
        "prompt_tokens": request.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": request.prompt_tokens + completion,
    }


def chat_completion(
    request: AnswerRequest, *, created: int, token: str, message: dict[str, Any], finish: str, said: str
) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` object (§2.2) with one ``message``; ``said`` is the text
    its completion tokens are counted on."""
    return {
        "id": f"chatcmpl-{token}",
        "object": "chat.completion",
        "created": created,
        "model": request.model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "logprobs": None, "finish_reason": finish, "message": message}],
        "usage": _usage(said, request),
    }


def chunk_head(request: AnswerRequest, *, created: int, token: str) -> dict[str, Any]:
    """The fields every ``chat.completion.chunk`` of one stream repeats."""
    return {
        "id": f"chatcmpl-{token}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": request.model,
        "system_fingerprint": None,
    }


def chunk(head: dict[str, Any], delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    """One ``chat.completion.chunk`` carrying ``delta``."""
    return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


def chat_body(text: str, request: AnswerRequest, *, created: int, token: str) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` object (§2.2)."""
    message = {"role": "assistant", "content": text, "refusal": None}
    return chat_completion(request, created=created, token=token, message=message, finish="stop", said=text)


def chat_stream(text: str, request: AnswerRequest, *, created: int, token: str) -> Iterator[dict[str, Any]]:
    """``chat.completion.chunk`` objects: role, content, finish, then usage when asked for (§2.4)."""
    head = chunk_head(request, created=created, token=token)
    yield chunk(head, {"role": "assistant", "content": ""}, None)
    if text:
        yield chunk(head, {"content": text}, None)
    yield chunk(head, {}, "stop")
    if request.include_usage:
        yield {**head, "choices": [], "usage": _usage(text, request)}


# -- OpenAI legacy completions (§3) ------------------------------------------------------------


def completion_body(text: str, request: AnswerRequest, *, created: int, token: str) -> dict[str, Any]:
    """A non-streaming ``text_completion`` object."""
    return {
        "id": f"cmpl-{token}",
        "object": "text_completion",
        "created": created,
        "model": request.model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}],
        "usage": _usage(text, request),
    }


def completion_stream(
    text: str, request: AnswerRequest, *, created: int, token: str
) -> Iterator[dict[str, Any]]:
    """Streamed ``text_completion`` chunks: the whole text with its finish reason, then usage when asked for.

    One piece carries both, since ``CompletionChoice.finish_reason`` is typed as never null.
    """
    head = {"id": f"cmpl-{token}", "object": "text_completion", "created": created, "model": request.model}
    yield {**head, "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}]}
    if request.include_usage:
        yield {**head, "choices": [], "usage": _usage(text, request)}


# -- OpenAI Responses (§4) ---------------------------------------------------------------------


def _responses_usage(text: str, request: AnswerRequest) -> dict[str, Any]:
    """A Responses usage object: the prompt's tokens and ``text``'s."""
    output = estimate_tokens(len(text.encode()))
    return {
        "input_tokens": request.prompt_tokens,
        "output_tokens": output,
        "total_tokens": request.prompt_tokens + output,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(text: str | None, token: str, status: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{token}",
        "status": status,
        "role": "assistant",
        "content": [] if text is None else [_output_text(text)],
    }


def _response(
    request: AnswerRequest, *, created: int, token: str, status: str, output: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "id": f"resp_{token}",
        "object": "response",
        "created_at": created,
        "status": status,
        "model": request.model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "temperature": None,
        "top_p": None,
        "usage": None,
    }


def responses_body(text: str, request: AnswerRequest, *, created: int, token: str) -> dict[str, Any]:
    """A completed ``response`` object with one assistant message."""
    body = _response(
        request, created=created, token=token, status="completed",
        output=[_message_item(text, token, "completed")],
    )
    body["usage"] = _responses_usage(text, request)
    return body


def responses_stream(
    text: str, request: AnswerRequest, *, created: int, token: str
) -> Iterator[dict[str, Any]]:
    """Typed Responses events, from ``response.created`` to ``response.completed`` (no ``[DONE]``)."""
    item_id = f"msg_{token}"
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {
            "type": "response.created",
            "response": _response(request, created=created, token=token, status="in_progress", output=[]),
        },
        {"type": "response.output_item.added", "output_index": 0,
         "item": _message_item(None, token, "in_progress")},
        {"type": "response.content_part.added", **where, "part": _output_text("")},
        {"type": "response.output_text.delta", **where, "delta": text, "logprobs": []},
        {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **where, "part": _output_text(text)},
        {"type": "response.output_item.done", "output_index": 0,
         "item": _message_item(text, token, "completed")},
        {"type": "response.completed",
         "response": responses_body(text, request, created=created, token=token)},
    ]
    for number, event in enumerate(events):
        yield {**event, "sequence_number": number}


# -- Ollama native (§5) ------------------------------------------------------------------------


def ollama_timestamp(now: float) -> str:
    """Ollama's ``created_at``: RFC 3339 in UTC with microseconds."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ollama_final(text: str, request: AnswerRequest) -> dict[str, Any]:
    return {
        "done": True,
        "done_reason": "stop",
        "total_duration": _OLLAMA_DURATIONS["total_duration"],
        "load_duration": _OLLAMA_DURATIONS["load_duration"],
        "prompt_eval_count": request.prompt_tokens,
        "prompt_eval_duration": _OLLAMA_DURATIONS["prompt_eval_duration"],
        "eval_count": estimate_tokens(len(text.encode())),
        "eval_duration": _OLLAMA_DURATIONS["eval_duration"],
    }


def ollama_chat_body(text: str, request: AnswerRequest, *, created_at: str) -> dict[str, Any]:
    """The single ``/api/chat`` object of a ``"stream": false`` request."""
    return {
        "model": request.model,
        "created_at": created_at,
        "message": {"role": "assistant", "content": text},
        **_ollama_final(text, request),
    }


def ollama_chat_stream(text: str, request: AnswerRequest, *, created_at: str) -> Iterator[dict[str, Any]]:
    """``/api/chat`` NDJSON objects: the content, then the ``done`` object with counts and durations."""
    head = {"model": request.model, "created_at": created_at}
    if text:
        yield {**head, "message": {"role": "assistant", "content": text}, "done": False}
    yield {**head, "message": {"role": "assistant", "content": ""}, **_ollama_final(text, request)}


def ollama_generate_body(text: str, request: AnswerRequest, *, created_at: str) -> dict[str, Any]:
    """The single ``/api/generate`` object of a ``"stream": false`` request."""
    body: dict[str, Any] = {
        "model": request.model, "created_at": created_at, "response": text, **_ollama_final(text, request)
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
    final: dict[str, Any] = {**head, "response": "", **_ollama_final(text, request)}
    if not request.raw:
        final["context"] = []
    yield final


#: Each dialect's text answer: its body, and its stream of events.
_TEXT: dict[str, tuple[Body, Stream]] = {
    "chat": (chat_body, chat_stream),
    "completions": (completion_body, completion_stream),
    "responses": (responses_body, responses_stream),
    "ollama-chat": (ollama_chat_body, ollama_chat_stream),
    "ollama-generate": (ollama_generate_body, ollama_generate_stream),
}
