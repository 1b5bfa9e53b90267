"""The proxy relays only to its upstream, answers only loopback Hosts, bounds what it buffers,
and relays status lines and lengths as they came; userinfo never shows.

Every test here runs real servers on loopback and speaks raw HTTP/1.1 where a client library
would refuse to send the request under test.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from canary.proxy.serving import BackgroundServer
from tests.proxy.test_proxy import closed_port_url, serve_proxy


class Recorder:
    """A raw ASGI server that records every request it gets and answers 200 ``recorded``."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, bytes]] = []
        self.first_chunk = threading.Event()
        self.received = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            self.received += len(message.get("body", b""))
            if self.received:
                self.first_chunk.set()
            if not message.get("more_body"):
                break
        host = dict(scope["headers"]).get(b"host", b"")
        self.requests.append((scope["method"], scope["path"], host))
        body = f"recorded {self.received}".encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
def upstream() -> Iterator[tuple[Recorder, BackgroundServer]]:
    recorder = Recorder()
    with BackgroundServer(recorder, name="upstream") as server:
        yield recorder, server


@pytest.fixture
def bystander() -> Iterator[tuple[Recorder, BackgroundServer]]:
    """A second local server the proxy must never reach."""
    recorder = Recorder()
    with BackgroundServer(recorder, name="bystander") as server:
        yield recorder, server


def raw_request(port: int, head: bytes, body: bytes = b"", timeout: float = 10.0) -> bytes:
    """Send ``head`` (and ``body``) on a fresh connection; the whole answer, until the server closes or 1 s idle."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head + body)
        sock.settimeout(1.0)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and _complete(answer):
                    break
        except TimeoutError:
            pass
    return answer


def _complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return body.endswith(b"0\r\n\r\n")


def status_line(answer: bytes) -> bytes:
    return answer.partition(b"\r\n")[0]


# -- 1. only the configured origin ----------------------------------------------------------------


@pytest.mark.parametrize("target", [
    "%2F@127.0.0.1:{port}/hooks/x",
    "%2f%2f127.0.0.1:{port}/x",
    "@127.0.0.1:{port}/hooks/x",
    "http://127.0.0.1:{port}/hooks/x",
    "127.0.0.1:{port}",
    "*",
])
def test_a_target_that_is_not_a_path_is_a_400_and_reaches_no_server(
    upstream: tuple[Recorder, BackgroundServer], bystander: tuple[Recorder, BackgroundServer], target: str
) -> None:
    up, up_server = upstream
    other, other_server = bystander
    with serve_proxy(up_server.url) as proxy:
        request_target = target.format(port=other_server.port).encode()
        head = (b"POST " + request_target + b" HTTP/1.1\r\nHost: 127.0.0.1:" + str(proxy.port).encode()
                + b"\r\nContent-Length: 2\r\n\r\n")
        answer = raw_request(proxy.port, head, b"{}")
    assert status_line(answer).startswith(b"HTTP/1.1 4"), answer[:300]
    assert b"Traceback" not in answer and b"Internal Server Error" not in answer
    assert other.requests == []
    assert up.requests == []


def test_a_foreign_host_through_an_encoded_authority_reaches_nothing(
    upstream: tuple[Recorder, BackgroundServer], bystander: tuple[Recorder, BackgroundServer]
) -> None:
    up, up_server = upstream
    other, other_server = bystander
    with serve_proxy(up_server.url) as proxy:
        head = f"GET %2F@127.0.0.1:{other_server.port}/metrics HTTP/1.1\r\nHost: evil.example\r\n\r\n".encode()
        answer = raw_request(proxy.port, head)
    assert status_line(answer).startswith(b"HTTP/1.1 4"), answer[:300]
    assert other.requests == [] and up.requests == []


def test_a_path_with_an_at_sign_goes_to_the_upstream_as_a_path(
    upstream: tuple[Recorder, BackgroundServer], bystander: tuple[Recorder, BackgroundServer]
) -> None:
    up, up_server = upstream
    other, other_server = bystander
    with serve_proxy(up_server.url + "/base/") as proxy:
        target = f"//127.0.0.1:{other_server.port}/x@127.0.0.1:{other_server.port}/y".encode()
        head = b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        answer = raw_request(proxy.port, head)
    assert status_line(answer) == b"HTTP/1.1 200 OK"
    assert other.requests == []
    assert len(up.requests) == 1
    _, path, host = up.requests[0]
    assert path.startswith("/base//127.0.0.1:") and host == up_server.url.removeprefix("http://").encode()


# -- 2. Host checks ---------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:11435", "127.0.0.1.nip.io", "10.0.0.1"])
def test_a_foreign_host_is_refused_before_anything_is_relayed(
    upstream: tuple[Recorder, BackgroundServer], host: str
) -> None:
    up, up_server = upstream
    with serve_proxy(up_server.url) as proxy, httpx.Client(trust_env=False) as client:
        r = client.post(proxy.url + "/v1/embeddings", content=b"{}", headers={"host": host})
        scripted = client.post(proxy.url + "/v1/chat/completions", content=b"{}", headers={"host": host})
    assert r.status_code == 403 and scripted.status_code == 403
    assert "loopback" in r.json()["error"]["message"]
    assert up.requests == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost:{port}", "[::1]:{port}", "LOCALHOST.", "box.lan:{port}"])
def test_loopback_and_listen_names_are_accepted(upstream: tuple[Recorder, BackgroundServer], host: str) -> None:
    up, up_server = upstream
    with serve_proxy(up_server.url, allowed_hosts=["box.lan"]) as proxy, httpx.Client(trust_env=False) as client:
        r = client.get(proxy.url + "/v1/models", headers={"host": host.format(port=proxy.port)})
    assert r.status_code == 200, r.text
    assert len(up.requests) == 1


# -- 3. memory: streamed bodies, capped model calls --------------------------------------------


def test_a_non_model_body_is_streamed_upstream_before_the_client_has_sent_it_all(
    upstream: tuple[Recorder, BackgroundServer],
) -> None:
    up, up_server = upstream
    sent_rest = threading.Event()

    def body() -> Iterator[bytes]:
        yield b"x" * 1000
        # A buffering proxy would wait for the rest before opening the upstream request.
        assert up.first_chunk.wait(10), "the upstream saw nothing before the body ended"
        sent_rest.set()
        yield b"y" * 1000

    with serve_proxy(up_server.url, max_body=100) as proxy, httpx.Client(trust_env=False, timeout=20) as client:
        r = client.post(proxy.url + "/api/pull", content=body())
    assert sent_rest.is_set()
    assert r.status_code == 200 and r.text == "recorded 2000"  # max_body caps model calls only


@pytest.mark.parametrize(("size", "status"), [(1000, 200), (1001, 413)])
def test_a_model_call_larger_than_max_body_is_a_413(
    upstream: tuple[Recorder, BackgroundServer], size: int, status: int
) -> None:
    up, up_server = upstream
    with serve_proxy(up_server.url, max_body=1000) as proxy, httpx.Client(trust_env=False) as client:
        r = client.post(proxy.url + "/v1/chat/completions", content=b"x" * size)
        ollama = client.post(proxy.url + "/api/chat", content=iter([b"x" * (size // 2), b"x" * (size - size // 2)]))
    assert r.status_code == status and ollama.status_code == status
    if status == 413:
        assert "1000 bytes" in r.json()["error"]["message"] and "max_body" in r.json()["error"]["message"]
        assert "1000 bytes" in ollama.json()["error"]  # Ollama's own error shape
        assert up.requests == []
    else:
        assert len(up.requests) == 2


# -- 5. fidelity: reason phrase and Content-Length ---------------------------------------------


class RawUpstream:
    """A socket server that answers every request with the same raw bytes, then keeps the connection."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            conn.sendall(self.answer)
            time.sleep(0.5)

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_the_reason_phrase_and_content_length_come_through(method: str) -> None:
    raw = RawUpstream(b"HTTP/1.1 418 Whatever\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nhello")
    try:
        with serve_proxy(f"http://127.0.0.1:{raw.port}") as proxy:
            body = b'{"model":"m"}' if method == "POST" else b""
            framing = f"Content-Length: {len(body)}\r\n" if body else ""
            path = "/v1/chat/completions" if method == "POST" else "/v1/models"
            head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{framing}\r\n".encode()
            answer = raw_request(proxy.port, head, body)
    finally:
        raw.close()
    head_bytes, _, content = answer.partition(b"\r\n\r\n")
    lines = head_bytes.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 418 Whatever"
    assert b"content-length: 5" in [line.lower() for line in lines]
    assert not any(line.lower().startswith(b"transfer-encoding") for line in lines)
    assert content == b"hello"


def test_a_chunked_upstream_answer_stays_chunked() -> None:
    raw = RawUpstream(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    try:
        with serve_proxy(f"http://127.0.0.1:{raw.port}") as proxy:
            answer = raw_request(proxy.port, b"GET /api/tags HTTP/1.1\r\nHost: localhost\r\n\r\n")
    finally:
        raw.close()
    head, _, content = answer.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower() and b"content-length" not in head.lower()
    assert content == b"5\r\nhello\r\n0\r\n\r\n"


# -- 4. userinfo is never shown ------------------------------------------------------------------


def test_upstream_credentials_never_appear_in_a_502() -> None:
    port = closed_port_url().rsplit(":", 1)[1]
    with serve_proxy(f"http://canary-user:s3cret-pw@127.0.0.1:{port}") as proxy, \
            httpx.Client(trust_env=False) as client:
        r = client.post(proxy.url + "/v1/chat/completions", content=b"{}")
        ollama = client.post(proxy.url + "/api/chat", content=b"{}")
    assert r.status_code == 502 and ollama.status_code == 502
    for text in (r.text, ollama.text):
        assert "s3cret-pw" not in text and "canary-user" not in text
        assert f"http://***@127.0.0.1:{port}" in text


def test_upstream_credentials_are_sent_as_basic_auth_unless_the_client_authorizes(
    upstream: tuple[Recorder, BackgroundServer],
) -> None:
    seen: list[bytes | None] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        seen.append(dict(scope["headers"]).get(b"authorization"))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    with BackgroundServer(app) as server:
        port = server.port
        with serve_proxy(f"http://u:p@127.0.0.1:{port}") as proxy, httpx.Client(trust_env=False) as client:
            client.get(proxy.url + "/v1/models")
            client.get(proxy.url + "/v1/models", headers={"authorization": "Bearer sk-agent"})
    assert seen == [b"Basic dTpw", b"Bearer sk-agent"]
