"""Lines that carry a stored run's nonce are canary firings: in ``collect``, ``status`` and ``audit``.

Through the CLI, with real log files and a real SQLite store holding finished runs.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

from canary.cli.main import main
from canary.runs.runlog import RunLog
from canary.runs.values import new_nonce
from canary.store.engine import Store
from canary.store.nonces import NONCE_SIZE, nonce_candidates
from tests.helpers_store import record

#: Shaped like a nonce (36 characters of a-z0-9) but no run of the store has it.
STRANGER = "zz" + "0123456789abcdefghijklmnopqrstuvwx"[:NONCE_SIZE - 2]


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def write_setup(root: Path) -> tuple[Path, Path]:
    (root / "defs").mkdir()
    (root / "defs" / "citation.toml").write_text(
        "[guard]\nname = 'citation'\nmatch = 'CitationGuard: rejected'\nwindow = '24h'\n"
    )
    (root / "defs" / "date.toml").write_text("[guard]\nname = 'date'\nmatch = 'DateGuard: rejected'\n")
    db = root / "state" / "canary.db"
    config = root / "canary.toml"
    config.write_text(
        "defs = ['defs/*.toml']\n[logs]\npaths = ['logs/agent.log']\nactivity = 'task finished'\n"
        f"[store]\nurl = 'sqlite:///{db}'\n"
    )
    (root / "logs").mkdir()
    return config, db


def stored_runs(db: Path, nonces: list[str]) -> None:
    """Finished runs of the citation guard, as an earlier ``canary run`` leaves them."""
    store = Store(f"sqlite:///{db}")
    try:
        runs = RunLog(store)
        for n, nonce in enumerate(nonces):
            at = datetime.now(UTC) - timedelta(hours=2 + n)
            rid = runs.start(guard="citation", canary="fake-url", variant=0, expect="reject", nonce=nonce,
                             started=at, injected_text="x", leak_text=f"{nonce}.example.org")
            runs.finish(rid, record("caught"), finished=at + timedelta(seconds=3))
    finally:
        store.close()


def write_log(path: Path, old: str, recent: str) -> None:
    now = datetime.now(UTC) - timedelta(minutes=10)
    path.write_text(
        f"{stamp(now)} INFO task finished task=a\n"
        f"{stamp(now)} WARN CitationGuard: rejected https://organic.example.org/x task=a\n"
        f"{stamp(now)} WARN CitationGuard: rejected https://{old}.example.org/permit\n"
        f"{stamp(now)} WARN CitationGuard: rejected http://www.{old}.example.org/permit/ again\n"
        f"{stamp(now)} WARN CitationGuard: rejected url=https://{recent}.example.org/p\n"
        # shaped like a nonce, in no run of the store: organic
        f"{stamp(now)} WARN CitationGuard: rejected https://{STRANGER}.example.org/q\n"
        # a stored nonce inside a longer run of letters and digits is still that run's
        f"{stamp(now)} WARN CitationGuard: rejected id=x9{old}7\n"
        f"{stamp(now)} INFO fetched https://{old}.example.org/permit\n"
        f"{stamp(now)} WARN DateGuard: rejected 2026-13-01\n"
    )


def invoke(config: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--config", str(config), *args])
    return result.exit_code, result.stdout


def test_collect_status_and_audit_count_nonce_lines_as_canary_and_agree(tmp_path: Path) -> None:
    config, db = write_setup(tmp_path)
    old, recent = new_nonce(), new_nonce()
    stored_runs(db, [old, recent])
    write_log(tmp_path / "logs" / "agent.log", old, recent)

    code, _out = invoke(config, "collect", "--once")
    assert code == 0
    code, out = invoke(config, "status", "--json")
    status = {g["guard"]: g for g in json.loads(out)["guards"]}
    assert (status["citation"]["organic_firings"], status["citation"]["canary_firings"]) == (2, 4)
    assert (status["date"]["organic_firings"], status["date"]["canary_firings"]) == (1, 0)

    code, out = invoke(config, "audit", "--window", "24h", "--json")
    audited = {g["guard"]: g for g in json.loads(out)["guards"]}
    for name, g in status.items():
        assert (audited[name]["organic"], audited[name]["canary"]) == (
            g["organic_firings"], g["canary_firings"]), name
        assert audited[name]["firings"] == g["organic_firings"] + g["canary_firings"]

    # the stored firings are tied to the run whose nonce they carry
    with sqlite3.connect(db) as conn:
        tied = conn.execute(
            "SELECT r.nonce, COUNT(*) FROM firings f JOIN runs r ON r.id = f.run_id GROUP BY r.nonce"
        ).fetchall()
    conn.close()
    assert dict(tied) == {old: 3, recent: 1}

    code, out = invoke(config, "audit", "--window", "24h")
    header = out.splitlines()[0].split()
    assert header[:4] == ["guard", "firings", "organic", "canary"]
    row = next(line.split() for line in out.splitlines() if line.startswith("citation"))
    assert row[1:4] == ["6", "2", "4"]


def test_audit_without_a_store_counts_every_firing_organic_and_creates_none(tmp_path: Path) -> None:
    config, db = write_setup(tmp_path)
    write_log(tmp_path / "logs" / "agent.log", new_nonce(), new_nonce())
    code, out = invoke(config, "audit", "--json")
    assert code == 0
    citation = next(g for g in json.loads(out)["guards"] if g["guard"] == "citation")
    assert (citation["firings"], citation["organic"], citation["canary"]) == (6, 6, 0)
    assert not db.exists() and not db.parent.exists()


def test_audit_leaves_the_store_untouched(tmp_path: Path) -> None:
    config, db = write_setup(tmp_path)
    nonce = new_nonce()
    stored_runs(db, [nonce])
    write_log(tmp_path / "logs" / "agent.log", nonce, new_nonce())
    before = db.read_bytes()
    _code, out = invoke(config, "audit", "--json")
    citation = next(g for g in json.loads(out)["guards"] if g["guard"] == "citation")
    assert (citation["organic"], citation["canary"]) == (3, 3)
    # nothing written: the database is as it was, and any write-ahead log SQLite opened is empty
    assert db.read_bytes() == before
    wal = db.with_name(db.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0


def test_nonce_candidates_are_every_36_character_window_of_a_long_enough_run() -> None:
    nonce = new_nonce()
    assert len(nonce) == NONCE_SIZE
    assert nonce in nonce_candidates(f"see https://{nonce}.example.org/")
    assert nonce in nonce_candidates(f"x9{nonce}7")
    assert nonce_candidates("short ids only: abc123 task=t1a2b3c4") == set()
    # upper case is not of the nonce alphabet
    assert nonce_candidates(nonce.upper()) == set()


def test_status_and_audit_end_the_window_at_the_same_instant(tmp_path: Path) -> None:
    config, db = write_setup(tmp_path)
    nonce = new_nonce()
    stored_runs(db, [nonce])
    start = datetime.now(UTC) - timedelta(hours=24)  # the citation guard's window starts here
    (tmp_path / "logs" / "agent.log").write_text(
        # just before the window, in the hour it starts in: counted by neither
        f"{stamp(start - timedelta(seconds=30))} WARN CitationGuard: rejected https://old.example.org/\n"
        f"{stamp(start - timedelta(seconds=30))} WARN CitationGuard: rejected https://{nonce}.example.org/\n"
        f"{stamp(start + timedelta(seconds=60))} WARN CitationGuard: rejected https://new.example.org/\n"
        f"{stamp(start + timedelta(seconds=90))} WARN CitationGuard: rejected https://{nonce}.example.org/x\n"
        f"{stamp(datetime.now(UTC))} WARN CitationGuard: rejected https://now.example.org/\n"
    )
    code, out = invoke(config, "collect", "--once")
    assert code == 0
    assert " citation=2(+1 canary) " in out  # the counts collect prints end the window there too
    _code, out = invoke(config, "status", "--json")
    citation = next(g for g in json.loads(out)["guards"] if g["guard"] == "citation")
    _code, out = invoke(config, "audit", "--window", "24h", "--json")
    audited = next(g for g in json.loads(out)["guards"] if g["guard"] == "citation")
    assert (citation["organic_firings"], citation["canary_firings"]) == (2, 1)
    assert (audited["organic"], audited["canary"]) == (2, 1)


def test_an_unreadable_store_is_a_warning_and_the_audit_counts_every_firing_organic(tmp_path: Path) -> None:
    config, db = write_setup(tmp_path)
    db.parent.mkdir()
    db.write_bytes(b"this is not a database, only bytes where one should be" * 100)
    write_log(tmp_path / "logs" / "agent.log", new_nonce(), new_nonce())
    result = CliRunner().invoke(main, ["--config", str(config), "audit", "--json"])
    assert result.exit_code == 0, result.output
    assert "the store's runs could not be read" in result.stderr
    assert "lines carrying a run's nonce are counted organic" in result.stderr
    assert "Traceback" not in result.output
    citation = next(g for g in json.loads(result.stdout)["guards"] if g["guard"] == "citation")
    assert (citation["organic"], citation["canary"]) == (6, 0)


def test_a_database_server_that_is_not_there_is_said_in_its_own_words(tmp_path: Path) -> None:
    """The driver's sentence, not the Python class names of SQLAlchemy's and psycopg's exceptions."""
    from canary.demo.live import free_port

    config, _db = write_setup(tmp_path)
    config.write_text(config.read_text().replace(
        f"sqlite:///{_db}", f"postgresql+psycopg://canary:pw@127.0.0.1:{free_port()}/canary"))
    write_log(tmp_path / "logs" / "agent.log", new_nonce(), new_nonce())
    result = CliRunner().invoke(main, ["--config", str(config), "audit"])
    assert "the store's runs could not be read (connection failed: " in result.stderr, result.stderr
    assert "Error" not in result.stderr and "pw" not in result.stderr, result.stderr
