"""The daemon's path to its first accept loads no store, collectors or scheduler."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import canary.cli.main, canary.daemon.loop, canary.daemon.steps, canary.daemon.first, canary.daemon.sockets
import canary.daemon.reload, canary.daemon.handover
heavy = ("sqlalchemy", "sqlmodel", "textual", "hyperscan", "watchdog", "apscheduler", "canary.store.engine",
         "canary.logs.collect", "canary.runs.runner")
print(json.dumps([m for m in heavy if m in sys.modules]))
"""


def test_what_serves_first_imports_nothing_heavy() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == []
