"""A guard one of whose ways to fire was not read is ``unread`` (inconclusive), never ``asleep``: a
log-line guard audited with export files only, a span guard audited with logs (or log records) only,
a guard of log lines and spans with its logs alone read, an event guard with spans but no log record."""

from __future__ import annotations

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
from tests.traces.test_audit_otlp import evaluation_line, span_lines

CITATION = "[guard]\nname = 'citation'\nmatch = 'CitationGuard: rejected'\n"
BOTH = ("[guard]\nname = 'both'\nmatch = 'GroundingGuard: rejected'\n"
        "span = { attributes = { \"openinference.span.kind\" = \"GUARDRAIL\", \"output.value\" = \"BLOCKED\" } }\n")
GUARDS = {"citation": CITATION, "grounding": GUARDRAIL, "evaluation": EVALUATION, "both": BOTH}


def run_audit(root: Path, *args: str, logs: list[str] | None = None) -> tuple[int, str, str]:
    extra = ""
    if logs is not None:
        (root / "agent.log").write_text("".join(f"{line}\n" for line in logs))
        extra = f"[logs]\npaths = ['{root / 'agent.log'}']\n"
    config = write_project(root, GUARDS, extra=extra)
    result = CliRunner().invoke(main, ["audit", "--config", str(config), *args])
    return result.exit_code, result.stdout, result.stderr


def flags(stdout: str) -> dict[str, tuple[str | None, str | None]]:
    doc: dict[str, Any] = json.loads(stdout)
    return {g["guard"]: (g["flag"], g.get("unread")) for g in doc["guards"]}


def test_a_log_line_guard_audited_with_a_traces_export_only_is_unread(tmp_path: Path) -> None:
    traces = tmp_path / "traces.json"
    traces.write_text("\n".join(span_lines(blocked=0, passed=2)) + "\n")  # spans read; none fires
    code, stdout, _ = run_audit(tmp_path, "--otlp", str(traces), "--json")
    found = flags(stdout)
    assert found["citation"] == ("unread", "no log line was read: give [logs] paths that match the agent's logs")
    assert found["grounding"] == ("asleep", None)  # spans were read: its silence is a finding
    assert found["both"] == ("unread", "no log line was read: give [logs] paths that match the agent's logs")
    assert found["evaluation"] == ("unread", "no log record was read: give --otlp FILE with the agent's logs")
    assert code == 1
    code, stdout, _ = run_audit(tmp_path, "--otlp", str(traces))
    row = next(line for line in stdout.splitlines() if line.startswith("citation"))
    assert "ASLEEP" not in row and "unread: no log line was read" in row, stdout
    assert "citation" not in next(line for line in stdout.splitlines() if line.startswith("ASLEEP:"))
    assert "Inconclusive: both, citation, evaluation: not all they fire through was read" in stdout, stdout


def test_a_span_guard_audited_with_a_logs_export_only_is_unread(tmp_path: Path) -> None:
    logs = tmp_path / "logs.json"
    logs.write_text(evaluation_line() + "\n")  # log records read, no span
    code, stdout, _ = run_audit(tmp_path, "--otlp", str(logs), "--json",
                                logs=["2026-12-01T10:00:00Z INFO task finished"])
    found = flags(stdout)
    assert found["grounding"] == ("unread", "no span was read: give --otlp FILE with the agent's traces")
    assert found["evaluation"] == (None, None)  # the failing evaluation record fired it
    assert found["citation"] == ("asleep", None)  # a log line was read
    assert found["both"] == ("unread", "no span was read: give --otlp FILE with the agent's traces")
    assert code == 1


def test_a_guard_of_every_way_unread_names_each_and_an_audit_of_nothing_but_unread_guards_is_inconclusive(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("")
    code, stdout, _ = run_audit(tmp_path, "--otlp", str(empty), "--json")
    found = flags(stdout)
    assert found["both"] == ("unread", "no log line or span was read: give [logs] paths that match the agent's "
                                       "logs, and --otlp FILE with the agent's traces")
    assert found["evaluation"] == ("unread", "no span event or log record was read: give --otlp FILE with the "
                                             "agent's traces and logs")
    assert {flag for flag, _ in found.values()} == {"unread"}
    assert code == 1  # inconclusive, never "every guard fired"


def spans_with_event(label: str) -> str:
    """One export line of a request whose guard span carries an evaluation event labelled ``label``."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("agent").start_as_current_span("judge") as span:
        span.add_event("gen_ai.evaluation.result", {"gen_ai.evaluation.score.label": label})
    return encode_spans(memory.get_finished_spans()).to_json()


def records(label: str) -> str:
    """One export line of log records: an evaluation labelled ``label``."""
    memory = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    provider.get_logger("agent").emit(LogRecord(event_name="gen_ai.evaluation.result",
                                                attributes={"gen_ai.evaluation.score.label": label}))
    return encode_logs(list(memory.get_finished_logs())).to_json()  # type: ignore[arg-type]


def export(root: Path, name: str, *lines: str) -> str:
    path = root / name
    path.write_text("".join(f"{line}\n" for line in lines))
    return str(path)


def test_a_log_line_and_span_guard_whose_logs_alone_were_read_is_unread_never_asleep(tmp_path: Path) -> None:
    activity = ["2026-12-01T10:00:00Z INFO task finished"]
    code, stdout, _ = run_audit(tmp_path, "--json", logs=activity)  # its logs read, no firing; no --otlp
    found = flags(stdout)
    assert found["both"] == ("unread", "no span was read: give --otlp FILE with the agent's traces")
    assert found["citation"] == ("asleep", None)  # everything it fires through was read
    assert code == 1
    code, stdout, _ = run_audit(tmp_path, logs=activity)
    row = next(line for line in stdout.splitlines() if line.startswith("both"))
    assert "ASLEEP" not in row and "unread: no span was read: give --otlp FILE" in row, stdout
    assert "both" not in next(line for line in stdout.splitlines() if line.startswith("ASLEEP:"))
    inconclusive = next(line for line in stdout.splitlines() if line.startswith("Inconclusive:"))
    assert "both" in inconclusive and "not all they fire through was read" in inconclusive, stdout
    # the same logs and spans that show no firing: every way was read, so its silence is a finding
    passed = export(tmp_path, "passed.json", *span_lines(blocked=0, passed=2))
    code, stdout, _ = run_audit(tmp_path, "--otlp", passed, "--json", logs=activity)
    assert flags(stdout)["both"] == ("asleep", None)
    # a firing in its spans alone, or in its logs alone, is a firing
    blocked = export(tmp_path, "blocked.json", *span_lines(blocked=1, passed=1))
    _, stdout, _ = run_audit(tmp_path, "--otlp", blocked, "--json", logs=activity)
    assert flags(stdout)["both"] == (None, None)
    _, stdout, _ = run_audit(tmp_path, "--json", logs=[*activity, "2026-12-01T10:01:00Z GroundingGuard: rejected"])
    assert flags(stdout)["both"] == (None, None)


def test_an_event_guard_is_unread_when_spans_or_log_records_were_not_read(tmp_path: Path) -> None:
    passing = export(tmp_path, "traces.json", spans_with_event("pass"))  # a span event read; none fires
    code, stdout, _ = run_audit(tmp_path, "--otlp", passing, "--json")
    assert flags(stdout)["evaluation"] == ("unread", "no log record was read: give --otlp FILE with the agent's logs")
    assert code == 1
    logs = export(tmp_path, "logs.json", records("pass"))  # log records read, none fires; no span
    _, stdout, _ = run_audit(tmp_path, "--otlp", logs, "--json")
    assert flags(stdout)["evaluation"] == ("unread", "no span event was read: give --otlp FILE with the agent's "
                                                     "traces")
    _, stdout, _ = run_audit(tmp_path, "--otlp", passing, logs, "--json")
    assert flags(stdout)["evaluation"] == ("asleep", None)  # both read, neither fired
    # a firing span event with no log record read is a firing
    failing = export(tmp_path, "failing.json", spans_with_event("fail"))
    _, stdout, _ = run_audit(tmp_path, "--otlp", failing, "--json")
    assert flags(stdout)["evaluation"] == (None, None)
    _, stdout, _ = run_audit(tmp_path, "--otlp", export(tmp_path, "failed.json", records("fail")), "--json")
    assert flags(stdout)["evaluation"] == (None, None)
