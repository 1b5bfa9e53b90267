"""The trace receiver under load, against a no-op receiver measured in the same run.

    uv run python tests/bench/bench_traces.py                    # 10,000 spans/s for 30 s, each target
    uv run python tests/bench/bench_traces.py --seconds 5        # a quick run
    uv run python tests/bench/bench_traces.py --rate 4000 --agents 1 --json

Agent processes (``--agents``, each sending its share of ``--rate``) run the real OpenTelemetry
SDK: a tracer provider, its batch span processor and the OTLP/HTTP protobuf exporter, exactly as
an agent would, timing every export call. Each agent request is four or five spans that look like an
instrumented agent's: the request's root, an OpenInference LLM span (model, token counts, the
prompt text), a retriever span, a GUARDRAIL span that passes (the look-alike a live guard writes
when it accepts), and one request in twenty a GUARDRAIL span that blocks (a firing).

Targets, one after the other, each in its own process:

- ``noop``: the fastest simple thing that answers an exporter: an asyncio server that reads each
  request's head and body and answers ``200`` with an empty body (an empty export response), no
  parsing at all;
- ``canary``: the receiver as the daemon serves it (``canary.traces.service.receiver_app`` under
  ``BackgroundServer``), over a SQLite store in WAL mode, with one span guard.

Reported per target: spans sent, spans the receiver counted, spans lost (sent and not taken in:
dropped by a full processor queue, or by a failed export), firings stored against blocking spans
sent, the export calls' latency (p50, p99, max) and the receiver's CPU from ready to stop
(seconds, and share of one core) and peak memory (max RSS). Ratios: canary's export latency and CPU over noop's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GUARD = """
[guard]
name = "grounding"
span = { name = "^grounding-check$", attributes = { "openinference.span.kind" = "^GUARDRAIL$", "output.value" = "^BLOCKED" } }
"""
#: Spans per agent request: four, and a blocking guard span in one request of twenty.
PER_REQUEST = 4 + 1 / 20
PROMPT = ("You are a careful assistant. Read the permit page and tell me the minimum monthly amount, "
          "citing the page you read. Question {n}: what does the permit say about the amount?")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


READY: dict[str, float] = {}  # a target's usage when it started serving


def usage() -> dict[str, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": own.ru_utime + own.ru_stime, "max_rss_mib": own.ru_maxrss / 1024}


# -- the targets ---------------------------------------------------------------------------------


async def _noop(port: int, stop: asyncio.Event) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        READY.update(usage())
        print("ready", flush=True)
        await stop.wait()


def serve(target: str, port: int, root: Path) -> None:
    """A target in this process until stdin closes; then its figures as JSON on stdout."""
    extra: dict[str, Any] = {}
    if target == "noop":
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()
        loop.add_reader(sys.stdin.fileno(), lambda: sys.stdin.read() or stop.set())
        loop.run_until_complete(_noop(port, stop))
    else:
        from canary.config.settings import load_config
        from canary.proxy.serving import BackgroundServer
        from canary.store.engine import Store
        from canary.traces.service import receiver_app

        (root / "defs").mkdir(exist_ok=True)
        (root / "defs" / "grounding.toml").write_text(GUARD)
        (root / "canary.toml").write_text(f'defs = ["defs/*.toml"]\n[traces]\nlisten = "127.0.0.1:{port}"\n'
                                          f'[store]\nurl = "sqlite:///{root / "canary.db"}"\n')
        config = load_config(path=root / "canary.toml")
        store = Store(config.store.url)
        app = receiver_app(config, store)
        server = BackgroundServer(app, "127.0.0.1", port, name="trace receiver").start()
        READY.update(usage())
        print("ready", flush=True)
        sys.stdin.read()
        server.stop()
        app.close()
        extra = {"counted": app.counts.spans, "firings": store.count_firings(), "refused": app.counts.refused,
                 "last_error": app.counts.last_error}
        store.close()
    end = usage()
    # the CPU spent serving, from ready to stop: start-up (imports, the store's migration) left out
    print(json.dumps({**end, "cpu_s": end["cpu_s"] - READY.get("cpu_s", 0.0), **extra}), flush=True)


# -- an agent ------------------------------------------------------------------------------------


def agent(endpoint: str, rate: float, seconds: float) -> None:
    """Send ``rate`` spans a second for ``seconds`` through the real SDK; the figures as JSON."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

    latencies: list[float] = []
    exported = [0, 0]  # spans in successful exports, in failed ones

    class Timed(OTLPSpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            began = time.perf_counter()
            result = super().export(spans)
            latencies.append(time.perf_counter() - began)
            exported[0 if result == SpanExportResult.SUCCESS else 1] += len(spans)
            return result

    provider = TracerProvider(resource=Resource.create({"service.name": "bench-agent"}))
    provider.add_span_processor(BatchSpanProcessor(
        Timed(endpoint=f"{endpoint}/v1/traces"), max_queue_size=max(2048, int(rate * 4)),
        schedule_delay_millis=200, max_export_batch_size=512))
    tracer = provider.get_tracer("bench-agent")
    requests = int(rate * seconds / PER_REQUEST)
    blocked = n = 0
    began = time.perf_counter()
    while n < requests:
        due = int((time.perf_counter() - began) * rate / PER_REQUEST) + 1
        for _ in range(min(due, requests) - n):
            n += 1
            with tracer.start_as_current_span("agent.request", attributes={"request.id": f"r{n}"}):
                with tracer.start_as_current_span("ChatCompletion", attributes={
                        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                        "llm.token_count.prompt": 412, "llm.token_count.completion": 57,
                        "input.value": PROMPT.format(n=n)}):
                    pass
                with tracer.start_as_current_span("retrieve", attributes={
                        "openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.id": f"d{n % 97}"}):
                    pass
                with tracer.start_as_current_span("grounding-check", attributes={
                        "openinference.span.kind": "GUARDRAIL", "output.value": "PASSED: 3 of 3 sources fetched"}):
                    pass
                if n % 20 == 0:
                    blocked += 1
                    with tracer.start_as_current_span("grounding-check", attributes={
                            "openinference.span.kind": "GUARDRAIL", "output.value": "BLOCKED: unverified source"}):
                        pass
        time.sleep(0.002)
    sending = time.perf_counter() - began
    provider.force_flush(60_000)
    provider.shutdown()
    created = requests * 4 + blocked
    print(json.dumps({"created": created, "blocked": blocked, "sending_s": sending, "exported": exported[0],
                      "failed": exported[1], "latencies": latencies, **usage()}), flush=True)


# -- one target, one run -------------------------------------------------------------------------


def run(target: str, rate: float, seconds: float, agents: int, work: Path) -> dict[str, Any]:
    port = free_port()
    root = Path(tempfile.mkdtemp(dir=work))
    server = subprocess.Popen([sys.executable, __file__, "--serve", target, str(port), str(root)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdin is not None
    assert server.stdout.readline().strip() == "ready"
    began = time.perf_counter()
    children = [subprocess.Popen([sys.executable, __file__, "--agent", f"http://127.0.0.1:{port}",
                                  str(rate / agents), str(seconds)], stdout=subprocess.PIPE, text=True)
                for _ in range(agents)]
    results = [json.loads(c.communicate()[0]) for c in children]
    wall = time.perf_counter() - began
    server.stdin.close()
    figures = json.loads(server.stdout.readline())
    server.wait(30)
    latencies = sorted(x for r in results for x in r["latencies"])
    created = sum(r["created"] for r in results)
    taken = figures.get("counted", sum(r["exported"] for r in results))
    return {
        "target": target, "created": created, "taken": taken, "lost": created - taken,
        "failed_exports_spans": sum(r["failed"] for r in results),
        "blocked": sum(r["blocked"] for r in results), "firings": figures.get("firings"),
        "rate_achieved": created / max(r["sending_s"] for r in results), "wall_s": wall,
        "export_calls": len(latencies),
        "export_p50_ms": 1000 * statistics.median(latencies) if latencies else None,
        "export_p99_ms": 1000 * latencies[int(len(latencies) * 0.99) - 1] if latencies else None,
        "export_max_ms": 1000 * latencies[-1] if latencies else None,
        "receiver_cpu_s": figures["cpu_s"], "receiver_core_share": figures["cpu_s"] / wall,
        "receiver_max_rss_mib": figures["max_rss_mib"], "refused": figures.get("refused"),
        "agent_cpu_s": sum(r["cpu_s"] for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=10_000.0, help="spans per second, all agents together")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--agents", type=int, default=2, help="agent processes sharing the rate")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--agent", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]), Path(args.serve[2]))
        return
    if args.agent:
        agent(args.agent[0], float(args.agent[1]), float(args.agent[2]))
        return
    print(f"load average at start: {os.getloadavg()}")
    out = ROOT / "tests" / "bench" / "_out"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as work:
        rows = [run(target, args.rate, args.seconds, args.agents, Path(work)) for target in ("noop", "canary")]
    noop, canary = rows
    for row in rows:
        print(f"\n{row['target']}: {row['created']} spans sent at {row['rate_achieved']:.0f}/s, "
              f"{row['taken']} taken in, {row['lost']} lost, firings {row['firings']} of {row['blocked']} "
              f"blocking spans")
        print(f"  export calls {row['export_calls']}: p50 {row['export_p50_ms']:.2f} ms, "
              f"p99 {row['export_p99_ms']:.2f} ms, max {row['export_max_ms']:.1f} ms")
        print(f"  receiver CPU {row['receiver_cpu_s']:.1f} s over {row['wall_s']:.1f} s "
              f"({100 * row['receiver_core_share']:.0f}% of one core), max RSS {row['receiver_max_rss_mib']:.0f} MiB; "
              f"agents' CPU {row['agent_cpu_s']:.1f} s")
    print(f"\ncanary / noop: export p50 x{canary['export_p50_ms'] / noop['export_p50_ms']:.2f}, "
          f"p99 x{canary['export_p99_ms'] / noop['export_p99_ms']:.2f}; "
          f"receiver CPU x{canary['receiver_cpu_s'] / max(noop['receiver_cpu_s'], 1e-9):.1f}")
    print(f"load average at end: {os.getloadavg()}")
    if args.json:
        print(json.dumps(rows, indent=2))
    if canary["lost"] or canary["firings"] != canary["blocked"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
