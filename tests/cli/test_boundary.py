"""The CLI's one error boundary, ``--config`` on every subcommand, and help that teaches."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from canary.cli.main import main
from canary.store import engine as store_engine
from canary.store.engine import Store


def commands(group: click.Group = main, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = [] if prefix else [()]
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += commands(command, (*prefix, name))
    return found


def write_project(root: Path, name: str = "canary.toml", guards: tuple[str, ...] = ("citation", "quote")) -> Path:
    (root / "defs").mkdir(exist_ok=True)
    for guard in guards:
        (root / "defs" / f"{guard}.toml").write_text(
            f"[guard]\nname = '{guard}'\nmatch = '{guard.title()}Guard: rejected'\n")
    path = root / name
    path.write_text(f"defs = ['defs/*.toml']\n[logs]\npaths = ['agent.log']\n"
                    f"[store]\nurl = 'sqlite:///{(root / 'canary.db').as_posix()}'\n")
    return path


@pytest.mark.parametrize("argv", commands(), ids=lambda argv: " ".join(argv) or "canary")
def test_every_help_ends_with_examples_and_exit_codes(argv: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*argv, "--help"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "Examples:" in text and "Exit codes:" in text
    examples = text[text.index("Examples:"):text.index("Exit codes:")]
    assert " ".join(("canary", *argv)) in examples  # an example of this very command
    codes = text[text.index("Exit codes:"):].strip().splitlines()[1:]
    assert codes and all(line.strip()[0] in "0123" for line in codes), codes
    assert text.rstrip().endswith(codes[-1].strip())  # the exit codes are the help's last lines


@pytest.fixture
def locked_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project whose store another connection holds with BEGIN EXCLUSIVE."""
    write_project(tmp_path)
    Store(f"sqlite:///{(tmp_path / 'canary.db').as_posix()}").close()  # created, in WAL mode
    monkeypatch.setattr(store_engine, "BUSY_TIMEOUT_S", 0.3)  # fail in 0.3 s, not after 30
    holder = sqlite3.connect(tmp_path / "canary.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    yield tmp_path
    holder.execute("ROLLBACK")
    holder.close()


def test_mute_on_a_locked_store_prints_one_line_and_exits_3(locked_store: Path) -> None:
    result = CliRunner().invoke(main, ["mute", "citation", "--for", "1h"])
    assert result.exit_code == 3, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: the store at sqlite:///") and "database is locked" in lines[0]
    assert "Traceback" not in result.output


def test_unmute_on_a_locked_store_is_the_same_one_line(locked_store: Path) -> None:
    result = CliRunner().invoke(main, ["unmute", "citation"])
    assert result.exit_code == 3, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "database is locked" in result.stderr


def test_the_config_option_works_after_the_subcommand_too(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = write_project(elsewhere, "mine.toml")
    for argv in (["--config", str(path), "check"], ["check", "--config", str(path)]):
        result = CliRunner().invoke(main, argv)
        assert result.exit_code == 0, (argv, result.output)
        assert "CitationGuard: rejected" in result.stdout
    missing = str(tmp_path / "missing.toml")
    result = CliRunner().invoke(main, ["--config", str(path), "check", "--config", missing])
    assert result.exit_code == 2 and "missing.toml" in result.stderr  # the subcommand's one wins


@pytest.mark.parametrize("argv", [["status"], ["audit"], ["mute", "citation", "--for", "1h"],
                                  ["unmute", "citation"], ["run"], ["dashboard"], ["collect", "--once"]])
def test_every_command_that_reads_a_config_takes_config_after_it(tmp_path: Path, argv: list[str]) -> None:
    result = CliRunner().invoke(main, [*argv, "--config", str(tmp_path / "nowhere.toml")])
    assert result.exit_code == 2, result.output
    assert "--config names" in result.stderr and "nowhere.toml" in result.stderr


def test_no_canary_toml_suggests_canary_init() -> None:
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 2
    assert "no canary.toml found" in result.stderr and "canary init" in result.stderr


def test_mute_an_unknown_guard_says_did_you_mean_and_lists_the_guards(tmp_path: Path) -> None:
    write_project(tmp_path)
    result = CliRunner().invoke(main, ["mute", "citaton", "--for", "1h"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: no guard named 'citaton' (did you mean 'citation'?); the guards are: citation, quote"
    )
    result = CliRunner().invoke(main, ["unmute", "zzz"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: no guard named 'zzz'; the guards are: citation, quote"


@pytest.mark.parametrize(("given", "said"), [("400d", "400d"), ("31d", "31d"), ("745h", "745h")])
def test_a_mute_too_long_says_so_in_the_units_a_user_writes(tmp_path: Path, given: str, said: str) -> None:
    write_project(tmp_path)
    result = CliRunner().invoke(main, ["mute", "citation", "--for", given])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: --for: a mute lasts at most 30d; got {said}"


def test_run_an_unknown_guard_or_canary_lists_the_names_that_exist(tmp_path: Path) -> None:
    write_project(tmp_path)
    (tmp_path / "defs" / "citation.toml").write_text(
        "[guard]\nname = 'citation'\nmatch = 'CitationGuard: rejected'\n"
        "[[canary]]\nname = 'fake-url'\nevery = '6h'\nprompt = 'p {fixture_url}'\nfixture = '<p>x</p>'\n"
        "inject = 'see https://{nonce}.example.org'\nleak = '{nonce}.example.org'\n")
    result = CliRunner().invoke(main, ["run", "qoute"])
    assert result.exit_code == 2
    assert "did you mean 'quote'?" in result.stderr and "the guards are: citation, quote" in result.stderr
    result = CliRunner().invoke(main, ["run", "citation/fake-rul"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: guard 'citation': no canary named 'fake-rul' (did you mean 'fake-url'?); "
        "the canaries are: fake-url"
    )


def test_an_error_carrying_escapes_is_printed_with_them_shown(tmp_path: Path) -> None:
    write_project(tmp_path)
    (tmp_path / "defs" / "bad.toml").write_text('[guard]\nname = "bad"\nmatch = "x"\n"\\u001b]0;PWNED\\u0007" = 1\n')
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 2
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "\\x1b]0;PWNED\\x07" in result.stderr


def test_run_with_a_wrong_answer_path_shows_the_keys_the_reply_has(tmp_path: Path) -> None:
    import socket

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from canary.proxy.serving import BackgroundServer

    async def ask(request: Request) -> JSONResponse:
        return JSONResponse({"result": {"text": "I could not verify that.", "tokens": 12}})

    def port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    write_project(tmp_path, guards=("quote",))
    (tmp_path / "defs" / "citation.toml").write_text(
        "[guard]\nname = 'citation'\nmatch = 'CitationGuard: rejected'\n"
        "[[canary]]\nname = 'fake-url'\nevery = '6h'\nprompt = 'p {fixture_url}'\nfixture = '<p>x</p>'\n"
        "inject = 'see https://{nonce}.example.org'\nleak = '{nonce}.example.org'\ntimeout = '10s'\n")
    (tmp_path / "agent.log").write_text("")
    with BackgroundServer(Starlette(routes=[Route("/ask", ask, methods=["POST"])])) as agent:
        (tmp_path / "canary.toml").write_text(
            f"defs = ['defs/*.toml']\n[logs]\npaths = ['agent.log']\n"
            f"[store]\nurl = 'sqlite:///{(tmp_path / 'canary.db').as_posix()}'\n"
            f"[agent]\nurl = '{agent.url}/ask'\nanswer = 'result.answer'\ntimeout = '10s'\n"
            f"[model]\nlisten = '127.0.0.1:{port()}'\n[fixtures]\nlisten = '127.0.0.1:{port()}'\n"
            f"[daemon]\ncontrol = '127.0.0.1:{port()}'\n")
        result = CliRunner().invoke(main, ["run", "citation"])
    assert result.exit_code == 3, result.output  # every run an error: none could be completed
    assert ("the agent's reply has no 'result.answer' (missing 'answer'; "
            "'result' has the keys: text, tokens)") in result.stdout


def test_a_file_that_cannot_be_written_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    result = CliRunner().invoke(main, ["init", "--yes", "--dir", str(tmp_path / "a-file" / "project")])
    assert result.exit_code == 3, result.output
    assert isinstance(result.exception, SystemExit)
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'a-file' / 'project'}: Not a directory"
    ]



def test_a_reader_that_goes_away_is_not_an_error(tmp_path: Path) -> None:
    """``canary ... | head``: the closed pipe ends the command quietly, exit 0, no traceback."""
    import subprocess
    import sys

    script = tmp_path / "big.py"
    script.write_text(
        "import click\n"
        "from canary.cli.boundary import CanaryGroup\n"
        "@click.group(cls=CanaryGroup)\n"
        "def main() -> None: ...\n"
        "@main.command()\n"
        "def lines() -> None:\n"
        "    for n in range(50_000):\n"
        "        click.echo(f'guard-{n} alive')\n"
        "main()\n"
    )
    proc = subprocess.run(
        f"set -o pipefail; {sys.executable} {script} lines | head -n 1; echo \"codes=${{PIPESTATUS[*]}}\"",
        shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.stdout.startswith("guard-0 alive\n")
    assert "codes=0 0" in proc.stdout, proc.stdout[-200:]
    assert proc.stderr == ""
