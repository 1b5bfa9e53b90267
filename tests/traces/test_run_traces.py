"""A span in a trace of a run's model calls is the run's, also once the run has left the flight:
stored with it by the receiver when it arrives after the verdict, and counted as canary by
``canary audit --otlp``.

The run is a real stored run (``RunLog``), its trace ids kept as the runner keeps them; the span
reaches the real receiver over loopback as OTLP JSON, and the audit reads a real export file.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner

from canary.cli.main import main
from canary.runs.record import RunRecord
from canary.runs.runlog import RunLog
from canary.store.engine import Store
from canary.vocabulary import Verdict
from tests.traces.conftest import Served

RUN_TRACE = "5b8efff798038103d269b633813fc60c"
OTHER_TRACE = "0af7651916cd43dd8448eb211c80319c"


def guard_span(trace: str, span: str) -> dict[str, Any]:
    attrs = [{"key": "openinference.span.kind", "value": {"stringValue": "GUARDRAIL"}},
             {"key": "output.value", "value": {"stringValue": "BLOCKED"}}]
    return {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": trace, "spanId": span, "name": "guard", "attributes": attrs}]}]}]}


def finished_run(store: Store, trace_ids: list[str]) -> int:
    """A caught run of the grounding guard whose model calls carried ``trace_ids``."""
    log = RunLog(store)
    started = datetime.now(UTC)
    run_id = log.start(guard="grounding", canary="fake-source", variant=0, expect="reject",
                       nonce="n" * 36, started=started, injected_text="x", leak_text="y")
    log.traced(run_id, trace_ids)
    log.finish(run_id, RunRecord(guard="grounding", canary="fake-source", variant=0, expect="reject",
                                 verdict=Verdict.CAUGHT, nonce="n" * 36, started=started, duration_s=1.0,
                                 trace={}, leaked=False, firings=1, attribution="trace", foreign_calls=0,
                                 evidence="span 'guard'", answer="", error=None), finished=datetime.now(UTC))
    return run_id


def test_a_span_of_a_runs_trace_after_its_verdict_is_stored_with_the_run(served: Served) -> None:
    run_id = finished_run(served.store, [RUN_TRACE])
    for trace, span in ((RUN_TRACE, "eee19b7ec3c1b174"), (OTHER_TRACE, "b7ad6b7169203331")):
        reply = httpx.post(f"{served.endpoint}/v1/traces", content=json.dumps(guard_span(trace, span)).encode(),
                           headers={"content-type": "application/json"}, timeout=10)
        assert reply.status_code == 200
    assert served.app.flush()
    with served.store.engine.connect() as conn:
        rows = dict(conn.exec_driver_sql("SELECT file_key, run_id FROM firings").all())
        counts = dict(conn.exec_driver_sql("SELECT source, sum(count) FROM hourly_counts GROUP BY source").all())
    assert rows == {f"{RUN_TRACE}:eee19b7ec3c1b174": run_id, f"{OTHER_TRACE}:b7ad6b7169203331": None}
    assert counts == {"canary": 1, "organic": 1}


def test_audit_counts_a_span_of_a_stored_runs_trace_as_canary(tmp_path: Path, served: Served) -> None:
    finished_run(served.store, [RUN_TRACE])
    export = tmp_path / "traces.json"
    export.write_text("".join(json.dumps(guard_span(trace, span)) + "\n" for trace, span in (
        (RUN_TRACE, "eee19b7ec3c1b174"), (OTHER_TRACE, "b7ad6b7169203331"), (OTHER_TRACE, "00f067aa0ba902b7"))))
    assert served.config.path is not None
    result = CliRunner().invoke(main, ["audit", "--config", str(served.config.path), "--json", "--otlp", str(export)])
    doc = json.loads(result.stdout)
    grounding = next(g for g in doc["guards"] if g["guard"] == "grounding")
    assert (grounding["firings"], grounding["canary"], grounding["organic"]) == (3, 1, 2)
