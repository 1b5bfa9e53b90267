"""A port already taken names the config key to change, and the canary daemon holding it when it is one."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from canary.config.settings import load_config
from canary.demo.live import free_port as _free_port
from canary.errors import UnavailableError
from canary.runs.session import Session, open_store


def _config(root: Path, model: int, fixtures: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "canary.toml"
    path.write_text(f"defs = []\n[logs]\npaths = []\n[model]\nlisten = '127.0.0.1:{model}'\n"
                    f"[fixtures]\nlisten = '127.0.0.1:{fixtures}'\n")
    return path


@pytest.mark.parametrize("key", ["[model] listen", "[fixtures] listen"])
def test_a_port_held_by_another_program_names_the_config_key(tmp_path: Path, key: str) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        taken = int(held.getsockname()[1])
        model, fixtures = (taken, _free_port()) if key == "[model] listen" else (_free_port(), taken)
        config = load_config(path=_config(tmp_path / "p", model, fixtures))
        store = open_store(config)
        try:
            with pytest.raises(UnavailableError) as caught:
                Session(config, store).start()
        finally:
            store.close()
    message = str(caught.value)
    assert f"127.0.0.1:{taken}" in message
    assert f"set another port in {key}" in message
    assert "canary daemon" not in message  # nothing says a daemon holds it: none does


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A real ``canary daemon`` of another project, and the model proxy port it holds."""
    model = _free_port()
    config = _config(tmp_path / "alpha", model, _free_port())
    canary = str(Path(sys.executable).with_name("canary"))
    errors = tmp_path / "daemon.stderr"
    with errors.open("wb") as sink:
        proc = subprocess.Popen([canary, "--config", str(config), "daemon", "--tick", "0.5"],
                                cwd=config.parent, stdout=subprocess.DEVNULL, stderr=sink)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, errors.read_text()
            done = subprocess.run([canary, "status", "--json"], cwd=config.parent, capture_output=True,
                                  text=True, timeout=60, check=False)
            if done.stdout and json.loads(done.stdout)["daemon"]["running"]:
                break
            assert time.monotonic() < deadline, done.stderr
            time.sleep(0.3)
        yield proc, model
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_a_port_held_by_a_canary_daemon_says_so_with_its_pid(
    daemon: tuple[subprocess.Popen[bytes], int], tmp_path: Path
) -> None:
    proc, model = daemon
    config = load_config(path=_config(tmp_path / "beta", model, _free_port()))
    store = open_store(config)
    try:
        with pytest.raises(UnavailableError) as caught:
            Session(config, store).start()
    finally:
        store.close()
    message = str(caught.value)
    assert f"the canary daemon pid {proc.pid}" in message
    assert "set another port in [model] listen" in message
