"""The daemon's path to its first accept loads no store, collectors or scheduler."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import anthropic
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from canary.config.settings import load_config
from canary.daemon.first import check_listeners, serve_first
from canary.daemon.loop import Daemon
from canary.proxy.serving import BackgroundServer
from canary.runs.inflight import ActiveRun
from canary.runs.registry import Registry
from tests.runs.claude_agent import FailingModel

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


def test_a_daemon_under_a_service_manager_does_not_hand_over_on_sigusr2(tmp_path: Path) -> None:
    """systemd would take the old daemon's exit for the service's and end the successor with it."""
    config = tmp_path / "canary.toml"
    config.write_text(f"defs = []\n[store]\nurl = \"sqlite:///{tmp_path / 'canary.db'}\"\n")
    daemon = Daemon(load_config(path=config))
    daemon.managed = True
    with BackgroundServer(_app(), name="proxy") as proxy:
        daemon.session = SimpleNamespace(proxy=proxy, fixtures=None)  # type: ignore[assignment]
        try:
            assert daemon.hand_over() is False
        finally:
            if daemon.successor is not None:  # the check failed: end what it started
                daemon.successor.kill()
                daemon.successor.wait()
    assert not daemon.stop_event.is_set() and daemon.successor is None


def _app() -> Starlette:
    async def quick(request: Request) -> Response:
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/", quick)])


def test_a_socket_held_elsewhere_is_moved_by_reinstalling_with_the_config_the_daemon_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "conf dir" / "other.toml"
    config.parent.mkdir()
    config.write_text(f"defs = []\n[store]\nurl = \"sqlite:///{tmp_path / 'canary.db'}\"\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CANARY_CONFIG", raising=False)
    held = socket.socket()
    held.bind(("127.0.0.1", 0))  # not the port canary.toml names
    with held, caplog.at_level(logging.WARNING):
        check_listeners(load_config(path=config), {"proxy": held}, managed=True)
    assert "run `canary service install --config 'conf dir/other.toml'` again to move it" in caplog.text


def test_the_proxy_served_first_tells_a_run_the_model_server_failed_its_call(tmp_path: Path) -> None:
    """A 5xx the model server answered a run's call is the run's to name, on the service manager's socket too."""
    nonce = "k3v9abcdefghijklmnop"
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    with held, FailingModel() as model:
        config = tmp_path / "canary.toml"
        config.write_text(f"defs = []\n[model]\nlisten = \"127.0.0.1:{held.getsockname()[1]}\"\n"
                          f"upstream = \"{model.url}\"\n[store]\nurl = \"sqlite:///{tmp_path / 'canary.db'}\"\n")
        registry = Registry(has_upstream=True)
        run = ActiveRun(1, "cite", nonce, 2, "fabricated", None, "page", started=0.0, deadline=2e9)
        registry.add(run)
        first = serve_first(load_config(path=config), {"proxy": held}, registry, drain=0.0)
        try:
            assert first.proxy is not None
            with anthropic.Anthropic(base_url=first.proxy.url, api_key="k", max_retries=0) as client, \
                    pytest.raises(anthropic.InternalServerError):
                client.messages.create(model="m", max_tokens=16,
                                       messages=[{"role": "user", "content": f"FAIL500 run {nonce}"}])
        finally:
            first.stop()
    assert run.upstream_failure == (f"the model server at {model.url} ([model] upstream) answered the run's "
                                    "model call with HTTP 500")
    assert run.upstream_relayed
