"""The model proxy: relays everything to the upstream model server byte for byte, and answers the
model calls its interceptor picks with a scripted assistant message in the client's dialect.

A raw ASGI app. It answers only requests whose Host is a loopback name or one of its listen
names (403 otherwise) and whose target is origin-form (``/path?query``; 400 otherwise). A model
call's body is buffered for the interceptor, up to ``max_body`` bytes (413 beyond); every other
body is streamed upstream as it arrives. How passthrough relays is in :mod:`canary.proxy.relay`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from types import SimpleNamespace
from typing import Protocol

import httpx
from starlette.types import Receive, Scope, Send

from canary.config.tls import tls_context
from canary.proxy import dialects
from canary.proxy.dialects import HOOK_PATH, MODEL_PATHS, Dialect, Family, requested_stream
from canary.proxy.health import Recorder
from canary.proxy.pool import UpstreamTransport
from canary.proxy.relay import Relay, send_error
from canary.proxy.serving import BodyTooLarge, host_allowed, read_body
from canary.proxy.toolcalls import ToolCall

__all__ = [
    "DEFAULT_MAX_BODY", "MODEL_PATHS", "Dialect", "Interceptor", "ModelCall", "ProxyApp", "create_proxy",
    "model_call", "requested_stream",
]

log = logging.getLogger(__name__)

#: The stock response to an in-process hook call that is not the injection point.
_NO_ANSWER = {"type": "http.response.start", "status": 204, "headers": [(b"content-length", b"0")]}
#: The largest model-call body the proxy reads by default (64 MiB); larger ones get a 413.
DEFAULT_MAX_BODY = 64 * 1024 * 1024


class ModelCall:
    """One model call as the proxy received it.

    ``stream`` (the stream mode the client asked for; Ollama native streams unless
    ``"stream": false``; Gemini's path tells) is read from the body only when asked for: a call
    that passes through never needs it.
    """

    __slots__ = ("_stream", "body", "dialect", "family", "path", "query", "traceparent")

    def __init__(self, path: str, dialect: Dialect, body: bytes, stream: bool | None = None, *,
                 query: bytes = b"", traceparent: str | None = None) -> None:
        self.path = path  # request path as received, e.g. "/v1/chat/completions" or "/api/chat"
        self.dialect: Dialect = dialect
        self.family: Family = dialects.family(dialect)
        self.body = body  # the raw request body
        self.query = query
        self._stream = stream
        self.traceparent = traceparent  # the W3C trace context header the agent sent, if any

    @property
    def stream(self) -> bool:
        """The stream mode the client asked for."""
        if self._stream is None:
            self._stream = self.family.stream(self.path, self.body)
        return self._stream

    @property
    def asks_thinking(self) -> bool:
        """Whether the call asked its model for extended thinking."""
        return self.family.asks_thinking(self.path, self.body)

    def offers_tools(self) -> bool:
        """Whether the call can take a tool call."""
        return self.family.offers_tools(self.body)

    def __repr__(self) -> str:
        return f"ModelCall({self.path!r}, {self.dialect!r}, <{len(self.body)} bytes>)"


class Interceptor(Protocol):
    """Decides, per model call, whether the proxy answers with scripted text."""

    def intercept(self, call: ModelCall) -> str | ToolCall | None:
        """The scripted assistant text (or tool call) to answer with, or None to pass the call through."""
        ...


def model_call(method: str, path: str, body: bytes) -> ModelCall | None:
    """The model call a request is, or None when it is not one of the dialect endpoints."""
    if method != "POST":
        return None
    spoken = dialects.family_for(path)
    if spoken is None:
        return None
    return ModelCall(path, spoken.name, body)  # type: ignore[arg-type]


def create_proxy(
    upstream: str | None,
    interceptor: Interceptor | None = None,
    *,
    client: httpx.AsyncClient | None = None,
    connect_timeout: float = 5.0,
    read_timeout: float | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    allowed_hosts: Collection[str] = (),
    recorder: Recorder | None = None,
    ca_file: str | None = None,
) -> ProxyApp:
    """The proxy as an ASGI app; with no ``client``, it makes one and closes it on shutdown.

    ``upstream`` is the model server's base URL (``http://127.0.0.1:11434``); None answers 503
    to everything the interceptor does not script. ``allowed_hosts`` adds Host names accepted
    beside loopback ones (the names of a listener allowed beyond loopback). ``ca_file`` adds CAs
    to the system's for an https upstream.
    """
    owned = client is None
    transport = None
    if client is None:
        transport = UpstreamTransport(ssl_context=tls_context(ca_file) if ca_file else None)
        client = httpx.AsyncClient(transport=transport, follow_redirects=False, trust_env=False)
    timeout = httpx.Timeout(connect=connect_timeout, read=read_timeout, write=60.0, pool=30.0)
    relay = Relay(upstream, client, timeout, transport, recorder=recorder) if upstream else None
    app = ProxyApp(relay, interceptor, client, owned=owned, max_body=max_body, allowed_hosts=allowed_hosts,
                   upstream=upstream)
    app.recorder = recorder
    app.ca_file = ca_file
    app.connect_timeout = connect_timeout
    app.read_timeout = read_timeout
    return app




class ProxyApp:
    """The ASGI app behind every path of the proxy."""

    def __init__(
        self,
        relay: Relay | None,
        interceptor: Interceptor | None,
        client: httpx.AsyncClient,
        *,
        owned: bool,
        max_body: int,
        allowed_hosts: Collection[str],
        upstream: str | None,
    ) -> None:
        self.relay = relay
        self.recorder: Recorder | None = None  # told of requests that never reach the model server
        self.interceptor = interceptor
        self.client = client
        self.max_body = max_body
        self.allowed_hosts = tuple(allowed_hosts)
        self._owned = owned
        self.state = SimpleNamespace(client=client, upstream=upstream)
        # What the front (``canary.proxy.server``) needs to relay on its own.
        self.upstream = upstream
        self.ca_file: str | None = None
        self.connect_timeout = 5.0
        self.read_timeout: float | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._owned:
                    await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        if not host_allowed(_header(scope, b"host"), self.allowed_hosts):
            await send_error(send, path, 403, "forbidden_host",
                             "the canary proxy answers only requests addressed to a loopback host "
                             "or to the name it listens on")
            return
        raw_path: bytes = scope.get("raw_path") or path.encode()
        if not raw_path.startswith(b"/"):
            await send_error(send, "", 400, "bad_request_target",
                             "the request target must be a path (origin-form, starting with '/')")
            return
        query: bytes = scope.get("query_string", b"")
        target = raw_path + b"?" + query if query else raw_path
        method: str = scope["method"]
        body: bytes | None = None
        spoken = dialects.family_for(path) if method == "POST" else None
        if spoken is None and path == HOOK_PATH and method == "POST":
            await self._hook(receive, send, query)
            return
        if spoken is not None:
            body = await self._body(receive, send, path)
            if body is None:
                return  # the client left before it finished sending, or was told it sent too much
            call = ModelCall(path, spoken.name, body, query=query,  # type: ignore[arg-type]
                             traceparent=_header(scope, b"traceparent") or None)
            if await self._scripted(send, call):
                return
        if self.relay is None:
            if self.recorder is not None:
                self.recorder.counted("no_upstream")
            await send_error(
                send, path, 503, "upstream_not_configured",
                "the canary proxy has no upstream model server configured ([model] upstream in canary.toml)",
            )
            return
        try:
            url = self.relay.url(target)
        except httpx.InvalidURL:
            await send_error(send, path, 400, "bad_request_target", "the request target is not a valid path")
            return
        await self.relay.relay(scope, receive, send, url, body)

    async def _body(self, receive: Receive, send: Send, path: str) -> bytes | None:
        """The whole body; None when the client left first, or was answered 413 past ``max_body``."""
        try:
            return await read_body(receive, self.max_body)
        except BodyTooLarge:
            await send_error(send, path, 413, "request_too_large",
                             f"the request body is larger than the canary proxy's limit of "
                             f"{self.max_body} bytes ([model] max_body in canary.toml)", close=True)
            return None

    async def _scripted(self, send: Send, call: ModelCall) -> bool:
        """Whether the call is the injection point of a run; it then got the run's scripted answer."""
        if self.interceptor is None:
            return False
        text = self._intercept(call)
        if text is None:
            return False
        await _send_scripted(send, call, text)
        if self.recorder is not None:
            self.recorder.counted("scripted")
        return True

    async def _hook(self, receive: Receive, send: Send, query: bytes) -> None:
        """The in-process hook: the fabrication when this call is the injection point, else 204 at once."""
        read = await self._body(receive, send, HOOK_PATH)
        if read is None:
            return
        if await self._scripted(send, ModelCall(HOOK_PATH, "inprocess", read, stream=False, query=query)):
            return
        await send(_NO_ANSWER)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _intercept(self, call: ModelCall) -> str | ToolCall | None:
        assert self.interceptor is not None
        try:
            return self.interceptor.intercept(call)
        except Exception:
            # The agent's own traffic must keep flowing whatever the canary bookkeeping does.
            log.exception("the interceptor failed on %s; passing the call through", call.path)
            return None


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return ""


async def _send_scripted(send: Send, call: ModelCall, text: str | ToolCall) -> None:
    request = call.family.read_request(call.path, call.body, call.query)
    scripted = dialects.script(call.dialect, text, request, now=time.time(), token=dialects.new_token())
    await send({"type": "http.response.start", "status": 200, "headers": list(scripted.headers)})
    last = len(scripted.chunks) - 1
    for index, chunk in enumerate(scripted.chunks):
        await send({"type": "http.response.body", "body": chunk, "more_body": index < last})
