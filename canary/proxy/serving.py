"""Serving ASGI apps on loopback from a background thread (the proxy, fixtures, demo services)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from typing import Any

from canary.errors import UnavailableError

LOOPBACK_NAMES = {"localhost"}


def is_loopback(host: str) -> bool:
    """Whether a host name or address is this machine's loopback."""
    host = host.strip("[]")
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_listen(listen: str) -> tuple[str, int]:
    """``127.0.0.1:11435`` or ``[::1]:11435`` into host and port."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{listen!r} is not host:port")
    return host.strip("[]"), int(port)


def format_listen(host: str, port: int) -> str:
    """Host and port as a URL authority (IPv6 in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _quiet_server_class() -> Any:
    import uvicorn

    class QuietServer(uvicorn.Server):
        """A uvicorn server that sleeps until told to exit, instead of waking ten times a second."""

        _exit: asyncio.Event | None = None
        _loop: asyncio.AbstractEventLoop | None = None

        async def main_loop(self) -> None:
            self._loop = asyncio.get_running_loop()
            self._exit = asyncio.Event()
            if not self.should_exit:
                await self._exit.wait()

        def request_exit(self) -> None:
            self.should_exit = True
            loop, event = self._loop, self._exit
            if loop is not None and event is not None and not loop.is_closed():
                loop.call_soon_threadsafe(event.set)

    return QuietServer


class BackgroundServer:
    """One uvicorn server in a daemon thread; ``start()`` returns once it accepts connections."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, name: str = "server") -> None:
        self.app = app
        self.host = host
        self.port = port
        self.name = name
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    @property
    def url(self) -> str:
        """Base URL of the running server."""
        return f"http://{format_listen(self.host, self.port)}"

    def start(self, timeout: float = 10.0) -> BackgroundServer:
        """Bind, start serving, and wait until ready; a taken port is an UnavailableError."""
        import uvicorn

        _QuietServer = _quiet_server_class()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # IPPROTO_TCP, so asyncio sets TCP_NODELAY: otherwise a body written after its
        # headers waits for the client's delayed ACK (~40 ms).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise UnavailableError(
                f"cannot listen on {format_listen(self.host, self.port)} for the {self.name}: "
                f"{exc.strerror or exc}"
            ) from exc
        sock.listen(2048)
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            server_header=False,
            date_header=False,
            lifespan="auto",
            timeout_graceful_shutdown=2,
        )
        self._server = _QuietServer(config)
        ready = threading.Event()
        server = self._server

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)

            async def main() -> None:
                serve = asyncio.ensure_future(server.serve(sockets=[sock]))
                while not server.started and not serve.done():
                    await asyncio.sleep(0.005)
                ready.set()
                await serve

            try:
                loop.run_until_complete(main())
            finally:
                ready.set()
                loop.close()

        self._thread = threading.Thread(target=run, name=f"canary-{self.name}", daemon=True)
        self._thread.start()
        if not ready.wait(timeout) or not server.started:
            self.stop()
            raise UnavailableError(f"the {self.name} did not start on {self.url}")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and wait for the thread."""
        if self._server is not None:
            self._server.request_exit()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
