"""Draining a stopping server without racing a client that reuses an idle keep-alive connection.

Raw sockets on loopback, so each test knows exactly which connection a request travels on.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from canary.proxy.serving import BackgroundServer

REQUEST = b"GET /quick HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def _app() -> Starlette:
    async def quick(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def never(request: Request) -> Response:
        await asyncio.Event().wait()
        return PlainTextResponse("never")

    return Starlette(routes=[Route("/quick", quick), Route("/never", never)])


def _answer(sock: socket.socket) -> bytes:
    """One whole response (small, with Content-Length) read off ``sock``; b"" if it was closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        if not piece:
            return data
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(body) < length:
        piece = sock.recv(65536)
        if not piece:
            break
        body += piece
    return data


def _connect(server: BackgroundServer) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=20)
    sock.sendall(REQUEST)
    assert _answer(sock).startswith(b"HTTP/1.1 200")
    return sock


def test_an_idle_connection_is_kept_through_the_drain_until_idle_past_the_clients_expiry() -> None:
    """A client may send on a connection idle less than its keep-alive expiry: it is answered, not cut."""
    server = BackgroundServer(_app(), drain=30.0, idle_close=4.0).start()
    stopper = threading.Thread(target=server.stop)
    try:
        with _connect(server) as sock:
            stopper.start()
            time.sleep(1.5)  # draining, the connection idle all along
            assert stopper.is_alive()
            sock.sendall(REQUEST)
            answer = _answer(sock)
            assert answer.startswith(b"HTTP/1.1 200")
            assert b"connection: close" in answer.lower()
            assert sock.recv(100) == b""  # closed by the server once it answered
    finally:
        if stopper.ident is None:
            server.stop()
        stopper.join(40)
    assert not stopper.is_alive()


def test_a_connection_idle_past_the_expiry_is_closed_and_the_drain_ends() -> None:
    server = BackgroundServer(_app(), drain=30.0, idle_close=0.5).start()
    with _connect(server) as sock:
        began = time.monotonic()
        server.stop()
        took = time.monotonic() - began
        assert sock.recv(100) == b""  # closed while idle, no request on it
    assert took < 20.0  # well inside the 30 s bound: the drain ended once nothing was left


def test_a_draining_server_answers_new_connections_until_the_old_ones_are_gone() -> None:
    """No one else accepts on the listener while this server drains, so it goes on serving."""
    server = BackgroundServer(_app(), drain=30.0, idle_close=3.0).start()
    stopper = threading.Thread(target=server.stop)
    try:
        with _connect(server) as old:
            stopper.start()
            time.sleep(0.5)  # draining; ``old`` still open
            with socket.create_connection((server.host, server.port), timeout=20) as new:
                new.sendall(REQUEST)
                answer = _answer(new)
            assert answer.startswith(b"HTTP/1.1 200")
            assert b"connection: close" in answer.lower()
            assert old.recv(100) == b""  # then the old one is closed, idle past 3 s
        stopper.join(40)
        assert not stopper.is_alive()
        # the drain is over: the listener is closed
        probe = socket.socket()
        try:
            assert probe.connect_ex((server.host, server.port)) != 0
        finally:
            probe.close()
    finally:
        if stopper.is_alive():
            stopper.join(40)


def test_the_drain_is_bounded_and_cuts_what_still_runs_then() -> None:
    server = BackgroundServer(_app(), drain=1.0, idle_close=30.0).start()
    with socket.create_connection((server.host, server.port), timeout=30) as sock:
        sock.sendall(REQUEST.replace(b"/quick", b"/never"))
        time.sleep(0.3)  # the request is in flight
        began = time.monotonic()
        server.stop()
        took = time.monotonic() - began
        cut = sock.recv(100)
        assert cut == b"" or cut.startswith(b"HTTP/1.1 500")  # cut: no answer from the app
    assert took < 15.0  # the 1 s bound, then uvicorn's own 2 s for tasks: not the 30 s idle_close


def test_a_running_server_closes_an_idle_connection_only_after_idle_close() -> None:
    """uvicorn's own default (5 s) equals httpx's expiry, so a client could write as it closed."""
    with BackgroundServer(_app(), idle_close=1.5) as server, _connect(server) as sock:
        time.sleep(0.8)
        sock.sendall(REQUEST)
        assert _answer(sock).startswith(b"HTTP/1.1 200")  # still open after 0.8 s idle
        time.sleep(3.0)
        assert sock.recv(100) == b""  # closed once idle past 1.5 s
