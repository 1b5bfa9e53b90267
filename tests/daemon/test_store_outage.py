"""A real daemon on a real PostgreSQL that goes away: nothing lost or doubled, and it says so.

Each test starts a PostgreSQL cluster of its own (``.ci/postgres``, in a folder of its own), so
stopping it or killing its connections touches no other test. The agent's log lines carry
sequence numbers; after the outage every line's firing is stored exactly once.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from canary.proxy.serving import BackgroundServer
from canary.store.sites import Site, quoted
from tests.daemon.projects import Project, canary, make_project, start_daemon, stop, wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "postgres"


@pytest.fixture
def server() -> Iterator[dict[str, str]]:
    """A PostgreSQL server of this test's own: its URL and folder."""
    installed = shutil.which("pg_ctl") or list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not (shutil.which("pg_isready") and installed):
        pytest.skip("PostgreSQL is not installed (Debian: apt install postgresql)")
    folder = tempfile.mkdtemp(prefix="canary-pg-outage-")
    out = subprocess.run(["bash", str(SCRIPT), "start", folder], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    values = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    try:
        yield {"url": values["CANARY_TEST_PG_URL"], "dir": folder}
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", folder], capture_output=True, timeout=120, check=False)
        shutil.rmtree(folder, ignore_errors=True)


def pg(action: str, folder: str) -> None:
    out = subprocess.run(["bash", str(SCRIPT), action, folder], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr


class Hooks:
    """A webhook receiver on loopback."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []

        async def hook(request: Request) -> Response:
            self.posts.append(await request.json())
            return JSONResponse({"ok": True})

        self.server = BackgroundServer(Starlette(routes=[Route("/hook", hook, methods=["POST"])])).start()


def write_lines(log: Path, start: int, count: int) -> None:
    """Lines stamped now, so the daemon's first read back over the window takes them in."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with log.open("a") as handle:
        for n in range(start, start + count):
            handle.write(f"{stamp} task finished seq={n}\n"
                         f"{stamp} CitationGuard: rejected https://x.example.org seq={n}\n")


def stored_seqs(url: str, project: Project) -> list[int]:
    site = Site(project.name)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            table = f"{quoted(site.schema)}.firings"
            if conn.execute(text("SELECT to_regclass(:t)"), {"t": table}).scalar() is None:
                return []  # the daemon has not made it yet
            lines = conn.execute(text(f"SELECT line FROM {table} WHERE guard = 'citation'"))
            return sorted(int(m.group(1)) for (line,) in lines if (m := re.search(r"seq=(\d+)", line)))
    finally:
        engine.dispose()


def metric(project: Project, name: str) -> float | None:
    body = httpx.get(project.metrics_url, timeout=5, trust_env=False).text
    found = re.search(rf"^{name}\{{[^}}]*\}} (\S+)$", body, flags=re.M)
    return float(found.group(1)) if found else None


def test_a_server_that_stops_and_comes_back_loses_and_doubles_nothing(server: dict[str, str], tmp_path: Path) -> None:
    hooks = Hooks()
    project = make_project(tmp_path, "outage", store_url=server["url"])
    text_ = project.config.read_text().replace("[alerts]\ndesktop = false\n",
                                               f"[alerts]\ndesktop = false\nwebhook = '{hooks.server.url}/hook'\n")
    project.config.write_text(text_)
    project.log.write_text("")
    write_lines(project.log, 0, 50)
    proc = start_daemon(project, tmp_path / "daemon.err")
    try:
        wait_for(lambda: len(stored_seqs(server["url"], project)) == 50, 90, "the first 50 firings")
        wait_for(lambda: metric(project, "canary_store_up") == 1.0, 30, "the store up")

        pg("stop", server["dir"])
        write_lines(project.log, 50, 50)  # written while the store is gone
        wait_for(lambda: metric(project, "canary_store_up") == 0.0, 60, "canary_store_up 0")
        status = canary("status", cwd=project.folder)
        assert status.returncode == 3, status.stdout + status.stderr
        assert "runs and the store cannot be written since" in status.stderr, status.stderr
        assert "keeping its place in the logs" in status.stderr
        assert status.stderr.count("could not be used") <= 1, status.stderr  # the failure told once
        wait_for(lambda: any(p.get("guard") == "(daemon)" for p in hooks.posts), 60, "the store alert")

        pg("start", server["dir"])
        write_lines(project.log, 100, 50)
        wait_for(lambda: len(stored_seqs(server["url"], project)) >= 150, 120, "every firing after the outage")
        wait_for(lambda: any(p.get("guard") == "(daemon)" and p.get("status") == "ok" for p in hooks.posts), 60,
                 "the store's recovery notice")
        time.sleep(2)  # a few more ticks: anything doubled would show now
        assert stored_seqs(server["url"], project) == list(range(150))
        told = [p for p in hooks.posts if p.get("guard") == "(daemon)"]
        assert [p["status"] for p in told] == ["error", "ok"], told  # one outage, told once, and its end
        wait_for(lambda: metric(project, "canary_store_up") == 1.0, 60, "canary_store_up back to 1")
        back = canary("status", "--json", cwd=project.folder)
        assert '"running": true' in back.stdout, back.stdout + back.stderr
    finally:
        stop(proc)
        hooks.server.stop()


def test_connections_killed_mid_run_lose_and_double_nothing(server: dict[str, str], tmp_path: Path) -> None:
    project = make_project(tmp_path, "killed", store_url=server["url"])
    project.log.write_text("")
    write_lines(project.log, 0, 10)
    proc = start_daemon(project, tmp_path / "daemon.err", tick=0.3)
    stop_writing = threading.Event()

    def agent() -> None:
        n = 10
        while not stop_writing.is_set() and n < 400:
            write_lines(project.log, n, 10)
            n += 10
            time.sleep(0.05)

    engine = create_engine(server["url"])
    writer = threading.Thread(target=agent)
    try:
        wait_for(lambda: stored_seqs(server["url"], project) != [], 90, "the first firings")
        writer.start()
        killed = 0
        deadline = time.monotonic() + 20
        while writer.is_alive() and time.monotonic() < deadline:
            with engine.connect() as conn:  # the daemon's connections, never this one
                killed += int(conn.execute(text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = 'canary' "
                    "AND pid <> pg_backend_pid() AND usename = 'canary'")).scalar() or 0)
            time.sleep(0.2)
        writer.join(60)
        assert killed > 0
        wait_for(lambda: len(stored_seqs(server["url"], project)) >= 400, 120, "every firing")
        time.sleep(2)
        assert stored_seqs(server["url"], project) == list(range(400))
    finally:
        stop_writing.set()
        engine.dispose()
        stop(proc)
