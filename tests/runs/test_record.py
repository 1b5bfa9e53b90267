"""One run record: the runner's result, the control API's document, the CLI's rows."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import click

from canary.cli.printers import runs_table
from canary.daemon.control import ControlClient, create_control_app
from canary.proxy.serving import BackgroundServer
from canary.runs.record import RunRecord
from canary.sentences import explain
from canary.vocabulary import STAGES, Verdict

#: The keys of one entry of the contract's ``canary run --json`` document, in its order.
CONTRACT_KEYS = ["guard", "canary", "variant", "expect", "verdict", "nonce", "started", "duration_s",
                 "trace", "leaked", "firings", "attribution", "foreign_calls", "evidence", "answer",
                 "error", "model_calls", "unmatched_line", "nearest_guard"]

RECORD = RunRecord(
    guard="version", canary="fake-version", variant=1, expect="reject", verdict=Verdict.AMBIGUOUS,
    nonce="k3v9abcdefghijklmnop", started=datetime(2026, 11, 29, 10, 0, 0, 250000, tzinfo=UTC),
    duration_s=2.4129, trace={"sent": 0.0, "fixture_fetched": 0.21, "injected": 0.35, "fired": None,
                             "repair_requested": None, "answered": 2.1},
    leaked=False, firings=0, attribution=None, foreign_calls=7,
    evidence="2026-11-29T10:00:00.612Z WARN VersionGuard: rejected", answer="I could not confirm it.",
    error=None, leak_text="3.14.7",
)


class Handlers:
    """The daemon's side of ``POST /run``: finished runs as their documents."""

    def health(self) -> dict[str, object]:
        return {"ok": True}

    def status(self) -> dict[str, object]:
        return {"guards": []}

    def run_now(self, selection: list[str], wait: bool) -> dict[str, object]:
        caught = replace(RECORD, verdict=Verdict.CAUGHT, attribution="task", firings=1, foreign_calls=0)
        return {"runs": [RECORD.to_wire(), caught.to_wire()]}


def test_the_document_has_the_contracts_keys() -> None:
    doc = RECORD.to_json()
    assert list(doc) == CONTRACT_KEYS
    assert list(doc["trace"]) == list(STAGES)
    assert (doc["started"], doc["duration_s"], doc["verdict"]) == ("2026-11-29T10:00:00.250000Z", 2.413,
                                                                   "ambiguous")


def test_a_record_crosses_the_control_api_unchanged() -> None:
    token = "t0ken"
    app = create_control_app(token, Handlers())
    with BackgroundServer(app, name="control") as server, ControlClient(
        server.url.removeprefix("http://"), token
    ) as client:
        doc = client.run(["version"], wait=True)
    received = [RunRecord.from_json(r) for r in doc["runs"]]
    sent = replace(RECORD, duration_s=2.413)
    assert received[0] == sent
    assert (received[1].verdict, received[1].attribution) == (Verdict.CAUGHT, "task")


def test_the_run_table_names_the_mark_and_an_ambiguous_runs_foreign_calls() -> None:
    caught = replace(RECORD, verdict=Verdict.CAUGHT, attribution="value", firings=1)
    table = click.unstyle(runs_table([RECORD, caught]))
    header, first, second = table.splitlines()
    assert "tied by" in header
    assert "AMBIGUOUS" in first and "7 foreign call(s)" in first
    assert "CAUGHT" in second and " value " in second
    advice = explain(RECORD)
    assert "7 model call(s) without the nonce" in advice and "[logs] correlate" in advice


def test_the_calls_a_tool_canary_did_not_inject_cross_the_control_api() -> None:
    """What a not_injected tool canary's reason is read from reaches ``canary run`` through a daemon."""
    for counts in ({"thinking_calls": 2}, {"toolless_calls": 1}):
        record = replace(RECORD, verdict=Verdict.NOT_INJECTED, model_calls=2, leak_text=None, **counts)
        received = RunRecord.from_json(record.to_json())
        assert received == replace(record, duration_s=2.413)
        assert explain(received) == explain(record)


def test_a_leaked_runs_reason_names_the_value_through_the_daemon_too() -> None:
    """The control API carries what leaked (the contract's document does not): ``canary run`` through a
    daemon says which value reached the answer, as it does alone."""
    leaked = replace(RECORD, verdict=Verdict.LEAKED, leaked=True, foreign_calls=0)
    assert "leak_text" not in leaked.to_json()
    received = RunRecord.from_json(leaked.to_wire())
    assert "'3.14.7' is in the final answer" in explain(received)
    assert explain(received) == explain(leaked)
