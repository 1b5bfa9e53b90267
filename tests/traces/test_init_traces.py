"""``canary init --traces``: guards proposed from the guard-shaped spans the receiver got."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

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
from tests.traces.conftest import Served


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


def test_a_guard_is_proposed_per_guard_shaped_span_and_fires_on_them(served: Served, tmp_path: Path) -> None:
    send_guard_spans(served.endpoint)
    assert served.app.flush()
    traces_step(served.store, served.server)  # what the daemon stores each tick
    (tmp_path / "defs").rename(tmp_path / "canaries_defs")
    config = tmp_path / "canary.toml"
    config.write_text(config.read_text().replace('defs = ["defs/*.toml"]', 'defs = ["canaries_defs/*.toml"]'))
    result = CliRunner().invoke(main, ["init", "--traces", "--yes", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    proposed = {g.name for g in load_config(path=config).guards} - {"grounding", "evaluation"}
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
