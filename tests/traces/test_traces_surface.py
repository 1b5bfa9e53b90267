"""What users see of the receiver: canary check, status's daemon.traces, inert evidence."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import httpx
from click.testing import CliRunner

from canary.cli.main import main
from canary.daemon.health import traces_step
from canary.daemon.steps import beat
from canary.status.overview import status_document
from canary.terminal import safe
from tests.traces.conftest import GUARDRAIL, Served, write_project


def test_check_says_how_to_point_an_agent_at_the_receiver(tmp_path: Path) -> None:
    config = write_project(tmp_path, {"grounding": GUARDRAIL}, traces="127.0.0.1:4399")
    result = CliRunner().invoke(main, ["check", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4399" in result.output
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf" in result.output
    assert "span {'attributes'" in result.output


def test_status_shows_the_running_daemons_receiver(served: Served) -> None:
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "check",
        "attributes": [{"key": "openinference.span.kind", "value": {"stringValue": "GUARDRAIL"}},
                       {"key": "output.value", "value": {"stringValue": "BLOCKED"}}]}]}]}]}
    assert httpx.post(f"{served.endpoint}/v1/traces", json=body).status_code == 200
    assert httpx.post(f"{served.endpoint}/v1/traces", content=b"junk",
                      headers={"content-type": "application/json"}).status_code == 400
    assert served.app.flush()
    now = datetime.now(UTC)
    beat(served.store, pid=1, started=now, now=now, files=0, addresses={})
    traces_step(served.store, served.server)
    doc = status_document(served.store, served.config, now=now)
    traces = doc["daemon"]["traces"]
    assert traces["listen"] == served.endpoint.removeprefix("http://")
    assert (traces["spans"], traces["firings"], traces["refused"]) == (1, 1, 1)
    assert traces["last_error"] == "400: not JSON (expecting value at line 1, column 1)"
    seen = datetime.fromisoformat(traces["span_seen_at"].replace("Z", "+00:00"))  # a time like every other
    assert abs((seen - now).total_seconds()) < 60 and traces["record_seen_at"] is None
    (guard,) = [g for g in doc["guards"] if g["guard"] == "grounding"]
    assert guard["organic_firings"] == 1


def test_attribute_text_in_a_firings_evidence_stays_inert(served: Served) -> None:
    hostile = "BLOCKED \x1b]52;c;aGVsbG8=\x07 \x1b[2J \u202e \x9b"
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "check \x1b[31m",
        "attributes": [{"key": "openinference.span.kind", "value": {"stringValue": "GUARDRAIL"}},
                       {"key": "output.value", "value": {"stringValue": hostile}}]}]}]}]}
    assert httpx.post(f"{served.endpoint}/v1/traces", content=json.dumps(body).encode(),
                      headers={"content-type": "application/json"}).status_code == 200
    assert served.app.flush()
    with served.store.engine.connect() as conn:
        (line,) = conn.exec_driver_sql("SELECT line FROM firings").one()
    # the stored evidence quotes every value, so no control character is in it, raw or made safe
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c == "\u202e" for c in line)
    assert safe(line) == line and "\\x1b]52" in line


def test_a_trace_only_agents_guard_is_inconclusive_until_spans_come_then_alive(served: Served) -> None:
    """No [logs]: a span guard's evidence is what the receiver takes in, not log files that do not exist."""
    now = datetime.now(UTC)
    beat(served.store, pid=1, started=now, now=now, files=0, addresses={})
    traces_step(served.store, served.server)
    doc = status_document(served.store, served.config, now=now)
    grounding = next(g for g in doc["guards"] if g["guard"] == "grounding")
    assert grounding["status"] == "inconclusive"
    assert "no span" in grounding["reason"] and "logs" not in grounding["reason"]
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "check",
        "attributes": [{"key": "openinference.span.kind", "value": {"stringValue": "GUARDRAIL"}},
                       {"key": "output.value", "value": {"stringValue": "BLOCKED"}}]}]}]}]}
    assert httpx.post(f"{served.endpoint}/v1/traces", json=body).status_code == 200
    assert served.app.flush()
    traces_step(served.store, served.server)
    doc = status_document(served.store, served.config, now=datetime.now(UTC))
    statuses = {g["guard"]: (g["status"], g["reason"]) for g in doc["guards"]}
    assert statuses["grounding"][0] == "alive"
    # spans came, none an evaluation, and no log record: an evaluation may come in log records only
    assert statuses["evaluation"][0] == "inconclusive"
    assert statuses["evaluation"][1].startswith("no log record has reached the trace receiver")


def _guardrail(span_id: str, end_nanos: int | str) -> dict[str, object]:
    return {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": span_id, "name": "check",
            "startTimeUnixNano": "0", "endTimeUnixNano": str(end_nanos),
            "attributes": [{"key": "openinference.span.kind", "value": {"stringValue": "GUARDRAIL"}},
                           {"key": "output.value", "value": {"stringValue": "BLOCKED"}}]}


def test_a_span_stamped_out_of_range_or_far_ahead_is_counted_when_received(served: Served) -> None:
    """A time no clock gives (past year 9999, before 1970) or beyond [logs] clock_skew ahead is
    the time the span came, as a log line's; the other spans of its request are stored too."""
    now = datetime.now(UTC)
    spans = [_guardrail("00000000000000a1", int(now.timestamp() * 1e9)),  # a good one
             _guardrail("00000000000000a2", 10**30), _guardrail("00000000000000a3", -5),
             _guardrail("00000000000000a4", int((now.timestamp() + 365 * 86400) * 1e9))]
    body = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    assert httpx.post(f"{served.endpoint}/v1/traces", json=body).status_code == 200
    assert served.app.flush()
    with served.store.engine.connect() as conn:
        stamps = sorted(str(ts) for (ts,) in conn.exec_driver_sql("SELECT ts FROM firings"))
    assert len(stamps) == 4
    latest = datetime.fromisoformat(stamps[-1]).replace(tzinfo=UTC)
    earliest = datetime.fromisoformat(stamps[0]).replace(tzinfo=UTC)
    assert abs((latest - now).total_seconds()) < 60 and abs((earliest - now).total_seconds()) < 60


def _evaluation(body: str, *, at: int | None, observed: int | None) -> dict[str, object]:
    record: dict[str, object] = {
        "eventName": "gen_ai.evaluation.result", "body": {"stringValue": body},
        "attributes": [{"key": "gen_ai.evaluation.score.label", "value": {"stringValue": "fail"}}]}
    if at is not None:
        record["timeUnixNano"] = str(at)
    if observed is not None:
        record["observedTimeUnixNano"] = str(observed)
    return record


def test_log_records_without_trace_context_are_told_apart_by_body_and_observed_time(served: Served) -> None:
    """A Collector's filelog receiver sends records with no trace id: two rejections in one second
    are two firings; the same record sent again (a retried export) is one."""
    second = int(datetime.now(UTC).timestamp()) * 10**9
    records = [_evaluation("claim 1 not grounded", at=second, observed=second + 1),
               _evaluation("claim 2 not grounded", at=second, observed=second + 2),
               _evaluation("claim 3 not grounded", at=None, observed=second + 3)]
    body = {"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]}
    for _ in range(2):  # sent twice, as an exporter retries
        assert httpx.post(f"{served.endpoint}/v1/logs", json=body).status_code == 200
        assert served.app.flush()
    with served.store.engine.connect() as conn:
        (count,) = conn.exec_driver_sql("SELECT COUNT(*) FROM firings WHERE guard = 'evaluation'").one()
    assert count == 3
