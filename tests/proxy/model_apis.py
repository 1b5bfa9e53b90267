"""Loopback model servers that answer as the Anthropic Messages and Gemini APIs do.

Their answers are written out here by hand, shaped as the real APIs send them (event names and
order, ``ping``, thinking blocks with signatures, Gemini ``thoughtSignature`` parts, CRLF SSE
frames), and they enforce the rules a proxy could break: an API key and ``anthropic-version``
on every Messages call, and with thinking on, a tool turn that does not start with its signed
thinking block (Anthropic) or a ``functionCall`` part without its signature (Gemini 3) is a 400,
with the APIs' own error text. Every request is recorded.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

UPSTREAM_TEXT = "UPSTREAM ANSWER from the model"
SIGNATURE = "EqQBCkYIARgCIkD3u1n2signedbytes=="  # the shape of a real signature; only its presence counts


@dataclass
class Seen:
    """One request as the model server received it."""

    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    peer: tuple[str, int] | None = None  # the client's address: one per connection

    @property
    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


@dataclass
class ModelAPIs:
    """The recorded requests and the app."""

    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, request: Request, body: bytes) -> Seen:
        """Record one request."""
        peer = (request.client.host, request.client.port) if request.client else None
        seen = Seen(request.url.path, request.url.query, {k.lower(): v for k, v in request.headers.items()},
                    body, peer)
        with self.lock:
            self.seen.append(seen)
        return seen

    def app(self) -> Starlette:
        """The ASGI app serving both APIs."""
        return Starlette(routes=[
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
            Route("/v1beta/models/{rest:path}", self.gemini, methods=["POST"]),
        ])

    # -- Anthropic ---------------------------------------------------------------------------

    async def count_tokens(self, request: Request) -> Response:
        """``{"input_tokens": N}``."""
        body = await request.body()
        self.record(request, body)
        return JSONResponse({"input_tokens": len(body) // 4})

    async def messages(self, request: Request) -> Response:
        """A message, whole or streamed; thinking blocks first when thinking is on."""
        body = await request.body()
        seen = self.record(request, body)
        if not (seen.headers.get("x-api-key") or seen.headers.get("authorization")):
            return _anthropic_error(401, "authentication_error", "x-api-key header is required")
        if "anthropic-version" not in seen.headers:
            return _anthropic_error(400, "invalid_request_error", "anthropic-version: header is required")
        data = seen.json
        thinking = (data.get("thinking") or {}).get("type") in ("enabled", "adaptive")
        problem = _thinking_problem(data["messages"]) if thinking else None
        if problem is not None:
            return _anthropic_error(400, "invalid_request_error", problem)
        content: list[dict[str, Any]] = []
        if thinking:
            content.append({"type": "thinking", "thinking": "Let me look at this.", "signature": SIGNATURE})
        content.append({"type": "text", "text": UPSTREAM_TEXT})
        message = {
            "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
            "model": data["model"], "content": content, "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 25, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                      "output_tokens": 12, "service_tier": "standard"},
        }
        if not data.get("stream"):
            return JSONResponse(message, headers={"request-id": "req_011CSHoEeqs5C35K2UUqR7Fy"})
        return StreamingResponse(_anthropic_events(message), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "request-id": "req_011CSHoEeqs5C35K2UU"})

    # -- Gemini --------------------------------------------------------------------------------

    async def gemini(self, request: Request) -> Response:
        """``generateContent`` or ``streamGenerateContent`` (SSE with ``alt=sse``)."""
        body = await request.body()
        seen = self.record(request, body)
        rest = request.path_params["rest"]
        model, _, method = rest.partition(":")
        if "x-goog-api-key" not in seen.headers and "key=" not in seen.query:
            return _gemini_error(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers.")
        data = seen.json
        signed = model.startswith("gemini-3")
        if signed:
            for turn in data.get("contents", []):
                for index, part in enumerate(turn.get("parts", [])):
                    if "functionCall" in part and "thoughtSignature" not in part:
                        return _gemini_error(
                            400, "INVALID_ARGUMENT",
                            "Function call is missing a thought_signature in functionCall parts. This is "
                            "required for tools to work correctly, and missing thought_signature may lead "
                            f"to degraded model performance. Additional data, function call "
                            f"`default_api:{part['functionCall'].get('name')}` , position {index + 1}.")
        part: dict[str, Any] = {"text": UPSTREAM_TEXT}
        if signed:
            part["thoughtSignature"] = "CiQBjz1rX3NpZ25lZGJ5dGVz"
        usage = {"promptTokenCount": 8, "candidatesTokenCount": 7, "totalTokenCount": 15,
                 "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 8}]}
        if method == "generateContent":
            return JSONResponse({
                "candidates": [{"content": {"parts": [part], "role": "model"}, "finishReason": "STOP",
                                "avgLogprobs": -0.12, "index": 0}],
                "usageMetadata": usage, "modelVersion": model, "responseId": "mMYxaO2vN4uJ1MkP7cOYsAk",
            })
        chunks = [
            {"candidates": [{"content": {"parts": [{"text": "UPSTREAM ANSWER "}], "role": "model"},
                             "index": 0}],
             "usageMetadata": {"promptTokenCount": 8, "totalTokenCount": 8}, "modelVersion": model,
             "responseId": "mMYxaO2vN4uJ1MkP7cOYsAk"},
            {"candidates": [{"content": {"parts": [{**part, "text": "from the model"}], "role": "model"},
                             "finishReason": "STOP", "index": 0}],
             "usageMetadata": usage, "modelVersion": model, "responseId": "mMYxaO2vN4uJ1MkP7cOYsAk"},
        ]
        frames = [b"data: " + json.dumps(c, separators=(",", ":")).encode() + b"\r\n\r\n" for c in chunks]
        return StreamingResponse(iter(frames), media_type="text/event-stream")


def _thinking_problem(messages: list[dict[str, Any]]) -> str | None:
    """The API's complaint about a tool turn that does not start with a thinking block, if any."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message["role"] != "assistant":
            continue
        content = message["content"]
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        uses_tools = any(b.get("type") == "tool_use" for b in blocks)
        if not uses_tools:
            return None
        first = blocks[0].get("type")
        if first not in ("thinking", "redacted_thinking"):
            return (f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                    f"`{first}`. When `thinking` is enabled, a final `assistant` message must start with a "
                    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks).")
        return None
    return None


def _anthropic_events(message: dict[str, Any]) -> Any:
    def event(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()

    start = {**message, "content": [], "stop_reason": None,
             "usage": {**message["usage"], "output_tokens": 1}}
    yield event("message_start", {"type": "message_start", "message": start})
    for index, block in enumerate(message["content"]):
        if block["type"] == "thinking":
            yield event("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {"type": "thinking", "thinking": "",
                                                                  "signature": ""}})
            yield event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": {"type": "thinking_delta", "thinking": block["thinking"]}})
            yield event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": {"type": "signature_delta", "signature": SIGNATURE}})
        else:
            yield event("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {"type": "text", "text": ""}})
            if index == 0 or message["content"][0]["type"] == "thinking":
                yield event("ping", {"type": "ping"})
            for piece in ("UPSTREAM ANSWER ", "from the model"):
                yield event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                    "delta": {"type": "text_delta", "text": piece}})
        yield event("content_block_stop", {"type": "content_block_stop", "index": index})
    yield event("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                  "usage": {"output_tokens": 12}})
    yield event("message_stop", {"type": "message_stop"})


def _anthropic_error(status: int, kind: str, message: str) -> Response:
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message},
                         "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}, status_code=status)


def _gemini_error(status: int, state: str, message: str) -> Response:
    return JSONResponse({"error": {"code": status, "message": message, "status": state}}, status_code=status)
