"""The proxy's front: every connection the agent makes, parsed by a C parser and relayed as bytes.

Only the request head is looked at (``httptools``). A model call's body is read whole (up to
``max_body``, within a global in-flight budget and a read deadline) and scanned for the nonces
of the runs in flight; a call carrying none, and every other request, is relayed to the model
server byte for byte (``canary.proxy.exchange``), with no request or response object built. A
call carrying a live nonce, or the in-process hook's, goes to the full path: the ASGI app
(``canary.proxy.app``) on a loopback port of its own, which may script the answer.

An interceptor that cannot say which bodies it wants (no ``live``) sees every model call on
the full path. The checks hold on both paths: the Host must be loopback or a listen name (403),
the target origin-form (400), a body within ``max_body`` (413); a request the parser refuses
(both Content-Length and chunked framing, say) is a 400 and the connection is closed.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import sys
from typing import Any, Protocol

from canary.proxy import dialects
from canary.proxy.exchange import Exchange, Failure
from canary.proxy.frontconn import FrontProtocol
from canary.proxy.health import Recorder
from canary.proxy.serving import host_allowed
from canary.proxy.upstream import Origin, Pool

__all__ = ["Budget", "Front", "FrontProtocol", "Screen"]

log = logging.getLogger(__name__)

#: Seconds between looks at a body still arriving, and the bytes it must have grown by at each.
BODY_PERIOD = 10.0
BODY_MIN = 16 * 1024
#: Request-body bytes all connections may hold at once by default (beside ``max_body`` for each).
DEFAULT_BUDGET = 256 * 1024 * 1024
_TRIM_AFTER = 8 * 1024 * 1024


class Screen(Protocol):
    """An interceptor that can say, from a body alone, whether it may act on the call."""

    def live(self, body: bytes) -> bool:
        """Whether the body carries what the interceptor acts on (a live run's nonce)."""
        ...

    def passed(self, traceparent: str | None) -> None:
        """A model call went past without the interceptor (it carried no live nonce)."""
        ...


def _malloc_trim() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    return trim


class Budget:
    """Request-body bytes held by every connection at once; the memory goes back once they are let go."""

    def __init__(self, limit: int = DEFAULT_BUDGET) -> None:
        self.limit = limit
        self.used = 0
        self.high = 0
        self._trim = _malloc_trim()

    def take(self, size: int) -> bool:
        """Hold ``size`` more bytes, if the budget allows."""
        if self.used + size > self.limit:
            return False
        self.used += size
        self.high = max(self.high, self.used)
        return True

    def give(self, size: int) -> None:
        """Let go of ``size`` bytes; once none is held after many were, return the memory to the system."""
        self.used -= size
        if self.used == 0 and self.high >= _TRIM_AFTER:
            self.high = 0
            if self._trim is not None:
                self._trim(0)  # glibc keeps freed heap pages otherwise: the daemon would stay large


class Front:
    """What every connection of the front shares: where requests go, the limits, the idle connections."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, *, upstream: Origin | None, full: Origin | None,
        interceptor: object | None, recorder: Recorder | None, max_body: int, allowed_hosts: tuple[str, ...],
        connect_timeout: float = 5.0, read_timeout: float | None = None, header_timeout: float | None = 10.0,
        budget: Budget | None = None, body_period: float = BODY_PERIOD, body_min: int = BODY_MIN,
        draining: Any = None,
    ) -> None:
        self.loop = loop
        self.upstream = upstream
        self.full = full
        self.interceptor = interceptor
        self.screen: Screen | None = interceptor if callable(getattr(interceptor, "live", None)) else None  # type: ignore[assignment]
        self.recorder = recorder
        self.max_body = max_body
        self.allowed_hosts = allowed_hosts
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.header_timeout = header_timeout
        self.budget = budget or Budget()
        self.body_period = body_period
        self.body_min = body_min
        self.pool = Pool(loop)
        self.connections: set[FrontProtocol] = set()
        self._drain_state = draining
        self._hosts: dict[bytes, bool] = {}
        # One sweep a moment looks at every connection's deadlines (a head late, a body trickling)
        # instead of a timer per request: arming and cancelling timers was a tenth of the front's time.
        self._every = min(1.0, body_period / 3, (header_timeout or 10.0) / 10)
        self._sweeper: asyncio.TimerHandle | None = loop.call_later(self._every, self._sweep)

    def _sweep(self) -> None:
        now = self.loop.time()
        for connection in list(self.connections):
            connection.sweep(now)
        self._sweeper = self.loop.call_later(self._every, self._sweep)

    def close(self) -> None:
        """Stop the sweep and close the idle upstream connections."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self.pool.close()

    def host_allowed(self, host: bytes | None) -> bool:
        """Whether a Host header names loopback or a listen name (remembered: few names ever come)."""
        key = host or b""
        known = self._hosts.get(key)
        if known is None:
            known = host_allowed(key.decode("latin-1"), self.allowed_hosts)
            if len(self._hosts) < 1024:
                self._hosts[key] = known
        return known

    @property
    def draining(self) -> bool:
        """Whether every answer now says ``Connection: close``."""
        state = self._drain_state
        return bool(state is not None and state.active)

    def protocol(self) -> FrontProtocol:
        """A protocol for one accepted connection."""
        return FrontProtocol(self)

    # -- routing ----------------------------------------------------------------------

    def begin(self, ex: Exchange) -> None:
        """A whole request head: check it, then read its body or send it on."""
        url = ex.url
        path = url.partition(b"?")[0].decode("latin-1")
        ex.path = path
        if not self.host_allowed(ex.header(b"host")):
            ex.refuse(403, "forbidden_host", "the canary proxy answers only requests addressed to a loopback "
                      "host or to the name it listens on")
            return
        if not url.startswith(b"/"):
            ex.path = ""
            ex.refuse(400, "bad_request_target",
                      "the request target must be a path (origin-form, starting with '/')")
            return
        self._framing(ex)
        if ex.expect and (ex.length not in (None, b"0") or ex.chunked_in):
            ex.proto.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if ex.length not in (None, b"0") or ex.chunked_in:
            ex.watch_body()
        post = ex.method == b"POST"
        if post and (path == dialects.HOOK_PATH or dialects.family_for(path) is not None):
            ex.buffered = True
            return
        self._send(ex, self.upstream)

    @staticmethod
    def _framing(ex: Exchange) -> None:
        """What the front reads of the headers, in one pass: framing, ``Expect``, ``traceparent``."""
        for name, value in ex.headers:
            low = name.lower()
            if low == b"content-length":
                ex.length = value.strip()
            elif low == b"transfer-encoding":
                ex.chunked_in = True
            elif low == b"expect":
                ex.expect = True
            elif low == b"traceparent":
                ex.traceparent = value

    def dispatch(self, ex: Exchange) -> None:
        """A buffered body is whole: the full path if the interceptor may act on it, else upstream."""
        full = self._wants(ex)
        if full and self.full is not None:
            self._send(ex, self.full)
            return
        if ex.path == dialects.HOOK_PATH:
            ex.answer_raw(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
            return
        self._send(ex, self.upstream)

    def _wants(self, ex: Exchange) -> bool:
        if ex.path == dialects.HOOK_PATH:
            return self.interceptor is not None
        if self.interceptor is None:
            return False
        screen = self.screen
        if screen is None:
            return True
        try:
            if screen.live(bytes(ex.body)):
                return True
            traceparent = ex.traceparent
            screen.passed(traceparent.decode("latin-1") if traceparent else None)
        except Exception:
            log.exception("the interceptor failed on %s; the call takes the full path", ex.path)
            return True
        return False

    def _send(self, ex: Exchange, origin: Origin | None) -> None:
        if origin is None:
            if self.recorder is not None:
                self.recorder.counted("no_upstream")
            ex.answer_error(503, "upstream_not_configured", "the canary proxy has no upstream model server "
                            "configured ([model] upstream in canary.toml)")
            return
        ex.go(origin)

    # -- outcomes ---------------------------------------------------------------------

    def answered(self, ex: Exchange, status: int, seconds: float) -> None:
        """The upstream answered (told to the recorder; the full path tells its own)."""
        if self.recorder is None or ex.origin is not self.upstream:
            return
        try:
            self.recorder.answered(status, seconds)
        except Exception:
            log.exception("the proxy's recorder failed; the agent's request is answered anyway")

    def unreachable(self, ex: Exchange, origin: Origin | None, failure: Failure) -> None:
        """``origin`` failed the request before answering: the proxy's own error, or the upstream instead."""
        if ex.finished:
            return
        if origin is not None and origin is self.full and self.upstream is not None:
            log.warning("the proxy's full path is not there (%s); relaying %s as is",
                        failure.predicate, ex.path)
            ex.go(self.upstream)
            return
        if self.recorder is not None and origin is self.upstream:
            try:
                self.recorder.failed(failure.outcome, failure.predicate, bytes(ex.body))
            except Exception:
                log.exception("the proxy's recorder failed; the agent's request is answered anyway")
        # The model server failed a call the proxy relays as is: the agent's SDK retries it, or not,
        # as it would a direct call's failure.
        ex.answer_error(failure.status, failure.kind, failure.message, client_retries=origin is self.upstream)
