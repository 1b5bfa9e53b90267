"""The control token file: owner-only from creation, never followed through a link, rotated when exposed."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from canary import locations
from canary.daemon.token import TOKEN_FILE, ensure_token, read_token, token_path
from canary.demo.live import free_port
from canary.errors import UnavailableError


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_token_file_is_created_owner_only_in_the_state_dir() -> None:
    token = ensure_token()
    path = locations.state_dir() / TOKEN_FILE
    assert token_path() == path
    assert mode(path) == 0o600
    assert len(token) >= 40
    assert read_token() == token
    assert ensure_token() == token  # stable once created


def test_a_missing_state_dir_is_created_0700(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "control.token"
    token = ensure_token(path)
    assert mode(path.parent) == 0o700
    assert mode(path) == 0o600
    assert path.read_text().strip() == token


def test_a_token_readable_by_others_is_rotated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "control.token"
    path.write_text("leaked-token\n")
    os.chmod(path, 0o644)
    with caplog.at_level(logging.WARNING, logger="canary.daemon.token"):
        token = ensure_token(path)
    assert token != "leaked-token" and len(token) >= 40  # someone may have read the old one
    assert mode(path) == 0o600
    assert read_token(path) == token
    assert "mode 644" in caplog.text


def test_a_symlinked_token_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "someone-elses-file"
    target.write_text("not a token\n")
    os.chmod(target, 0o644)
    path = tmp_path / "control.token"
    path.symlink_to(target)
    with pytest.raises(UnavailableError, match="symbolic link; it is never followed"):
        ensure_token(path)
    assert mode(target) == 0o644 and target.read_text() == "not a token\n"
    assert read_token(path) is None  # the client does not take its content either


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.symlink_to(p.parent / "nowhere"), "symbolic link to nothing"),
        (lambda p: p.mkdir(), "is not a regular file"),
        (os.mkfifo, "is not a regular file"),
    ],
    ids=["dangling-symlink", "directory", "fifo"],
)
def test_a_token_path_that_is_not_a_regular_file_is_a_clear_error(
    tmp_path: Path, make: Any, message: str
) -> None:
    path = tmp_path / "control.token"
    make(path)
    with pytest.raises(UnavailableError, match=message) as raised:
        ensure_token(path)
    assert str(path) in str(raised.value) and "remove it" in str(raised.value)


@pytest.mark.slow
def test_the_daemon_on_a_bad_token_path_says_so_without_a_traceback_and_exits_3(tmp_path: Path) -> None:
    token_path(tmp_path / "canary.toml").mkdir(parents=True)  # the project's token path
    (tmp_path / "canary.toml").write_text(
        f"defs = []\n[logs]\npaths = []\n[store]\nurl = 'sqlite:///{(tmp_path / 'canary.db').as_posix()}'\n"
        f"[model]\nlisten = '127.0.0.1:{free_port()}'\n[fixtures]\nlisten = '127.0.0.1:{free_port()}'\n"
        f"[daemon]\ncontrol = '127.0.0.1:{free_port()}'\n")
    canary = str(Path(sys.executable).with_name("canary"))
    done = subprocess.run([canary, "daemon"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert "is not a regular file; remove it" in done.stderr


def test_an_empty_token_file_gets_a_token(tmp_path: Path) -> None:
    path = tmp_path / "control.token"
    path.touch(mode=0o600)
    token = ensure_token(path)
    assert token
    assert read_token(path) == token


def test_read_token_is_none_when_missing_or_empty(tmp_path: Path) -> None:
    assert read_token(tmp_path / "absent") is None
    (tmp_path / "empty").write_text("\n")
    assert read_token(tmp_path / "empty") is None
