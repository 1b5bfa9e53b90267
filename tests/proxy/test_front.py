"""The proxy's front on loopback: which requests take the full path, and the limits on request bodies."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from canary.proxy.app import ModelCall, create_proxy
from canary.proxy.front import Budget
from canary.proxy.server import ProxyServer
from canary.proxy.serving import BackgroundServer
from canary.runs.inflight import ActiveRun
from canary.runs.registry import Registry
from canary.runs.values import new_nonce
from tests.proxy.test_proxy import FakeUpstream

CHAT = "/v1/chat/completions"


class CountingRegistry(Registry):
    """The run registry, counting the calls it was asked to intercept."""

    def __init__(self) -> None:
        super().__init__(has_upstream=True)
        self.asked: list[bytes] = []
        self._count_lock = threading.Lock()

    def intercept(self, call: ModelCall) -> Any:
        with self._count_lock:
            self.asked.append(call.body)
        return super().intercept(call)


def _run(nonce: str) -> ActiveRun:
    now = time.time()
    return ActiveRun(1, "citation", nonce, "first", "SCRIPTED with https://fake.example.org", None, "page",
                     started=now, deadline=now + 600)


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, BackgroundServer]]:
    fake = FakeUpstream()
    with BackgroundServer(fake, name="fake upstream") as server:
        yield fake, server


def _chat(text: str, *, stream: bool = False) -> bytes:
    return json.dumps({"model": "m", "stream": stream, "messages": [{"role": "user", "content": text}]}).encode()


def test_only_a_call_carrying_a_live_nonce_reaches_the_interceptor(
    upstream: tuple[FakeUpstream, BackgroundServer],
) -> None:
    _, server = upstream
    registry = CountingRegistry()
    nonce = new_nonce()
    registry.add(_run(nonce))
    proxy = ProxyServer(create_proxy(server.url, registry), name="proxy").start()
    try:
        with httpx.Client(trust_env=False, timeout=10) as client:
            organic = client.post(proxy.url + CHAT, content=_chat("what is the minimum?"),
                                  headers={"traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"})
            canary = client.post(proxy.url + CHAT, content=_chat(f"read https://{nonce}.example.org"))
    finally:
        proxy.stop()
    assert organic.status_code == 200 and "SCRIPTED" not in organic.text
    assert canary.status_code == 200 and "SCRIPTED" in canary.json()["choices"][0]["message"]["content"]
    # The organic call went straight to the model server: the interceptor was asked only about the canary's.
    assert len(registry.asked) == 1 and nonce.encode() in registry.asked[0]
    run = registry.active()[0]
    assert run.foreign_calls == 1  # the organic call is still the run's foreign work
    assert registry.traced_elsewhere("ab" * 16)


def _raw(port: int, request: bytes, *, wait: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(request)
        received = b""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            received += data
        return received


def test_content_length_with_chunked_is_a_400_and_no_traceback(
    upstream: tuple[FakeUpstream, BackgroundServer], capfd: pytest.CaptureFixture[str],
) -> None:
    _, server = upstream
    with ProxyServer(create_proxy(server.url), name="proxy") as proxy:
        for path in (CHAT, "/api/tags"):
            answer = _raw(proxy.port, (
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n"
                "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n").encode())
            assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
            assert b"connection: close" in answer.lower()
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err and "Traceback" not in captured.out


def test_a_body_that_trickles_in_is_cut_off(upstream: tuple[FakeUpstream, BackgroundServer]) -> None:
    _, server = upstream
    with ProxyServer(create_proxy(server.url), name="proxy", body_period=0.3) as proxy, \
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        sock.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n".encode())
        started = time.monotonic()
        answer = b""
        while time.monotonic() - started < 4 and not answer:
            sock.sendall(b"x")  # one byte every 50 ms: far below the front's floor
            time.sleep(0.05)
            sock.setblocking(False)
            try:
                answer = sock.recv(65536)
            except BlockingIOError:
                pass
            except OSError:
                break
            finally:
                sock.setblocking(True)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert time.monotonic() - started < 2


def test_unfinished_bodies_past_the_budget_are_refused_and_let_go(
    upstream: tuple[FakeUpstream, BackgroundServer],
) -> None:
    _, server = upstream
    budget = Budget(limit=1_000_000)
    size = 600_000
    with ProxyServer(create_proxy(server.url, max_body=size), name="proxy", budget=budget) as proxy:
        socks = [socket.create_connection(("127.0.0.1", proxy.port), timeout=5) for _ in range(2)]
        try:
            for sock in socks:
                sock.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {size}\r\n\r\n".encode()
                             + b"x" * (size - 10))
            ready, _, _ = select.select(socks, [], [], 5)  # whichever came second is refused
            assert len(ready) == 1
            answer = ready[0].recv(65536)
            assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
            assert b"retry-after: 1" in answer
            assert budget.used <= budget.limit
        finally:
            for sock in socks:
                sock.close()
        deadline = time.monotonic() + 3
        while budget.used and time.monotonic() < deadline:
            time.sleep(0.02)
        assert budget.used == 0
        with httpx.Client(trust_env=False) as client:  # and the proxy goes on answering
            assert client.post(proxy.url + CHAT, content=_chat("hi")).status_code == 200


def test_a_connection_whose_head_is_late_is_closed(upstream: tuple[FakeUpstream, BackgroundServer]) -> None:
    _, server = upstream
    with ProxyServer(create_proxy(server.url), name="proxy", header_timeout=0.5) as proxy, \
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        sock.sendall(b"GET /api/tags HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
        started = time.monotonic()
        assert sock.recv(100) == b""  # closed by the proxy, with nothing relayed
        assert time.monotonic() - started < 2.5


@pytest.mark.parametrize("full_path", [False, True], ids=["relayed", "full path"])
def test_the_upstreams_query_string_is_kept(
    upstream: tuple[FakeUpstream, BackgroundServer], full_path: bool,
) -> None:
    from tests.proxy.test_proxy import MarkerInterceptor

    fake, server = upstream
    interceptor = MarkerInterceptor() if full_path else None  # it sees every model call on the full path
    with ProxyServer(create_proxy(server.url + "/?key=s3cret&api-version=2", interceptor), name="proxy") as proxy, \
            httpx.Client(trust_env=False) as client:
        for target, query in ((CHAT, b"key=s3cret&api-version=2"),
                              (CHAT + "?alt=sse", b"key=s3cret&api-version=2&alt=sse")):
            assert client.post(proxy.url + target, content=_chat("hi")).status_code == 200
            seen = fake.log[-1]
            assert (seen.path, seen.query) == (CHAT, query)
    if interceptor is not None:
        assert len(interceptor.calls) == 2


def test_an_http_1_0_client_gets_an_answer_of_unknown_length_unchunked(
    upstream: tuple[FakeUpstream, BackgroundServer],
) -> None:
    from tests.proxy.test_proxy import Plan

    fake, server = upstream
    key = fake.plan(Plan(200, [(b"content-type", b"text/event-stream")], [b"data: one\n\n", b"data: two\n\n"]))
    with ProxyServer(create_proxy(server.url), name="proxy") as proxy:
        answer = _raw(proxy.port, f"GET /api/tags HTTP/1.0\r\nHost: 127.0.0.1\r\nx-plan: {key}\r\n\r\n".encode())
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding" not in head.lower()
    assert body == b"data: one\n\ndata: two\n\n"  # delimited by the close, as HTTP/1.0 reads it
