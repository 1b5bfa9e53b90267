"""How a scripted answer goes on the wire: one JSON body, SSE events (plain or typed), or NDJSON.

Every piece is compact JSON with its non-ASCII characters kept, so the same answer gives the
same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "JSON_HEADERS", "NDJSON_HEADERS", "SSE_HEADERS", "Headers", "Scripted", "dump", "json_body", "ndjson",
    "sse", "typed_sse",
]

Headers = tuple[tuple[bytes, bytes], ...]

JSON_HEADERS: Headers = ((b"content-type", b"application/json"),)
SSE_HEADERS: Headers = ((b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"))
NDJSON_HEADERS: Headers = ((b"content-type", b"application/x-ndjson"),)


@dataclass(frozen=True)
class Scripted:
    """A complete 200 answer: headers and the body pieces to send in order."""

    headers: Headers
    chunks: tuple[bytes, ...]
    stream: bool

    @property
    def body(self) -> bytes:
        """All pieces joined: the body as a client receives it."""
        return b"".join(self.chunks)


def dump(obj: Any) -> bytes:
    """``obj`` as compact UTF-8 JSON."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def json_body(obj: Any) -> Scripted:
    """One JSON body, with its length."""
    body = dump(obj)
    return Scripted((*JSON_HEADERS, (b"content-length", str(len(body)).encode())), (body,), stream=False)


def sse(events: Iterator[dict[str, Any]], *, done: bool, end: bytes = b"\n\n") -> Scripted:
    """Server-sent events, one ``data:`` line each ending in ``end``, then ``data: [DONE]`` when ``done``."""
    chunks = [b"data: " + dump(event) + end for event in events]
    if done:
        chunks.append(b"data: [DONE]" + end)
    return Scripted(SSE_HEADERS, tuple(chunks), stream=True)


def typed_sse(events: Iterator[dict[str, Any]]) -> Scripted:
    """Server-sent events each named by its ``type`` (``event:`` then ``data:``), as Responses streams."""
    chunks = [f"event: {event['type']}\n".encode() + b"data: " + dump(event) + b"\n\n" for event in events]
    return Scripted(SSE_HEADERS, tuple(chunks), stream=True)


def ndjson(objects: Iterator[dict[str, Any]]) -> Scripted:
    """One JSON object a line, as Ollama streams."""
    return Scripted(NDJSON_HEADERS, tuple(dump(obj) + b"\n" for obj in objects), stream=True)
