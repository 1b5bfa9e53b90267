"""The daemon's status of a guard that also fires through spans or OTLP log records: a day of the
agent's log lines with no firing proves it ``asleep`` only once the trace receiver has taken in what
it fires through (a span for ``span``, a span and a log record for ``event``); until then it is
``inconclusive``, naming what has not reached the receiver and what would make it conclusive."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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
from canary.daemon.steps import beat, decide_statuses
from canary.store.engine import Store
from collectors.positions import Batch, FileState
from tests.traces.conftest import EVALUATION, Served, serving, write_project

CITATION = "[guard]\nname = 'citation'\nmatch = 'CitationGuard: rejected'\n"
BOTH = ("[guard]\nname = 'both'\nmatch = 'GroundingGuard: rejected'\n"
        "span = { attributes = { \"openinference.span.kind\" = \"GUARDRAIL\", \"output.value\" = \"BLOCKED\" } }\n")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A project whose agent logs lines and exports OTLP: a log-line guard, a guard of log lines and
    spans, an event guard; its receiver on a free loopback port."""
    log = tmp_path / "agent.log"
    log.write_text("2026-12-07T10:00:00Z answered task=1\n")
    path = write_project(tmp_path, {"citation": CITATION, "both": BOTH, "evaluation": EVALUATION},
                         extra=f"[logs]\npaths = ['{log}']\n")
    with serving(load_config(path=path)) as s:
        yield s


def read_logs(store: Store, at: datetime, key: str) -> None:
    """The collectors read 40 log lines of the agent at ``at``, none a guard's firing."""
    clock = store.clock
    store.clock = lambda: at
    try:
        store.commit(Batch(FileState(key, 1, 2, "/logs/agent.log", 600, 10, b"h" * 16, 600), [], 40, 600))
    finally:
        store.clock = clock


def a_day_of_logs(served: Served, now: datetime) -> None:
    """Log lines followed since two days ago, and read within the last 24 h: a whole window of activity."""
    read_logs(served.store, now - timedelta(days=2), "1:2")
    read_logs(served.store, now - timedelta(hours=1), "1:3")
    beat(served.store, pid=1, started=now - timedelta(days=2), now=now, files=1, addresses={})


def send_spans(endpoint: str, *, guard: str | None = None) -> None:
    """A request's spans through the real SDK exporter: a model call and, with ``guard``, a guard span."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("request"):
        with tracer.start_as_current_span("llm", attributes={"openinference.span.kind": "LLM"}):
            pass
        if guard is not None:
            with tracer.start_as_current_span("check", attributes={
                    "openinference.span.kind": "GUARDRAIL", "output.value": guard}):
                pass
    provider.shutdown()


def send_evaluation(endpoint: str, label: str) -> None:
    """An evaluation's log record through the real SDK exporter (``fail`` fires the event guard)."""
    logs = LoggerProvider()
    logs.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{endpoint}/v1/logs")))
    logs.get_logger("agent").emit(LogRecord(event_name="gen_ai.evaluation.result", attributes={
        "gen_ai.evaluation.name": "Groundedness", "gen_ai.evaluation.score.label": label}))
    logs.shutdown()


def statuses(served: Served, now: datetime) -> dict[str, tuple[str, str]]:
    """What ``canary status --json`` says of each guard, after the daemon's tick stored the receiver's counts."""
    assert served.app.flush()
    traces_step(served.store, served.server)
    result = CliRunner().invoke(main, ["status", "--json", "--config", str(served.config.path)])
    doc: dict[str, Any] = json.loads(result.stdout)
    return {g["guard"]: (g["status"], g["reason"]) for g in doc["guards"]}


def test_a_guard_of_log_lines_and_spans_is_asleep_by_silence_only_once_a_span_came(served: Served) -> None:
    now = datetime.now(UTC)
    a_day_of_logs(served, now)
    found = statuses(served, now)
    assert found["citation"][0] == "asleep"  # all it fires through was read: its silence is a finding
    status, reason = found["both"]
    assert status == "inconclusive", reason
    assert reason == ("no span has reached the trace receiver ([traces] listen), and the guard may fire "
                      "in spans as well as in log lines, so a silence proves nothing: point the agent's OTLP "
                      "exporter for traces at it")
    # the daemon's status step records it as such, so an alert says the same
    changes = {c["guard"]: c for c in decide_statuses(served.store, served.config, now=now, readable=None)}
    assert changes["both"]["status"] == "inconclusive" and changes["both"]["reason"] == reason
    send_spans(served.endpoint, guard="PASSED")  # spans came, and none fired it
    status, reason = statuses(served, now)["both"]
    assert status == "asleep", reason
    assert reason.startswith("no firing in the last 1d across 40 log lines")


def test_an_event_guard_is_inconclusive_until_a_span_and_a_log_record_came(served: Served) -> None:
    now = datetime.now(UTC)
    a_day_of_logs(served, now)
    status, reason = statuses(served, now)["evaluation"]
    assert status == "inconclusive", reason
    assert reason == ("no span or log record has reached the trace receiver ([traces] listen), and the "
                      "guard may fire only in span events or log records, so a silence proves nothing: "
                      "point the agent's OTLP exporter for traces and logs at it")
    send_spans(served.endpoint)  # spans, but the guard may fire only in log records
    status, reason = statuses(served, now)["evaluation"]
    assert status == "inconclusive", reason
    assert reason == ("no log record has reached the trace receiver ([traces] listen), and the guard may "
                      "fire only in log records, so a silence proves nothing: point the agent's OTLP "
                      "exporter for logs at it")
    send_evaluation(served.endpoint, "pass")  # a log record came, and it did not fire the guard
    status, reason = statuses(served, now)["evaluation"]
    assert status == "asleep", reason


def test_an_event_guard_with_log_records_but_no_span_is_inconclusive_and_alive_once_one_fires(
        served: Served) -> None:
    now = datetime.now(UTC)
    a_day_of_logs(served, now)
    send_evaluation(served.endpoint, "pass")
    status, reason = statuses(served, now)["evaluation"]
    assert status == "inconclusive", reason
    assert reason == ("no span has reached the trace receiver ([traces] listen), and the guard may fire "
                      "only in span events, so a silence proves nothing: point the agent's OTLP exporter "
                      "for traces at it")
    send_evaluation(served.endpoint, "fail")  # it fired, in a log record: no span is needed to say so
    assert statuses(served, now)["evaluation"][0] == "alive"


def test_a_guard_of_log_lines_and_spans_that_fired_in_a_span_is_alive(served: Served) -> None:
    now = datetime.now(UTC)
    a_day_of_logs(served, now)
    send_spans(served.endpoint, guard="BLOCKED")
    status, reason = statuses(served, now)["both"]
    assert status == "alive", reason


def test_a_log_line_guard_whose_logs_cannot_be_read_now_is_inconclusive_not_asleep(
        served: Served, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    a_day_of_logs(served, now)
    (tmp_path / "agent.log").unlink()  # the day's lines were read, but what comes now cannot be
    status, reason = statuses(served, now)["citation"]
    assert status == "inconclusive", reason
    assert reason == "its logs cannot be read, so a silence proves nothing"


def test_what_the_receiver_took_in_before_the_daemon_restarted_still_counts(served: Served) -> None:
    """A restarted daemon's receiver counts from zero: the spans its predecessor took in still prove
    that spans reach it, so the guard stays asleep instead of turning inconclusive at every restart."""
    from canary.status import receiver
    from canary.traces.receiver import ReceiverCounts

    now = datetime.now(UTC)
    a_day_of_logs(served, now)
    send_spans(served.endpoint, guard="PASSED")
    send_evaluation(served.endpoint, "pass")
    before = statuses(served, now)
    assert before["both"][0] == "asleep" and before["evaluation"][0] == "asleep", before
    receiver.record(served.store, ReceiverCounts(listen=served.app.counts.listen).to_json())  # its first tick
    result = CliRunner().invoke(main, ["status", "--json", "--config", str(served.config.path)])
    doc = json.loads(result.stdout)
    after = {g["guard"]: g["status"] for g in doc["guards"]}
    assert after["both"] == "asleep" and after["evaluation"] == "asleep", doc["guards"]
    assert doc["daemon"]["traces"]["spans"] == 0  # what this daemon's receiver took in, as ever


def test_with_no_trace_receiver_configured_the_reason_says_to_add_one(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("2026-12-07T10:00:00Z answered task=1\n")
    path = write_project(tmp_path, {"both": BOTH}, extra=f"[logs]\npaths = ['{log}']\n")
    path.write_text("\n".join(line for line in path.read_text().splitlines()
                              if not line.startswith(("[traces]", "listen"))) + "\n")
    config = load_config(path=path)
    assert config.traces is None
    store = Store(config.store.url)
    now = datetime.now(UTC)
    try:
        read_logs(store, now - timedelta(days=2), "1:2")
        read_logs(store, now - timedelta(hours=1), "1:3")
        beat(store, pid=1, started=now - timedelta(days=2), now=now, files=1, addresses={})
    finally:
        store.close()
    result = CliRunner().invoke(main, ["status", "--json", "--config", str(path)])
    [guard] = json.loads(result.stdout)["guards"]
    assert guard["status"] == "inconclusive", guard
    assert guard["reason"] == ("no trace receiver is configured, and the guard may fire in spans as well as "
                               "in log lines, so a silence proves nothing: add [traces] listen to canary.toml "
                               "and point the agent's OTLP exporter for traces at it"), guard["reason"]


def test_spans_that_stopped_coming_before_the_window_prove_nothing_of_it(served: Served) -> None:
    """The receiver took in spans and log records three days ago (before a restart), none since: a day
    of log lines without a firing proves nothing of a guard that may fire only in what stopped coming.
    The reason says when the last one came; a span in the window makes the silence a finding again."""
    from canary.status import receiver
    from canary.status.reasons import clock_time
    from canary.traces.receiver import ReceiverCounts

    now = datetime.now(UTC)
    a_day_of_logs(served, now)
    long_ago = now - timedelta(days=3)
    receiver.record(served.store, {**ReceiverCounts(listen=served.app.counts.listen).to_json(),
                                   "span_seen_at": long_ago.timestamp(),
                                   "record_seen_at": long_ago.timestamp()})
    found = statuses(served, now)
    assert found["citation"][0] == "asleep"  # its log lines were read all along
    status, reason = found["both"]
    assert status == "inconclusive", reason
    assert reason == (f"no span has reached the trace receiver ([traces] listen) in the last 1d (the last "
                      f"at {clock_time(long_ago, now)}), and the guard may fire in spans as well as in log "
                      "lines, so a silence proves nothing: point the agent's OTLP exporter for traces at it")
    status, reason = found["evaluation"]
    assert status == "inconclusive", reason
    assert reason.startswith("no span or log record has reached the trace receiver ([traces] listen) in "
                             f"the last 1d (the last at {clock_time(long_ago, now)}), "), reason
    send_spans(served.endpoint, guard="PASSED")
    found = statuses(served, now)
    assert found["both"][0] == "asleep", found["both"]
    status, reason = found["evaluation"]
    assert status == "inconclusive", reason
    assert reason.startswith("no log record has reached the trace receiver ([traces] listen) in the last "
                             f"1d (the last at {clock_time(long_ago, now)}), "), reason


def test_an_idle_agent_whose_spans_stopped_with_it_is_not_inconclusive(served: Served) -> None:
    """No log line read and no span taken in for three days: the agent was idle, which explains the
    silence of its spans as it does that of its log lines; the guard reads as a log-line guard does."""
    from canary.status import receiver
    from canary.traces.receiver import ReceiverCounts

    now = datetime.now(UTC)
    read_logs(served.store, now - timedelta(days=3), "1:2")  # the agent's last lines, three days ago
    beat(served.store, pid=1, started=now - timedelta(days=4), now=now, files=1, addresses={})
    long_ago = (now - timedelta(days=3)).timestamp()
    receiver.record(served.store, {**ReceiverCounts(listen=served.app.counts.listen).to_json(),
                                   "span_seen_at": long_ago, "record_seen_at": long_ago})
    found = statuses(served, now)
    assert found["both"][0] == found["citation"][0] != "inconclusive", found
    assert found["evaluation"][0] != "inconclusive", found
