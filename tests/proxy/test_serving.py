"""The servers' HTTP layer: a response head leaves with its first body piece, in one write."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from canary.proxy.serving import BackgroundServer


async def late_body(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
    await asyncio.sleep(0.3)
    await send({"type": "http.response.body", "body": b"hello"})


def test_the_head_is_written_with_the_first_body_piece() -> None:
    with BackgroundServer(late_body) as server, socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sock.settimeout(5)
        first = sock.recv(65536)  # a head written alone would arrive 0.3 s before its body
        assert first.startswith(b"HTTP/1.1 200 OK\r\n")
        assert first.endswith(b"\r\n\r\nhello")


def test_a_closing_response_is_written_before_the_connection_closes() -> None:
    async def closing(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await receive()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with BackgroundServer(closing) as server, socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sock.settimeout(5)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"\r\n\r\nok")
