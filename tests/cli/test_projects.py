"""One store per project: the default store and control address follow the config file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from canary import locations
from canary.config.settings import load_config
from canary.daemon.control import ControlClient, connect
from canary.daemon.token import ensure_token, read_token, token_path
from canary.demo.live import free_port as _free_port
from canary.errors import UnavailableError


def _project(root: Path, log_line: str) -> Path:
    root.mkdir(parents=True)
    (root / "agent.log").write_text(log_line)
    (root / "canary.toml").write_text(
        f"defs = []\n[logs]\npaths = [{str(root / 'agent.log')!r}]\n"
        f"[model]\nlisten = '127.0.0.1:{_free_port()}'\n[fixtures]\nlisten = '127.0.0.1:{_free_port()}'\n")
    return root / "canary.toml"


def _canary(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    canary = str(Path(sys.executable).with_name("canary"))
    return subprocess.run([canary, *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          check=False, env=os.environ.copy())


def test_two_projects_get_two_stores_and_two_control_addresses(tmp_path: Path) -> None:
    first = load_config(path=_project(tmp_path / "alpha", ""))
    second = load_config(path=_project(tmp_path / "beta", ""))
    assert first.store.url != second.store.url
    assert first.daemon.control != second.daemon.control
    state = Path(os.environ["CANARY_STATE_DIR"])
    first_db = Path(first.store.url.removeprefix("sqlite:///"))
    assert first_db.parent.parent == state / "projects"
    assert first_db.parent.name.startswith("alpha-") and first_db.name == "canary.db"
    # The same config file always maps to the same folder and port.
    again = load_config(path=tmp_path / "alpha" / "canary.toml")
    assert (again.store.url, again.daemon.control) == (first.store.url, first.daemon.control)


def test_an_explicit_store_url_and_control_address_still_win(tmp_path: Path) -> None:
    path = _project(tmp_path / "alpha", "")
    with path.open("a") as f:
        f.write(f"[store]\nurl = 'sqlite:///{(tmp_path / 'mine.db').as_posix()}'\n"
                "[daemon]\ncontrol = '127.0.0.1:11999'\n")
    config = load_config(path=path)
    assert config.store.url == f"sqlite:///{(tmp_path / 'mine.db').as_posix()}"
    assert config.daemon.control == "127.0.0.1:11999"


@contextmanager
def _daemon(config: Path, errors: Path) -> Iterator[Path]:
    """A real ``canary daemon`` for one project, with defaults for its store, control address and token."""
    canary = str(Path(sys.executable).with_name("canary"))
    with errors.open("wb") as sink:
        proc = subprocess.Popen([canary, "--config", str(config), "daemon", "--tick", "0.5"],
                                cwd=config.parent, stdout=subprocess.DEVNULL, stderr=sink)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, errors.read_text()
            done = _canary("status", "--json", cwd=config.parent)
            if done.stdout and json.loads(done.stdout)["daemon"]["running"]:
                break
            assert time.monotonic() < deadline, done.stderr
            time.sleep(0.3)
        yield config
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def daemon_of_alpha(tmp_path: Path) -> Iterator[Path]:
    """A real ``canary daemon`` for project alpha."""
    config = _project(tmp_path / "alpha", "CitationGuard: rejected https://x.example.org\n")
    with _daemon(config, tmp_path / "alpha.stderr") as running:
        yield running


@pytest.mark.slow
def test_status_in_a_second_project_never_reads_the_first_projects_daemon(
    daemon_of_alpha: Path, tmp_path: Path
) -> None:
    alpha = json.loads(_canary("status", "--json", cwd=daemon_of_alpha.parent).stdout)
    beta_config = _project(tmp_path / "beta", "")
    done = _canary("status", "--json", cwd=beta_config.parent)
    beta = json.loads(done.stdout)
    assert alpha["daemon"]["running"] is True
    assert beta["daemon"]["running"] is False
    assert alpha["config"] == str(daemon_of_alpha) and beta["config"] == str(beta_config)
    assert alpha["store"] != beta["store"]
    assert beta["store"] == load_config(path=beta_config).store.url
    # The human form names them too, on stderr, so a pipe of the table stays the table.
    human = _canary("status", cwd=beta_config.parent)
    assert f"config {beta_config}" in human.stderr and f"store {beta['store']}" in human.stderr
    assert "config" not in human.stdout.splitlines()[0]
    # Each project's daemon has its own token, in its own folder: alpha's refuses beta's.
    first, second = load_config(path=daemon_of_alpha), load_config(path=beta_config)
    assert token_path(first.path).parent == locations.project_dir(daemon_of_alpha)
    assert not (locations.state_dir() / "control.token").exists()  # no token shared by every project
    alpha_token, beta_token = read_token(token_path(first.path)), ensure_token(token_path(second.path))
    assert alpha_token and beta_token and alpha_token != beta_token
    assert token_path(second.path).parent == locations.project_dir(beta_config)
    with ControlClient(first.daemon.control, beta_token) as stranger, pytest.raises(UnavailableError):
        stranger.status()
    client = connect(first.daemon.control, token_path(first.path))
    assert client is not None
    with client:
        assert client.status()["daemon"]["running"] is True


def test_project_folders_are_owner_only(tmp_path: Path) -> None:
    from canary.store.engine import Store

    config = load_config(path=_project(tmp_path / "alpha", ""))
    Store(config.store.url).close()
    db = Path(config.store.url.removeprefix("sqlite:///"))
    for folder in (locations.state_dir(), db.parent.parent, db.parent):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert db.stat().st_mode & 0o777 == 0o600
