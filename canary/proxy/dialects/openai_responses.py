"""OpenAI Responses (``/v1/responses``): ``response`` objects and typed events, with no ``[DONE]``.

A tool call is one ``function_call`` output item (``call_id``, ``name``, ``arguments``); streamed,
with its ``function_call_arguments`` delta and done events.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from canary.proxy.dialects.base import (
    AnswerRequest,
    Family,
    Scripted,
    ToolCall,
    chat_messages,
    json_body,
    parse_object,
    token_usage,
    typed_sse,
)

__all__ = ["RESPONSES", "responses_body", "responses_stream", "responses_tool_body", "responses_tool_stream"]


def _usage(text: str, request: AnswerRequest) -> dict[str, Any]:
    return {
        **token_usage(text, request, "input_tokens", "output_tokens"),
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


def _numbered(events: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for number, event in enumerate(events):
        yield {**event, "sequence_number": number}


def responses_body(text: str, request: AnswerRequest, *, created: int, token: str) -> dict[str, Any]:
    """A completed ``response`` object with one assistant message."""
    body = _response(
        request, created=created, token=token, status="completed",
        output=[_message_item(text, token, "completed")],
    )
    body["usage"] = _usage(text, request)
    return body


def responses_stream(
    text: str, request: AnswerRequest, *, created: int, token: str
) -> Iterator[dict[str, Any]]:
    """Typed Responses events, from ``response.created`` to ``response.completed`` (no ``[DONE]``)."""
    where = {"item_id": f"msg_{token}", "output_index": 0, "content_index": 0}
    return _numbered([
        {"type": "response.created",
         "response": _response(request, created=created, token=token, status="in_progress", output=[])},
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
    ])


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
    body["usage"] = _usage(call.as_text, request)
    return body


def responses_tool_stream(
    call: ToolCall, request: AnswerRequest, *, created: int, token: str
) -> Iterator[dict[str, Any]]:
    """Typed events: created, the item added, its arguments delta and done, the item done, completed."""
    where = {"item_id": f"fc_{token}", "output_index": 0}
    return _numbered([
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
    ])


class Responses(Family):
    """OpenAI Responses, with and without the ``/v1`` prefix."""

    name = "responses"
    paths = ("/v1/responses", "/responses")

    def messages(self, path: str, body: bytes) -> list[dict[str, str]]:
        """``instructions`` and ``input`` (a string, or input items)."""
        data = parse_object(body)
        given = data.get("input")
        items = [{"role": "user", "content": given}] if isinstance(given, str) else given
        return chat_messages(items, system=data.get("instructions"))

    def text(self, text: str, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """The text as a completed ``response``, or its typed events."""
        if request.stream:
            return typed_sse(responses_stream(text, request, created=int(now), token=token))
        return json_body(responses_body(text, request, created=int(now), token=token))

    def tool(self, call: ToolCall, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """The call as a ``function_call`` output item, or its typed events."""
        if request.stream:
            return typed_sse(responses_tool_stream(call, request, created=int(now), token=token))
        return json_body(responses_tool_body(call, request, created=int(now), token=token))


RESPONSES = Responses()
