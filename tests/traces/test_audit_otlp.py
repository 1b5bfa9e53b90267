"""``canary audit --otlp FILE``: OTLP JSON export files counted the way log files are."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.json.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from canary.cli.main import main
from tests.traces.conftest import EVALUATION, GUARDRAIL, write_project


def span_lines(blocked: int, passed: int) -> list[str]:
    """One export line per request, as the Collector's file exporter writes them."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("agent")
    lines = []
    for verdict in ["BLOCKED"] * blocked + ["PASSED"] * passed:
        with tracer.start_as_current_span("request"), tracer.start_as_current_span(
                "guard", attributes={"openinference.span.kind": "GUARDRAIL", "output.value": verdict}):
            pass
        lines.append(encode_spans(memory.get_finished_spans()).to_json())
        memory.clear()
    return lines


def evaluation_line() -> str:
    memory = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    logger = provider.get_logger("agent")
    for label in ("fail", "pass"):
        logger.emit(LogRecord(event_name="gen_ai.evaluation.result",
                              attributes={"gen_ai.evaluation.name": "Groundedness",
                                          "gen_ai.evaluation.score.label": label}))
    return encode_logs(list(memory.get_finished_logs())).to_json()  # type: ignore[arg-type]


def audit_json(root: Path, *args: str) -> tuple[int, dict[str, Any]]:
    config = write_project(root, {"grounding": GUARDRAIL, "evaluation": EVALUATION})
    result = CliRunner().invoke(main, ["audit", "--config", str(config), "--json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_spans_and_log_records_of_export_files_are_counted_once_each(tmp_path: Path) -> None:
    lines = span_lines(blocked=3, passed=2)
    plain = tmp_path / "traces.json"
    plain.write_text("\n".join([lines[0], '{"resourceMetrics": []}', "not json \x1b[2J", *lines[1:]]) + "\n")
    # the same first span again, in a rotated and compressed file: one firing, not two
    rotated = tmp_path / "traces-2026-12-01.json.gz"
    rotated.write_bytes(gzip.compress((lines[0] + "\n" + evaluation_line() + "\n").encode()))
    code, doc = audit_json(tmp_path, "--otlp", str(plain), "--otlp", str(rotated))
    guards = {g["guard"]: g for g in doc["guards"]}
    assert (guards["grounding"]["firings"], guards["grounding"]["organic"]) == (3, 3)
    assert guards["grounding"]["first"] is not None and guards["grounding"]["flag"] is None
    assert guards["evaluation"]["firings"] == 1
    files = {Path(f["path"]).name: f for f in doc["files"]}
    assert files["traces.json"]["lines"] == 7 and files["traces.json"]["error"] is None
    (warning,) = files["traces.json"]["warnings"]
    assert f"{plain}: line 3: not JSON (expecting value at column 1)" == warning
    assert code == 0


def test_a_guard_that_fires_only_through_spans_is_unread_without_an_export_file(tmp_path: Path) -> None:
    _, doc = audit_json(tmp_path)
    assert {g["guard"]: g["flag"] for g in doc["guards"]} == {"grounding": "unread", "evaluation": "unread"}


def test_an_export_file_with_no_span_or_record_leaves_a_span_guard_unread(tmp_path: Path) -> None:
    """An empty file, or one of metrics only, proves no silence: unread, never asleep."""
    empty, metrics = tmp_path / "empty.json", tmp_path / "metrics.json"
    empty.write_text("")
    metrics.write_text('{"resourceMetrics": []}\n')
    code, doc = audit_json(tmp_path, "--otlp", str(empty), "--otlp", str(metrics))
    assert {g["guard"]: g["flag"] for g in doc["guards"]} == {"grounding": "unread", "evaluation": "unread"}
    # spans that no guard matches were read: a silence over them is a finding for a span guard; an
    # event guard may fire on a log record, and none was read
    passed = tmp_path / "passed.json"
    passed.write_text(span_lines(blocked=0, passed=2)[0] + "\n")
    code, doc = audit_json(tmp_path, "--otlp", str(passed))
    assert {g["guard"]: g["flag"] for g in doc["guards"]} == {"grounding": "asleep", "evaluation": "unread"}
    assert code == 1
