"""Verdicts that stay true in a busy agent: organic firings are never a canary's proof.

Everything is real: the agent, its model and the proxy are HTTP servers on
loopback, a background client sends organic tasks through the agent (and so
through the proxy) while canaries run, the agent writes a real log file that
the collectors follow into a real SQLite store.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from sqlmodel import col

from canary.config.settings import load_config
from canary.runs.record import RunRecord
from canary.runs.session import Session, open_store
from canary.store.engine import Store
from canary.store.tables import Firing, Run
from tests.runs.busy_agent import busy_agent

GRACE = 0.6


def run_once(root: Path, canary: str, *, style: str, canary_guard: bool = False,
             correlate: bool = False, kind: str = "version") -> tuple[RunRecord, Store]:
    with busy_agent(root, correlate=correlate, kind=kind) as agent:
        agent.behaviour.style = style
        agent.behaviour.canary_guard = canary_guard
        config = load_config(str(agent.config_path))
        store = open_store(config)
        with Session(config, store, grace=GRACE, rescan=0.2) as session:
            assert session.runner is not None
            guard = config.guards[0]
            result = session.runner.run(guard, next(c for c in guard.canaries if c.name == canary))
        assert agent.behaviour.organic_firings > 0, "the organic path never fired"
    return result, store


def test_a_guard_line_that_names_someone_elses_value_is_not_the_runs(tmp_path: Path) -> None:
    result, store = run_once(tmp_path, "fake-version", style="value")
    assert result.verdict == "unlogged", result
    assert (result.firings, result.attribution, result.evidence) == (0, None, None)
    assert result.foreign_calls > 0
    with store.engine.connect() as conn:
        tied = conn.execute(select(Firing).where(col(Firing.run_id).is_not(None))).all()
        organic = conn.execute(select(Firing).where(col(Firing.run_id).is_(None))).all()
    assert tied == [] and organic, "every organic line stays organic"


def test_an_unmarked_guard_line_amid_other_work_is_ambiguous(tmp_path: Path) -> None:
    result, store = run_once(tmp_path, "fake-version", style="bare")
    assert result.verdict == "ambiguous", result
    assert result.attribution is None and result.firings == 0
    assert result.foreign_calls > 0
    assert result.evidence is not None and "VersionGuard: rejected" in result.evidence
    with store.engine.connect() as conn:
        row = conn.execute(select(Run.verdict, Run.attribution, Run.foreign_calls)).one()
    assert (row[0], row[1], row[2]) == ("ambiguous", None, result.foreign_calls)


def test_a_task_id_ties_the_guards_line_to_the_run(tmp_path: Path) -> None:
    result, store = run_once(tmp_path, "fake-version", style="task", canary_guard=True,
                             correlate=True)
    assert result.verdict == "caught", result
    assert (result.attribution, result.firings) == ("task", 1)
    assert result.evidence is not None and "VersionGuard: rejected" in result.evidence
    with store.engine.connect() as conn:
        row = conn.execute(select(Run.attribution)).one()
        tied = conn.execute(select(Firing.line).where(col(Firing.run_id).is_not(None),
                                                      col(Firing.guard) == "version")).all()
    assert row[0] == "task" and [t[0] for t in tied] == [result.evidence]


def test_task_ids_without_the_guard_on_the_canary_path_are_not_caught(tmp_path: Path) -> None:
    result, _ = run_once(tmp_path, "fake-version", style="task", correlate=True)
    assert result.verdict == "unlogged", result  # every organic line names another task


def test_in_a_quiet_agent_an_unmarked_line_is_tied_by_time(tmp_path: Path) -> None:
    with busy_agent(tmp_path, every=None) as agent:
        agent.behaviour.style, agent.behaviour.canary_guard = "bare", True
        config = load_config(str(agent.config_path))
        store = open_store(config)
        with Session(config, store, grace=GRACE, rescan=0.2) as session:
            assert session.runner is not None
            guard = config.guards[0]
            result = session.runner.run(guard, guard.canaries[0])
    assert result.verdict == "caught", result
    assert (result.attribution, result.firings, result.foreign_calls) == ("time", 1, 0)
    with store.engine.connect() as conn:
        tied = conn.execute(select(Firing.run_id).where(col(Firing.guard) == "version")).all()
    assert [t[0] for t in tied] == [1]  # stored with the run, not counted as organic


@pytest.mark.parametrize(("style", "verdict"), [("value", "passed"), ("bare", "ambiguous")])
def test_a_control_on_the_busy_agent(tmp_path: Path, style: str, verdict: str) -> None:
    result, _ = run_once(tmp_path, "control", style=style)
    assert result.verdict == verdict, result
    assert result.attribution is None


def test_a_date_line_naming_another_date_written_out_is_someone_elses(tmp_path: Path) -> None:
    """The organic lines of a busy date guard name dates as its model wrote them (November 3, 2019):
    none is the control's date, so none makes it ambiguous."""
    result, store = run_once(tmp_path, "control", style="value", kind="date")
    assert result.verdict == "passed", result
    assert result.foreign_calls > 0
    with store.engine.connect() as conn:
        assert conn.execute(select(Firing).where(col(Firing.run_id).is_not(None))).all() == []


def test_a_controls_draft_and_correction_are_both_stored_with_the_run(tmp_path: Path) -> None:
    """With no other work going on, the draft's bare line is the run's beside the correction's line
    that names the run's value: both are stored with the run, none counted organic."""
    with busy_agent(tmp_path, every=None) as agent:
        agent.behaviour.draft = True
        config = load_config(str(agent.config_path))
        store = open_store(config)
        with Session(config, store, grace=GRACE, rescan=0.2) as session:
            assert session.runner is not None
            guard = config.guards[0]
            result = session.runner.run(guard, next(c for c in guard.canaries if c.name == "control"))
    assert result.verdict == "false_rejection", result
    assert (result.attribution, result.firings, result.foreign_calls) == ("value", 2, 0)
    with store.engine.connect() as conn:
        tied = conn.execute(select(Firing.run_id).where(col(Firing.guard) == "version")).all()
        counts = dict(conn.exec_driver_sql(
            "SELECT source, SUM(count) FROM hourly_counts GROUP BY source").all())
    assert [t[0] for t in tied] == [1, 1]
    assert counts.get("organic", 0) == 0 and counts["canary"] == 2


@pytest.mark.slow
def test_fifty_runs_on_the_busy_agent_are_never_caught_by_an_organic_line(tmp_path: Path) -> None:
    with busy_agent(tmp_path) as agent:
        config = load_config(str(agent.config_path))
        store = open_store(config)
        seen: list[tuple[str, str, str]] = []
        with Session(config, store, grace=0.4, rescan=0.2) as session:
            assert session.runner is not None
            guard = config.guards[0]
            for i in range(52):
                agent.behaviour.style = ("value", "bare")[i % 2]
                canary = guard.canaries[(i // 2) % 2]
                result = session.runner.run(guard, canary)
                seen.append((agent.behaviour.style, canary.name, str(result.verdict)))
        organic = agent.behaviour.organic_firings
    assert organic > 100
    assert not [s for s in seen if s[2] in ("caught", "false_rejection")], seen
    expected = {("value", "fake-version"): "unlogged", ("bare", "fake-version"): "ambiguous",
                ("value", "control"): "passed", ("bare", "control"): "ambiguous"}
    assert [s for s in seen if expected[(s[0], s[1])] != s[2]] == []
    with store.engine.connect() as conn:
        assert conn.execute(select(Firing).where(col(Firing.run_id).is_not(None))).all() == []
