"""``canary status --json`` when the store cannot be opened: still a JSON document on stdout, saying
so (its reason redacted and made safe, no traceback), with exit 3; the text output is unchanged: the
reason on stderr, nothing on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from canary.cli.main import main
from canary.demo.live import free_port

GUARD = "[guard]\nname = 'cite'\nmatch = 'CitationGuard: rejected'\n"


def write_config(folder: Path, url: str) -> Path:
    """A config of one guard on the store at ``url``."""
    (folder / "defs").mkdir(parents=True, exist_ok=True)
    (folder / "defs" / "cite.toml").write_text(GUARD)
    (folder / "agent.log").write_text("")
    path = folder / "canary.toml"
    path.write_text(f"defs = ['defs/*.toml']\nproject = 'shop'\n[logs]\npaths = ['{folder / 'agent.log'}']\n"
                    f"[alerts]\ndesktop = false\n[store]\nurl = {json.dumps(url)}\n")
    return path


def console(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``canary status`` as the console script runs it (its quick way)."""
    code = "import sys\nfrom canary.cli.entry import main\nsys.argv = ['canary', *sys.argv[1:]]\nmain()\n"
    env = {k: v for k, v in os.environ.items() if k not in ("CANARY_CONFIG", "NO_COLOR")}
    return subprocess.run([sys.executable, "-c", code, "status", "--config", str(config), *args],
                          capture_output=True, text=True, env=env, timeout=60, check=False)


def outputs(config: Path, *args: str) -> list[tuple[int, str, str]]:
    """(exit code, stdout, stderr) through the console script's quick way and through click."""
    quick = console(config, *args)
    done = CliRunner().invoke(main, ["status", "--config", str(config), *args])
    return [(quick.returncode, quick.stdout, quick.stderr), (done.exit_code, done.stdout, done.stderr)]


def assert_unreadable(doc: dict[str, Any], config: Path, *, store: str, reason: str) -> None:
    assert doc["project"] == "shop" and doc["config"] == str(config) and doc["store"] == store
    assert reason in doc["error"], doc["error"]
    assert doc["problems"] == [{"kind": "store_unavailable", "message": doc["error"]}]
    # nothing is known of them: null, never an empty list a script would read as "no guard alerts"
    assert doc["daemon"] is None and doc["guards"] is None and doc["model"] is None


def test_a_corrupt_sqlite_store_is_a_json_document_with_exit_3(tmp_path: Path) -> None:
    db = tmp_path / "st\x1b]0;pwned\x07" / "canary.db"  # a folder name a terminal would obey
    db.parent.mkdir()
    db.write_text("this is no database\n" * 100)
    config = write_config(tmp_path / "agent", f"sqlite:///{db}")

    for code, stdout, stderr in outputs(config, "--json"):
        assert code == 3, stdout + stderr
        assert "could not be used" in stderr and "Traceback" not in stdout + stderr, stderr
        doc = json.loads(stdout)
        assert_unreadable(doc, config, store=f"sqlite:///{db}", reason="file is not a database")
        assert "\x1b" not in doc["error"] and "\x07" not in doc["error"]  # shown, never obeyed by `jq -r`
        assert "\\x1b]0;pwned\\x07" in doc["error"]


def test_an_unreachable_postgresql_store_is_a_json_document_without_its_password(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://canary:hunter2secret@127.0.0.1:{free_port()}/canary"
    config = write_config(tmp_path / "agent", url)

    for code, stdout, stderr in outputs(config, "--json"):
        assert code == 3, stdout + stderr
        assert "hunter2secret" not in stdout + stderr
        doc = json.loads(stdout)
        assert_unreadable(doc, config, store=url.replace("canary:hunter2secret@", "***@"),
                          reason="could not be used")
        assert "\n" not in doc["error"]  # one line, no traceback


def test_the_text_output_of_an_unreadable_store_is_unchanged(tmp_path: Path) -> None:
    db = tmp_path / "canary.db"
    db.write_text("this is no database\n" * 100)
    config = write_config(tmp_path / "agent", f"sqlite:///{db}")

    for code, stdout, stderr in outputs(config):
        assert code == 3, stdout + stderr
        assert stdout == ""
        assert stderr.startswith("error: the store at ") and "file is not a database" in stderr, stderr


def test_a_broken_definition_is_listed_after_the_store(tmp_path: Path) -> None:
    db = tmp_path / "canary.db"
    db.write_text("this is no database\n" * 100)
    config = write_config(tmp_path / "agent", f"sqlite:///{db}")
    (config.parent / "defs" / "quote.toml").write_text(GUARD.replace("cite", "quote") + "windw = '24h'\n")

    for code, stdout, stderr in outputs(config, "--json"):
        assert code == 3, stdout + stderr
        problems = json.loads(stdout)["problems"]
        assert [p["kind"] for p in problems] == ["store_unavailable", "definitions"], problems
        assert "windw" in problems[1]["message"]


def test_all_projects_of_an_unreachable_store_is_a_json_document_with_exit_3(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://canary:hunter2secret@127.0.0.1:{free_port()}/canary"
    config = write_config(tmp_path / "agent", url)

    for code, stdout, stderr in outputs(config, "--all-projects", "--json"):
        assert code == 3, stdout + stderr
        assert "hunter2secret" not in stdout + stderr and "Traceback" not in stdout + stderr
        doc = json.loads(stdout)
        assert doc["store"] == url.replace("canary:hunter2secret@", "***@")
        assert doc["projects"] is None  # nothing is known of them, never "no project alerts"
        assert "could not be used" in doc["error"] and "\n" not in doc["error"], doc["error"]
        assert doc["problems"] == [{"kind": "store_unavailable", "message": doc["error"]}]
    plain = CliRunner().invoke(main, ["status", "--config", str(config), "--all-projects"])
    assert plain.exit_code == 3 and plain.stdout == "", plain.output
