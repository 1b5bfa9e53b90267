"""OpenAI legacy completions (``/v1/completions``): ``text_completion`` objects; no tool calls."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from canary.proxy.dialects.base import (
    AnswerRequest,
    Family,
    Scripted,
    json_body,
    parse_object,
    sse,
    text_of,
    token_usage,
)

__all__ = ["COMPLETIONS", "completion_body", "completion_stream"]


def completion_body(text: str, request: AnswerRequest, *, created: int, token: str) -> dict[str, Any]:
    """A non-streaming ``text_completion`` object."""
    return {
        "id": f"cmpl-{token}",
        "object": "text_completion",
        "created": created,
        "model": request.model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}],
        "usage": token_usage(text, request),
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
        yield {**head, "choices": [], "usage": token_usage(text, request)}


class Completions(Family):
    """Legacy completions: a tool call goes out as JSON text."""

    name = "completions"
    paths = ("/v1/completions", "/completions")
    has_tools = False

    def messages(self, path: str, body: bytes) -> list[dict[str, str]]:
        """The ``prompt``, as one user message."""
        return [{"role": "user", "content": text_of(parse_object(body).get("prompt"))}]

    def text(self, text: str, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """The text as a ``text_completion``, or its chunks ending in ``[DONE]``."""
        if request.stream:
            return sse(completion_stream(text, request, created=int(now), token=token), done=True)
        return json_body(completion_body(text, request, created=int(now), token=token))


COMPLETIONS = Completions()
