"""Never break the agent: 20 daemon restarts under socket activation while a real agent calls the model.

This process plays systemd: it holds the proxy's and fixture server's listening sockets and
starts each daemon with them (``LISTEN_FDS``), SIGTERMs it, starts the next. A separate agent
process sends organic chat completions through the proxy all along, with no retries. The kernel
queues connections while no daemon runs; a stopping daemon drains what it accepted.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from canary.demo.live import free_port
from canary.demo.model import create_model_server
from canary.proxy.serving import BackgroundServer
from tests.daemon import activation

pytestmark = pytest.mark.slow

AGENT = Path(__file__).with_name("organic_agent.py")
RESTARTS = 20
#: Organic requests per second; tests/bench/bench_restart.py runs 50/s on a quiet machine.
RATE = 20.0
#: Restarts for the stream and crash variants, which add kinds of traffic, not count.
FEW = 5


@dataclass
class World:
    root: Path
    config: Path
    sockets: dict[str, socket.socket]
    model: BackgroundServer
    proxy_url: str

    def daemon(self, n: int) -> tuple[subprocess.Popen[bytes], Path]:
        err = self.root / f"daemon{n}.err"
        argv = [sys.executable, "-m", "canary.cli.main", "--config", str(self.config), "daemon", "--tick", "0.5"]
        return activation.spawn(argv, self.sockets, stderr=err), err


def write_config(root: Path, proxy: str, fixtures: str, upstream: str) -> Path:
    config = root / "canary.toml"
    config.write_text(
        f"""defs = []
[model]
listen = "{proxy}"
upstream = "{upstream}"
[fixtures]
listen = "{fixtures}"
[daemon]
control = "127.0.0.1:{free_port()}"
[store]
url = "sqlite:///{root / 'canary.db'}"
[alerts]
desktop = false
"""
    )
    return config


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    model = BackgroundServer(create_model_server(), name="model").start()
    sockets = {"proxy": activation.listener(), "fixtures": activation.listener()}
    proxy = activation.address(sockets["proxy"])
    config = write_config(tmp_path, proxy, activation.address(sockets["fixtures"]), model.url)
    yield World(tmp_path, config, sockets, model, f"http://{proxy}/v1/chat/completions")
    model.stop()
    for sock in sockets.values():
        sock.close()


def wait_up(proc: subprocess.Popen[bytes], err: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "daemon up" in err.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited {proc.returncode}:\n{err.read_text(errors='replace')}")
        time.sleep(0.05)
    raise AssertionError(f"the daemon did not come up:\n{err.read_text(errors='replace')}")


def stop(proc: subprocess.Popen[bytes], sig: int) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run_agent(world: World, *, rate: float, stream: bool = False) -> tuple[subprocess.Popen[bytes], Path, Path]:
    stop_file, out = world.root / "agent.stop", world.root / "agent.json"
    argv = [sys.executable, str(AGENT), world.proxy_url, str(rate), str(stop_file), str(out)]
    return subprocess.Popen([*argv, *(["--stream"] if stream else [])]), stop_file, out


def agent_results(proc: subprocess.Popen[bytes], stop_file: Path, out: Path) -> list[list[Any]]:
    stop_file.touch()
    assert proc.wait(300) == 0
    results: list[list[Any]] = json.loads(out.read_text())
    return results


def restart_under_load(
    world: World, sig: int, *, restarts: int = RESTARTS, stream: bool = False
) -> tuple[list[list[Any]], list[int]]:
    proc, err = world.daemon(0)
    wait_up(proc, err)
    agent = run_agent(world, rate=RATE, stream=stream)
    codes = []
    try:
        for n in range(1, restarts + 1):
            time.sleep(0.3)  # serve under load for a while
            codes.append(stop(proc, sig))
            proc, err = world.daemon(n)
            wait_up(proc, err)
        time.sleep(0.3)
        results = agent_results(*agent)
    finally:
        if agent[0].poll() is None:
            agent[0].kill()
        codes.append(stop(proc, signal.SIGTERM))
    return results, codes


@pytest.mark.timeout(1500)  # a daemon takes seconds to start on a loaded machine, twenty times
def test_twenty_sigterm_restarts_under_socket_activation_fail_no_agent_request(world: World) -> None:
    results, codes = restart_under_load(world, signal.SIGTERM)

    refused = [r for r in results if r[2] == "refused"]
    assert refused == [], refused[:5]
    # The goal is zero. Still open: in a few restarts out of twenty, a handful of requests sent
    # during the drain fail as the stopping daemon exits (ReadError), on connections its server
    # no longer tracks. This bound keeps any regression from that level visible.
    failures = [r for r in results if r[2] != "ok"]
    assert len(failures) <= len(results) // 100, failures[:5]
    assert codes == [0] * (RESTARTS + 1)  # every daemon drained and exited cleanly
    assert len(results) > RESTARTS * 0.3 * RATE  # the load really ran across the restarts
    # the kernel held connections made while no daemon ran: some waited, none was refused
    assert max(r[1] for r in results) > 0.3


@pytest.mark.timeout(600)
def test_sigterm_restarts_cut_no_stream(world: World) -> None:
    results, _codes = restart_under_load(world, signal.SIGTERM, restarts=FEW, stream=True)

    assert [r for r in results if r[2] == "refused"] == []
    failures = [r for r in results if r[2] != "ok"]
    assert len(failures) <= len(results) // 100, failures[:5]  # the same residue as above, no more
    assert len(results) > FEW * 0.3 * RATE


@pytest.mark.timeout(600)
def test_sigkill_refuses_no_connection(world: World) -> None:
    """A crash cuts what the dead daemon had accepted, but the queue keeps every new connection."""
    results, _codes = restart_under_load(world, signal.SIGKILL, restarts=FEW)

    refused = [r for r in results if r[2] == "refused"]
    assert refused == [], refused[:5]
    # What a killed daemon had accepted is cut (a daemon just started has accepted the whole
    # queue, so that can be many); what the next one serves arrives whole.
    cut = [r for r in results if r[2] == "failed"]
    assert all("ReadError" in r[3] or "RemoteProtocolError" in r[3] for r in cut), cut[:5]
    assert sum(r[2] == "ok" for r in results) > FEW * 0.3 * RATE


@pytest.mark.timeout(600)
def test_sighup_does_not_break_serving(world: World) -> None:
    proc, err = world.daemon(0)
    wait_up(proc, err)
    agent = run_agent(world, rate=RATE)
    try:
        for _ in range(3):
            time.sleep(0.5)
            proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        results = agent_results(*agent)
        assert proc.poll() is None  # still the same daemon
    finally:
        if agent[0].poll() is None:
            agent[0].kill()
        code = stop(proc, signal.SIGTERM)
    assert [r for r in results if r[2] != "ok"] == []
    assert code == 0
    assert "definitions reloaded" in err.read_text()  # the SIGHUP was taken, and serving went on
