"""``canary init --traces``: guards proposed from the guard-shaped spans the receiver got."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from canary.cli.main import main
from canary.config.settings import load_config
from canary.daemon.health import traces_step
from canary.proxy.serving import BackgroundServer
from canary.store.engine import Store
from canary.traces.service import receiver_app
from canary.traces.shapes import propose
from tests.traces.conftest import Served, write_project


def send_guard_spans(endpoint: str) -> None:
    """The conventions' guard spans and an evaluation event, each blocking once, through the real exporters."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    tracer = provider.get_tracer("agent")
    for verdict in ("PASSED", "BLOCKED: unverified source"):
        with tracer.start_as_current_span("request"):
            with tracer.start_as_current_span("source-check", attributes={
                    "openinference.span.kind": "GUARDRAIL", "output.value": verdict}):
                pass
            with tracer.start_as_current_span("apply_guardrail grounding", attributes={
                    "gen_ai.security.decision.type": "deny" if verdict != "PASSED" else "allow"}):
                pass
            with tracer.start_as_current_span("guardrails.rail", attributes={
                    "rail.type": "output", "rail.name": "self check facts", "rail.stop": verdict != "PASSED"}):
                pass
            with tracer.start_as_current_span("llm", attributes={"openinference.span.kind": "LLM"}):
                pass
    provider.shutdown()
    logs = LoggerProvider()
    logs.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{endpoint}/v1/logs")))
    logs.get_logger("agent").emit(LogRecord(event_name="gen_ai.evaluation.result", attributes={
        "gen_ai.evaluation.name": "Groundedness", "gen_ai.evaluation.score.label": "fail"}))
    logs.shutdown()


def received(served: Served, tmp_path: Path, *, keep: tuple[str, ...] = ()) -> Path:
    """The receiver got the conventions' guard spans; the project's ``defs`` reads canaries_defs/,
    which holds a log-line guard (citation) and the fixture's guards named in ``keep``. Its config's path."""
    send_guard_spans(served.endpoint)
    assert served.app.flush()
    traces_step(served.store, served.server)  # what the daemon stores each tick
    (tmp_path / "defs").rename(tmp_path / "canaries_defs")
    for path in (tmp_path / "canaries_defs").iterdir():
        if path.stem not in keep:
            path.unlink()
    (tmp_path / "canaries_defs" / "citation.toml").write_text(
        "[guard]\nname = 'citation'\nmatch = 'CitationGuard: rejected'\n")
    config = tmp_path / "canary.toml"
    config.write_text(config.read_text().replace('defs = ["defs/*.toml"]', 'defs = ["canaries_defs/*.toml"]'))
    return config


def test_a_guard_is_proposed_per_guard_shaped_span_and_fires_on_them(served: Served, tmp_path: Path) -> None:
    config = received(served, tmp_path)
    result = CliRunner().invoke(main, ["init", "--traces", "--yes", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "     1 event   event " in result.output, result.output
    assert not re.search(r"\b1 (spans|events)\b", result.output)
    proposed = {g.name for g in load_config(path=config).guards} - {"citation"}
    assert proposed == {"source-check", "apply-guardrail-grounding", "self-check-facts", "groundedness"}
    # each proposed guard fires on the blocking span (or event) it came from, never on the passing one
    new = load_config(path=config)
    store = Store(f"sqlite:///{tmp_path / 'again.db'}")
    app = receiver_app(new, store)
    with BackgroundServer(app, "127.0.0.1", 0, name="trace receiver") as server:
        send_guard_spans(server.url)
    app.close()
    with store.engine.connect() as conn:
        fired = Counter(g for (g,) in conn.exec_driver_sql("SELECT guard FROM firings"))
    store.close()
    assert {g: fired[g] for g in proposed} == dict.fromkeys(proposed, 1)


def test_with_no_guard_shaped_span_received_it_says_what_to_do(served: Served, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["init", "--traces", "--yes", "--dir", str(tmp_path)])
    assert result.exit_code == 1 and "no guard-shaped span yet" in result.output


def test_guards_written_where_defs_does_not_read_are_named_and_the_exit_says_so(
    served: Served, tmp_path: Path,
) -> None:
    """canary.toml reads defs/*.toml: the guards go to canaries_defs/, which nothing loads, and init says so."""
    send_guard_spans(served.endpoint)
    assert served.app.flush()
    traces_step(served.store, served.server)
    result = CliRunner().invoke(main, ["init", "--traces", "--yes", "--dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "defs" in result.output and "canaries_defs/*.toml" in result.output
    assert "does not read" in result.output


def test_templates_copied_where_defs_does_not_read_are_named(tmp_path: Path) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "citation.toml").write_text("[guard]\nname = 'citation'\nmatch = 'CitationGuard: rejected'\n")
    (tmp_path / "canary.toml").write_text(f'defs = ["defs/*.toml"]\n[logs]\npaths = ["{tmp_path}/a.log"]\n')
    result = CliRunner().invoke(main, ["init", "--template", "span_guardrail", "--dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "does not read" in result.output and "canaries_defs/*.toml" in result.output


def test_a_span_a_guard_already_matches_is_not_proposed_again(served: Served, tmp_path: Path) -> None:
    """The project's grounding guard fires on every GUARDRAIL span that blocks, its evaluation guard on
    every failing evaluation: source-check and groundedness are theirs already."""
    config = received(served, tmp_path, keep=("grounding", "evaluation"))
    result = CliRunner().invoke(main, ["init", "--traces", "--yes", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    guards = {g.name for g in load_config(path=config).guards}
    assert guards == {"citation", "grounding", "evaluation", "apply-guardrail-grounding", "self-check-facts"}
    assert "source-check" in result.output and "already matched by guard 'grounding'" in result.output
    assert "groundedness" in result.output and "already matched by guard 'evaluation'" in result.output
    assert not (tmp_path / "canaries_defs" / "source-check.toml").exists()


def test_with_every_span_matched_already_it_says_there_is_nothing_new(served: Served, tmp_path: Path) -> None:
    """The bundled span templates copied in first: they match every convention's blocking span."""
    received(served, tmp_path)
    runner = CliRunner()
    copied = runner.invoke(main, ["init", "--dir", str(tmp_path), "--template", "span_guardrail", "--template",
                                  "span_security_deny", "--template", "span_nemo_rail", "--template",
                                  "span_evaluation"])
    assert copied.exit_code == 0, copied.output
    before = sorted(p.name for p in (tmp_path / "canaries_defs").iterdir())
    result = runner.invoke(main, ["init", "--traces", "--yes", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Nothing new to propose" in result.output, result.output
    assert "written" not in result.output
    assert sorted(p.name for p in (tmp_path / "canaries_defs").iterdir()) == before


def test_a_proposed_guard_renamed_is_not_proposed_again_and_a_taken_name_is_not_reused(
    served: Served, tmp_path: Path,
) -> None:
    config = received(served, tmp_path)
    runner = CliRunner()
    assert runner.invoke(main, ["init", "--traces", "--yes", "--dir", str(tmp_path)]).exit_code == 0
    folder = tmp_path / "canaries_defs"
    text = (folder / "source-check.toml").read_text()
    (folder / "my-check.toml").write_text(text.replace('name = "source-check"', 'name = "my-check"'))
    (folder / "source-check.toml").unlink()
    # a log-line guard took the name groundedness, and the evaluation guard is gone
    (folder / "groundedness.toml").unlink()
    (folder / "grounded-log.toml").write_text("[guard]\nname = 'groundedness'\nmatch = 'Grounded: rejected'\n")
    result = runner.invoke(main, ["init", "--traces", "--yes", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "already matched by guard 'my-check'" in result.output
    guards = {g.name for g in load_config(path=config).guards}
    assert guards == {"citation", "my-check", "apply-guardrail-grounding", "self-check-facts", "groundedness",
                      "groundedness-2"}
    assert not (folder / "source-check.toml").exists()


SHAPE = {"convention": "openinference", "kind": "span", "name": "source-check", "count": 3,
         "values": {"output.value": ["PASSED", "BLOCKED: no source", "FLAGGED: stale source"]}}


@pytest.mark.parametrize(("span", "covered", "weak_covered"), [
    # any GUARDRAIL span that blocks or flags: every rejecting one seen
    ("{ attributes = { 'openinference.span.kind' = 'GUARDRAIL', 'output.value' = 'BLOCKED|FLAGGED' } }", True, True),
    # its name, exactly
    ("{ name = '^source-check$', attributes = { 'output.value' = '(?i)blocked|flagged' } }", True, True),
    # another span's name
    ("{ name = '^citation-check$', attributes = { 'output.value' = 'BLOCKED|FLAGGED' } }", False, False),
    # only one of the two rejecting verdicts seen: the flagged spans are no firing of it
    ("{ attributes = { 'openinference.span.kind' = 'GUARDRAIL', 'output.value' = 'BLOCKED' } }", False, True),
    # an attribute the span was never seen with: it cannot tell
    ("{ attributes = { 'openinference.span.kind' = 'GUARDRAIL', 'session.id' = '.' } }", False, False),
])
def test_a_shape_is_covered_only_by_a_guard_that_fires_on_every_rejecting_span_seen(
    tmp_path: Path, span: str, covered: bool, weak_covered: bool,
) -> None:
    config = write_project(tmp_path, {"mine": f"[guard]\nname = 'mine'\nspan = {span}\n"})
    (proposal,) = propose([SHAPE], load_config(path=config).guards)
    assert (proposal.covered_by == "mine") is covered
    (weak,) = propose([{**SHAPE, "values": {"output.value": ["PASSED"]}}], load_config(path=config).guards)
    assert not weak.strong  # no rejecting verdict seen: the convention's own ("BLOCKED") stands for one
    assert (weak.covered_by == "mine") is weak_covered
