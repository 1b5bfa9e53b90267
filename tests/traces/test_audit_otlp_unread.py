"""A guard none of whose ways to fire was read is ``unread`` (inconclusive), never ``asleep``: a
log-line guard audited with export files only, a span guard audited with logs (or log records) only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

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
    assert found["both"] == ("asleep", None)  # one of its ways (spans) was read
    assert code == 1
    code, stdout, _ = run_audit(tmp_path, "--otlp", str(traces))
    row = next(line for line in stdout.splitlines() if line.startswith("citation"))
    assert "ASLEEP" not in row and "unread: no log line was read" in row, stdout
    assert "citation" not in next(line for line in stdout.splitlines() if line.startswith("ASLEEP:"))
    assert "Inconclusive: citation: nothing it fires through was read" in stdout, stdout


def test_a_span_guard_audited_with_a_logs_export_only_is_unread(tmp_path: Path) -> None:
    logs = tmp_path / "logs.json"
    logs.write_text(evaluation_line() + "\n")  # log records read, no span
    code, stdout, _ = run_audit(tmp_path, "--otlp", str(logs), "--json",
                                logs=["2026-12-01T10:00:00Z INFO task finished"])
    found = flags(stdout)
    assert found["grounding"] == ("unread", "no span was read: give --otlp FILE with the agent's traces")
    assert found["evaluation"] == (None, None)  # the failing evaluation record fired it
    assert found["citation"] == ("asleep", None)  # a log line was read
    assert found["both"] == ("asleep", None)
    assert code == 1


def test_a_guard_of_every_way_unread_names_each_and_an_audit_of_nothing_but_unread_guards_is_inconclusive(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("")
    code, stdout, _ = run_audit(tmp_path, "--otlp", str(empty), "--json")
    found = flags(stdout)
    assert found["both"] == ("unread", "no log line or span was read: give [logs] paths that match the agent's "
                                       "logs, or --otlp FILE with the agent's traces")
    assert found["evaluation"] == ("unread", "no span event or log record was read: give --otlp FILE with the "
                                             "agent's traces or logs")
    assert {flag for flag, _ in found.values()} == {"unread"}
    assert code == 1  # inconclusive, never "every guard fired"
