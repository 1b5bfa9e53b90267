"""The upstream transport: one connection per request in flight, reused once its response closes."""

from __future__ import annotations

import asyncio
from typing import Any

import httpcore
import httpx
import pytest

from canary.proxy.pool import UpstreamTransport, _HeadWithBody
from canary.proxy.serving import BackgroundServer
from tests.proxy.test_proxy import closed_port_url


class Peers:
    """Answers ``ok`` after ``?wait=`` seconds and records the client address of each request."""

    def __init__(self) -> None:
        self.peers: list[tuple[str, int]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await receive()
        self.peers.append(scope["client"])
        query = dict(p.split("=") for p in scope["query_string"].decode().split("&") if "=" in p)
        await asyncio.sleep(float(query.get("wait", "0")))
        headers = [(b"content-length", b"2")]
        if "close" in query:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})


async def _get(client: httpx.AsyncClient, url: str) -> str:
    r = await client.get(url)
    return r.text


def test_sequential_requests_share_one_connection_and_concurrent_ones_get_their_own() -> None:
    peers = Peers()

    async def main(base: str) -> None:
        async with httpx.AsyncClient(transport=UpstreamTransport()) as client:
            for _ in range(10):
                assert await _get(client, base + "/") == "ok"
            assert len(set(peers.peers)) == 1
            peers.peers.clear()
            answers = await asyncio.gather(*(_get(client, base + "/?wait=0.2") for _ in range(20)))
            assert answers == ["ok"] * 20
            assert len(set(peers.peers)) == 20  # none waited for another's connection
            peers.peers.clear()
            await asyncio.gather(*(_get(client, base + "/?wait=0.05") for _ in range(20)))
            assert len(set(peers.peers)) == 20 and len(peers.peers) == 20

    with BackgroundServer(peers) as server:
        asyncio.run(main(server.url))


def test_a_connection_the_upstream_closes_is_not_reused() -> None:
    peers = Peers()

    async def main(base: str) -> None:
        async with httpx.AsyncClient(transport=UpstreamTransport()) as client:
            for _ in range(3):
                assert await _get(client, base + "/?close=1") == "ok"
            assert len(set(peers.peers)) == 3

    with BackgroundServer(peers) as server:
        asyncio.run(main(server.url))


def test_failures_are_httpx_exceptions() -> None:
    async def main() -> None:
        async with httpx.AsyncClient(transport=UpstreamTransport()) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(closed_port_url() + "/")

    asyncio.run(main())


class Writes(httpcore.AsyncNetworkStream):
    """Records every write that reaches the socket."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.writes.append(buffer)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return b"HTTP/1.1 200 OK\r\n\r\n"


def test_a_request_head_goes_out_with_its_body_in_one_write() -> None:
    async def main() -> None:
        inner = Writes()
        stream = _HeadWithBody(inner)
        await stream.write(b"POST / HTTP/1.1\r\ncontent-length: 2\r\n\r\n")
        await stream.write(b"{}")
        await stream.write(b"")  # h11's end of message for a sized body
        await stream.read(65536)
        await stream.write(b"GET / HTTP/1.1\r\n\r\n")  # the next request on the connection
        await stream.write(b"")
        await stream.write(b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n")
        await stream.read(65536)  # a read sends whatever is held first
        assert inner.writes == [b"POST / HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}", b"GET / HTTP/1.1\r\n\r\n",
                                b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"]

    asyncio.run(main())
