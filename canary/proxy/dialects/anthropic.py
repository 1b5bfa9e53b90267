"""Anthropic Messages (``POST /v1/messages``): ``message`` objects and the SSE event sequence.

A text answer is one ``text`` content block with ``stop_reason: "end_turn"``; a tool call one
``tool_use`` block (id, name, input) with ``stop_reason: "tool_use"``. Streamed, every event has its
``event:`` line, in the order the API sends them: ``message_start``, ``content_block_start``,
``ping``, ``content_block_delta`` (``text_delta`` or ``input_json_delta``), ``content_block_stop``,
``message_delta`` (stop reason and usage), ``message_stop``. No thinking block is ever written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from canary.proxy.dialects import base
from canary.proxy.dialects.base import (
    AnswerRequest,
    OneShape,
    Scripted,
    ToolCall,
    estimate_tokens,
    tools_listed,
    typed_sse,
)

__all__ = ["ANTHROPIC", "message_body", "message_events"]

#: ``thinking.type`` values that switch extended thinking on.
_THINKING_ON = frozenset({"enabled", "adaptive"})


def _usage(request: AnswerRequest, output: int) -> dict[str, Any]:
    return {
        "input_tokens": request.prompt_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output,
        "service_tier": "standard",
    }


def _message(request: AnswerRequest, token: str, content: list[dict[str, Any]], stop: str | None,
             output: int) -> dict[str, Any]:
    return {
        "id": f"msg_{token}",
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": _usage(request, output),
    }


def _block(answer: str | ToolCall) -> dict[str, Any]:
    if isinstance(answer, str):
        return {"type": "text", "text": answer}
    return {"type": "tool_use", "id": answer.call_id, "name": answer.name, "input": dict(answer.arguments)}


def _shown(answer: str | ToolCall) -> str:
    return answer if isinstance(answer, str) else answer.as_text


def _stop(answer: str | ToolCall) -> str:
    return "end_turn" if isinstance(answer, str) else "tool_use"


def message_body(answer: str | ToolCall, request: AnswerRequest, *, token: str) -> dict[str, Any]:
    """A whole ``message`` with the text or ``tool_use`` block."""
    output = estimate_tokens(len(_shown(answer).encode()))
    return _message(request, token, [_block(answer)], _stop(answer), output)


def message_events(answer: str | ToolCall, request: AnswerRequest, *, token: str) -> Iterator[dict[str, Any]]:
    """The streamed events of the same message, from ``message_start`` to ``message_stop``."""
    output = estimate_tokens(len(_shown(answer).encode()))
    yield {"type": "message_start", "message": _message(request, token, [], None, 1)}
    if isinstance(answer, str):
        opening: dict[str, Any] = {"type": "text", "text": ""}
        delta: dict[str, Any] = {"type": "text_delta", "text": answer}
    else:
        opening = {**_block(answer), "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(dict(answer.arguments),
                                                                          ensure_ascii=False)}
    yield {"type": "content_block_start", "index": 0, "content_block": opening}
    yield {"type": "ping"}
    yield {"type": "content_block_delta", "index": 0, "delta": delta}
    yield {"type": "content_block_stop", "index": 0}
    yield {"type": "message_delta", "delta": {"stop_reason": _stop(answer), "stop_sequence": None},
           "usage": {"output_tokens": output}}
    yield {"type": "message_stop"}


class Anthropic(OneShape):
    """Anthropic Messages; ``count_tokens`` and every other path pass through."""

    name = "anthropic"
    paths = ("/v1/messages",)

    def messages(self, path: str, body: bytes) -> list[dict[str, str]]:
        """``system`` (a string or text blocks) and ``messages``."""
        data = base.parse_object(body)
        return base.chat_messages(data.get("messages"), system=data.get("system"))

    def asks_thinking(self, path: str, body: bytes) -> bool:
        """Whether ``thinking`` is on (enabled or adaptive): the API then checks each tool turn's block."""
        if b'"thinking"' not in body:
            return False
        thinking = base.parse_object(body).get("thinking")
        return isinstance(thinking, dict) and thinking.get("type") in _THINKING_ON

    def offers_tools(self, body: bytes) -> bool:
        """A non-empty ``tools`` list."""
        return tools_listed(body, b'"tools"', lambda data: data.get("tools"))

    def answer(self, answer: str | ToolCall, request: AnswerRequest, token: str) -> Scripted:
        """A ``message`` with a text or ``tool_use`` block, or its event stream (``input_json_delta``)."""
        if request.stream:
            return typed_sse(message_events(answer, request, token=token))
        return base.json_body(message_body(answer, request, token=token))

    def error(self, status: int, kind: str, message: str) -> bytes:
        """Anthropic's error body: ``{"type": "error", "error": {"type": ..., "message": ...}}``."""
        return base.dump({"type": "error", "error": {"type": kind, "message": message}})


ANTHROPIC = Anthropic()
