"""The demo amid organic traffic: ambiguous without a mark, caught once the task id ties the line."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, select

from canary.demo.organic import run_organic_demo
from canary.store.tables import Firing


def test_the_organic_demo_is_ambiguous_then_caught_by_task_id(tmp_path: Path) -> None:
    plain, correlated = run_organic_demo(tmp_path, grace=1.0)
    assert plain.verdict == "ambiguous", plain
    assert plain.foreign_calls > 0 and plain.attribution is None
    assert plain.nonce not in (plain.evidence or "")
    assert correlated.verdict == "caught", correlated
    assert (correlated.attribution, correlated.firings) == ("task", correlated.firings)
    assert correlated.firings >= 1 and correlated.foreign_calls > 0
    engine = create_engine(f"sqlite:///{tmp_path / 'plain' / 'canary.db'}")
    with engine.connect() as conn:
        users = conn.execute(select(Firing.line).where(Firing.guard == "citation")).all()
    engine.dispose()
    assert len(users) > 2  # the users' tasks fired the same guard meanwhile
