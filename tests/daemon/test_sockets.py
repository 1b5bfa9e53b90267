"""Sockets from the service manager: systemd's LISTEN_FDS protocol and launchd's launch_activate_socket."""

from __future__ import annotations

import ctypes
import json
import os
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from canary.daemon import sockets
from canary.proxy.serving import BackgroundServer
from tests.daemon import activation

PROBE = """
import json, os, socket
from canary.daemon.sockets import systemd_sockets
found = systemd_sockets()
print(json.dumps({
    "names": {n: list(s.getsockname()[:2]) for n, s in found.items()},
    "inheritable": [s.get_inheritable() for s in found.values()],
    "tcp": [s.proto == socket.IPPROTO_TCP for s in found.values()],
    "env": [k for k in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES") if k in os.environ],
}))
"""


def probe(tmp_path: Path, socks: dict[str, socket.socket], **env: str) -> dict[str, Any]:
    script, out, err = tmp_path / "probe.py", tmp_path / "probe.out", tmp_path / "probe.err"
    script.write_text(PROBE)
    proc = activation.spawn([sys.executable, str(script)], socks, env={**os.environ, **env},
                            stdout=out, stderr=err)
    assert proc.wait(60) == 0, err.read_text()
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_systemd_sockets_are_taken_by_name_and_the_variables_removed(tmp_path: Path) -> None:
    proxy, fixtures = activation.listener(), activation.listener()
    expected = {"proxy": list(proxy.getsockname()[:2]), "fixtures": list(fixtures.getsockname()[:2])}
    try:
        found = probe(tmp_path, {"proxy": proxy, "fixtures": fixtures})
    finally:
        proxy.close()
        fixtures.close()
    assert found["names"] == expected
    assert found["inheritable"] == [False, False]  # a child of the daemon never gets them
    assert found["tcp"] == [True, True]  # so asyncio sets TCP_NODELAY on accepted connections
    assert found["env"] == []  # LISTEN_* removed once read


def test_systemd_sockets_keep_their_addresses(tmp_path: Path) -> None:
    proxy = activation.listener()
    address = list(proxy.getsockname()[:2])
    try:
        found = probe(tmp_path, {"proxy": proxy})
    finally:
        proxy.close()
    assert found["names"] == {"proxy": address}


def test_listen_fds_for_another_process_is_ignored() -> None:
    env = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1", "LISTEN_FDNAMES": "proxy"}
    assert sockets.systemd_sockets(env) == {}
    assert env == {}  # removed all the same


def test_no_listen_fds_means_a_daemon_started_by_hand() -> None:
    assert sockets.systemd_sockets({}) == {}


def test_a_descriptor_that_is_not_a_listening_socket_is_ignored(tmp_path: Path) -> None:
    unconnected = socket.socket()  # a TCP socket, but not listening
    try:
        found = probe(tmp_path, {"proxy": unconnected})
    finally:
        unconnected.close()
    assert found["names"] == {}


def test_launchd_sockets_through_launch_activate_socket() -> None:
    """The ctypes call as libSystem makes it: an allocated array of descriptors, freed by the caller."""
    held = activation.listener()
    calls: list[bytes] = []
    freed: list[int] = []
    arrays: list[Any] = []

    def activate(name: bytes, fds: Any, count: Any) -> int:
        calls.append(name)
        if name != b"proxy":
            return 2  # ENOENT: no such Sockets entry
        array = (ctypes.c_int * 1)(os.dup(held.fileno()))
        arrays.append(array)
        ctypes.cast(fds, ctypes.POINTER(ctypes.POINTER(ctypes.c_int)))[0] = ctypes.cast(
            array, ctypes.POINTER(ctypes.c_int)
        )
        ctypes.cast(count, ctypes.POINTER(ctypes.c_size_t))[0] = 1
        return 0

    def free(pointer: Any) -> None:
        freed.append(ctypes.addressof(pointer.contents))

    try:
        found = sockets.launchd_sockets(("proxy", "fixtures"), activate=activate, free=free)
        assert calls == [b"proxy", b"fixtures"]
        assert list(found) == ["proxy"]
        assert found["proxy"].getsockname() == held.getsockname()
        assert freed == [ctypes.addressof(arrays[0])]  # the array launchd allocated is released
        found["proxy"].close()
    finally:
        held.close()


def test_launchd_is_not_asked_off_macos() -> None:
    assert sockets.launchd_sockets(("proxy",), platform="linux") == {}


# -- serving on a held socket, and draining ------------------------------------------------------


def _app(release: threading.Event) -> Starlette:
    async def quick(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def stream(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b"first "
            while not release.is_set():
                await __import__("asyncio").sleep(0.01)
            yield b"last"

        return StreamingResponse(body())

    async def slow(request: Request) -> Response:
        while not release.is_set():
            await __import__("asyncio").sleep(0.01)
        return PlainTextResponse("late")

    return Starlette(routes=[Route("/quick", quick), Route("/stream", stream), Route("/slow", slow)])


def test_a_server_given_a_socket_serves_on_it_and_leaves_the_queue_to_the_next() -> None:
    held = activation.listener()
    url = f"http://{activation.address(held)}"
    first = BackgroundServer(_app(threading.Event()), sock=socket.socket(fileno=os.dup(held.fileno())),
                             drain=5.0).start()
    assert httpx.get(f"{url}/quick").text == "ok"
    first.stop()
    # nobody serves now, but the held socket queues the connection: it is answered by the next server
    answer: list[str] = []
    waiter = threading.Thread(target=lambda: answer.append(httpx.get(f"{url}/quick", timeout=30).text))
    waiter.start()
    time.sleep(0.5)
    assert answer == []
    second = BackgroundServer(_app(threading.Event()), sock=socket.socket(fileno=os.dup(held.fileno())),
                              drain=5.0).start()
    waiter.join(30)
    second.stop()
    held.close()
    assert answer == ["ok"]


def test_draining_finishes_a_stream_in_flight_and_closes_keep_alive_connections() -> None:
    release = threading.Event()
    server = BackgroundServer(_app(release), drain=10.0).start()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.get("/quick").headers.get("connection") != "close"
        chunks: list[bytes] = []

        def read_stream() -> None:
            with httpx.stream("GET", f"{server.url}/stream", timeout=30) as response:
                chunks.extend(response.iter_bytes())

        reader = threading.Thread(target=read_stream)
        reader.start()
        time.sleep(0.3)  # the stream has begun
        stopper = threading.Thread(target=server.stop)
        stopper.start()
        time.sleep(0.3)  # draining now: the listener is closed, the stream still open
        assert stopper.is_alive()
        # a request on the idle keep-alive connection is still answered, with Connection: close
        last = client.get("/quick")
        assert last.text == "ok" and last.headers["connection"] == "close"
        release.set()
        reader.join(30)
        stopper.join(30)
    assert b"".join(chunks) == b"first last"  # the stream was not cut


def test_a_request_in_flight_when_the_drain_begins_is_answered_with_connection_close() -> None:
    """Else the client would put the connection back in its pool just as the server closes it."""
    release = threading.Event()
    server = BackgroundServer(_app(release), drain=10.0).start()
    answers: list[httpx.Response] = []
    with httpx.Client(base_url=server.url, timeout=30) as client:
        asker = threading.Thread(target=lambda: answers.append(client.get("/slow")))
        asker.start()
        time.sleep(0.3)  # the request is in flight
        stopper = threading.Thread(target=server.stop)
        stopper.start()
        time.sleep(0.3)  # draining
        release.set()
        asker.join(30)
        stopper.join(30)
    assert answers[0].text == "late"
    assert answers[0].headers["connection"] == "close"
