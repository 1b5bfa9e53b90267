"""The model server stopped and restarted under a running daemon: status, transition, alert, recovery.

A real daemon process, a real model server on loopback that is stopped and started again on the
same port, the test's own requests as the agent's organic traffic, and a webhook receiver.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from canary.config.settings import load_config
from canary.demo.live import free_port
from canary.demo.model import create_model_server
from canary.proxy.serving import BackgroundServer

pytestmark = pytest.mark.slow

BODY = {"model": "demo", "messages": [{"role": "user", "content": "What is the minimum monthly amount?"}]}


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def transitions(db: Path) -> list[tuple[str, str | None, str]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT status, previous, reason FROM transitions WHERE guard = 'model server' ORDER BY id"
        ).fetchall()
    return [(str(a), b, str(c)) for a, b, c in rows]


def canary_cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "canary.cli.main", "--config", str(config), *args],
        capture_output=True, text=True, timeout=120, check=False,
    )


@pytest.mark.timeout(600)
def test_model_server_down_and_back_is_a_status_a_transition_an_alert_and_a_recovery(tmp_path: Path) -> None:
    posts: list[dict[str, Any]] = []

    async def hook(request: Request) -> Response:
        posts.append(await request.json())
        return JSONResponse({"ok": True})

    receiver = BackgroundServer(Starlette(routes=[Route("/hook", hook, methods=["POST"])]), name="hook").start()
    model_port, proxy = free_port(), free_port()
    model = BackgroundServer(create_model_server(), "127.0.0.1", model_port, name="model").start()
    config = tmp_path / "canary.toml"
    db = tmp_path / "canary.db"
    config.write_text(
        f"""defs = []
[model]
listen = "127.0.0.1:{proxy}"
upstream = "http://user:secret@127.0.0.1:{model_port}"
[fixtures]
listen = "127.0.0.1:{free_port()}"
[daemon]
control = "127.0.0.1:{free_port()}"
[store]
url = "sqlite:///{db}"
[alerts]
desktop = false
webhook = "{receiver.url}/hook"
"""
    )
    err = tmp_path / "daemon.err"
    with err.open("wb") as sink:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "canary.cli.main", "--config", str(config), "daemon", "--tick", "0.5"],
            stdout=subprocess.DEVNULL, stderr=sink, env=os.environ.copy(),
        )
    url = f"http://127.0.0.1:{proxy}/v1/chat/completions"
    try:
        wait_for(lambda: "daemon up" in err.read_text(), 120, "the daemon")
        with httpx.Client(timeout=30, trust_env=False) as agent:
            assert agent.post(url, json=BODY).status_code == 200
            model.stop()
            failed = [agent.post(url, json=BODY).status_code for _ in range(3)]
        assert failed == [502, 502, 502]

        down = wait_for(lambda: transitions(db), 60, "the model server's transition")
        assert down[0][0:2] == ("unreachable", "reachable")
        assert re.search(r"model server unreachable since \d\d:\d\d: 3 agent requests failed", down[0][2])
        assert "refused the connection" in down[0][2] and "secret" not in down[0][2]

        status = canary_cli(config, "status")
        assert re.search(r"model server unreachable since \d\d:\d\d: 3 agent requests failed", status.stdout)
        doc = json.loads(canary_cli(config, "status", "--json").stdout)
        assert doc["model"]["state"] == "unreachable" and doc["model"]["failed"] == 3
        assert "secret" not in json.dumps(doc)

        alert = wait_for(lambda: [p for p in posts if p["guard"] == "model server"], 60, "the alert")
        assert alert[0]["status"] == "unreachable"

        # back on the same port: the daemon sees it accept connections again, no request needed
        model = BackgroundServer(create_model_server(), "127.0.0.1", model_port, name="model").start()
        wait_for(lambda: len(transitions(db)) >= 2, 60, "the recovery transition")
        assert transitions(db)[1][0:2] == ("reachable", "unreachable")
        recovered = wait_for(
            lambda: [p for p in posts if p["guard"] == "model server" and p["status"] == "reachable"],
            60, "the recovery alert",
        )
        assert "answers again" in recovered[0]["reason"]
        status = canary_cli(config, "status")
        assert "model server unreachable" not in status.stdout
        doc = json.loads(canary_cli(config, "status", "--json").stdout)
        assert doc["model"]["state"] == "reachable"
        metrics = httpx.get(f"http://127.0.0.1:{_control(config)}/metrics", trust_env=False).text
        project = load_config(path=config).project
        assert f'canary_proxy_requests_total{{outcome="refused",project="{project}"}} 3.0' in metrics
        assert f'canary_proxy_requests_total{{outcome="ok",project="{project}"}} 1.0' in metrics
        assert f'canary_proxy_upstream_seconds_count{{project="{project}"}} 1.0' in metrics
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(60)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
        model.stop()
        receiver.stop()


def _control(config: Path) -> int:
    match = re.search(r'control = "127\.0\.0\.1:(\d+)"', config.read_text())
    assert match is not None
    return int(match.group(1))
