"""Model proxy overhead, against a raw byte relay and a direct connection measured in the same run.

    uv run python tests/bench/bench_proxy.py             # the full run (a few minutes)
    uv run python tests/bench/bench_proxy.py --quick     # fewer rounds
    uv run python tests/bench/bench_proxy.py --only added,clients,streams,dialects
    uv run python tests/bench/bench_proxy.py --json      # figures as JSON too
    uv run python tests/bench/bench_proxy.py --upstream-kind asgi   # the fake model server under uvicorn
    BENCH_PROXY_FACTORY=module:function uv run python tests/bench/bench_proxy.py   # another proxy factory

Every side runs in a process of its own; this process is the load generator. The sides:

- direct: the fake model server itself, by default written with asyncio and no HTTP library
  (``RawUpstream``), so that it never limits another side;
- the raw byte relay: asyncio piping bytes between each client connection and one upstream
  connection of its own, with no HTTP parsing at all (the floor any proxy is held to);
- proxy (front): the proxy as the daemon serves it (``canary.proxy.server.ProxyServer``, over a run
  registry with no run in flight);
- proxy, all ASGI: the app alone under uvicorn, as it was served before the front (``asgi``);
- the minimal httpx relay: raw ASGI under uvicorn, the body buffered, one ``httpx.AsyncClient``.

Measured: sequential 1 KB calls on every side in turn, what each adds to direct's p50 and p99
(``added``); non-streaming added latency with httpx clients and each process's CPU per request,
1 KB and 1 MiB bodies; added first-byte time of a stream; inter-chunk gaps (upstream every 20 ms);
50 concurrent SSE streams, first byte p99 against direct's; 50 concurrent keep-alive clients sending
1 KB calls back to back, req/s and p99 against the byte relay's; each dialect family's added p50 and
first-byte time (OpenAI chat, Anthropic Messages, Gemini); the in-process hook's 204; 200
concurrent streams without an error; the per-request check in ms per 100 KiB of body.

Targets: 50 keep-alive clients at >= 0.5x the byte relay's req/s; 50 concurrent streams' first
byte p99 <= 2x direct's; sequential 1 KB calls add < 0.3 ms at p50; gaps within 2 ms of direct;
no error over 200 concurrent streams; check < 0.05 ms per 100 KiB.

``--listener nodelay`` serves the uvicorn sides on a socket created with ``IPPROTO_TCP`` instead
of ``BackgroundServer`` (asyncio only sets TCP_NODELAY on sockets whose ``proto`` says TCP).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import itertools
import json
import os
import random
import socket
import statistics
import string
import subprocess
import sys
import time
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CHAT_PATH = "/v1/chat/completions"
#: Each dialect's (whole, streamed) paths; the fake upstream answers each in its own shape.
DIALECT_PATHS = {
    "chat": (CHAT_PATH, CHAT_PATH),
    "anthropic": ("/v1/messages", "/v1/messages"),
    "gemini": ("/v1beta/models/gemini-2.5-flash:generateContent",
               "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
}
HOOK_PATH = "/canary/v1/answer"
NONCE_CHARS = string.ascii_lowercase + string.digits


# -- the fake upstream and the proxy, each in a child process -----------------------------------


def _completion_body() -> bytes:
    return json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1764420000, "model": "m",
        "system_fingerprint": None,
        "choices": [{"index": 0, "logprobs": None, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "The minimum is 420 euros. " * 8,
                                 "refusal": None}}],
        "usage": {"prompt_tokens": 300, "completion_tokens": 60, "total_tokens": 360},
    }).encode()


def _chunk(index: int) -> bytes:
    event = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1764420000, "model": "m",
             "choices": [{"index": 0, "delta": {"content": f"tok{index} "}, "logprobs": None,
                          "finish_reason": None}]}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def _anthropic_body() -> bytes:
    return json.dumps({
        "id": "msg_bench", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "The minimum is 420 euros. " * 8}], "stop_reason": "end_turn",
        "stop_sequence": None, "usage": {"input_tokens": 300, "output_tokens": 60},
    }).encode()


def _anthropic_event(index: int) -> bytes:
    event = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"tok{index} "}}
    return b"event: content_block_delta\ndata: " + json.dumps(event).encode() + b"\n\n"


def _gemini_body(index: int | None = None) -> bytes:
    text = "The minimum is 420 euros. " * 8 if index is None else f"tok{index} "
    return json.dumps({
        "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP",
                        "index": 0}],
        "usageMetadata": {"promptTokenCount": 300, "candidatesTokenCount": 60, "totalTokenCount": 360},
        "modelVersion": "gemini-2.5-flash", "responseId": "bench",
    }).encode()


class FastUpstream:
    """Answers model calls in the dialect of their path: one JSON body, or ``n`` SSE chunks ``gap``
    ms apart (query string)."""

    def __init__(self) -> None:
        self.body = _completion_body()
        self.bodies = {"anthropic": _anthropic_body(), "gemini": _gemini_body()}
        self.json_headers = [(b"content-type", b"application/json"),
                             (b"content-length", str(len(self.body)).encode()),
                             (b"x-request-id", b"req-bench")]
        self.sse_headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            request += message.get("body", b"")
            if not message.get("more_body"):
                break
        path: str = scope["path"]
        dialect = "anthropic" if path == "/v1/messages" else "gemini" if "/models/" in path else "chat"
        streamed = path.endswith(":streamGenerateContent") or b'"stream":true' in request
        if not streamed:
            body = self.bodies.get(dialect, self.body)
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                       (b"x-request-id", b"req-bench")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        chunk = {"anthropic": _anthropic_event,
                 "gemini": lambda i: b"data: " + _gemini_body(i) + b"\r\n\r\n"}.get(dialect, _chunk)
        query = dict(p.split("=") for p in scope["query_string"].decode().split("&") if "=" in p)
        count, gap = int(query.get("n", "20")), float(query.get("gap", "20")) / 1000
        await send({"type": "http.response.start", "status": 200, "headers": self.sse_headers})
        for index in range(count):
            if index and gap:
                await asyncio.sleep(gap)
            await send({"type": "http.response.body", "body": chunk(index), "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n" if dialect == "chat" else b"",
                    "more_body": False})


class RawUpstream(asyncio.Protocol):
    """The fake model server with no HTTP library: the same answers as ``FastUpstream``, written as bytes.

    The default upstream, so that the upstream is never what limits a side: every side is held to
    the same model server, and the fastest of them (the byte relay) shows how much room is left.
    """

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: Any = None
        self.busy = False
        bodies = {"chat": _completion_body(), "anthropic": _anthropic_body(), "gemini": _gemini_body()}
        self.answers = {dialect: (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                                  b"x-request-id: req-bench\r\n\r\n" % len(body)) + body
                        for dialect, body in bodies.items()}

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._next()

    def _next(self) -> None:
        while not self.busy:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].split(b"\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4:end + 4 + length]
            self.buffer = self.buffer[end + 4 + length:]
            target = head[0].split(b" ")[1].decode()
            path, _, query = target.partition("?")
            dialect = "anthropic" if path == "/v1/messages" else "gemini" if "/models/" in path else "chat"
            if path.endswith(":streamGenerateContent") or b'"stream":true' in body:
                self.busy = True
                asyncio.get_running_loop().create_task(self._stream(dialect, query))
                return
            self.transport.write(self.answers[dialect])

    async def _stream(self, dialect: str, query: str) -> None:
        chunk = {"anthropic": _anthropic_event,
                 "gemini": lambda i: b"data: " + _gemini_body(i) + b"\r\n\r\n"}.get(dialect, _chunk)
        params = dict(p.split("=") for p in query.split("&") if "=" in p)
        count, gap = int(params.get("n", "20")), float(params.get("gap", "20")) / 1000
        write = self.transport.write
        write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
              b"transfer-encoding: chunked\r\n\r\n")
        for index in range(count):
            if index and gap:
                await asyncio.sleep(gap)
            data = chunk(index)
            write(b"%x\r\n%b\r\n" % (len(data), data))
        if dialect == "chat":
            write(b"e\r\ndata: [DONE]\n\n\r\n")
        write(b"0\r\n\r\n")
        self.busy = False
        self._next()


def _serve_raw_upstream() -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(RawUpstream, "127.0.0.1", 0, backlog=2048)
        print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
        await server.serve_forever()

    asyncio.run(main())


class MinimalRelay:
    """The reference relay: raw ASGI, the body buffered, one shared httpx client, raw chunks relayed."""

    _DROP = frozenset({b"host", b"content-length", b"connection", b"transfer-encoding", b"keep-alive"})

    def __init__(self, upstream: str) -> None:
        import httpx

        self.upstream = upstream
        self.client = httpx.AsyncClient(trust_env=False, timeout=None)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        query = scope["query_string"].decode()
        url = self.upstream + scope["path"] + (f"?{query}" if query else "")
        headers = [(k, v) for k, v in scope["headers"] if k not in self._DROP]
        request = self.client.build_request(scope["method"], url, headers=headers, content=body)
        response = await self.client.send(request, stream=True)
        try:
            out = [(k.lower(), v) for k, v in response.headers.raw if k.lower() not in self._DROP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


def _serve_bytes(upstream: str) -> None:
    """The floor: a TCP relay that pipes bytes both ways, one upstream connection per client's."""
    host, port = upstream.removeprefix("http://").rsplit(":", 1)

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        for w in (writer, up_writer):
            w.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
        await server.serve_forever()

    asyncio.run(main())


def _serve(role: str, upstream: str | None, listener: str) -> None:
    """Serve the fake upstream or the proxy on a free loopback port; print the port, serve until killed."""
    import uvicorn

    from canary.proxy.app import create_proxy
    from canary.proxy.serving import BackgroundServer

    if role == "bytes":
        assert upstream is not None
        _serve_bytes(upstream)
        return
    if role == "rawup":
        _serve_raw_upstream()
        return
    if role == "proxy" and listener == "product" and "BENCH_PROXY_FACTORY" not in os.environ:
        _serve_front(upstream)
        return
    app: Any
    if role == "upstream":
        app = FastUpstream()
    elif role == "relay":
        assert upstream is not None
        app = MinimalRelay(upstream)
    elif role == "asgi":
        app = create_proxy(upstream, _registry_with_runs(0))
    else:
        module, _, name = os.environ.get("BENCH_PROXY_FACTORY", "canary.proxy.app:create_proxy").partition(":")
        factory = getattr(importlib.import_module(module), name) if module != "canary.proxy.app" else create_proxy
        app = factory(upstream)
    if listener == "product":
        server = BackgroundServer(app, name=role).start()
        print(f"PORT {server.port}", flush=True)
        while True:
            time.sleep(3600)
    # a TCP socket asyncio recognises as such, so every accepted connection gets TCP_NODELAY
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False,
                            date_header=False, lifespan="off" if role == "upstream" else "auto")
    uvicorn.Server(config).run(sockets=[sock])


def _serve_front(upstream: str | None) -> None:
    """The proxy as the daemon serves it: the front, over a run registry with no run in flight."""
    from canary.proxy.app import create_proxy
    from canary.proxy.server import ProxyServer

    server = ProxyServer(create_proxy(upstream, _registry_with_runs(0)), name="proxy").start()
    print(f"PORT {server.port}", flush=True)
    while True:
        time.sleep(3600)


def _spawn(role: str, listener: str, upstream: str | None = None) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, __file__, "--serve", role, "--listener", listener]
    if upstream:
        command += ["--upstream", upstream]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if not line.startswith("PORT "):
        child.kill()
        raise SystemExit(f"the {role} did not start: {line!r}")
    url = f"http://127.0.0.1:{line.split()[1]}"
    _wait_ready(url)
    return child, url


def _wait_ready(url: str) -> None:
    import httpx

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.post(url + CHAT_PATH, content=b"{}", timeout=1, trust_env=False)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise SystemExit(f"{url} never answered")


# -- measurements -------------------------------------------------------------------------------


def _request_body() -> bytes:
    messages = [
        {"role": "system", "content": "You are a careful assistant. Cite the page you read."},
        {"role": "user", "content": "Read https://permits.example.org/residence and tell me the minimum "
                                    "monthly amount an applicant must show. " * 6},
        {"role": "assistant", "content": "I will fetch the page first."},
        {"role": "tool", "tool_call_id": "call_1",
         "content": "<p>The minimum amount is exactly 420 euros per month.</p> " * 6},
    ]
    return json.dumps({"model": "m", "messages": messages, "temperature": 0}).encode()


def _client() -> Any:
    """A sync keep-alive client with TCP_NODELAY (asyncio sets it on the servers' side already).

    Without it, the request's headers and body go out as two writes and Nagle's algorithm holds
    the second until the server's delayed ACK: tens of milliseconds on every call, direct or not.
    """
    import httpx

    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    return httpx.Client(transport=httpx.HTTPTransport(socket_options=nodelay), trust_env=False)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _ms(seconds: float) -> float:
    return seconds * 1000


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_latency(
    direct: str, proxied: str, rounds: int, per_round: int, warmup: int, pids: dict[str, int],
    body: bytes | None = None, path: str = CHAT_PATH,
) -> dict[str, Any]:
    """Non-streaming calls, interleaved; added p50/p99 per round, then the median over rounds.

    Also the CPU time each server process spent per request: unlike wall-clock latency, it
    hardly moves when other work on the machine delays the processes' wake-ups.
    """

    body = body if body is not None else _request_body()
    headers = {"content-type": "application/json"}
    result: dict[str, Any] = {"body_bytes": len(body), "rounds": [], "per_round": per_round}
    with _client() as d, _client() as p:
        for _ in range(warmup):
            d.post(direct + path, content=body, headers=headers)
            p.post(proxied + path, content=body, headers=headers)
        cpu_before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        for _ in range(rounds):
            times: dict[str, list[float]] = {"direct": [], "proxied": []}
            for index in range(per_round):
                order = [("direct", d, direct), ("proxied", p, proxied)]
                for name, client, base in order if index % 2 else reversed(order):
                    start = time.perf_counter()
                    r = client.post(base + path, content=body, headers=headers)
                    r.read()
                    times[name].append(time.perf_counter() - start)
                    assert r.status_code == 200
            result["rounds"].append({
                side: {"p50": _ms(statistics.median(t)), "p99": _ms(_percentile(t, 0.99))}
                for side, t in times.items()
            })
        cpu_after = {name: _cpu_seconds(pid) for name, pid in pids.items()}
    # the upstream serves every request twice per index (direct and proxied); the proxy once
    served = {"upstream": 2 * rounds * per_round, "proxy": rounds * per_round}
    served.update({name: rounds * per_round for name in pids if name not in served})
    for name, before in cpu_before.items():
        after = cpu_after[name]
        if before is not None and after is not None:
            result[f"{name}_cpu_ms_per_request"] = _ms(after - before) / served[name]
    rows = result["rounds"]
    for key in ("p50", "p99"):
        result[f"direct_{key}"] = statistics.median(r["direct"][key] for r in rows)
        result[f"proxied_{key}"] = statistics.median(r["proxied"][key] for r in rows)
        added = [r["proxied"][key] - r["direct"][key] for r in rows]
        result[f"added_{key}"] = statistics.median(added)
        result[f"added_{key}_range"] = (min(added), max(added))
    return result


def bench_added(bases: dict[str, str], rounds: int, per_round: int, warmup: int, body: bytes,
                path: str = CHAT_PATH) -> dict[str, Any]:
    """Sequential keep-alive calls on every side in turn (direct first); per round each side's p50 and
    p99, and what it adds to direct's; the median over rounds. Raw sockets, so the client adds little."""
    sockets: dict[str, socket.socket] = {}
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body
    for side, base in bases.items():
        host, port = base.removeprefix("http://").rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sockets[side] = sock

    def call(sock: socket.socket) -> float:
        start = time.perf_counter()
        sock.sendall(head)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        top, _, rest = data.partition(b"\r\n\r\n")
        length = int(top.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(rest) < length:
            rest += sock.recv(65536)
        return time.perf_counter() - start

    try:
        for _ in range(warmup):
            for sock in sockets.values():
                call(sock)
        rows = []
        for _ in range(rounds):
            times: dict[str, list[float]] = {side: [] for side in sockets}
            for index in range(per_round):
                order = list(sockets.items())
                for side, sock in order if index % 2 else reversed(order):
                    times[side].append(call(sock))
            rows.append({side: (_ms(statistics.median(t)), _ms(_percentile(t, 0.99))) for side, t in times.items()})
    finally:
        for sock in sockets.values():
            sock.close()
    out: dict[str, Any] = {"body_bytes": len(body), "rounds": rounds, "per_round": per_round}
    for side in bases:
        out[side] = {
            "p50": statistics.median(r[side][0] for r in rows), "p99": statistics.median(r[side][1] for r in rows),
            "added_p50": statistics.median(r[side][0] - r["direct"][0] for r in rows),
            "added_p99": statistics.median(r[side][1] - r["direct"][1] for r in rows),
        }
    return out


def _first_byte(client: Any, url: str, body: bytes) -> float:
    start = time.perf_counter()
    first = None
    with client.stream("POST", url, content=body) as response:
        for chunk in response.iter_raw():
            if chunk and first is None:
                first = time.perf_counter() - start
    assert first is not None
    return first


def bench_ttfb(direct: str, proxied: str, rounds: int, per_round: int, warmup: int, *,
               path: str = CHAT_PATH, body: bytes | None = None) -> dict[str, Any]:
    """Time to the first body byte of a stream, interleaved; median over rounds of the p50 difference."""

    body = body if body is not None else _request_body()[:-1] + b',"stream":true}'
    query = ("&" if "?" in path else "?") + "n=3&gap=0"
    rows = []
    with _client() as d, _client() as p:
        for _ in range(warmup):
            _first_byte(d, direct + path + query, body)
            _first_byte(p, proxied + path + query, body)
        for _ in range(rounds):
            times: dict[str, list[float]] = {"direct": [], "proxied": []}
            for index in range(per_round):
                order = [("direct", d, direct), ("proxied", p, proxied)]
                for name, client, base in order if index % 2 else reversed(order):
                    times[name].append(_first_byte(client, base + path + query, body))
            rows.append({side: _ms(statistics.median(t)) for side, t in times.items()})
    added = [r["proxied"] - r["direct"] for r in rows]
    return {"direct_p50": statistics.median(r["direct"] for r in rows),
            "proxied_p50": statistics.median(r["proxied"] for r in rows),
            "added_p50": statistics.median(added), "added_range": (min(added), max(added))}


def _arrivals(client: Any, url: str, body: bytes) -> list[float]:
    arrivals = []
    with client.stream("POST", url, content=body) as response:
        for chunk in response.iter_raw():
            if chunk:
                arrivals.append(time.perf_counter())
    return arrivals


def bench_gaps(direct: str, proxied: str, streams: int, chunks: int, gap_ms: int) -> dict[str, Any]:
    """Inter-chunk gaps seen by the client when the upstream sends a chunk every ``gap_ms``."""

    body = _request_body()[:-1] + b',"stream":true}'
    query = f"?n={chunks}&gap={gap_ms}"
    gaps: dict[str, list[float]] = {"direct": [], "proxied": []}
    totals: dict[str, list[float]] = {"direct": [], "proxied": []}
    with _client() as d, _client() as p:
        for index in range(streams):
            order = [("direct", d, direct), ("proxied", p, proxied)]
            for name, client, base in order if index % 2 else reversed(order):
                arrivals = _arrivals(client, base + CHAT_PATH + query, body)
                gaps[name] += [_ms(b - a) for a, b in itertools.pairwise(arrivals)]
                totals[name].append(_ms(arrivals[-1] - arrivals[0]))
    out: dict[str, Any] = {"upstream_gap_ms": gap_ms}
    for side, values in gaps.items():
        out[side] = {"p50": statistics.median(values), "p95": _percentile(values, 0.95), "max": max(values),
                     "chunks_seen_per_stream": len(values) / streams + 1,
                     "stream_time_p50": statistics.median(totals[side])}
    out["p50_diff"] = out["proxied"]["p50"] - out["direct"]["p50"]
    out["p95_diff"] = out["proxied"]["p95"] - out["direct"]["p95"]
    return out


async def _concurrent(base: str, count: int, chunks: int, gap_ms: int) -> dict[str, Any]:
    import httpx

    body = _request_body()[:-1] + b',"stream":true}'
    expected = b"".join(_chunk(i) for i in range(chunks)) + b"data: [DONE]\n\n"
    limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=count + 10)
    errors: list[str] = []
    ttfb: list[float] = []

    async with httpx.AsyncClient(trust_env=False, limits=limits, timeout=60) as client:

        async def one() -> None:
            start = time.perf_counter()
            try:
                async with client.stream("POST", f"{base}{CHAT_PATH}?n={chunks}&gap={gap_ms}",
                                         content=body) as response:
                    data = b""
                    async for chunk in response.aiter_raw():
                        if not data:
                            ttfb.append(time.perf_counter() - start)
                        data += chunk
                if response.status_code != 200 or data != expected:
                    errors.append(f"status {response.status_code}, {len(data)} of {len(expected)} bytes")
            except Exception as exc:  # counted and reported, the point of this measurement
                errors.append(f"{type(exc).__name__}: {exc}")

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(count)))
        wall = time.perf_counter() - start
    return {"streams": count, "errors": len(errors), "first_errors": errors[:3],
            "ttfb_p50": _ms(statistics.median(ttfb)) if ttfb else None,
            "ttfb_p95": _ms(_percentile(ttfb, 0.95)) if ttfb else None,
            "ttfb_p99": _ms(_percentile(ttfb, 0.99)) if ttfb else None, "wall_s": wall}


def bench_concurrency(direct: str, proxied: str, count: int) -> dict[str, Any]:
    """``count`` streams at once (10 chunks, 20 ms apart), direct then proxied."""
    return {side: asyncio.run(_concurrent(base, count, chunks=10, gap_ms=20))
            for side, base in (("direct", direct), ("proxied", proxied))}


def bench_streams(bases: dict[str, str], count: int) -> dict[str, Any]:
    """``count`` streams at once (10 chunks, 20 ms apart) on each side in turn, twice, best TTFB p99 kept."""
    out: dict[str, Any] = {}
    for _ in range(2):
        for side, base in bases.items():
            row = asyncio.run(_concurrent(base, count, chunks=10, gap_ms=20))
            if side not in out or (row["ttfb_p99"] or 1e9) < (out[side]["ttfb_p99"] or 1e9):
                out[side] = row
    return out


async def _keepalive_client(host: str, port: int, request: bytes, stop: float, latencies: list[float]) -> int:
    """One keep-alive connection sending ``request`` until ``stop``; a minimal HTTP/1.1 reader."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    done = 0
    try:
        while time.perf_counter() < stop:
            start = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length, chunked = None, False
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"transfer-encoding":
                    chunked = True
            if head[9:12] != b"200" or (length is None and not chunked):
                raise RuntimeError(f"unexpected answer {head[:200]!r}")
            if length is not None:
                await reader.readexactly(length)
            else:
                while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                    await reader.readexactly(size + 2)
                await reader.readuntil(b"\r\n")
            latencies.append(time.perf_counter() - start)
            done += 1
    finally:
        writer.close()
    return done


async def _clients(base: str, count: int, seconds: float, body: bytes) -> dict[str, Any]:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    request = (f"POST {CHAT_PATH} HTTP/1.1\r\nHost: {host}:{port}\r\ncontent-type: application/json\r\n"
               f"content-length: {len(body)}\r\n\r\n").encode() + body
    latencies: list[float] = []
    # warm-up: every connection opened and used once before the clock starts
    await asyncio.gather(*(_keepalive_client(host, int(port), request, time.perf_counter() + 0.2, [])
                           for _ in range(count)))
    start = time.perf_counter()
    counts = await asyncio.gather(*(_keepalive_client(host, int(port), request, start + seconds, latencies)
                                    for _ in range(count)))
    wall = time.perf_counter() - start
    return {"clients": count, "requests": sum(counts), "rps": sum(counts) / wall,
            "p50": _ms(statistics.median(latencies)), "p99": _ms(_percentile(latencies, 0.99))}


def bench_clients(bases: dict[str, str], count: int, seconds: float, rounds: int) -> dict[str, Any]:
    """``count`` keep-alive clients sending 1 KB calls back to back; sides interleaved, median of rounds."""
    body = _sized_body(1024)
    rows: dict[str, list[dict[str, Any]]] = {side: [] for side in bases}
    for _ in range(rounds):
        for side, base in bases.items():
            rows[side].append(asyncio.run(_clients(base, count, seconds, body)))
    out: dict[str, Any] = {}
    for side, results in rows.items():
        out[side] = {key: statistics.median(r[key] for r in results) for key in ("rps", "p50", "p99")}
        out[side]["clients"] = count
    return out


def _sized_body(size: int) -> bytes:
    """A chat request body of exactly ``size`` bytes (the last message padded)."""
    request = json.loads(_request_body())
    request["messages"][-1]["content"] = ""
    bare = len(json.dumps(request).encode())
    request["messages"][-1]["content"] = ("Lorem ipsum dolor sit amet. " * (size // 28 + 1))[: max(0, size - bare)]
    body = json.dumps(request).encode()
    assert len(body) == size, (len(body), size)
    return body


def _registry_with_runs(count: int) -> Any:
    """The real run registry with ``count`` runs in flight; no benchmark body carries their nonces."""
    from canary.runs.inflight import ActiveRun
    from canary.runs.registry import Registry
    from canary.runs.values import new_nonce

    registry = Registry(has_upstream=True)
    now = time.time()
    for index in range(count):
        registry.add(ActiveRun(index, f"guard{index}", new_nonce(), "first", "scripted", None, "page",
                               started=now, deadline=now + 3600))
    return registry


def _big_body(size: int, *, stream: bool | None, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    sentences = [
        "The minimum monthly amount for the permit is set by the regional office.",
        "Applicants must bring an original bank statement and a valid passport.",
        "According to https://www.example.gov/permits/residence the fee was raised in 2024.",
        "I fetched the page and found the following table of requirements:",
        "| Requirement | Value |\n|---|---|\n| Income | 1,250 EUR |\n| Duration | 12 months |",
        '<div class="content"><p>Opening hours: Monday to Friday, 9:00-12:00.</p></div>',
        "Let me check the source again before answering the question.",
        "def parse(page):\n    return [row.text for row in page.select('tr')]",
    ]
    messages: list[dict[str, str]] = [{"role": "system", "content": "You are a careful assistant."}]
    while len(json.dumps(messages)) < size:
        messages.append({"role": rng.choice(["user", "assistant", "tool"]),
                         "content": " ".join(rng.choice(sentences) for _ in range(6))})
    request: dict[str, Any] = {"model": "llama3.2", "messages": messages}
    if stream is not None:
        request["stream"] = stream
    request["tools"] = [{"type": "function", "function": {"name": "fetch", "parameters": {
        "type": "object", "properties": {"url": {"type": "string"}}}}}]
    return json.dumps(request).encode()


def bench_check(size: int = 100 * 1024) -> dict[str, Any]:
    """The per-request check in ms per 100 KiB: routing + stream flag, then 3 nonce scans."""
    from canary.proxy.app import model_call

    interceptor: Any = _registry_with_runs(3)
    out: dict[str, Any] = {}

    def per_100k(body: bytes, action: Any, number: int = 2000) -> float:
        runs = timeit.repeat(action, number=number, repeat=7)
        return statistics.median(runs) / number * 1000 * (100 * 1024) / len(body)

    for label, stream in (("stream_last", True), ("no_stream_key", None)):
        body = _big_body(size, stream=stream)
        call = model_call("POST", CHAT_PATH, body)
        assert call is not None and call.stream is bool(stream)
        route = per_100k(body, lambda body=body: model_call("POST", CHAT_PATH, body))
        scan = per_100k(body, lambda call=call: interceptor.intercept(call))
        total = per_100k(body, lambda body=body: interceptor.intercept(model_call("POST", CHAT_PATH, body)))
        one = per_100k(body, lambda body=body: b"k3v9q2x7m1p0z8w4r6t5" in body)
        parse = per_100k(body, lambda body=body: json.loads(body), number=100)
        out[label] = {"body_bytes": len(body), "route_and_stream_flag": route, "three_nonce_scan": scan,
                      "one_nonce_scan": one, "total": total, "json_loads_reference": parse}
    body = _big_body(size, stream=True)
    # The same decision for each dialect's path: which family speaks it, and the runs' nonces.
    out["per_dialect"] = {dialect: per_100k(body, lambda path=whole: interceptor.intercept(model_call("POST", path, body)))
                          for dialect, (whole, _) in DIALECT_PATHS.items()}
    return out


def _dialect_body(dialect: str, *, stream: bool) -> bytes:
    """A ~1.2 KB model call in the dialect's own request shape."""
    chat = json.loads(_request_body())
    if dialect == "chat":
        return _dump({**chat, **({"stream": True} if stream else {})})
    turns = [m for m in chat["messages"] if m["role"] in ("user", "assistant")]
    if dialect == "anthropic":
        return _dump({"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": chat["messages"][0]["content"],
                      "messages": turns, **({"stream": True} if stream else {})})
    return _dump({"contents": [{"role": "model" if m["role"] == "assistant" else "user",
                                     "parts": [{"text": m["content"]}]} for m in turns],
                  "systemInstruction": {"parts": [{"text": chat["messages"][0]["content"]}]}})


def _dump(obj: Any) -> bytes:
    """Compact JSON, as the SDKs send it (``"stream":true``, which the fake upstream looks for)."""
    return json.dumps(obj, separators=(",", ":")).encode()


def bench_dialects(direct: str, proxied: str, rounds: int, per_round: int, warmup: int,
                   pids: dict[str, int]) -> dict[str, Any]:
    """Added p50 (whole answers) and added first-byte time (streams), per dialect family.

    The dialects take turns within each round, so a change in the machine's load moves them alike.
    """
    added: dict[str, dict[str, list[float]]] = {d: {"p50": [], "ttfb": []} for d in DIALECT_PATHS}
    direct_p50: dict[str, list[float]] = {d: [] for d in DIALECT_PATHS}
    cpu: dict[str, list[float]] = {d: [] for d in DIALECT_PATHS}
    for index in range(rounds):
        for dialect, (whole, streamed) in DIALECT_PATHS.items():
            latency = bench_latency(direct, proxied, 1, per_round, warmup if index == 0 else 5, pids,
                                    _dialect_body(dialect, stream=False), path=whole)
            ttfb = bench_ttfb(direct, proxied, 1, per_round // 2, 5, path=streamed,
                              body=_dialect_body(dialect, stream=True))
            added[dialect]["p50"].append(latency["added_p50"])
            added[dialect]["ttfb"].append(ttfb["added_p50"])
            direct_p50[dialect].append(latency["direct_p50"])
            if "proxy_cpu_ms_per_request" in latency:
                cpu[dialect].append(latency["proxy_cpu_ms_per_request"])
    return {d: {"added_p50": statistics.median(a["p50"]), "added_ttfb": statistics.median(a["ttfb"]),
                "direct_p50": statistics.median(direct_p50[d]), "rounds": rounds,
                "proxy_cpu_ms": statistics.median(cpu[d]) if cpu[d] else None}
            for d, a in added.items()}


def bench_hook(direct: str, proxied: str, rounds: int, per_round: int, warmup: int) -> dict[str, Any]:
    """The in-process hook's answer to an organic call (204) against a whole direct model call."""
    body = json.dumps({"messages": json.loads(_request_body())["messages"]}).encode()
    rows = []
    with _client() as d, _client() as p:
        for _ in range(warmup):
            d.post(direct + CHAT_PATH, content=_request_body())
            assert p.post(proxied + HOOK_PATH, content=body).status_code == 204
        for _ in range(rounds):
            times: dict[str, list[float]] = {"direct": [], "hook": []}
            for _ in range(per_round):
                for name, client, url, sent in (("direct", d, direct + CHAT_PATH, _request_body()),
                                                ("hook", p, proxied + HOOK_PATH, body)):
                    start = time.perf_counter()
                    client.post(url, content=sent).read()
                    times[name].append(time.perf_counter() - start)
            rows.append({side: _ms(statistics.median(t)) for side, t in times.items()})
    return {"hook_p50": statistics.median(r["hook"] for r in rows),
            "direct_p50": statistics.median(r["direct"] for r in rows)}


# -- report -------------------------------------------------------------------------------------


def _mark(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def _report_latency(lat: dict[str, Any], targets: dict[str, float] | None) -> None:
    print(f"\nnon-streaming ({lat['body_bytes']} B body, {len(lat['rounds'])} rounds x "
          f"{lat['per_round']} interleaved)")
    for key in ("p50", "p99"):
        low, high = lat[f"added_{key}_range"]
        direct, proxied, added = lat[f"direct_{key}"], lat[f"proxied_{key}"], lat[f"added_{key}"]
        target = (targets or {}).get(key)
        verdict = f", target < {target} ms: {_mark(added < target)}" if target is not None else ""
        print(f"  {key}: direct {direct:.3f} ms, proxied {proxied:.3f} ms, ratio {proxied / direct:.2f}x; "
              f"added {added:.3f} ms (rounds {low:.3f}..{high:.3f}){verdict}")
    if "proxy_cpu_ms_per_request" in lat:
        print(f"  CPU per request: proxy {lat['proxy_cpu_ms_per_request']:.3f} ms, upstream "
              f"{lat['upstream_cpu_ms_per_request']:.3f} ms")


def _report_added(added: dict[str, Any]) -> None:
    print(f"\nsequential {added['body_bytes']} B calls, keep-alive, sides in turn ({added['rounds']} rounds x "
          f"{added['per_round']}): direct p50 {added['direct']['p50']:.3f} ms, p99 {added['direct']['p99']:.3f} ms")
    for side in ("bytes", "proxied", "asgi"):
        row = added[side]
        print(f"  {SIDES[side]}: p50 {row['p50']:.3f} ms, p99 {row['p99']:.3f} ms; adds p50 {row['added_p50']:.3f} ms, "
              f"p99 {row['added_p99']:.3f} ms")
    print(f"  the proxy adds p50 {added['proxied']['added_p50']:.3f} ms "
          f"({added['proxied']['added_p50'] - added['bytes']['added_p50']:+.3f} ms over the byte relay's); "
          f"target < 0.3 ms: {_mark(added['proxied']['added_p50'] < 0.3)}")


#: What each side is, as the report names it.
SIDES = {"direct": "direct", "proxied": "proxy (front)", "bytes": "raw asyncio byte relay",
         "asgi": "proxy, all ASGI (before the front)", "relay": "minimal httpx relay"}


def report(results: dict[str, Any]) -> None:
    """Print every measurement that was run, each with its target."""
    if "added" in results:
        _report_added(results["added"])
    if "latency" in results:
        _report_latency(results["latency"], {"p50": 1.0, "p99": 5.0})
    if "latency_1m" in results:
        _report_latency(results["latency_1m"], None)
    if "ttfb" in results:
        ttfb = results["ttfb"]
        print(f"stream first byte: direct {ttfb['direct_p50']:.3f} ms, proxied {ttfb['proxied_p50']:.3f} ms, "
              f"added {ttfb['added_p50']:.3f} ms (rounds {ttfb['added_range'][0]:.3f}.."
              f"{ttfb['added_range'][1]:.3f}), target < 3 ms: {_mark(ttfb['added_p50'] < 3)}")
    if "gaps" in results:
        _report_gaps(results["gaps"])
    if "streams" in results:
        _report_streams(results["streams"])
    if "clients" in results:
        _report_clients(results["clients"])
    if "concurrency" in results:
        conc = results["concurrency"]
        for side in ("direct", "proxied"):
            c = conc[side]
            print(f"{c['streams']} concurrent streams {side}: {c['errors']} errors, "
                  f"TTFB p50 {c['ttfb_p50']:.1f} ms p95 {c['ttfb_p95']:.1f} ms, wall {c['wall_s']:.2f} s "
                  f"{c['first_errors'] or ''}")
        print(f"  target no error: {_mark(conc['proxied']['errors'] == 0)}")
    if "dialects" in results:
        _report_dialects(results["dialects"])
    if "hook" in results:
        hook = results["hook"]
        print(f"in-process hook, organic call (204): p50 {hook['hook_p50']:.3f} ms round trip, against "
              f"{hook['direct_p50']:.3f} ms for a whole direct model call "
              f"({hook['hook_p50'] / hook['direct_p50']:.2f}x); target < 1 ms: {_mark(hook['hook_p50'] < 1)}")
    check = dict(results.get("check", {}))
    per_dialect = check.pop("per_dialect", None)
    if per_dialect:
        chat = per_dialect["chat"]
        print("check per 100 KiB, route + 3 nonce scans, by dialect: " + ", ".join(
            f"{d} {ms:.4f} ms ({ms / chat:.2f}x chat's)" for d, ms in per_dialect.items()))
    for label, row in check.items():
        print(f"check per 100 KiB ({label}, {row['body_bytes']} B): route+stream flag "
              f"{row['route_and_stream_flag']:.4f} ms, registry with 3 runs {row['three_nonce_scan']:.4f} ms "
              f"(one nonce {row['one_nonce_scan']:.4f}), total {row['total']:.4f} ms "
              f"= {row['total'] / row['json_loads_reference']:.2f}x json.loads "
              f"({row['json_loads_reference']:.3f} ms); target < 0.05 ms: {_mark(row['total'] < 0.05)}")


def _report_dialects(rows: dict[str, Any]) -> None:
    chat = rows["chat"]
    for dialect, row in rows.items():
        fine = row["added_p50"] <= chat["added_p50"] + 0.1 and row["added_ttfb"] <= chat["added_ttfb"] + 0.1
        verdict = "" if dialect == "chat" else f"; target no worse than chat (+0.1 ms noise): {_mark(fine)}"
        print(f"dialect {dialect}: added p50 {row['added_p50']:.3f} ms (direct {row['direct_p50']:.3f} ms, "
              f"{row['added_p50'] / chat['added_p50']:.2f}x chat's), added TTFB {row['added_ttfb']:.3f} ms "
              f"({row['added_ttfb'] / chat['added_ttfb']:.2f}x chat's)"
              + (f", proxy CPU {row['proxy_cpu_ms']:.3f} ms/call" if row.get("proxy_cpu_ms") else "") + verdict)


def _report_gaps(gaps: dict[str, Any]) -> None:
    d, p = gaps["direct"], gaps["proxied"]
    print(f"chunk gaps (upstream every {gaps['upstream_gap_ms']} ms): direct p50 {d['p50']:.2f} / p95 "
          f"{d['p95']:.2f} / max {d['max']:.2f} ms; proxied p50 {p['p50']:.2f} / p95 {p['p95']:.2f} / "
          f"max {p['max']:.2f} ms; p50 diff {gaps['p50_diff']:+.2f}, p95 diff {gaps['p95_diff']:+.2f}, "
          f"target within 2 ms: {_mark(abs(gaps['p50_diff']) < 2 and abs(gaps['p95_diff']) < 2)}")
    print(f"  chunks seen per stream: direct {d['chunks_seen_per_stream']:.1f}, proxied "
          f"{p['chunks_seen_per_stream']:.1f}; stream time p50 direct {d['stream_time_p50']:.1f} ms, "
          f"proxied {p['stream_time_p50']:.1f} ms")


def _report_streams(streams: dict[str, Any]) -> None:
    for side, c in streams.items():
        print(f"{c['streams']} concurrent streams {side}: {c['errors']} errors, TTFB p50 {c['ttfb_p50']:.1f} ms "
              f"p99 {c['ttfb_p99']:.1f} ms, wall {c['wall_s']:.2f} s {c['first_errors'] or ''}")
    direct = streams["direct"]["ttfb_p99"]
    ratio = streams["proxied"]["ttfb_p99"] / direct
    others = ", ".join(f"{SIDES[side]} {streams[side]['ttfb_p99'] / direct:.2f}x"
                       for side in ("bytes", "asgi", "relay") if side in streams)
    print(f"  first byte p99 / direct's: proxy {ratio:.2f}x ({others}); target <= 2x: {_mark(ratio <= 2)}")


def _report_clients(clients: dict[str, Any]) -> None:
    for side, c in clients.items():
        print(f"{c['clients']} concurrent clients {side} (1 KB calls, keep-alive): {c['rps']:.0f} req/s, "
              f"p50 {c['p50']:.2f} ms, p99 {c['p99']:.2f} ms")
    floor = clients["bytes"]
    share = clients["proxied"]["rps"] / floor["rps"]
    others = ", ".join(f"{SIDES[side]} {clients[side]['rps'] / floor['rps']:.2f}x"
                       for side in ("asgi", "relay", "direct") if side in clients)
    print(f"  req/s / the raw byte relay's: proxy {share:.2f}x ({others}); p99 proxy "
          f"{clients['proxied']['p99']:.1f} ms against {floor['p99']:.1f} ms; target >= 0.5x: {_mark(share >= 0.5)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", choices=["upstream", "rawup", "proxy", "asgi", "relay", "bytes"], help=argparse.SUPPRESS)
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    parser.add_argument("--listener", choices=["product", "nodelay"], default="product",
                        help="serve both sides with canary.proxy.serving.BackgroundServer (product), or on a "
                             "socket created as IPPROTO_TCP so asyncio sets TCP_NODELAY (nodelay)")
    parser.add_argument("--upstream-kind", choices=["raw", "asgi"], default="raw",
                        help="the fake model server: bytes written by asyncio (raw), or an ASGI app under uvicorn")
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    parser.add_argument("--concurrent", type=int, default=200, help="streams of the no-error check")
    parser.add_argument("--clients", type=int, default=50, help="concurrent clients and streams compared")
    parser.add_argument("--only", help="comma-separated measurements to run (added,latency,latency_1m,ttfb,gaps,"
                        "dialects,hook,streams,clients,concurrency,check)")
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve, args.upstream, args.listener)
        return
    rounds, per_round, warmup = (3, 50, 30) if args.quick else (7, 200, 30)
    children = []
    try:
        upstream, upstream_url = _spawn("rawup" if args.upstream_kind == "raw" else "upstream", args.listener)
        children.append(upstream)
        proxy, proxy_url = _spawn("proxy", args.listener, upstream_url)
        children.append(proxy)
        relay, relay_url = _spawn("relay", args.listener, upstream_url)
        children.append(relay)
        floor, floor_url = _spawn("bytes", args.listener, upstream_url)
        children.append(floor)
        before, before_url = _spawn("asgi", args.listener, upstream_url)
        children.append(before)
        print(f"upstream {upstream_url} (pid {upstream.pid}), proxy {proxy_url} (pid {proxy.pid}), "
              f"relay {relay_url} (pid {relay.pid}), listener {args.listener}, "
              f"python {sys.version.split()[0]}, load {os.getloadavg()[0]:.2f}")
        results: dict[str, Any] = {"args": {"rounds": rounds, "per_round": per_round}}
        pids = {"upstream": upstream.pid, "proxy": proxy.pid}
        bases = {"direct": upstream_url, "proxied": proxy_url, "relay": relay_url, "bytes": floor_url,
                 "asgi": before_url}
        wanted = set(args.only.split(",")) if args.only else None
        steps: dict[str, Any] = {
            "added": lambda: bench_added({"direct": upstream_url, "proxied": proxy_url, "bytes": floor_url,
                                          "asgi": before_url}, rounds, per_round * 2, warmup, _sized_body(1024)),
            "latency": lambda: bench_latency(upstream_url, proxy_url, rounds, per_round, warmup, pids,
                                             _sized_body(1024)),
            "latency_1m": lambda: bench_latency(upstream_url, proxy_url, rounds, max(10, per_round // 10), 5,
                                                pids, _sized_body(1024 * 1024)),
            "ttfb": lambda: bench_ttfb(upstream_url, proxy_url, rounds, 30 if args.quick else 60, warmup),
            "gaps": lambda: bench_gaps(upstream_url, proxy_url, 3 if args.quick else 6, 20, 20),
            "dialects": lambda: bench_dialects(upstream_url, proxy_url, rounds, per_round // 2, warmup, pids),
            "hook": lambda: bench_hook(upstream_url, proxy_url, rounds, per_round // 2, warmup),
            "streams": lambda: bench_streams(bases, args.clients),
            "clients": lambda: bench_clients(bases, args.clients, 2.0 if args.quick else 4.0,
                                             3 if args.quick else 5),
            "concurrency": lambda: bench_concurrency(upstream_url, proxy_url, args.concurrent),
            "check": bench_check,
        }
        for name, step in steps.items():
            if wanted is None or name in wanted:
                results[name] = step()
    finally:
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
    report(results)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        print(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
