"""The control API drops connections that are slow to send their request: many half-open
sockets are closed in time and never stop a real request from being answered."""

from __future__ import annotations

import socket
import time

import httpx

from canary.daemon.control import create_control_app
from canary.proxy.serving import BackgroundServer
from tests.daemon.test_control import TOKEN, StubHandlers

SLOW = 120  # half-open connections held at once (the attack used 900; a modest number proves it)


def _closed_by_server(sock: socket.socket, deadline: float) -> bool:
    """Whether the server closes ``sock`` before ``deadline`` (reads until EOF, discarding any answer)."""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except OSError:
            return True
    return False


def test_half_open_heads_are_closed_and_real_requests_still_answered() -> None:
    app = create_control_app(TOKEN, StubHandlers())
    with BackgroundServer(app, name="control", header_timeout=1.0) as server:
        sockets = []
        try:
            for index in range(SLOW):
                sock = socket.create_connection(("127.0.0.1", server.port))
                # half a head: a request line and one header, never the blank line that ends it
                if index % 2:
                    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                sockets.append(sock)
            r = httpx.get(server.url + "/health", headers={"authorization": f"Bearer {TOKEN}"},
                          trust_env=False, timeout=5)
            assert r.status_code == 200
            deadline = time.monotonic() + 6.0
            still_open = [s for s in sockets if not _closed_by_server(s, deadline)]
            assert still_open == []
        finally:
            for sock in sockets:
                sock.close()


def test_a_keep_alive_connection_must_send_its_next_head_in_time_too() -> None:
    app = create_control_app(TOKEN, StubHandlers())
    with BackgroundServer(app, name="control", header_timeout=1.0) as server, \
            socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /health HTTP/1.1\r\n")  # then nothing more
        assert _closed_by_server(sock, time.monotonic() + 4.0)


def test_a_body_that_does_not_arrive_in_time_is_a_408_and_the_connection_closes() -> None:
    app = create_control_app(TOKEN, StubHandlers(), body_timeout=0.5)
    with BackgroundServer(app, name="control") as server, \
            socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(f"POST /run HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"select\"".encode())
        sock.settimeout(5)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408")
        assert b"did not arrive within 0.5 s" in answer
