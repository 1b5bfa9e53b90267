"""The model proxy as served: the front on the agent's address, the full path behind it on loopback.

``ProxyServer`` has ``BackgroundServer``'s interface (start, stop with a drain, ``url``,
``listener``): it runs the ASGI app (``canary.proxy.app``) on a loopback port of its own and,
on the same event loop, the front (``canary.proxy.front``) on the agent's address or the socket
handed over, so the counts and the full path's httpx client stay on one thread. Stopping with a
drain drains the front as ``canary.proxy.drain`` tells, then stops the full path.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from canary.errors import UnavailableError
from canary.proxy.app import ProxyApp
from canary.proxy.drain import IDLE_CLOSE, DrainState, drain
from canary.proxy.front import Budget, Front
from canary.proxy.serving import HEADER_TIMEOUT, BackgroundServer, bind_listener, format_listen
from canary.proxy.upstream import Origin

__all__ = ["ProxyServer"]


class ProxyServer:
    """The proxy's front and full path, served from one background thread."""

    def __init__(
        self, app: ProxyApp, host: str = "127.0.0.1", port: int = 0, *, name: str = "model proxy",
        sock: socket.socket | None = None, drain: float = 0.0, idle_close: float = IDLE_CLOSE,
        header_timeout: float | None = HEADER_TIMEOUT, asgi: Any = None, budget: Budget | None = None,
        body_period: float | None = None,
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.name = name
        self.inherited = sock
        self.drain = drain
        self.idle_close = idle_close
        self.header_timeout = header_timeout
        self.budget = budget
        self.body_period = body_period
        self._asgi = asgi if asgi is not None else app
        self._inner: BackgroundServer | None = None
        self._sock: socket.socket | None = None
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state = DrainState()
        self.front: Front | None = None

    @property
    def listener(self) -> socket.socket | None:
        """The listening socket while the server runs (to hand over to a successor)."""
        return self._sock

    @property
    def url(self) -> str:
        """Base URL of the running server."""
        return f"http://{format_listen(self.host, self.port)}"

    def start(self, timeout: float = 10.0) -> ProxyServer:
        """Bind, start serving, and wait until ready; a taken port is an UnavailableError."""
        sock = self.inherited
        if sock is None:
            sock = bind_listener(self.host, self.port, self.name)
        sock.setblocking(False)
        self._sock = sock
        address = sock.getsockname()
        self.host, self.port = str(address[0]), int(address[1])
        try:
            inner = BackgroundServer(self._asgi, "127.0.0.1", 0, name=f"{self.name} (full path)")
            self._inner = inner.start(timeout)
            loop = self._inner.loop
            assert loop is not None
            self._loop = loop
            asyncio.run_coroutine_threadsafe(self._serve(sock), loop).result(timeout)
        except BaseException as exc:
            self.stop()
            if isinstance(exc, UnavailableError):
                raise
            raise UnavailableError(f"the {self.name} did not start on {self.url}: {exc}") from exc
        return self

    async def _serve(self, sock: socket.socket) -> None:
        app = self.app
        loop = asyncio.get_running_loop()
        upstream = Origin.of_url(app.upstream, app.ca_file) if app.upstream else None
        inner = self._inner
        assert inner is not None
        extra: dict[str, Any] = {}
        if self.body_period is not None:
            extra["body_period"] = self.body_period
        self.front = Front(
            loop, upstream=upstream, full=Origin(inner.host, inner.port, shown=inner.url),
            interceptor=app.interceptor, recorder=app.recorder, max_body=app.max_body,
            allowed_hosts=app.allowed_hosts, connect_timeout=app.connect_timeout,
            read_timeout=app.read_timeout,
            header_timeout=self.header_timeout, budget=self.budget, draining=self._state, **extra,
        )
        self._server = await loop.create_server(self.front.protocol, sock=sock, backlog=2048)

    async def _stop(self) -> None:
        server, front = self._server, self.front
        if server is None or front is None:
            return
        if self.drain > 0:
            await drain([server], front.connections, self._state, bound=self.drain,
                        idle_close=self.idle_close)
        server.close()
        for connection in list(front.connections):
            connection.abort()
        front.close()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving (draining first, when asked to), then stop the full path."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError, TimeoutError, asyncio.CancelledError):
                asyncio.run_coroutine_threadsafe(self._stop(), loop).result(timeout + self.drain)
        if self._inner is not None:
            self._inner.stop(timeout)
            self._inner = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
