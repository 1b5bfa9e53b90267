"""``canary status`` reads only its own config's rows, and writes nothing to find them.

A config whose rows the store says are another project's (SQLite) or another config's (the same
project and machine) is refused as the daemon refuses it, with the same reason and exit 3; a
project whose daemon never ran reads as "none ever ran" and leaves no site in a shared store.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text

from canary.cli.main import main
from canary.config.settings import load_config
from canary.daemon.steps import beat
from canary.errors import StoreError
from canary.store.engine import Store
from canary.store.sites import REGISTRY, Site, quoted
from tests.store.conftest import pg_url


def write_config(folder: Path, *, project: str, url: str, machine: str | None = None) -> Path:
    """A config of one guard, ``project`` on the store at ``url``, its log empty."""
    (folder / "defs").mkdir(parents=True)
    (folder / "defs" / "cite.toml").write_text("[guard]\nname = 'cite'\nmatch = 'CitationGuard: rejected'\n")
    (folder / "agent.log").write_text("")
    path = folder / "canary.toml"
    path.write_text(
        f"defs = ['defs/*.toml']\nproject = '{project}'\n[logs]\npaths = ['{folder / 'agent.log'}']\n"
        f"[alerts]\ndesktop = false\n[store]\nurl = {json.dumps(url)}\n"
        + (f"machine = '{machine}'\n" if machine else "")
    )
    return path


def daemon_ran(config: Path) -> None:
    """What the config's daemon leaves: its claim on the store and a heartbeat of now."""
    store = Store.of(load_config(str(config)))
    now = datetime.now(UTC)
    try:
        beat(store, pid=os.getpid(), started=now - timedelta(hours=1), now=now, files=1, addresses={})
    finally:
        store.close()


def refusal(config: Path) -> str:
    """What ``canary daemon`` (and ``canary mute``) say when they open the config's store."""
    with pytest.raises(StoreError) as refused:
        Store.of(load_config(str(config)))
    return str(refused.value)


def console(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``canary status`` through the console script's quick way."""
    code = "import sys\nfrom canary.cli.entry import main\nsys.argv = ['canary', *sys.argv[1:]]\nmain()\n"
    env = {k: v for k, v in os.environ.items() if k not in ("CANARY_CONFIG", "NO_COLOR")}
    return subprocess.run([sys.executable, "-c", code, "status", "--config", str(config), *args],
                          capture_output=True, text=True, env=env, timeout=60, check=False)


def assert_refused(config: Path, reason: str) -> None:
    """Text and JSON, through the quick way and through click: exit 3, the reason, no guard (the
    text prints nothing on stdout, ``--json`` a document that carries the reason)."""
    for args in ((), ("--json",)):
        quick = console(config, *args)
        done = CliRunner().invoke(main, ["status", "--config", str(config), *args])
        for code, stdout, stderr in ((quick.returncode, quick.stdout, quick.stderr),
                                     (done.exit_code, done.stdout, done.stderr)):
            assert code == 3 and reason in stderr, stdout + stderr
            if args:
                doc = json.loads(stdout)
                assert doc["error"] == reason and doc["guards"] is None, stdout
            else:
                assert stdout == "", stdout


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_sqlite_store_of_another_project_is_refused_as_the_daemon_refuses_it(tmp_path: Path) -> None:
    db = tmp_path / "store" / "canary.db"
    url = f"sqlite:///{db}"
    daemon_ran(write_config(tmp_path / "full", project="full", url=url))
    other = write_config(tmp_path / "other", project="other", url=url)
    reason = refusal(other)
    assert "belongs to project 'full', not 'other'" in reason
    before = digest(db)

    assert_refused(other, reason)
    assert digest(db) == before  # nothing written


def test_a_second_config_of_one_project_on_a_sqlite_store_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "store" / "canary.db"
    url = f"sqlite:///{db}"
    first = write_config(tmp_path / "agent", project="agent", url=url)
    daemon_ran(first)
    second = write_config(tmp_path / "work" / "agent", project="agent", url=url)
    reason = refusal(second)
    assert str(first) in reason
    before = digest(db)

    assert_refused(second, reason)
    assert digest(db) == before


def site_tables(site: Site) -> tuple[bool, bool, str | None]:
    """Whether the site's schema exists, whether the registry lists it, and the owner its meta names."""
    engine = create_engine(pg_url())
    try:
        with engine.connect() as conn:
            schema = conn.execute(text("SELECT 1 FROM pg_namespace WHERE nspname = :n"), {"n": site.schema}).first()
            listed = conn.execute(text(f"SELECT 1 FROM {quoted(REGISTRY)}.sites WHERE schema_name = :s"),
                                  {"s": site.schema}).first()
            owner = conn.execute(text(f"SELECT value FROM {quoted(site.schema)}.meta WHERE key = 'owner'")
                                 ).scalar() if schema else None
        return schema is not None, listed is not None, owner
    finally:
        engine.dispose()


def site_mutes(site: Site) -> list[tuple[str, str | None]]:
    """The (guard, reason) of every mute the site's schema holds."""
    engine = create_engine(pg_url())
    try:
        with engine.connect() as conn:
            return [(r[0], r[1]) for r in conn.execute(text(f"SELECT guard, reason FROM {quoted(site.schema)}.mutes"))]
    finally:
        engine.dispose()



def test_a_second_config_of_one_project_and_machine_is_refused_on_postgresql(
    tmp_path: Path, pg_site: Site
) -> None:
    first = write_config(tmp_path / "alpha", project=pg_site.project, url=pg_url(), machine="m1")
    daemon_ran(first)
    second = write_config(tmp_path / "alphadup", project=pg_site.project, url=pg_url(), machine="m1")
    reason = refusal(second)
    assert str(first) in reason

    assert_refused(second, reason)
    assert site_tables(pg_site) == (True, True, str(first))  # still the first config's rows


def test_status_of_a_project_whose_daemon_never_ran_creates_no_site(tmp_path: Path, pg_site: Site) -> None:
    config = write_config(tmp_path / "gamma", project=pg_site.project, url=pg_url(), machine="m1")

    for args in ((), ("--json",)):
        quick = console(config, *args)
        assert quick.returncode == 1, quick.stdout + quick.stderr
        assert "none ever ran on this store" in quick.stdout, quick.stdout
    done = CliRunner().invoke(main, ["status", "--json", "--config", str(config)])
    assert done.exit_code == 1, done.output
    doc = json.loads(done.stdout)
    assert doc["daemon"]["running"] is False and [p["kind"] for p in doc["problems"]] == ["no_daemon"]
    team = CliRunner().invoke(main, ["status", "--all-projects", "--json", "--config", str(config)])
    assert team.exit_code in (0, 1), team.output
    assert pg_site.project not in {s["project"] for s in json.loads(team.stdout)["projects"]}

    assert site_tables(pg_site) == (False, False, None)
