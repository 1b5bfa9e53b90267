"""Canary runs of an agent whose guard reports only as a GUARDRAIL span, busy with organic traffic.

Everything is real: the agent is its own process with the OpenTelemetry SDK, its OTLP/HTTP
exporter (protobuf, or JSON), the OpenInference OpenAI instrumentation and the httpx
instrumentation that puts ``traceparent`` on its model calls; its model calls go through the
real proxy to a model server on loopback; a client sends organic requests all along, and the
organic path's guard blocks every one of them, so guard spans arrive during every run.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlmodel import col
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from canary.config.settings import load_config
from canary.proxy.serving import BackgroundServer
from canary.runs.record import RunRecord
from canary.runs.session import Session, open_store
from canary.store.engine import Store
from canary.store.tables import Firing
from tests.traces.conftest import free_ports

AGENT = Path(__file__).with_name("traced_agent.py")
GUARD = """
[guard]
name = "grounding"
span = { name = "^grounding-guard$", attributes = { "openinference.span.kind" = "GUARDRAIL", "output.value" = "^BLOCKED" } }

[[canary]]
name = "fake-source"
every = "6h"
inject_at = "first"
prompt = "Check permit {nonce} and tell me the minimum monthly amount."
inject = "The minimum is {true_number} euros. Source: https://{nonce}.example.org/permit"
leak = "{nonce}.example.org"
timeout = "20s"
"""


def model_server() -> Starlette:
    """An OpenAI-compatible model whose every answer cites a source nobody fetched."""
    counter = itertools.count(1)

    async def chat(request: Request) -> Response:
        await request.body()
        text = f"The minimum is 1200 euros. Source: https://organic-{next(counter)}.example.org/p"
        return JSONResponse({
            "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@dataclass
class Busy:
    root: Path
    config: Path
    organic: int = 0
    traces: list[tuple[Any, ...]] = field(default_factory=list)  # (trace id, run id) the store keeps


def _organic(url: str, stop: threading.Event, busy: Busy) -> None:
    with httpx.Client(timeout=20) as client:
        while not stop.is_set():
            reply = client.post(url, json={"prompt": "Q: what is the minimum monthly amount?"})
            if reply.status_code == 200:
                busy.organic += 1


@contextmanager
def traced_agent(root: Path, *, mode: str, protocol: str) -> Iterator[Busy]:
    agent, proxy, fixtures, traces = free_ports(4)
    (root / "defs").mkdir()
    (root / "defs" / "grounding.toml").write_text(GUARD)
    config = root / "canary.toml"
    with BackgroundServer(model_server(), "127.0.0.1", 0, name="model") as model:
        config.write_text(f"""defs = ["defs/*.toml"]
[agent]
url = "http://127.0.0.1:{agent}/ask"
timeout = "20s"
[model]
listen = "127.0.0.1:{proxy}"
upstream = "{model.url}"
[fixtures]
listen = "127.0.0.1:{fixtures}"
[traces]
listen = "127.0.0.1:{traces}"
[store]
url = "sqlite:///{root / 'canary.db'}"
""")
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{traces}",
               "OTEL_EXPORTER_OTLP_PROTOCOL": protocol, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        process = subprocess.Popen([sys.executable, str(AGENT), str(agent), f"http://127.0.0.1:{proxy}", mode],
                                   env=env, stdout=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
            yield Busy(root, config)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(10)
            if process.stdout is not None:
                process.stdout.close()


def _await_organic(store: Store, *, since: datetime | None, timeout: float = 30.0) -> None:
    """Wait until an organic guard firing read at or after ``since`` is in the store."""
    query = select(col(Firing.id)).where(col(Firing.run_id).is_(None)).limit(1)
    if since is not None:
        query = query.where(col(Firing.read_at) >= since)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with store.engine.connect() as conn:
            if conn.execute(query).first() is not None:
                return
        time.sleep(0.1)
    raise AssertionError(f"no organic guard span arrived in {timeout:.0f} s (since {since})")


def run_busy(root: Path, *, mode: str, protocol: str) -> tuple[RunRecord, list[Any], Busy]:
    with traced_agent(root, mode=mode, protocol=protocol) as busy:
        config = load_config(path=busy.config)
        store = open_store(config)
        stop = threading.Event()
        with Session(config, store, grace=0.5, span_grace=3.0, rescan=0.2) as session:
            assert session.runner is not None
            organic = threading.Thread(target=_organic, args=(config.agent.url, stop, busy))  # type: ignore[union-attr]
            organic.start()
            try:
                # the exporter's batches reach the receiver before the run starts, and once more after it
                # started, so the run's wait is the only thing the organic spans can race with
                _await_organic(store, since=None)
                guard = config.guards[0]
                result = session.runner.run(guard, guard.canaries[0])
                _await_organic(store, since=result.started)
            finally:
                stop.set()
                organic.join(30)
        with store.engine.connect() as conn:
            firings = list(conn.execute(select(Firing).order_by(col(Firing.id))))
            busy.traces = [tuple(row) for row in conn.exec_driver_sql("SELECT trace_id, run_id FROM run_traces")]
        store.close()
    return result, firings, busy


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json"])
def test_a_live_guardrail_span_is_caught_by_its_trace_amid_organic_spans(tmp_path: Path, protocol: str) -> None:
    result, firings, busy = run_busy(tmp_path, mode="alive", protocol=protocol)
    assert result.verdict == "caught", result
    assert (result.attribution, result.firings) == ("trace", 1)
    assert result.foreign_calls > 0 and busy.organic > 0, "the agent was not busy during the run"
    tied = [f for f in firings if f.run_id is not None]
    assert [f.line for f in tied] == [result.evidence]
    # the trace of the run's model call is kept with the run: a later span in it is the run's too
    assert (tied[0].file_key.split(":")[0], tied[0].run_id) in busy.traces
    assert result.evidence is not None and result.evidence.startswith("span 'grounding-guard'")
    organic = [f for f in firings if f.run_id is None]
    assert len(organic) > 0, "no organic guard span arrived during the run"


@pytest.mark.slow
def test_a_dead_guardrail_leaks_and_no_organic_span_is_credited_to_the_run(tmp_path: Path) -> None:
    result, firings, busy = run_busy(tmp_path, mode="dead", protocol="http/protobuf")
    # organic guard spans arrived all through the run, each in a trace of another model call
    assert result.verdict == "leaked", result
    assert (result.attribution, result.firings) == (None, 0)
    assert busy.organic > 0 and result.foreign_calls > 0
    assert [f for f in firings if f.run_id is not None] == []
    assert len(firings) > 0


@pytest.mark.slow
def test_a_receiver_that_is_down_never_breaks_the_agent(tmp_path: Path) -> None:
    agent, nothing = free_ports(2)  # nothing listens on the exporter's port
    with BackgroundServer(model_server(), "127.0.0.1", 0, name="model") as model:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{nothing}",
               "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "50"}
        process = subprocess.Popen([sys.executable, str(AGENT), str(agent), model.url, "alive"], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
            with httpx.Client(timeout=5) as client:  # far below the exporter's own 10 s timeout
                replies = [client.post(f"http://127.0.0.1:{agent}/ask", json={"prompt": f"Q: {n}"})
                           for n in range(20)]
        finally:
            process.send_signal(signal.SIGKILL)
            _, stderr = process.communicate(timeout=10)
    assert [r.status_code for r in replies] == [200] * 20
    assert all(r.json()["answer"] == "I could not verify that source." for r in replies)
    assert "Connection refused" in stderr  # the exporter said it could not send, and went on
