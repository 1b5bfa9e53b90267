"""The model proxy: byte-exact passthrough, upstream failures, disconnects, scripted answers.

Fast tests run in-process (``httpx.MockTransport`` upstream, ``httpx.ASGITransport`` in front);
the rest run a fake model server and the proxy on loopback with real sockets.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response

from canary.proxy import dialects
from canary.proxy.app import MODEL_PATHS, ModelCall, create_proxy, model_call, requested_stream
from canary.proxy.server import ProxyServer
from canary.proxy.serving import BackgroundServer
from tests.profiles import examples

MARKER = b"CANARY-MARK-7q2x"
SCRIPTED = "SCRIPTED ANSWER with a nonce k3v9q2x.example.org"


# -- shared helpers (tests/proxy/test_proxy_clients.py imports these) ----------------------------------


class MarkerInterceptor:
    """Scripts every model call whose body carries MARKER; records every call it sees."""

    def __init__(self, text: str = SCRIPTED, marker: bytes = MARKER) -> None:
        self.text = text
        self.marker = marker
        self.calls: list[ModelCall] = []
        self._lock = threading.Lock()

    def intercept(self, call: ModelCall) -> str | None:
        with self._lock:
            self.calls.append(call)
        return self.text if self.marker in call.body else None


@dataclass
class Plan:
    """What the fake upstream answers to a request carrying ``x-plan: <key>``."""

    status: int = 200
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    before_headers: float = 0.0  # seconds to wait before the response starts
    gap: float = 0.0  # seconds between body chunks
    fail_after: int | None = None  # break the connection after this many chunks


@dataclass
class Seen:
    """One request as the fake upstream received it, and what became of its handler."""

    method: str
    path: str
    query: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    chunks_sent: int = 0
    completed: bool = False
    cancelled_at: float | None = None  # time.monotonic() when the client's disconnect stopped it

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)


class UpstreamCrash(Exception):
    """Raised inside the fake upstream to cut a response off mid-body."""


class FakeUpstream:
    """A raw ASGI model server: answers by plan (header ``x-plan``) or with a small default API.

    Like mlx_lm.server it refuses a body-carrying request without Content-Length (411). Every
    handler watches for the client's disconnect and records when it was cut off.
    """

    def __init__(self) -> None:
        self.plans: dict[str, Plan] = {}
        self.seen: dict[str, Seen] = {}
        self.log: list[Seen] = []

    def plan(self, plan: Plan) -> str:
        key = uuid.uuid4().hex
        self.plans[key] = plan
        return key

    def wait(self, key: str, predicate: Callable[[Seen], bool], timeout: float = 3.0) -> Seen:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = self.seen.get(key)
            if seen is not None and predicate(seen):
                return seen
            time.sleep(0.01)
        raise AssertionError(f"upstream request {key}: not met within {timeout}s: {self.seen.get(key)}")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        parts = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers = [(bytes(k), bytes(v)) for k, v in scope["headers"]]
        seen = Seen(scope["method"], scope["path"], scope["query_string"], headers, b"".join(parts))
        key = (seen.header(b"x-plan") or b"").decode()
        self.log.append(seen)
        if key:
            self.seen[key] = seen
        plan = self.plans.get(key) or default_plan(seen)
        framed = seen.header(b"content-length") is not None or seen.header(b"transfer-encoding") is not None
        if seen.method in ("POST", "PUT", "PATCH") and not framed:
            plan = Plan(411, [(b"content-type", b"application/json")],
                        [b'{"error":"Content-Length header is required"}'])

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        respond = asyncio.ensure_future(self._respond(plan, send, seen))
        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait({respond, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not respond.done():
                seen.cancelled_at = time.monotonic()
                respond.cancel()
                with suppress(asyncio.CancelledError):
                    await respond
            else:
                respond.result()  # a planned failure propagates: uvicorn drops the connection
        finally:
            watcher.cancel()

    @staticmethod
    async def _respond(plan: Plan, send: Any, seen: Seen) -> None:
        if plan.before_headers:
            await asyncio.sleep(plan.before_headers)
        await send({"type": "http.response.start", "status": plan.status, "headers": plan.headers})
        for index, chunk in enumerate(plan.chunks):
            if index == plan.fail_after:
                raise UpstreamCrash(f"planned failure after {index} chunks")
            if index and plan.gap:
                await asyncio.sleep(plan.gap)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            seen.chunks_sent += 1
        seen.completed = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _json_plan(obj: Any, status: int = 200) -> Plan:
    return Plan(status, [(b"content-type", b"application/json")], [json.dumps(obj).encode()])


def default_plan(seen: Seen) -> Plan:
    """The fake model server's own API, for requests without a plan."""
    try:
        request = json.loads(seen.body) if seen.body else {}
    except ValueError:
        request = {}
    model = request.get("model", "m") if isinstance(request, dict) else "m"
    path = seen.path
    if path in ("/", "/api/version") and seen.method in ("GET", "HEAD"):
        text = b"Ollama is running" if path == "/" else b'{"version":"0.13.3"}'
        headers = [(b"content-type", b"text/plain; charset=utf-8"),
                   (b"content-length", str(len(text)).encode())]
        return Plan(200, headers, [text] if seen.method == "GET" else [])
    if path == "/v1/models":
        return _json_plan({"object": "list", "data": [{"id": "m", "object": "model", "created": 0,
                                                       "owned_by": "fake"}]})
    if path == "/api/tags":
        return _json_plan({"models": [{"name": "m:latest", "model": "m:latest", "size": 1,
                                       "digest": "0" * 64, "modified_at": "2026-11-29T00:00:00Z",
                                       "details": {"format": "gguf"}}]})
    if path in ("/v1/chat/completions", "/chat/completions") and seen.method == "POST":
        answer = dialects.AnswerRequest(model=model, stream=bool(request.get("stream")),
                                        include_usage=bool((request.get("stream_options") or {})
                                                           .get("include_usage")))
        scripted = dialects.script("chat", "UPSTREAM ANSWER", answer, now=1764420000, token="upstream")
        return Plan(200, list(scripted.headers), list(scripted.chunks))
    if path in ("/api/chat", "/api/generate") and seen.method == "POST":
        dialect: dialects.Dialect = "ollama-chat" if path == "/api/chat" else "ollama-generate"
        answer = dialects.AnswerRequest(model=model, stream=request.get("stream", True) is not False)
        scripted = dialects.script(dialect, "UPSTREAM ANSWER", answer, now=1764420000, token="upstream")
        return Plan(200, list(scripted.headers), list(scripted.chunks))
    return _json_plan({"error": {"message": f"no route {path}", "type": "not_found_error"}}, 404)


class LoopCapture:
    """Wraps an ASGI app to learn the serving thread's loop (to close the proxy's client on it)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        await self.app(scope, receive, send)


@contextmanager
def serve_proxy(upstream: str | None, interceptor: Any = None, **options: Any) -> Iterator[ProxyServer]:
    """The proxy on a loopback port; its httpx client is closed on the loop that used it."""
    app = create_proxy(upstream, interceptor, **options)
    capture = LoopCapture(app)
    server = ProxyServer(app, name="proxy", asgi=capture).start()
    try:
        yield server
    finally:
        if capture.loop is not None:
            asyncio.run_coroutine_threadsafe(app.state.client.aclose(), capture.loop).result(5)
        server.stop()


def closed_port_url() -> str:
    """A loopback URL where nothing listens."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, BackgroundServer]]:
    fake = FakeUpstream()
    with BackgroundServer(fake, name="fake upstream") as server:
        yield fake, server


@pytest.fixture(scope="module")
def interceptor() -> MarkerInterceptor:
    return MarkerInterceptor()


@pytest.fixture(scope="module")
def proxy(upstream: tuple[FakeUpstream, BackgroundServer], interceptor: MarkerInterceptor) -> Iterator[str]:
    with serve_proxy(upstream[1].url, interceptor) as server:
        yield server.url


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=httpx.Timeout(10.0), trust_env=False) as client:
        yield client


# -- in-process: routing and the stream flag ----------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "dialect"),
    [
        ("POST", "/v1/chat/completions", "chat"),
        ("POST", "/chat/completions", "chat"),  # mlx_lm serves it without /v1
        ("POST", "/v1/completions", "completions"),
        ("POST", "/completions", "completions"),
        ("POST", "/v1/responses", "responses"),
        ("POST", "/responses", "responses"),
        ("POST", "/api/chat", "ollama-chat"),
        ("POST", "/api/generate", "ollama-generate"),
        ("GET", "/v1/chat/completions", None),  # only POST is a model call
        ("POST", "/v1/embeddings", None),
        ("POST", "/api/embed", None),
        ("GET", "/v1/models", None),
        ("POST", "/v1/responses/input_tokens", None),
        ("POST", "/v1/chat/completions/batch", None),
    ],
)
def test_model_call_routing(method: str, path: str, dialect: str | None) -> None:
    call = model_call(method, path, b"{}")
    assert (call.dialect if call else None) == dialect


@pytest.mark.parametrize(
    ("body", "default", "expected"),
    [
        (b'{"model":"m","stream":true}', False, True),
        (b'{"model": "m", "stream" : false}', True, False),
        (b'{"model":"m"}', False, False),  # OpenAI default
        (b'{"model":"m"}', True, True),  # Ollama REST default
        (b'{"stream":null}', True, True),
        (b'{"stream_options":{"include_usage":true},"stream":true}', False, True),
        (b'{"messages":[{"content":"say \\"stream\\": true"}]}', False, False),  # inside a string
        (b'{"metadata":{"stream":true},"stream":false}', False, False),  # the top level comes last
        (b'{"stream":true,"messages":[],"tools":[{"stream":{"type":"boolean"}}]}', False, True),
        (b'{"stream":\n\ttrue}', False, True),
        (b"not json at all", True, True),
        (b"", False, False),
        (b'"stream"', False, False),
    ],
)
def test_requested_stream(body: bytes, default: bool, expected: bool) -> None:
    assert requested_stream(body, default) is expected


@given(st.dictionaries(st.text(max_size=8), st.none() | st.booleans() | st.text(max_size=20), max_size=5),
       st.none() | st.booleans(), st.booleans())
def test_requested_stream_agrees_with_json(extra: dict[str, Any], stream: bool | None, default: bool) -> None:
    body = dict(extra)
    body.pop("stream", None)
    if stream is not None:
        body["stream"] = stream
    raw = json.dumps(body).encode()
    assert requested_stream(raw, default) is (default if stream is None else stream)


# -- in-process: passthrough with a MockTransport upstream ---------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextmanager
def _no_json_parsing(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    parsed: list[bytes] = []
    real = json.loads

    def spy(data: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(data)
        return real(data, *args, **kwargs)

    monkeypatch.setattr(json, "loads", spy)
    yield parsed


class Mock:
    """A MockTransport upstream that records requests and answers with a callable."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response]) -> None:
        self.requests: list[httpx.Request] = []
        self.answer = answer

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer(request)


async def _front(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:11435")  # a loopback Host, as an agent sends


@pytest.mark.anyio
async def test_passthrough_does_not_parse_json_and_calls_the_interceptor_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mock = Mock(lambda r: httpx.Response(200, json={"upstream": True}))
    seen = MarkerInterceptor()
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi " * 1000}],
                       "stream": True}).encode()
    with _no_json_parsing(monkeypatch) as parsed:
        async with httpx.AsyncClient(transport=httpx.MockTransport(mock)) as upstream_client:
            app = create_proxy("http://upstream.test", seen, client=upstream_client)
            async with await _front(app) as front:
                r = await front.post("/v1/chat/completions", content=body)
                await front.get("/v1/models")
                await front.post("/v1/embeddings", content=b'{"input":"x"}')
    assert body not in parsed and b'{"input":"x"}' not in parsed
    assert r.json() == {"upstream": True}
    assert [(c.path, c.dialect, c.stream, c.body == body) for c in seen.calls] == [
        ("/v1/chat/completions", "chat", True, True)
    ]
    assert mock.requests[0].content == body


@pytest.mark.anyio
async def test_request_headers_forwarded_except_hop_by_hop() -> None:
    mock = Mock(lambda r: httpx.Response(200, content=b"ok"))
    async with httpx.AsyncClient(transport=httpx.MockTransport(mock)) as upstream_client:
        app = create_proxy("http://upstream.test:8080/base", None, client=upstream_client)
        async with await _front(app) as front:
            await front.post(
                "/v1/chat/completions?api-version=2&x=%2F",
                content=b'{"model":"m"}',
                headers={
                    "authorization": "Bearer sk-local", "x-stainless-lang": "python",
                    "accept-encoding": "gzip, deflate", "connection": "keep-alive, x-private",
                    "x-private": "drop me", "keep-alive": "timeout=5", "te": "trailers",
                    "proxy-authorization": "Basic x", "upgrade": "h2c", "x-request-id": "req-1",
                },
            )
    sent = mock.requests[0]
    assert str(sent.url) == "http://upstream.test:8080/base/v1/chat/completions?api-version=2&x=%2F"
    names = {k.lower() for k in sent.headers}
    assert sent.headers["authorization"] == "Bearer sk-local"
    assert sent.headers["x-stainless-lang"] == "python"
    assert sent.headers["accept-encoding"] == "gzip, deflate"
    assert sent.headers["x-request-id"] == "req-1"
    assert sent.headers["host"] == "upstream.test:8080"
    assert sent.headers["content-length"] == str(len(b'{"model":"m"}'))
    assert not names & {"connection", "x-private", "keep-alive", "te", "proxy-authorization", "upgrade",
                        "transfer-encoding"}


@pytest.mark.anyio
async def test_get_without_body_gets_no_content_length() -> None:
    mock = Mock(lambda r: httpx.Response(200, content=b"ok"))
    async with httpx.AsyncClient(transport=httpx.MockTransport(mock)) as upstream_client:
        app = create_proxy("http://upstream.test", None, client=upstream_client)
        async with await _front(app) as front:
            await front.get("/api/tags")
            await front.post("/api/show", content=b"")
    assert "content-length" not in mock.requests[0].headers
    assert mock.requests[1].headers["content-length"] == "0"  # an empty POST keeps its length


@pytest.mark.anyio
async def test_response_status_headers_and_encoded_body_pass_through() -> None:
    compressed = gzip.compress(b'{"error": {"message": "slow down"}}')

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            429,
            headers=[
                ("content-type", "application/json"), ("content-encoding", "gzip"),
                ("content-length", str(len(compressed))), ("retry-after", "7"),
                ("x-request-id", "req-42"), ("x-ratelimit-remaining-requests", "0"),
                ("connection", "x-hop"), ("x-hop", "1"), ("keep-alive", "timeout=5"),
                ("set-cookie", "a=1"), ("set-cookie", "b=2"),
            ],
            content=compressed,
        )

    async with httpx.AsyncClient(transport=httpx.MockTransport(Mock(answer))) as upstream_client:
        app = create_proxy("http://upstream.test", MarkerInterceptor(), client=upstream_client)
        async with await _front(app) as front:
            r = await front.post("/v1/chat/completions", content=b'{"model":"m"}')
    assert r.status_code == 429
    assert r.headers["retry-after"] == "7"
    assert r.headers["x-request-id"] == "req-42"
    assert r.headers["x-ratelimit-remaining-requests"] == "0"
    assert r.headers["content-encoding"] == "gzip"
    assert r.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert "x-hop" not in r.headers and "keep-alive" not in r.headers and "connection" not in r.headers
    assert r.headers["content-length"] == str(len(compressed))  # the body is relayed unchanged
    assert r.json() == {"error": {"message": "slow down"}}  # the client decodes the gzip it got


@pytest.mark.anyio
async def test_head_keeps_content_length() -> None:
    mock = Mock(lambda r: httpx.Response(200, headers={"content-length": "17"}))
    async with httpx.AsyncClient(transport=httpx.MockTransport(mock)) as upstream_client:
        app = create_proxy("http://upstream.test", None, client=upstream_client)
        async with await _front(app) as front:
            r = await front.head("/")
    assert r.status_code == 200
    assert r.headers["content-length"] == "17"
    assert mock.requests[0].method == "HEAD"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (httpx.ConnectError("All connection attempts failed"), 502, "upstream_unavailable"),
        (httpx.ConnectTimeout("timed out"), 504, "upstream_timeout"),
        (httpx.ReadTimeout("timed out"), 504, "upstream_timeout"),
        (httpx.WriteTimeout("timed out"), 504, "upstream_timeout"),
        (httpx.PoolTimeout("timed out"), 504, "upstream_timeout"),
        (httpx.RemoteProtocolError("Server disconnected without sending a response."), 502, "upstream_error"),
        (httpx.ReadError("reset"), 502, "upstream_error"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat", "/v1/models"])
async def test_upstream_failures_map_to_their_own_response(
    error: Exception, status: int, kind: str, path: str
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        raise error

    async with httpx.AsyncClient(transport=httpx.MockTransport(Mock(answer))) as upstream_client:
        app = create_proxy("http://127.0.0.1:9", MarkerInterceptor(), client=upstream_client)
        async with await _front(app) as front:
            r = await front.post(path, content=b'{"model":"m"}')
    assert r.status_code == status
    assert r.headers["x-should-retry"] == "false"
    body = r.json()
    if path.startswith("/api/"):
        assert set(body) == {"error"} and isinstance(body["error"], str)  # Ollama style
        assert "127.0.0.1:9" in body["error"]
    else:
        assert body["error"]["type"] == kind
        assert "127.0.0.1:9" in body["error"]["message"]
        assert set(body["error"]) == {"message", "type", "param", "code"}


@pytest.mark.anyio
@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
                                               ("GET", "/api/tags"), ("HEAD", "/")])
async def test_no_upstream_is_a_503_that_says_so(method: str, path: str) -> None:
    app = create_proxy(None, MarkerInterceptor())
    try:
        async with await _front(app) as front:
            r = await front.request(method, path, content=b'{"model":"m"}' if method == "POST" else None)
            marked = b'{"model":"m","x":"' + MARKER + b'"}'
            scripted = await front.post("/v1/chat/completions", content=marked)
    finally:
        await app.state.client.aclose()
    assert r.status_code == 503
    if method != "HEAD":
        text = r.json()["error"] if path.startswith("/api/") else r.json()["error"]["message"]
        assert "no upstream" in text
    assert scripted.status_code == 200
    assert scripted.json()["choices"][0]["message"]["content"] == SCRIPTED


@pytest.mark.anyio
async def test_interceptor_failure_passes_the_call_through(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def intercept(self, call: ModelCall) -> str | None:
            raise RuntimeError("bookkeeping bug")

    mock = Mock(lambda r: httpx.Response(200, json={"upstream": True}))
    async with httpx.AsyncClient(transport=httpx.MockTransport(mock)) as upstream_client:
        app = create_proxy("http://upstream.test", Broken(), client=upstream_client)
        async with await _front(app) as front:
            r = await front.post("/api/chat", content=b'{"model":"m"}')
    assert r.json() == {"upstream": True}
    assert "bookkeeping bug" in caplog.text


@pytest.mark.anyio
@pytest.mark.parametrize("given_client", [False, True])
async def test_lifespan_closes_only_the_client_the_proxy_made(given_client: bool) -> None:
    client = httpx.AsyncClient() if given_client else None
    app = create_proxy("http://upstream.test", client=client)
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert app.state.client.is_closed is not given_client
    if client is not None:
        await client.aclose()


# -- in-process: scripted answers, validated against the SDKs' own models ----------------------


async def _scripted(path: str, request: dict[str, Any], text: str = SCRIPTED) -> httpx.Response:
    mock = Mock(lambda r: httpx.Response(500))
    body = json.dumps({**request, "marker": MARKER.decode()}).encode()
    async with httpx.AsyncClient(transport=httpx.MockTransport(mock)) as upstream_client:
        app = create_proxy("http://upstream.test", MarkerInterceptor(text), client=upstream_client)
        async with await _front(app) as front:
            r = await front.post(path, content=body)
    assert mock.requests == []  # a scripted call never reaches the upstream
    assert r.status_code == 200
    return r


def _sse_events(raw: bytes) -> list[str]:
    assert raw.endswith(b"\n\n")
    return [block.decode() for block in raw.split(b"\n\n")[:-1]]


TOOLS = [{"type": "function", "function": {"name": "final_result", "parameters": {"type": "object"}}}]


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/completions"])
@pytest.mark.parametrize("tools", [False, True])
async def test_scripted_chat_body(path: str, tools: bool) -> None:
    request: dict[str, Any] = {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}]}
    if tools:
        request["tools"] = TOOLS
    r = await _scripted(path, request)
    assert r.headers["content-type"] == "application/json"
    assert int(r.headers["content-length"]) == len(r.content)
    completion = ChatCompletion.model_validate_json(r.content, strict=True)
    assert completion.id.startswith("chatcmpl-")
    assert completion.object == "chat.completion"
    assert completion.model == "llama3.2"
    assert completion.choices[0].message.content == SCRIPTED
    assert completion.choices[0].message.tool_calls is None
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens > 0


@pytest.mark.anyio
@pytest.mark.parametrize("include_usage", [None, False, True])
async def test_scripted_chat_stream(include_usage: bool | None) -> None:
    request: dict[str, Any] = {"model": "m", "messages": [], "stream": True, "tools": TOOLS}
    if include_usage is not None:
        request["stream_options"] = {"include_usage": include_usage}
    r = await _scripted("/v1/chat/completions", request)
    assert r.headers["content-type"] == "text/event-stream"
    assert "content-length" not in r.headers
    events = _sse_events(r.content)
    assert events[-1] == "data: [DONE]"
    chunks = [ChatCompletionChunk.model_validate_json(e.removeprefix("data: "), strict=True)
              for e in events[:-1]]
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    assert all(c.model == "m" and c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == SCRIPTED
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    usage = [c for c in chunks if c.usage is not None]
    if include_usage:
        assert chunks[-1].choices == [] and usage == [chunks[-1]]
    else:
        assert usage == [] and all(c.choices for c in chunks)


@pytest.mark.anyio
async def test_scripted_ids_are_fresh_per_call() -> None:
    first = await _scripted("/v1/chat/completions", {"model": "m"})
    second = await _scripted("/v1/chat/completions", {"model": "m"})
    assert first.json()["id"] != second.json()["id"]


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("include_usage", [False, True])
async def test_scripted_completions(stream: bool, include_usage: bool) -> None:
    r = await _scripted("/v1/completions", {"model": "m", "prompt": "x", "stream": stream,
                                            "stream_options": {"include_usage": include_usage}})
    if not stream:
        completion = Completion.model_validate_json(r.content, strict=True)
        assert completion.choices[0].text == SCRIPTED and completion.choices[0].finish_reason == "stop"
        assert completion.model == "m" and completion.id.startswith("cmpl-")
        return
    events = _sse_events(r.content)
    assert events[-1] == "data: [DONE]"
    chunks = [Completion.model_validate_json(e.removeprefix("data: "), strict=True) for e in events[:-1]]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == SCRIPTED
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert any(c.usage is not None for c in chunks) is include_usage


@pytest.mark.anyio
async def test_scripted_responses_body() -> None:
    r = await _scripted("/v1/responses", {"model": "gpt-x", "input": "hi", "tools": TOOLS})
    response = Response.model_validate_json(r.content, strict=True)
    assert response.output_text == SCRIPTED
    assert response.status == "completed" and response.model == "gpt-x"
    assert response.id.startswith("resp_")


@pytest.mark.anyio
async def test_scripted_responses_stream() -> None:
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter

    r = await _scripted("/v1/responses", {"model": "m", "input": "hi", "stream": True})
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    types: list[str] = []
    for block in _sse_events(r.content):
        event_line, data_line = block.split("\n")
        event = adapter.validate_json(data_line.removeprefix("data: "), strict=True)
        assert event_line == f"event: {event.type}"
        assert event.sequence_number == len(types)
        types.append(event.type)
    assert b"[DONE]" not in r.content
    assert types == [
        "response.created", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed",
    ]
    assert event.response.output_text == SCRIPTED


def _ndjson(raw: bytes) -> list[dict[str, Any]]:
    assert raw.endswith(b"\n") and b"\n\n" not in raw and not raw.startswith(b"\n")  # no blank line
    return [json.loads(line) for line in raw.split(b"\n")[:-1]]


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/api/chat", "/api/generate"])
@pytest.mark.parametrize("stream", [None, True, False])
async def test_scripted_ollama(path: str, stream: bool | None) -> None:
    from ollama import ChatResponse, GenerateResponse

    request: dict[str, Any] = {"model": "llama3.2", "tools": TOOLS}
    if stream is not None:
        request["stream"] = stream
    r = await _scripted(path, request)
    model = ChatResponse if path == "/api/chat" else GenerateResponse
    if stream is False:
        assert r.headers["content-type"] == "application/json"
        objects = [r.json()]
    else:  # Ollama's REST API streams unless told not to
        assert r.headers["content-type"] == "application/x-ndjson"
        objects = _ndjson(r.content)
    parsed = [model.model_validate(o) for o in objects]
    text = "".join((p.message.content or "") if isinstance(p, ChatResponse) else (p.response or "")
                   for p in parsed)
    assert text == SCRIPTED
    assert [p.done for p in parsed] == [False] * (len(parsed) - 1) + [True]
    final = objects[-1]
    assert final["done_reason"] == "stop" and final["model"] == "llama3.2"
    for key in ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
                "eval_count", "eval_duration"):
        assert isinstance(final[key], int)
    assert final["created_at"].endswith("Z")


# -- real servers: byte-exact passthrough (hypothesis) ------------------------------------------

_json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def _sse_body(draw: st.DrawFn) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    events = []
    for kind, value in draw(st.lists(st.tuples(st.sampled_from(["data", "comment", "typed"]), _json_value),
                                     max_size=8)):
        data = json.dumps(value, ensure_ascii=draw(st.booleans()))
        if kind == "comment":
            events.append(f": ping {data[:10]}")
        elif kind == "typed":
            events.append(f"event: response.output_text.delta{eol}data: {data}")
        else:
            events.append(f"data:{draw(st.sampled_from(['', ' ']))}{data}")
    if draw(st.booleans()):
        events.append("data: [DONE]")
    text = "".join(event + eol + eol for event in events)
    return text.encode(), [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


@st.composite
def _ndjson_body(draw: st.DrawFn) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    objects = draw(st.lists(st.dictionaries(st.text(max_size=6), _json_value, max_size=4), max_size=8))
    body = "".join(json.dumps(o) + "\n" for o in objects).encode()
    return body, [(b"content-type", b"application/x-ndjson")]


@st.composite
def _bytes_body(draw: st.DrawFn) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    body = draw(st.binary(max_size=3000) | _json_value.map(lambda v: json.dumps(v).encode()))
    kind = draw(st.sampled_from([b"application/json", b"application/octet-stream"]))
    return body, [(b"content-type", kind)]


@st.composite
def response_plans(draw: st.DrawFn) -> Plan:
    body, headers = draw(st.one_of(_sse_body(), _ndjson_body(), _bytes_body()))
    if draw(st.booleans()):
        body = gzip.compress(body, compresslevel=draw(st.integers(1, 9)))
        headers.append((b"content-encoding", b"gzip"))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(body) - 1)), max_size=6)))) if body else []
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if body[a:b]]
    if draw(st.booleans()):
        headers.append((b"content-length", str(len(body)).encode()))
    headers.append((b"x-request-id", draw(st.uuids()).hex.encode()))
    status = draw(st.sampled_from([200, 200, 201, 400, 401, 404, 409, 422, 429, 500, 502, 503]))
    if status in (429, 503):
        headers.append((b"retry-after", str(draw(st.integers(0, 120))).encode()))
    return Plan(status, headers, chunks, gap=draw(st.sampled_from([0.0, 0.0, 0.002])))


_FRAMING = {"content-length", "transfer-encoding", "connection", "keep-alive"}


def _end_to_end_headers(response: httpx.Response) -> list[tuple[str, str]]:
    return sorted((k.lower(), v) for k, v in response.headers.multi_items() if k.lower() not in _FRAMING)


def _fetch(client: httpx.Client, method: str, url: str, **kwargs: Any) -> tuple[httpx.Response, bytes]:
    with client.stream(method, url, **kwargs) as response:
        return response, b"".join(response.iter_raw())


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=response_plans(), path=st.sampled_from([*MODEL_PATHS, "/v1/models", "/api/tags", "/x/y"]),
       stream=st.sampled_from([b"true", b"false", None]))
def test_responses_are_byte_identical_through_the_proxy(
    upstream: tuple[FakeUpstream, BackgroundServer], proxy: str, http: httpx.Client,
    plan: Plan, path: str, stream: bytes | None,
) -> None:
    fake, server = upstream
    key = fake.plan(plan)
    body = b'{"model":"m","messages":[]' + (b',"stream":' + stream if stream else b"") + b"}"
    expected = b"".join(plan.chunks)
    direct, direct_raw = _fetch(http, "POST", server.url + path, content=body, headers={"x-plan": key})
    proxied, proxied_raw = _fetch(http, "POST", proxy + path, content=body, headers={"x-plan": key})
    assert direct_raw == expected  # the reference: what the upstream sends
    assert proxied_raw == expected
    assert proxied.status_code == direct.status_code == plan.status
    assert _end_to_end_headers(proxied) == _end_to_end_headers(direct)
    if (b"content-encoding", b"gzip") in plan.headers:
        assert proxied.headers["content-encoding"] == "gzip"


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.binary(max_size=5000) | _json_value.map(lambda v: json.dumps(v).encode()),
    method=st.sampled_from(["POST", "PUT", "PATCH", "DELETE"]),
    path=st.sampled_from([*MODEL_PATHS, "/v1/embeddings", "/api/show", "/api/pull"]),
    query=st.sampled_from(["", "a=1", "api-version=2024-10-21&x=%2F%20", "q=caf%C3%A9&q=2"]),
    chunked=st.booleans(),
)
@example(body=b"", method="DELETE", path="/v1/chat/completions", query="", chunked=False)
@example(body=b"", method="DELETE", path="/api/chat", query="", chunked=True)
@example(body=b"", method="POST", path="/api/show", query="a=1", chunked=False)
def test_requests_are_byte_identical_upstream_with_their_framing(
    upstream: tuple[FakeUpstream, BackgroundServer], proxy: str, http: httpx.Client,
    interceptor: MarkerInterceptor, body: bytes, method: str, path: str, query: str, chunked: bool,
) -> None:
    assume(MARKER not in body)
    fake, _ = upstream
    key = fake.plan(_json_plan({"ok": True}))
    content: Any = iter([body[: len(body) // 2], body[len(body) // 2 :]]) if chunked else body
    url = proxy + path + (f"?{query}" if query else "")
    r = http.request(method, url, content=content,
                     headers={"x-plan": key, "authorization": "Bearer sk-test", "x-stainless-arch": "x64"})
    assert r.status_code == 200, r.text
    seen = fake.seen[key]
    assert seen.body == body
    if method == "POST" and path in MODEL_PATHS:  # a model call is buffered: an exact Content-Length
        assert seen.header(b"content-length") == str(len(body)).encode()
        assert seen.header(b"transfer-encoding") is None
    elif chunked:  # any other body is streamed, with the client's own framing
        assert seen.header(b"transfer-encoding") == b"chunked"
        assert seen.header(b"content-length") is None
    elif body or method != "DELETE":
        assert seen.header(b"content-length") == str(len(body)).encode()
        assert seen.header(b"transfer-encoding") is None
    else:  # httpx sends an empty DELETE without framing headers, and so does the proxy
        assert seen.header(b"content-length") is None
    assert seen.query == query.encode()
    assert seen.method == method and seen.path == path
    assert seen.header(b"authorization") == b"Bearer sk-test"
    assert seen.header(b"x-stainless-arch") == b"x64"


def test_every_method_and_path_passes_through(
    upstream: tuple[FakeUpstream, BackgroundServer], proxy: str, http: httpx.Client
) -> None:
    head = http.head(proxy + "/")
    assert head.status_code == 200 and head.headers["content-length"] == "17" and head.content == b""
    assert http.get(proxy + "/").text == "Ollama is running"
    assert http.get(proxy + "/v1/models").json()["data"][0]["id"] == "m"
    assert http.get(proxy + "/api/tags").json()["models"][0]["name"] == "m:latest"
    missing = http.get(proxy + "/nowhere")
    assert missing.status_code == 404 and "no route /nowhere" in missing.text
    assert http.options(proxy + "/v1/chat/completions").status_code == 404


# -- real servers: timing, slowness, disconnects, concurrency -----------------------------------


def _arrivals(client: httpx.Client, url: str, key: str, body: bytes) -> tuple[float, list[float]]:
    start = time.perf_counter()
    arrivals = []
    with client.stream("POST", url, content=body, headers={"x-plan": key}) as response:
        for chunk in response.iter_raw():
            if chunk:
                arrivals.append(time.perf_counter())
    return start, arrivals


@pytest.mark.slow  # timings: run alone in CI, where nothing else competes for the cores
@pytest.mark.parametrize(("path", "content_type", "line"), [
    ("/v1/chat/completions", b"text/event-stream", b'data: {"choices":[{"delta":{"content":"%d"}}]}\n\n'),
    ("/api/chat", b"application/x-ndjson", b'{"message":{"role":"assistant","content":"%d"},"done":false}\n'),
])
def test_chunk_timing_is_preserved(
    upstream: tuple[FakeUpstream, BackgroundServer], proxy: str, http: httpx.Client,
    path: str, content_type: bytes, line: bytes,
) -> None:
    fake, server = upstream
    chunks = [line % i for i in range(8)]
    key = fake.plan(Plan(200, [(b"content-type", content_type)], chunks, gap=0.05))
    body = b'{"model":"m","stream":true}'
    _, direct = _arrivals(http, server.url + path, key, body)
    _, proxied = _arrivals(http, proxy + path, key, body)
    assert len(proxied) == len(chunks)  # one arrival per chunk: nothing was held back and merged
    gaps = [(b - a) * 1000 for a, b in itertools.pairwise(proxied)]
    direct_gaps = [(b - a) * 1000 for a, b in itertools.pairwise(direct)]
    assert all(25 < gap < 100 for gap in gaps), gaps  # none bunched up; loose against a busy machine
    assert abs(statistics.median(gaps) - 50) < 5, gaps
    # Beside the direct stream of the same moment: a relay that held chunks back would stretch it.
    assert abs(statistics.median(gaps) - statistics.median(direct_gaps)) < 10, (gaps, direct_gaps)


def test_slow_first_byte_does_not_time_out(
    upstream: tuple[FakeUpstream, BackgroundServer], proxy: str, http: httpx.Client
) -> None:
    fake, _ = upstream
    plan = Plan(200, [(b"content-type", b"application/json")], [b'{"loaded":true}'], before_headers=2.0)
    key = fake.plan(plan)
    start = time.monotonic()
    r = http.post(proxy + "/v1/chat/completions", content=b'{"model":"m"}', headers={"x-plan": key})
    assert r.status_code == 200 and r.json() == {"loaded": True}
    assert time.monotonic() - start >= 2.0


def test_read_timeout_when_configured_is_a_504(upstream: tuple[FakeUpstream, BackgroundServer]) -> None:
    fake, server = upstream
    key = fake.plan(Plan(200, [], [b"late"], before_headers=1.0))
    with serve_proxy(server.url, read_timeout=0.2) as short, httpx.Client(trust_env=False) as client:
        r = client.post(short.url + "/api/generate", content=b"{}", headers={"x-plan": key})
    assert r.status_code == 504
    assert "did not answer in time (read timeout)" in r.json()["error"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/models"])
def test_disconnect_before_first_byte_cancels_upstream(
    upstream: tuple[FakeUpstream, BackgroundServer], proxy: str, path: str
) -> None:
    fake, _ = upstream
    key = fake.plan(Plan(200, [], [b"never"], before_headers=10.0))
    with httpx.Client(trust_env=False) as client, pytest.raises(httpx.ReadTimeout):
        client.post(proxy + path, content=b'{"model":"m"}', headers={"x-plan": key},
                    timeout=httpx.Timeout(5.0, read=0.3))
    gone = time.monotonic()
    seen = fake.wait(key, lambda s: s.cancelled_at is not None, timeout=2.0)
    assert seen.cancelled_at is not None and seen.cancelled_at - gone < 1.0
    assert not seen.completed


def test_disconnect_mid_stream_cancels_upstream(
    upstream: tuple[FakeUpstream, BackgroundServer], proxy: str
) -> None:
    fake, _ = upstream
    chunks = [b"data: {\"n\": %d}\n\n" % i for i in range(50)]
    # long gaps: the upstream is idle when the client leaves, so only a watcher can notice
    key = fake.plan(Plan(200, [(b"content-type", b"text/event-stream")], chunks, gap=0.3))
    with httpx.Client(trust_env=False) as client, client.stream(
        "POST", proxy + "/v1/chat/completions", content=b'{"stream":true}', headers={"x-plan": key}
    ) as response:
        received = 0
        for chunk in response.iter_raw():
            received += chunk.count(b"data:")
            if received >= 2:
                break
    gone = time.monotonic()
    seen = fake.wait(key, lambda s: s.cancelled_at is not None, timeout=2.0)
    assert seen.cancelled_at is not None and seen.cancelled_at - gone < 1.0
    assert seen.chunks_sent < 10 and not seen.completed


def test_scripted_and_passthrough_calls_do_not_interfere(
    upstream: tuple[FakeUpstream, BackgroundServer], proxy: str
) -> None:
    fake, _ = upstream
    chunks = [b"data: {\"n\": %d}\n\n" % i for i in range(5)] + [b"data: [DONE]\n\n"]
    key = fake.plan(Plan(200, [(b"content-type", b"text/event-stream")], chunks, gap=0.1))
    results: dict[str, Any] = {}

    async def both() -> None:
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:

            async def passthrough() -> None:
                body = b'{"model":"m","stream":true}'
                async with client.stream("POST", proxy + "/v1/chat/completions", content=body,
                                         headers={"x-plan": key}) as r:
                    results["passthrough"] = b"".join([c async for c in r.aiter_raw()])
                    results["passthrough_done"] = time.monotonic()

            async def scripted() -> None:
                await asyncio.sleep(0.15)  # while the passthrough stream is mid-way
                body = b'{"model":"m","messages":[{"role":"user","content":"' + MARKER + b'"}]}'
                r = await client.post(proxy + "/v1/chat/completions", content=body, headers={"x-plan": key})
                results["scripted"] = r.json()
                results["scripted_done"] = time.monotonic()

            await asyncio.gather(passthrough(), scripted())

    asyncio.run(both())
    assert results["passthrough"] == b"".join(chunks)
    assert results["scripted"]["choices"][0]["message"]["content"] == SCRIPTED
    assert results["scripted_done"] < results["passthrough_done"]
    assert fake.seen[key].body == b'{"model":"m","stream":true}'  # only the passthrough call went upstream


def test_upstream_down_is_a_prompt_502(interceptor: MarkerInterceptor) -> None:
    with serve_proxy(closed_port_url(), interceptor) as down, httpx.Client(trust_env=False) as client:
        start = time.monotonic()
        r = client.post(down.url + "/v1/chat/completions", content=b'{"model":"m"}')
        ollama = client.get(down.url + "/api/tags")
        elapsed = time.monotonic() - start
    assert elapsed < 1.0
    assert r.status_code == 502 and r.headers["x-should-retry"] == "false"
    assert r.json()["error"]["type"] == "upstream_unavailable"
    assert ollama.status_code == 502 and "not reachable" in ollama.json()["error"]


def test_upstream_failing_mid_stream_is_not_turned_into_a_clean_end(
    upstream: tuple[FakeUpstream, BackgroundServer], proxy: str
) -> None:
    fake, _ = upstream
    chunks = [b"data: {\"n\": %d}\n\n" % i for i in range(6)]
    key = fake.plan(Plan(200, [(b"content-type", b"text/event-stream")], chunks, fail_after=2))
    received = b""
    with httpx.Client(trust_env=False) as client, pytest.raises(httpx.RemoteProtocolError), client.stream(
        "POST", proxy + "/v1/chat/completions", content=b'{"stream":true}', headers={"x-plan": key}
    ) as response:
        for chunk in response.iter_raw():
            received += chunk
    assert received == b"".join(chunks[:2])  # what came before the break, and no clean end after it
