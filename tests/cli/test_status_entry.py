"""``canary status`` through the console script: it answers without click or any heavy module, and
prints, byte for byte, what the click command prints, with the same exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.entry import status_args
from canary.cli.main import main
from tests.cli.test_status_faults import GUARD, heartbeat

#: What ``canary status`` must never load: click, the ORM, HTTP and TLS, the log matchers, the TUI,
#: and the standard library's heavier corners it has no use for.
HEAVY = ("click", "sqlalchemy", "sqlmodel", "pydantic", "httpx", "textual", "hyperscan", "dashboard",
         "canary.logs", "canary.daemon", "canary.alerts", "collectors.scan", "ssl", "shutil", "logging",
         "subprocess", "asyncio")


@pytest.mark.parametrize(("argv", "expected"), [
    (["status"], (None, False)),
    (["status", "--json"], (None, True)),
    (["--config", "a.toml", "status"], ("a.toml", False)),
    (["status", "--json", "--config", "a.toml"], ("a.toml", True)),
    (["status", "--config=a.toml"], ("a.toml", False)),
    (["--json", "status"], None),  # not an option of the group: click says so
    (["status", "--all-projects"], None),
    (["status", "--help"], None),
    (["status", "-h"], None),
    (["status", "--config"], None),  # the value is missing: click says so
    (["status", "--config", "--json"], None),
    (["status", "citation"], None),
    (["unmute", "status"], None),
    (["check"], None),
    ([], None),
])
def test_only_a_plain_status_line_takes_the_quick_way(argv: list[str], expected: object) -> None:
    assert status_args(argv) == expected


def project(tmp_path: Path) -> Path:
    (tmp_path / "defs").mkdir()
    (tmp_path / "agent.log").write_text("started\n")
    for name in ("citation", "quote"):
        (tmp_path / "defs" / f"{name}.toml").write_text(GUARD.format(name=name))
    (tmp_path / "defs" / "quote.toml").write_text(GUARD.format(name="quote").replace("grace", "grac"))
    (tmp_path / "canary.toml").write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = ['{tmp_path / 'agent.log'}']\n"
        f"[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n"
    )
    heartbeat(tmp_path)
    return tmp_path / "canary.toml"


def console(args: list[str], *, probe: bool = False) -> subprocess.CompletedProcess[str]:
    """The console script as installed: ``canary.cli.entry:main`` (pyproject's [project.scripts])."""
    code = (
        "import sys\n"
        "from canary.cli.entry import main\n"
        "sys.argv = ['canary', *sys.argv[1:]]\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        f"    heavy = {HEAVY!r}\n"
        "    loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(heavy))\n"
        "    print('LOADED', loaded, file=sys.stderr)\n"
    ) if probe else "import sys\nfrom canary.cli.entry import main\nsys.argv = ['canary', *sys.argv[1:]]\nmain()\n"
    env = {k: v for k, v in os.environ.items() if k not in ("CANARY_CONFIG", "NO_COLOR")}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def test_the_console_script_names_the_entry_point() -> None:
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["scripts"]["canary"] == "canary.cli.entry:main"


@pytest.mark.slow
def test_status_loads_no_heavy_module(tmp_path: Path) -> None:
    config = project(tmp_path)
    out = console(["status", "--json", "--config", str(config)], probe=True)
    assert out.returncode == 2, out.stderr  # the broken definition, shown beside the guards
    assert out.stderr.rstrip().endswith("LOADED []"), out.stderr
    assert '"guards"' in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("as_json", [False, True])
def test_the_quick_way_prints_what_the_click_command_prints(tmp_path: Path, as_json: bool) -> None:
    config = project(tmp_path)
    args = ["--config", str(config), "status", *(["--json"] if as_json else [])]
    quick = console(args)
    slow = CliRunner().invoke(main, args)
    assert quick.returncode == slow.exit_code == 2
    assert quick.stdout == slow.stdout
    assert quick.stderr == slow.stderr


def on_a_terminal(args: list[str], env_extra: dict[str, str]) -> bytes:
    """What the console script writes to a terminal (a pseudo-terminal), stdout and stderr together."""
    import pty

    env = {k: v for k, v in os.environ.items() if k not in ("CANARY_CONFIG", "NO_COLOR", "TERM")}
    env.update(env_extra)
    code = "import sys\nfrom canary.cli.entry import main\nsys.argv = ['canary', *sys.argv[1:]]\nmain()\n"
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.DEVNULL, stdout=secondary,
                                stderr=secondary, env=env)
        os.close(secondary)
        out = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            out += chunk
        proc.wait(timeout=60)
        return out
    finally:
        os.close(primary)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal is POSIX")
def test_styles_reach_a_terminal_unless_it_asks_for_none(tmp_path: Path) -> None:
    config = project(tmp_path)
    args = ["status", "--config", str(config)]
    assert b"\x1b[1m" in on_a_terminal(args, {"TERM": "xterm"})  # the header, bold
    assert b"\x1b[" not in on_a_terminal(args, {"TERM": "xterm", "NO_COLOR": "1"})
    assert b"\x1b[" not in on_a_terminal(args, {"TERM": "dumb"})
