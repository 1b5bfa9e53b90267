"""OpenAI chat completions (``/v1/chat/completions``): ``chat.completion`` objects and their chunks.

A tool call is ``message.tool_calls`` with ``finish_reason: "tool_calls"``, its arguments a
JSON-encoded string; streamed, the first ``delta.tool_calls`` fragment carries its index, id and
name, the next its arguments.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from canary.proxy.dialects.base import (
    AnswerRequest,
    Family,
    Scripted,
    ToolCall,
    json_body,
    sse,
    token_usage,
)

__all__ = ["CHAT", "chat_body", "chat_stream", "chat_tool_body", "chat_tool_stream"]


def _head(request: AnswerRequest, created: int, token: str, kind: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{token}",
        "object": kind,
        "created": created,
        "model": request.model,
        "system_fingerprint": None,
    }


def _choice(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {"index": 0, "logprobs": None, "finish_reason": finish, "message": message}


def chat_body(text: str, request: AnswerRequest, *, created: int, token: str) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` object (§2.2)."""
    return {
        **_head(request, created, token, "chat.completion"),
        "choices": [_choice({"role": "assistant", "content": text, "refusal": None}, "stop")],
        "usage": token_usage(text, request),
    }


def _chunk(head: dict[str, Any], delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


def chat_stream(text: str, request: AnswerRequest, *, created: int, token: str) -> Iterator[dict[str, Any]]:
    """``chat.completion.chunk`` objects: role, content, finish, then usage when asked for (§2.4)."""
    head = _head(request, created, token, "chat.completion.chunk")
    yield _chunk(head, {"role": "assistant", "content": ""}, None)
    if text:
        yield _chunk(head, {"content": text}, None)
    yield _chunk(head, {}, "stop")
    if request.include_usage:
        yield {**head, "choices": [], "usage": token_usage(text, request)}


def _function(call: ToolCall, arguments: str) -> dict[str, Any]:
    return {"id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": arguments}}


def chat_tool_body(call: ToolCall, request: AnswerRequest, *, created: int, token: str) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` whose message is the tool call."""
    message = {
        "role": "assistant", "content": None, "refusal": None,
        "tool_calls": [_function(call, call.arguments_json)],
    }
    return {
        **_head(request, created, token, "chat.completion"),
        "choices": [_choice(message, "tool_calls")],
        "usage": token_usage(call.as_text, request),
    }


def chat_tool_stream(
    call: ToolCall, request: AnswerRequest, *, created: int, token: str
) -> Iterator[dict[str, Any]]:
    """Chunks: the call's index, id and name, then its arguments, then ``tool_calls`` and usage."""
    head = _head(request, created, token, "chat.completion.chunk")
    opening = {"index": 0, **_function(call, "")}
    yield _chunk(head, {"role": "assistant", "content": None, "tool_calls": [opening]}, None)
    yield _chunk(head, {"tool_calls": [{"index": 0, "function": {"arguments": call.arguments_json}}]}, None)
    yield _chunk(head, {}, "tool_calls")
    if request.include_usage:
        yield {**head, "choices": [], "usage": token_usage(call.as_text, request)}


class Chat(Family):
    """OpenAI chat completions, with and without the ``/v1`` prefix (mlx_lm serves it without)."""

    name = "chat"
    paths = ("/v1/chat/completions", "/chat/completions")

    def text(self, text: str, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """The text as a ``chat.completion``, or its chunks ending in ``[DONE]``."""
        if request.stream:
            return sse(chat_stream(text, request, created=int(now), token=token), done=True)
        return json_body(chat_body(text, request, created=int(now), token=token))

    def tool(self, call: ToolCall, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """The call as ``message.tool_calls``, or as ``delta.tool_calls`` chunks."""
        if request.stream:
            return sse(chat_tool_stream(call, request, created=int(now), token=token), done=True)
        return json_body(chat_tool_body(call, request, created=int(now), token=token))


CHAT = Chat()
