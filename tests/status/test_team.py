"""``canary status --all-projects``: every project and machine of a shared store, whose daemon is stale."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner
from sqlalchemy import insert

from canary.cli import printers as fmt
from canary.cli.main import main, team_exit
from canary.daemon.steps import beat
from canary.store.engine import Store
from canary.store.sites import Site
from canary.store.tables import Transition
from tests.store.conftest import drop_site, pg_url


def _daemon_was_here(store: Store, *, at: datetime, statuses: dict[str, str]) -> None:
    """What a site's daemon leaves: its heartbeat and a transition per guard (the older first)."""
    beat(store, pid=4242, started=at - timedelta(hours=1), now=at, files=1, addresses={})
    with store.engine.begin() as conn:
        for guard, status in statuses.items():
            conn.execute(insert(Transition).values(guard=guard, at=at - timedelta(hours=2), status="new",
                                                   previous=None, reason="nothing known yet"))
            conn.execute(insert(Transition).values(guard=guard, at=at - timedelta(minutes=5), status=status,
                                                   previous="new", reason=f"{guard} is {status}"))


def test_all_projects_lists_each_project_and_machine_and_the_stale_daemon(tmp_path: Path) -> None:
    url = pg_url()
    tag = uuid.uuid4().hex[:6]
    laptop, ci = Site(f"billing{tag}", "laptop"), Site(f"research{tag}", "ci-runner")
    now = datetime.now(UTC)
    stores = [Store(url, site=laptop), Store(url, site=ci)]
    try:
        _daemon_was_here(stores[0], at=now, statuses={"citation": "alive", "date": "asleep"})
        _daemon_was_here(stores[1], at=now - timedelta(hours=3), statuses={"quote": "alive"})  # gone since
        config = tmp_path / "canary.toml"
        config.write_text(f"defs = []\nproject = 'billing{tag}'\n[store]\nurl = {json.dumps(url)}\n"
                          "machine = 'laptop'\n")

        done = CliRunner().invoke(main, ["status", "--all-projects", "--json", "--config", str(config)])

        assert done.exit_code == 1, done.output  # a guard is asleep, and a daemon is stale
        sites = {(s["project"], s["machine"]): s for s in json.loads(done.output)["projects"]}
        billing, research = sites[(laptop.project, "laptop")], sites[(ci.project, "ci-runner")]
        assert billing["daemon"]["running"] is True and billing["daemon"]["stale"] is False
        assert [(g["guard"], g["status"], g["alerting"]) for g in billing["guards"]] == [
            ("citation", "alive", False), ("date", "asleep", True)]
        assert research["daemon"]["stale"] is True
        assert [(g["guard"], g["status"]) for g in research["guards"]] == [("quote", "alive")]

        table = CliRunner().invoke(main, ["status", "--all-projects", "--config", str(config)]).output
        header, *rows = table.splitlines()
        assert header.split()[:5] == ["PROJECT", "MACHINE", "DAEMON", "GUARD", "STATUS"]
        assert any(r.startswith(ci.project) and "ci-runner" in r and "stale (last beat" in r for r in rows)
        assert any(r.startswith(laptop.project) and " date " in r and "asleep" in r for r in rows)
    finally:
        for store in stores:
            store.close()
        drop_site(laptop)
        drop_site(ci)


def test_all_projects_on_a_sqlite_store_is_its_one_project(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = Store(f"sqlite:///{db}", site=Site("solo", "laptop"))
    _daemon_was_here(store, at=datetime.now(UTC), statuses={"citation": "alive"})
    store.close()
    config = tmp_path / "canary.toml"
    config.write_text(f"defs = []\nproject = 'solo'\n[store]\nurl = 'sqlite:///{db.as_posix()}'\nmachine = 'laptop'\n")

    done = CliRunner().invoke(main, ["status", "--all-projects", "--json", "--config", str(config)])

    assert done.exit_code == 0, done.output
    (site,) = json.loads(done.output)["projects"]
    assert (site["project"], site["machine"], site["daemon"]["running"]) == ("solo", "laptop", True)


def test_the_team_view_shows_each_guards_reason_now_not_when_its_status_began(tmp_path: Path) -> None:
    """The status stays alive while its firings grow: the reason shown is the latest one decided."""
    from canary.status.evaluate import GuardStatus
    from canary.status.team import team_view
    from canary.status.transitions import record_transitions
    from canary.vocabulary import Status

    store = Store(f"sqlite:///{tmp_path / 'c.db'}", site=Site("solo", "laptop"))
    try:
        now = datetime.now(UTC)
        beat(store, pid=4242, started=now, now=now, files=1, addresses={})
        for n in (1, 6):
            record_transitions(store, [GuardStatus("citation", Status.ALIVE, f"{n} firing(s) in the last 1d")],
                               now=now)
        ((guard,),) = [view.guards for view in team_view(store)]
        assert (guard.status, guard.reason) == ("alive", "6 firing(s) in the last 1d")
    finally:
        store.close()


def test_a_project_whose_logs_were_read_by_no_daemon_says_none_ran(tmp_path: Path) -> None:
    """``canary collect --once`` wrote the project's rows, but no daemon ever beat: the team view says none
    ran, not a stale daemon with a last beat of "never"."""
    (tmp_path / "agent.log").write_text("2026-12-07T10:00:00Z QuoteGuard: rejected x\n")
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "quote.toml").write_text("[guard]\nname = 'quote'\nmatch = 'QuoteGuard: rejected'\n")
    config = tmp_path / "canary.toml"
    config.write_text(f"defs = ['defs/*.toml']\nproject = 'solo'\n[logs]\npaths = ['agent.log']\n"
                      f"[store]\nurl = 'sqlite:///{(tmp_path / 'c.db').as_posix()}'\nmachine = 'laptop'\n")
    assert CliRunner().invoke(main, ["collect", "--once", "--config", str(config)]).exit_code == 0

    table = CliRunner().invoke(main, ["status", "--all-projects", "--config", str(config)])

    assert table.exit_code == 1, table.output
    _header, row = table.stdout.splitlines()
    cells = [cell.strip() for cell in row.split("  ") if cell.strip()]
    assert cells[:3] == ["solo", "laptop", "none ran (no heartbeat)"], row


def test_all_projects_of_a_store_no_daemon_wrote_is_not_healthy(tmp_path: Path) -> None:
    """Nothing collects anywhere: exit 1, as ``canary status`` exits 1 with no daemon, never 0."""
    config = tmp_path / "canary.toml"
    config.write_text(f"defs = []\nproject = 'solo'\n[store]\nurl = 'sqlite:///{(tmp_path / 'c.db').as_posix()}'\n")
    done = CliRunner().invoke(main, ["status", "--all-projects", "--config", str(config)])
    assert "none ran (no heartbeat)" in done.output, done.output
    assert done.exit_code == 1, done.output
    assert fmt.team_table({"store": "postgresql+psycopg://db/x", "projects": []}).startswith(
        "no project has written to the store at postgresql+psycopg://db/x")
    assert team_exit({"projects": []}) == 1


def test_a_daemon_that_stopped_is_said_to_have_stopped_not_to_be_stale(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = Store(f"sqlite:///{db}", site=Site("solo", "laptop"))
    at = datetime(2026, 12, 8, 9, 0, tzinfo=UTC)
    beat(store, pid=4242, started=at - timedelta(hours=1), now=at, files=1, addresses={}, stopped=at)
    store.close()
    config = tmp_path / "canary.toml"
    config.write_text(f"defs = []\nproject = 'solo'\n[store]\nurl = 'sqlite:///{db.as_posix()}'\nmachine = 'laptop'\n")
    done = CliRunner().invoke(main, ["status", "--all-projects", "--config", str(config)])
    assert done.exit_code == 1, done.output  # nothing collects
    assert "stopped at 2026-12-08T09:00:00Z" in done.output and "stale" not in done.output, done.output
    doc = CliRunner().invoke(main, ["status", "--all-projects", "--json", "--config", str(config)])
    (site,) = json.loads(doc.output)["projects"]
    assert site["daemon"]["stopped"] == "2026-12-08T09:00:00Z" and site["daemon"]["stale"] is True
