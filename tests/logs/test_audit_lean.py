"""``canary audit`` reads logs, not the store: it answers without importing SQLAlchemy or SQLModel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_audit_answers_without_importing_the_store(tmp_path: Path) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "a.toml").write_text("[guard]\nname = 'a'\nmatch = 'A: rejected'\n")
    (tmp_path / "canary.toml").write_text(
        "defs = ['defs/*.toml']\n[logs]\npaths = ['x.log']\nactivity = 'task done'\n"
        "correlate = 'task=(?P<id>\\\\w+)'\n"
        f"[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n")
    (tmp_path / "x.log").write_text("A: rejected task=1\ntask done\nnoise\nA: rejected\n")
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['canary', '--config', sys.argv[1], 'audit', '--json']\n"
        "try:\n"
        "    runpy.run_module('canary.cli.main', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    print('EXIT', exc.code, sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sqlalchemy', 'sqlmodel', 'pydantic', 'textual') "
        "or m in ('canary.store.engine', 'canary.store.tables', 'canary.store.migrations')), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CANARY_CONFIG"}
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "canary.toml")], capture_output=True,
                         text=True, env=env, timeout=60, check=False, cwd=tmp_path)
    assert out.stderr.startswith("EXIT 0 ") and out.stderr.rstrip().endswith(" []"), out.stderr
    doc = json.loads(out.stdout)
    assert [(g["guard"], g["firings"]) for g in doc["guards"]] == [("a", 2)]
    assert doc["activity"] == 1
