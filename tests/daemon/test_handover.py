"""A daemon started by hand restarts in place on SIGUSR2 with no agent request refused or failed.

The daemon binds its own ports (no service manager). On SIGUSR2 it starts a successor with its
listening sockets and drains; a real agent process calls the model through the proxy all along.
A second daemon started by hand on the same store is refused with a sentence naming the first.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from canary.demo.live import free_port
from canary.demo.model import create_model_server
from canary.proxy.serving import BackgroundServer
from tests.daemon.test_restart_activation import agent_results, write_config

pytestmark = pytest.mark.slow

AGENT = Path(__file__).with_name("organic_agent.py")


def wait_for_text(err: Path, text: str, count: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while err.read_text(errors="replace").count(text) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"no {count} x {text!r} in:\n{err.read_text(errors='replace')}")
        time.sleep(0.05)


def lock_released(lock: Path, timeout: float = 90.0) -> bool:
    deadline = time.monotonic() + timeout
    fd = os.open(lock, os.O_RDWR)
    try:
        while time.monotonic() < deadline:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError:
                time.sleep(0.1)
        return False
    finally:
        os.close(fd)


@pytest.mark.timeout(300)
def test_sigusr2_hands_the_sockets_to_a_new_daemon_and_no_request_fails(tmp_path: Path) -> None:
    proxy, fixtures = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    with BackgroundServer(create_model_server(), name="model") as model:
        config = write_config(tmp_path, proxy, fixtures, model.url)
        err = tmp_path / "daemon.err"
        argv = [sys.executable, "-m", "canary.cli.main", "--config", str(config), "daemon", "--tick", "0.5"]
        with err.open("ab") as sink:
            first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=sink)
        successor = None
        try:
            wait_for_text(err, "daemon up", 1)
            stop_file, out = tmp_path / "agent.stop", tmp_path / "agent.json"
            agent = subprocess.Popen([sys.executable, str(AGENT), f"http://{proxy}/v1/chat/completions", "10",
                                      str(stop_file), str(out)])
            try:
                time.sleep(1.0)
                first.send_signal(signal.SIGUSR2)
                assert first.wait(120) == 0  # drained and exited cleanly
                wait_for_text(err, "daemon up", 2)  # the successor is up
                successor = int((tmp_path / "canary.db.lock").read_text().strip())
                assert successor != first.pid
                time.sleep(1.0)
                results = agent_results(agent, stop_file, out)
            finally:
                if agent.poll() is None:
                    agent.kill()
                    agent.wait()
            # a second daemon by hand is refused, naming the one that runs
            second = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120)
            assert second.returncode != 0
            assert f"another daemon (pid {successor}) already runs" in second.stderr
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
            if successor is not None:
                os.kill(successor, signal.SIGTERM)
                assert lock_released(tmp_path / "canary.db.lock")
    assert [r for r in results if r[2] != "ok"] == []  # none refused, none failed
    assert len(results) > 15
    told = err.read_text(errors="replace")
    assert "the model proxy serves on" in told and "a socket the previous daemon handed over" in told
    assert "service manager" not in told  # no service manager is involved in a hand-over
