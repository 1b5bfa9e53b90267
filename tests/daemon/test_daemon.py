"""The daemon as a real subprocess against the demo agent.

Counts grow as the agent logs; a leaking canary becomes a transition becomes a
webhook POST to a local receiver; SIGKILL and restart lose and double nothing;
SIGTERM during a run exits cleanly; a second daemon on the same store is
refused; ``canary run`` goes through the running daemon.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from canary.daemon.token import token_path
from canary.demo.agent import create_agent
from canary.demo.live import free_port
from canary.demo.model import create_model_server
from canary.locations import bundled_defs_dir
from canary.proxy.serving import BackgroundServer

pytestmark = pytest.mark.slow

#: The lines of the two guards the test's definitions declare (the agent has more guards).
GUARD_LINE = re.compile(r"(CitationGuard|VersionGuard): rejected")


class Receiver:
    """A webhook receiver on loopback that records every POST."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []

        async def hook(request: Request) -> Response:
            self.posts.append(await request.json())
            return JSONResponse({"ok": True})

        self.server = BackgroundServer(Starlette(routes=[Route("/hook", hook, methods=["POST"])])).start()

    @property
    def url(self) -> str:
        return f"{self.server.url}/hook"


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    model = BackgroundServer(create_model_server(fabricate_every=2), name="model").start()
    proxy, fixtures, control, agent_port = free_port(), free_port(), free_port(), free_port()
    log = tmp_path / "agent.log"
    log.touch()
    agent = BackgroundServer(
        create_agent(f"http://127.0.0.1:{proxy}/v1", log), "127.0.0.1", agent_port, name="agent"
    ).start()
    receiver = Receiver()
    defs = tmp_path / "defs"
    defs.mkdir()
    for name in ("citation", "version"):
        text = (bundled_defs_dir() / f"{name}.toml").read_text()
        (defs / f"{name}.toml").write_text(text.replace('every = "12h"', 'every = "6h"'))
    config = tmp_path / "canary.toml"
    config.write_text(
        f"""defs = ["defs/*.toml"]
[agent]
url = "http://127.0.0.1:{agent_port}/ask"
timeout = "30s"
[model]
listen = "127.0.0.1:{proxy}"
upstream = "{model.url}"
[fixtures]
listen = "127.0.0.1:{fixtures}"
[daemon]
control = "127.0.0.1:{control}"
[logs]
paths = ["{log}"]
activity = 'task finished'
[store]
url = "sqlite:///{tmp_path / 'canary.db'}"
[alerts]
desktop = false
webhook = "{receiver.url}"
repeat = "6h"
"""
    )
    yield {
        "root": tmp_path, "config": config, "log": log, "db": tmp_path / "canary.db",
        "agent": f"http://127.0.0.1:{agent_port}/ask", "receiver": receiver, "control": control,
    }
    for server in (agent, model, receiver.server):
        server.stop()


def start_daemon(world: dict[str, Any], name: str = "daemon", tick: str = "0.5") -> subprocess.Popen[bytes]:
    err = world["root"] / f"{name}.err"
    with err.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "canary.cli.main", "--config", str(world["config"]), "daemon",
             "--tick", tick, "--spread", "1s"],
            stdout=subprocess.DEVNULL, stderr=sink, env=os.environ.copy(),
        )


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 40) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db, timeout=30) as conn:
        return conn.execute(sql).fetchall()


def heartbeat(db: Path) -> bool:
    """Whether the daemon has beaten once (the store may not exist or be migrated yet)."""
    try:
        return bool(db.exists() and query(db, "SELECT count(*) FROM heartbeat")[0][0])
    except sqlite3.OperationalError:
        return False


def have_runs(db: Path) -> bool:
    try:
        return bool(db.exists() and query(db, "SELECT count(*) FROM runs")[0][0])
    except sqlite3.OperationalError:
        return False


def guard_lines(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if GUARD_LINE.search(line))


def firings(db: Path) -> int:
    return int(query(db, "SELECT count(*) FROM firings")[0][0]) if db.exists() else 0


def traffic(world: dict[str, Any], n: int, page: str) -> None:
    for i in range(n):
        httpx.post(world["agent"], json={"prompt": f"Read {page}?q={i} and tell me the amount."}, timeout=30)


@pytest.fixture
def page() -> Iterator[str]:
    async def serve(request: Request) -> Response:
        return Response("<p>The minimum amount is exactly 2743 euros per month.</p>", media_type="text/html")

    with BackgroundServer(Starlette(routes=[Route("/page", serve)])) as server:
        yield f"{server.url}/page"


def test_counts_transitions_webhook_and_sigkill_restart(world: dict[str, Any], page: str) -> None:
    db: Path = world["db"]
    daemon = start_daemon(world)
    try:
        receiver: Receiver = world["receiver"]
        posts = wait_for(
            lambda: [p for p in receiver.posts if p["guard"] == "version" and p["status"] == "asleep"],
            60, "the version guard's asleep alert",
        )
        alert = posts[0]
        assert "fake-version leaked" in alert["reason"] and "ASLEEP" in alert["text"]
        transitions = query(db, "SELECT guard, status FROM transitions WHERE guard = 'version'")
        assert ("version", "asleep") in transitions
        verdicts = dict(query(db, "SELECT canary, verdict FROM runs WHERE verdict IS NOT NULL"))
        assert verdicts.get("fake-version") == "leaked"
        wait_for(lambda: verdicts.get("fake-url") or dict(
            query(db, "SELECT canary, verdict FROM runs WHERE verdict IS NOT NULL")).get("fake-url"),
            60, "the citation canary's verdict")
        traffic(world, 8, page)  # every second model answer is a fabrication: organic firings
        wait_for(lambda: firings(db) == guard_lines(world["log"]) and firings(db) > 0, 30, "organic firings")
        organic = query(db, "SELECT count(*) FROM firings WHERE run_id IS NULL")[0][0]
        assert organic >= 1
    finally:
        code = stop(daemon, signal.SIGKILL)
    assert code == -signal.SIGKILL
    # While the daemon is down the proxy is too, so the agent cannot answer: its log still grows.
    with world["log"].open("a") as f:
        for i in range(5):
            f.write(f"2026-11-29T10:00:0{i}.000Z WARN  guards CitationGuard: rejected url=https://x{i}.example.org\n")
    before = firings(db)
    assert before < guard_lines(world["log"])
    again = start_daemon(world)
    try:
        wait_for(lambda: firings(db) == guard_lines(world["log"]), 30, "catch-up after restart")
        time.sleep(2)
        assert firings(db) == guard_lines(world["log"])
        dupes = query(db, "SELECT file_key, offset, guard, count(*) c FROM firings GROUP BY 1, 2, 3 HAVING c > 1")
        assert dupes == []
    finally:
        assert stop(again) == 0
    beat = query(db, "SELECT stopped FROM heartbeat")
    assert beat and beat[0][0] is not None
    assert query(db, "SELECT count(*) FROM runs WHERE verdict IS NULL")[0][0] == 0


def test_second_daemon_on_the_same_store_is_refused(world: dict[str, Any]) -> None:
    first = start_daemon(world)
    try:
        wait_for(lambda: heartbeat(world["db"]), 30, "the first daemon's heartbeat")
        second = start_daemon(world, "second")
        code = second.wait(30)
        err = (world["root"] / "second.err").read_text()
        assert code == 3, err
        assert "another daemon" in err and str(first.pid) in err
    finally:
        assert stop(first) == 0


def test_canary_run_goes_through_the_daemon_and_control_refuses_strangers(world: dict[str, Any]) -> None:
    daemon = start_daemon(world)
    try:
        control = f"http://127.0.0.1:{world['control']}"
        wait_for(lambda: _answers(f"{control}/health"), 30, "the control API")
        assert httpx.get(f"{control}/status").status_code == 401
        token = token_path(world["config"]).read_text().strip()  # the project's own token
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{control}/status", headers={**auth, "Origin": "http://evil.example"}).status_code == 403
        assert httpx.get(f"{control}/status", headers=auth).json()["daemon"]["running"] is True
        metrics = httpx.get(f"{control}/metrics").text
        assert re.search(r'^canary_guard_firings_total\{guard="version",project="[^"]+",source="organic"\}',
                         metrics, flags=re.M)
        result = subprocess.run(
            [sys.executable, "-m", "canary.cli.main", "--config", str(world["config"]), "run", "version", "--json"],
            capture_output=True, timeout=120, check=False,
        )
        assert "through the daemon" in result.stderr.decode(), result.stderr.decode()[-2000:]
        assert result.stdout, result.stderr.decode()[-3000:]
        runs = json.loads(result.stdout)["runs"]
        assert [r["verdict"] for r in runs] == ["leaked"]
        assert result.returncode == 1
    finally:
        assert stop(daemon) == 0


def test_a_guard_defined_after_the_daemons_last_tick_runs_at_once(world: dict[str, Any]) -> None:
    """``canary run NEW`` right after NEW's file is written: the daemon loads the definitions it has
    not read yet, rather than saying there is no such guard until its next tick (a minute away)."""
    daemon = start_daemon(world, tick="60")
    try:
        control = f"http://127.0.0.1:{world['control']}"
        wait_for(lambda: _answers(f"{control}/health"), 30, "the control API")
        defs = world["config"].parent / "defs"
        text = (defs / "version.toml").read_text()
        (defs / "version2.toml").write_text(text.replace('name = "version"', 'name = "version2"', 1))
        result = subprocess.run(
            [sys.executable, "-m", "canary.cli.main", "--config", str(world["config"]), "run", "version2", "--json"],
            capture_output=True, timeout=120, check=False,
        )
        assert result.stdout, result.stderr.decode()[-3000:]
        runs = json.loads(result.stdout)["runs"]
        assert [(r["guard"], r["verdict"]) for r in runs] == [("version2", "leaked")]
    finally:
        assert stop(daemon) == 0


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=2)
    except httpx.TransportError:
        return False
    return True


def test_sigterm_during_a_run_exits_cleanly(world: dict[str, Any], tmp_path: Path) -> None:
    slow = _slow_agent()
    config: Path = world["config"]
    config.write_text(re.sub(r'url = "http://127.0.0.1:\d+/ask"', f'url = "{slow.url}/ask"', config.read_text()))
    daemon = start_daemon(world)
    try:
        wait_for(lambda: have_runs(world["db"]), 30, "a run in flight")
    finally:
        started = time.monotonic()
        code = stop(daemon)
        slow.stop()
    assert code == 0
    assert time.monotonic() - started < 40
    assert query(world["db"], "SELECT count(*) FROM runs WHERE verdict IS NULL")[0][0] == 0
    assert query(world["db"], "SELECT stopped FROM heartbeat")[0][0] is not None


def _slow_agent() -> BackgroundServer:
    release = threading.Event()

    async def ask(request: Request) -> Response:
        import asyncio

        await asyncio.sleep(3)
        return JSONResponse({"answer": "I could not read it."})

    del release
    return BackgroundServer(Starlette(routes=[Route("/ask", ask, methods=["POST"])])).start()
