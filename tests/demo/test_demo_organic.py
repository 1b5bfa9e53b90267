"""The demo amid organic traffic: ambiguous without a mark, caught once the task id ties the line."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from sqlalchemy import create_engine, select

from canary.cli.main import main
from canary.store.tables import Firing


def test_the_organic_demo_is_ambiguous_then_caught_by_task_id(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--organic", "--json", "--keep", str(tmp_path)])
    assert result.exit_code == 1, result.output  # an ambiguous run is not healthy
    plain, correlated = json.loads(result.stdout)["runs"]
    assert plain["verdict"] == "ambiguous", plain
    assert plain["foreign_calls"] > 0 and plain["attribution"] is None
    assert plain["nonce"] not in (plain["evidence"] or "")
    assert correlated["verdict"] == "caught", correlated
    assert correlated["attribution"] == "task" and correlated["firings"] >= 1
    assert correlated["foreign_calls"] > 0 and correlated["nonce"] not in correlated["evidence"]
    engine = create_engine(f"sqlite:///{tmp_path / 'plain' / 'canary.db'}")
    with engine.connect() as conn:
        users = conn.execute(select(Firing.run_id).where(Firing.guard == "citation")).all()
    engine.dispose()
    assert len(users) > 2 and all(run_id is None for (run_id,) in users)  # the users' firings
