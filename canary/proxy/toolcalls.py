"""Scripted tool calls in every dialect the proxy speaks, as whole bodies and as streams.

A fabricated tool call is written in the dialect's own shape: OpenAI chat ``message.tool_calls``
with ``finish_reason: "tool_calls"`` (streamed as ``delta.tool_calls`` chunks carrying their index
and id); Responses a ``function_call`` output item and its ``function_call_arguments`` events;
Ollama ``message.tool_calls`` with the arguments as an object. The legacy completions and Ollama
generate endpoints have no tool calls, so they get the call as JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from canary.proxy.dialects import (
    AnswerRequest,
    Body,
    Dialect,
    Stream,
    _ollama_final,
    _response,
    _responses_usage,
    _usage,
    chat_completion,
    chunk,
    chunk_head,
    framed,
    script,
)
from canary.proxy.framing import Scripted

__all__ = ["ToolCall", "offers_tools", "script_tool"]

#: The dialects whose requests name the tools they offer (the others get a call as JSON text).
_TOOL_DIALECTS = frozenset({"chat", "responses", "ollama-chat"})


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


def offers_tools(dialect: Dialect, body: bytes) -> bool:
    """Whether a request can take a tool call: it offers its model tools (a non-empty ``tools``
    list), or its dialect has no tool calls at all (it gets the call as JSON text)."""
    if dialect not in _TOOL_DIALECTS:
        return True
    if b'"tools"' not in body:
        return False
    try:
        tools = json.loads(body).get("tools")
    except (ValueError, AttributeError):
        return False
    return isinstance(tools, list) and bool(tools)


def script_tool(
    dialect: Dialect, call: ToolCall, request: AnswerRequest, *, now: float, token: str
) -> Scripted:
    """The fabricated ``call`` as ``dialect`` writes a tool call, in the request's stream mode."""
    tool = _TOOL.get(dialect)
    if tool is None:  # the legacy completions and Ollama generate have no tool calls: the call as text
        return script(dialect, call.as_text, request, now=now, token=token)
    body, stream = tool
    return framed(dialect, request, partial(body, call), partial(stream, call), now=now, token=token)


# -- OpenAI chat completions -------------------------------------------------------------------


def _function(call: ToolCall, arguments: str) -> dict[str, Any]:
    return {"id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": arguments}}


def chat_tool_body(call: ToolCall, request: AnswerRequest, *, created: int, token: str) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` whose message is the tool call."""
    message = {
        "role": "assistant", "content": None, "refusal": None,
        "tool_calls": [_function(call, call.arguments_json)],
    }
    return chat_completion(request, created=created, token=token, message=message, finish="tool_calls",
                           said=call.as_text)


def chat_tool_stream(
    call: ToolCall, request: AnswerRequest, *, created: int, token: str
) -> Iterator[dict[str, Any]]:
    """Chunks: the call's index, id and name, then its arguments, then ``tool_calls`` and usage."""
    head = chunk_head(request, created=created, token=token)
    opening = {"index": 0, **_function(call, "")}
    yield chunk(head, {"role": "assistant", "content": None, "tool_calls": [opening]}, None)
    yield chunk(head, {"tool_calls": [{"index": 0, "function": {"arguments": call.arguments_json}}]}, None)
    yield chunk(head, {}, "tool_calls")
    if request.include_usage:
        yield {**head, "choices": [], "usage": _usage(call.as_text, request)}


# -- OpenAI Responses --------------------------------------------------------------------------


def _function_item(call: ToolCall, token: str, *, arguments: str, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{token}",
        "call_id": call.call_id,
        "name": call.name,
        "arguments": arguments,
        "status": status,
    }


def responses_tool_body(
    call: ToolCall, request: AnswerRequest, *, created: int, token: str
) -> dict[str, Any]:
    """A completed ``response`` whose one output item is the ``function_call``."""
    body = _response(
        request, created=created, token=token, status="completed",
        output=[_function_item(call, token, arguments=call.arguments_json, status="completed")],
    )
    body["usage"] = _responses_usage(call.as_text, request)
    return body


def responses_tool_stream(
    call: ToolCall, request: AnswerRequest, *, created: int, token: str
) -> Iterator[dict[str, Any]]:
    """Typed events: created, the item added, its arguments delta and done, the item done, completed."""
    item_id = f"fc_{token}"
    where = {"item_id": item_id, "output_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created",
         "response": _response(request, created=created, token=token, status="in_progress", output=[])},
        {"type": "response.output_item.added", "output_index": 0,
         "item": _function_item(call, token, arguments="", status="in_progress")},
        {"type": "response.function_call_arguments.delta", **where, "delta": call.arguments_json},
        {"type": "response.function_call_arguments.done", **where, "name": call.name,
         "arguments": call.arguments_json},
        {"type": "response.output_item.done", "output_index": 0,
         "item": _function_item(call, token, arguments=call.arguments_json, status="completed")},
        {"type": "response.completed",
         "response": responses_tool_body(call, request, created=created, token=token)},
    ]
    for number, event in enumerate(events):
        yield {**event, "sequence_number": number}


# -- Ollama native -----------------------------------------------------------------------------


def _ollama_message(call: ToolCall) -> dict[str, Any]:
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
        "message": _ollama_message(call),
        **_ollama_final(call.as_text, request),
    }


def ollama_chat_tool_stream(
    call: ToolCall, request: AnswerRequest, *, created_at: str
) -> Iterator[dict[str, Any]]:
    """``/api/chat`` NDJSON objects: the tool call whole in one object, then the ``done`` object."""
    head = {"model": request.model, "created_at": created_at}
    yield {**head, "message": _ollama_message(call), "done": False}
    yield {**head, "message": {"role": "assistant", "content": ""}, **_ollama_final(call.as_text, request)}


#: Each dialect that has tool calls: the call's body, and its stream of events.
_TOOL: dict[str, tuple[Body, Stream]] = {
    "chat": (chat_tool_body, chat_tool_stream),
    "responses": (responses_tool_body, responses_tool_stream),
    "ollama-chat": (ollama_chat_tool_body, ollama_chat_tool_stream),
}
