"""The model server stopped and restarted under a running daemon: status, transition, alert, recovery;
and an https model server whose certificate the proxy refuses, reported the same way.

A real daemon process, a real model server on loopback that is stopped and started again on the
same port (or a TLS server with a test CA's certificate), the test's own requests as the agent's
organic traffic, and a webhook receiver.
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
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from canary.config.settings import load_config
from canary.demo.live import free_port
from canary.demo.model import create_model_server
from canary.proxy.serving import BackgroundServer
from tests.helpers_tls import tls_server

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


@contextmanager
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook receiver's URL and the alerts posted to it."""
    posts: list[dict[str, Any]] = []

    async def hook(request: Request) -> Response:
        posts.append(await request.json())
        return JSONResponse({"ok": True})

    receiver = BackgroundServer(Starlette(routes=[Route("/hook", hook, methods=["POST"])]), name="hook").start()
    try:
        yield f"{receiver.url}/hook", posts
    finally:
        receiver.stop()


def write_config(tmp_path: Path, proxy: int, upstream: str, hook: str) -> tuple[Path, Path]:
    """A project whose proxy listens on ``proxy`` in front of ``upstream``: its config and its store."""
    config = tmp_path / "canary.toml"
    db = tmp_path / "canary.db"
    config.write_text(
        f"""defs = []
[model]
listen = "127.0.0.1:{proxy}"
upstream = "{upstream}"
[fixtures]
listen = "127.0.0.1:{free_port()}"
[daemon]
control = "127.0.0.1:{free_port()}"
[store]
url = "sqlite:///{db}"
[alerts]
desktop = false
webhook = "{hook}"
"""
    )
    return config, db


@contextmanager
def running_daemon(config: Path, tmp_path: Path) -> Iterator[None]:
    """A daemon process for ``config``, up once the block starts, stopped with SIGTERM at its end."""
    err = tmp_path / "daemon.err"
    with err.open("wb") as sink:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "canary.cli.main", "--config", str(config), "daemon", "--tick", "0.5"],
            stdout=subprocess.DEVNULL, stderr=sink, env=os.environ.copy(),
        )
    try:
        wait_for(lambda: "daemon up" in err.read_text(), 120, "the daemon")
        yield
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(60)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()


@pytest.mark.timeout(600)
def test_model_server_down_and_back_is_a_status_a_transition_an_alert_and_a_recovery(tmp_path: Path) -> None:
    model_port, proxy = free_port(), free_port()
    model = BackgroundServer(create_model_server(), "127.0.0.1", model_port, name="model").start()
    with webhook() as (hook, posts), ExitStack() as stack:
        stack.callback(model.stop)
        config, db = write_config(tmp_path, proxy, f"http://user:secret@127.0.0.1:{model_port}", hook)
        stack.enter_context(running_daemon(config, tmp_path))
        url = f"http://127.0.0.1:{proxy}/v1/chat/completions"
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
        back = BackgroundServer(create_model_server(), "127.0.0.1", model_port, name="model").start()
        stack.callback(back.stop)
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


@pytest.mark.timeout(600)
def test_an_https_model_server_whose_certificate_is_refused_is_unreachable(tmp_path: Path) -> None:
    proxy = free_port()
    with webhook() as (hook, posts), tls_server(trustme.CA().issue_cert("127.0.0.1")) as model_port:
        config, db = write_config(tmp_path, proxy, f"https://127.0.0.1:{model_port}", hook)  # no ca_file
        with running_daemon(config, tmp_path), httpx.Client(timeout=30, trust_env=False) as agent:
            url = f"http://127.0.0.1:{proxy}/v1/chat/completions"
            failed = [agent.post(url, json=BODY) for _ in range(3)]
            assert [r.status_code for r in failed] == [502, 502, 502]
            assert all("upstream_certificate" in r.text for r in failed)

            down = wait_for(lambda: transitions(db), 60, "the model server's transition")
            assert down[0][0:2] == ("unreachable", "reachable")
            assert re.search(r"model server unreachable since \d\d:\d\d: 3 agent requests failed", down[0][2])
            assert "unable to get local issuer certificate" in down[0][2] and "[model] ca_file" in down[0][2]

            time.sleep(2)  # ticks go by; the daemon's own probe of the server must not reset the streak
            status = canary_cli(config, "status")
            assert re.search(r"model server unreachable since \d\d:\d\d: 3 agent requests failed", status.stdout)
            doc = json.loads(canary_cli(config, "status", "--json").stdout)
            assert doc["model"]["state"] == "unreachable" and doc["model"]["failed"] == 3
            assert [p["kind"] for p in doc["problems"]] == ["no_guards", "model_unreachable"]  # defs = []
            assert len(transitions(db)) == 1

            alert = wait_for(lambda: [p for p in posts if p["guard"] == "model server"], 60, "the alert")
            assert alert[0]["status"] == "unreachable" and "[model] ca_file" in alert[0]["reason"]


def _control(config: Path) -> int:
    match = re.search(r'control = "127\.0\.0\.1:(\d+)"', config.read_text())
    assert match is not None
    return int(match.group(1))
