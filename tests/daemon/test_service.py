"""`canary service`: the generated plist and unit, the commands issued, and status parsing."""

from __future__ import annotations

import os
import plistlib
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from canary import locations
from canary.config.settings import load_config
from canary.daemon import service
from canary.daemon.service import ServiceReport, ServiceStatus
from canary.errors import UsageError

# Installed without a config, a service is the project "default"'s.
LABEL = "io.github.guard-canary.daemon.default"
UNIT = "guard-canary-default.service"
UID = os.getuid()
TARGET = f"gui/{UID}/{LABEL}"
PYTHON = str(Path(sys.executable).absolute())
PROXY_SOCKET, FIXTURES_SOCKET = "guard-canary-default-proxy.socket", "guard-canary-default-fixtures.socket"
SOCKETS = f"{PROXY_SOCKET} {FIXTURES_SOCKET}"
LINUX_STEPS = [
    ["systemctl", "--user", "daemon-reload"],
    ["systemctl", "--user", "enable", PROXY_SOCKET, FIXTURES_SOCKET, UNIT],
    ["systemctl", "--user", "stop", UNIT],
    ["systemctl", "--user", "restart", PROXY_SOCKET, FIXTURES_SOCKET],
    ["systemctl", "--user", "restart", UNIT],
]
SHOW = ["systemctl", "--user", "show", UNIT, "-p", "LoadState,ActiveState,SubState,MainPID,ExecMainStatus"]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME and XDG_CONFIG_HOME in tmp_path: nothing reaches the real LaunchAgents or systemd dirs."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    monkeypatch.setenv("PATH", "/opt/agent/bin:/usr/bin:/bin")
    kept = ("CANARY_CONFIG_DIR", "CANARY_STATE_DIR")
    for key in [k for k in os.environ if k.startswith("CANARY_") and k not in kept]:
        monkeypatch.delenv(key)
    return home


def state() -> Path:
    return Path(os.environ["CANARY_STATE_DIR"])


def plist_path(home: Path) -> Path:
    return home / "Library" / "LaunchAgents" / f"{LABEL}.plist"


def unit_path(home: Path) -> Path:
    return home / "xdg" / "systemd" / "user" / UNIT


Reply = subprocess.CompletedProcess[str] | type[BaseException]


class Recorder:
    """A runner that records every argv and answers from a rule table (first matching prefix wins)."""

    def __init__(self, rules: dict[tuple[str, ...], Reply | list[Reply]] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.rules = rules or {}

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        for prefix, rule in self.rules.items():
            if tuple(argv[: len(prefix)]) == prefix:
                reply = (rule.pop(0) if len(rule) > 1 else rule[0]) if isinstance(rule, list) else rule
                if isinstance(reply, type):
                    raise reply(2, "No such file or directory", argv[0])
                return reply
        return done(argv, 0)


def done(
    argv: list[str] | None = None, code: int = 0, out: str = "", err: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(argv or [], code, out, err)


def missing(argv: list[str]) -> subprocess.CompletedProcess[str]:
    raise FileNotFoundError(2, "No such file or directory", argv[0])


NOT_LOADED_LAUNCHD = done(
    code=113, err=f'Bad request.\nCould not find service "{LABEL}" in domain for user gui: {UID}\n'
)
NO_BUS = done(code=1, err="Failed to connect to bus: No medium found\n")
NO_SUCH_PROCESS = done(code=3, err="Boot-out failed: 3: No such process\n")
NOT_PERMITTED = done(code=1, err="Boot-out failed: 1: Operation not permitted\n")
LISTENS_MOVED = {"proxy": "127.0.0.1:11445", "fixtures": "127.0.0.1:11446"}


# -- the plist ---------------------------------------------------------------------------------


def test_plist_has_every_key_with_the_right_values(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "my configs" / "canary.toml"
    monkeypatch.setenv("CANARY_WEBHOOK", "https://hooks.example/abc?x=1&y=%20")
    monkeypatch.setenv("CANARY_CONFIG", "relative/canary.toml")

    path, contents = service.plan(config, platform="darwin")

    # the project is named after the config's folder
    assert path == home / "Library" / "LaunchAgents" / "io.github.guard-canary.daemon.my-configs.plist"
    job = plistlib.loads(contents)
    logs = locations.project_dir(config, "my-configs").absolute() / "logs"
    assert logs.parent.name.startswith("my-configs-")
    assert job == {
        "Label": "io.github.guard-canary.daemon.my-configs",
        "ProgramArguments": [PYTHON, "-m", "canary.cli.main", "--config", str(config), "daemon"],
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "StandardOutPath": str(logs / "my-configs.out.log"),
        "StandardErrorPath": str(logs / "my-configs.err.log"),
        "WorkingDirectory": str(state().absolute()),
        "EnvironmentVariables": {
            "PATH": "/opt/agent/bin:/usr/bin:/bin",
            "CANARY_WEBHOOK": "https://hooks.example/abc?x=1&y=%20",
            # a path variable is made absolute: the service starts in the state directory
            "CANARY_CONFIG": str(tmp_path / "relative" / "canary.toml"),
            "CANARY_CONFIG_DIR": os.environ["CANARY_CONFIG_DIR"],
            "CANARY_STATE_DIR": os.environ["CANARY_STATE_DIR"],
        },
        "ProcessType": "Background",
        "ThrottleInterval": 10,
        # launchd holds the listeners, so connections wait while the daemon restarts
        "Sockets": {
            "proxy": {"SockNodeName": "127.0.0.1", "SockServiceName": "11435", "SockType": "stream",
                      "SockFamily": "IPv4"},
            "fixtures": {"SockNodeName": "127.0.0.1", "SockServiceName": "11436", "SockType": "stream",
                         "SockFamily": "IPv4"},
        },
    }
    assert contents.startswith(b"<?xml")  # XML, not binary: a person can read it


def test_without_config_the_service_gets_the_config_found_now(tmp_path: Path) -> None:
    argv = plistlib.loads(service.plan(None, platform="darwin")[1])["ProgramArguments"]
    assert argv == [PYTHON, "-m", "canary.cli.main", "daemon"]  # nothing found: the daemon looks itself

    (tmp_path / "canary.toml").write_text("", encoding="utf-8")  # ./canary.toml, cwd is tmp_path
    argv = plistlib.loads(service.plan(None, platform="darwin")[1])["ProgramArguments"]
    assert argv == [PYTHON, "-m", "canary.cli.main", "--config", str(tmp_path / "canary.toml"), "daemon"]


def test_relative_config_path_is_made_absolute(tmp_path: Path) -> None:
    argv = plistlib.loads(service.plan(Path("sub/canary.toml"), platform="darwin")[1])["ProgramArguments"]
    assert argv[3:5] == ["--config", str(tmp_path / "sub" / "canary.toml")]


# -- the systemd unit --------------------------------------------------------------------------


def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """Sections of a unit file as ordered (key, value) lists: keys such as Environment repeat."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in text.splitlines():
        if not line.strip() or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
            continue
        assert current is not None, line
        key, sep, value = line.partition("=")
        assert sep, line
        current.append((key, value))
    return sections


def one(section: list[tuple[str, str]], key: str) -> str:
    values = [v for k, v in section if k == key]
    assert len(values) == 1, (key, values)
    return values[0]


def systemd_words(value: str) -> list[str]:
    """Split a command line as systemd does: quotes and escapes, then `%%` and (past argv[0]) `$$`."""
    words = [w.replace("%%", "%") for w in shlex.split(value)]
    return words[:1] + [w.replace("$$", "$") for w in words[1:]]


def test_unit_has_the_right_sections_and_keys(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANARY_WEBHOOK", 'https://x.example/h?a=%41&b="$HOME"')

    path, contents = service.plan(None, platform="linux")

    assert path == unit_path(home)
    text = contents.decode()
    unit = parse_unit(text)
    assert list(unit) == ["Unit", "Service", "Install"]
    assert one(unit["Unit"], "After") == f"default.target {SOCKETS}"
    assert one(unit["Unit"], "Requires") == SOCKETS
    assert one(unit["Unit"], "Description")
    svc = unit["Service"]
    assert one(svc, "Type") == "simple"
    assert one(svc, "Restart") == "on-failure"
    assert one(svc, "RestartSec") == "5"
    assert one(svc, "Sockets") == SOCKETS
    assert one(svc, "WorkingDirectory") == str(state().absolute())
    assert systemd_words(one(svc, "ExecStart")) == [PYTHON, "-m", "canary.cli.main", "daemon"]
    # Environment= values: quoted, `%` doubled, `$` kept (systemd expands no variables there)
    env = [shlex.split(v)[0].replace("%%", "%") for k, v in svc if k == "Environment"]
    assert env == [
        "PATH=/opt/agent/bin:/usr/bin:/bin",
        f"CANARY_CONFIG_DIR={os.environ['CANARY_CONFIG_DIR']}",
        f"CANARY_STATE_DIR={os.environ['CANARY_STATE_DIR']}",
        'CANARY_WEBHOOK=https://x.example/h?a=%41&b="$HOME"',
    ]
    assert one(unit["Install"], "WantedBy") == "default.target"
    # configparser (non-strict, no interpolation) reads it too
    import configparser

    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    assert parser.get("Install", "WantedBy") == "default.target"
    assert parser.get("Service", "Type") == "simple"


@pytest.mark.parametrize(
    "name",
    [
        "with space/canary.toml",
        "100%d/canary.toml",
        "dollar$HOME ${X}/canary.toml",
        'quote"and\\backslash/canary.toml',
        "single'quote;semi/canary.toml",
    ],
)
def test_exec_start_splits_back_into_the_argv(tmp_path: Path, name: str) -> None:
    config = tmp_path / name
    _, contents = service.plan(config, platform="linux")
    exec_start = one(parse_unit(contents.decode())["Service"], "ExecStart")
    assert systemd_words(exec_start) == [PYTHON, "-m", "canary.cli.main", "--config", str(config), "daemon"]


@pytest.mark.parametrize(
    ("arg", "executable", "expected"),
    [
        ("plain", False, "plain"),
        ("a b", False, '"a b"'),
        ("50%", False, "50%%"),
        ("$HOME", False, "$$HOME"),
        ("/x $y/python", True, '"/x $y/python"'),  # systemd expands no variable in the executable
        ('say "hi" \\o/', False, '"say \\"hi\\" \\\\o/"'),
        ("", False, '""'),
    ],
)
def test_systemd_exec_quote(arg: str, executable: bool, expected: str) -> None:
    assert service.systemd_exec_quote(arg, executable=executable) == expected


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_real_systemd_accepts_the_unit_with_an_awkward_interpreter_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    odd = tmp_path / "venv 100%a $b" / "bin"
    odd.mkdir(parents=True)
    (odd / "python").symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(odd / "python"))
    _, contents = service.plan(tmp_path / "cfg 50%" / "canary.toml", platform="linux")
    unit = tmp_path / "check" / UNIT
    unit.parent.mkdir()
    unit.write_bytes(contents)

    out = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True, check=False
    )

    # a mis-quoted executable shows up as "Command ... is not executable"
    assert "not executable" not in out.stderr, out.stderr
    assert "ExecStart" not in out.stderr, out.stderr


# -- install: the commands, in order -----------------------------------------------------------


def test_install_darwin_fresh(home: Path) -> None:
    run = Recorder({("launchctl", "print"): NOT_LOADED_LAUNCHD})

    report = service.install(None, platform="darwin", run=run)

    path = plist_path(home)
    assert run.calls == [
        ["launchctl", "print", TARGET],
        ["launchctl", "enable", TARGET],
        ["launchctl", "bootstrap", f"gui/{UID}", str(path)],
    ]
    assert report.commands == run.calls
    assert report.ok and report.written and report.path == path
    assert path.read_bytes() == service.plan(None, platform="darwin")[1]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # the environment block may hold a webhook secret
    assert (state() / "logs").is_dir()  # launchd does not create the log directory
    text = service.render(report)
    assert f"wrote {path}" in text
    assert "default.err.log" in text  # how to see the logs


def test_install_darwin_when_loaded_boots_the_old_job_out_first(home: Path) -> None:
    run = Recorder()  # print answers 0: the job is loaded

    report = service.install(None, platform="darwin", run=run)

    assert run.calls == [
        ["launchctl", "print", TARGET],
        ["launchctl", "bootout", TARGET],
        ["launchctl", "enable", TARGET],
        ["launchctl", "bootstrap", f"gui/{UID}", str(plist_path(home))],
    ]
    assert report.ok


def test_install_darwin_retries_bootstrap_while_the_old_job_is_torn_down(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    naps: list[float] = []
    monkeypatch.setattr("canary.daemon.service.launchd.time.sleep", naps.append)
    busy = done(code=5, err="Bootstrap failed: 5: Input/output error\n")
    run = Recorder({("launchctl", "bootstrap"): [busy, done()]})

    report = service.install(None, platform="darwin", run=run)

    assert [c[1] for c in run.calls] == ["print", "bootout", "enable", "bootstrap", "bootstrap"]
    assert report.ok and naps == [1.0]


def test_install_linux(home: Path) -> None:
    run = Recorder()

    report = service.install(None, platform="linux", run=run)

    assert run.calls == LINUX_STEPS
    assert report.ok and report.written and unit_path(home).is_file()
    assert (unit_path(home).parent / PROXY_SOCKET).is_file()
    assert (unit_path(home).parent / FIXTURES_SOCKET).is_file()
    assert f"journalctl --user -u {UNIT} -f" in service.render(report)


def test_installing_again_leaves_a_drop_in_of_the_users_in_place(home: Path) -> None:
    """A variable an agent command needs goes in a drop-in (``systemctl --user edit``): a new install keeps it."""
    service.install(None, platform="linux", run=Recorder())
    drop_in = unit_path(home).parent / f"{UNIT}.d" / "override.conf"
    drop_in.parent.mkdir()
    drop_in.write_text("[Service]\nEnvironment=OPENAI_API_KEY=sk-test\n")
    service.install(None, platform="linux", run=Recorder())
    assert drop_in.read_text() == "[Service]\nEnvironment=OPENAI_API_KEY=sk-test\n"


@pytest.mark.parametrize("platform", ["darwin", "linux"])
def test_install_twice_is_idempotent(platform: str) -> None:
    first = service.install(None, platform=platform, run=Recorder())
    before = first.path.read_bytes()
    second = service.install(None, platform=platform, run=Recorder())

    assert first.ok and second.ok
    assert second.path.read_bytes() == before
    assert "(unchanged)" in second.messages[0]
    written = sorted(p.name for p in second.path.parent.iterdir())  # no temp file left
    assert written == sorted([second.path.name] + ([PROXY_SOCKET, FIXTURES_SOCKET] if platform == "linux" else []))


@pytest.mark.parametrize("platform", ["darwin", "linux"])
def test_dry_run_writes_nothing_and_runs_nothing(platform: str) -> None:
    report = service.install(None, platform=platform, run=missing, dry_run=True)

    assert report.ok and not report.written and not report.path.exists()
    assert service.plan(None, platform=platform)[1].decode().splitlines()[1] in service.render(report)


@pytest.mark.parametrize("platform", ["darwin", "linux"])
def test_a_missing_service_manager_leaves_nothing_installed(platform: str) -> None:
    report = service.install(None, platform=platform, run=missing)

    assert not report.ok and not report.written
    assert not report.path.exists()
    assert sorted(p.name for p in report.path.parent.iterdir()) == []  # no socket unit, no temp file
    text = service.render(report)
    assert "was not found on PATH" in text
    assert "nothing was left installed" in text
    assert "canary service install --dry-run" in text  # what to run under a supervisor of one's own
    # and status no longer calls it installed
    assert service.status(platform=platform, run=missing).installed is False


def test_systemd_without_a_user_session_explains_and_takes_the_units_back(home: Path) -> None:
    run = Recorder({("systemctl", "--user", "enable"): NO_BUS})

    report = service.install(None, platform="linux", run=run)

    assert not report.ok and not report.path.exists()
    assert not (report.path.parent / PROXY_SOCKET).exists()
    text = service.render(report)
    assert "Failed to connect to bus" in text
    assert "containers" in text
    assert ["systemctl", "--user", "disable", "--now", UNIT, PROXY_SOCKET, FIXTURES_SOCKET] in run.calls


def test_a_failed_reinstall_puts_the_previous_units_back(home: Path) -> None:
    service.install(None, platform="linux", run=Recorder(), listens={"proxy": "127.0.0.1:11435"})
    before = {p.name: p.read_bytes() for p in unit_path(home).parent.iterdir() if p.is_file()}
    failing = Recorder({("systemctl", "--user", "restart", UNIT): done(code=1, err="Job failed.")})

    report = service.install(None, platform="linux", run=failing, listens=LISTENS_MOVED)

    assert not report.ok
    after = {p.name: p.read_bytes() for p in unit_path(home).parent.iterdir() if p.is_file()}
    assert after == before  # the old unit and socket as they were; no new fixtures socket left
    assert failing.calls[-1] == ["systemctl", "--user", "restart", PROXY_SOCKET, UNIT]
    assert "was put back" in service.render(report)


def test_a_failed_launchd_install_removes_its_plist(home: Path) -> None:
    run = Recorder({("launchctl", "print"): NOT_LOADED_LAUNCHD,
                    ("launchctl", "bootstrap"): done(code=5, err="Bootstrap failed: 5: Input/output error")})

    report = service.install(None, platform="darwin", run=run)

    assert not report.ok and not plist_path(home).exists()
    assert "Input/output error" in service.render(report)


def test_unsupported_platform_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="macOS"):
        service.plan(None, platform="win32")


# -- uninstall ---------------------------------------------------------------------------------


def test_uninstall_darwin(home: Path) -> None:
    service.install(None, platform="darwin", run=Recorder())
    run = Recorder()

    report = service.uninstall(platform="darwin", run=run)

    assert run.calls == [["launchctl", "bootout", TARGET]]
    assert report.ok and not plist_path(home).exists()
    assert f"removed {plist_path(home)}" in service.render(report)


def test_uninstall_linux(home: Path) -> None:
    service.install(None, platform="linux", run=Recorder())
    wants = unit_path(home).parent / "default.target.wants" / UNIT
    wants.parent.mkdir()
    wants.symlink_to(unit_path(home))
    run = Recorder()

    report = service.uninstall(platform="linux", run=run)

    assert run.calls == [
        ["systemctl", "--user", "disable", "--now", UNIT, FIXTURES_SOCKET, PROXY_SOCKET],
        ["systemctl", "--user", "daemon-reload"],
    ]
    assert report.ok and not unit_path(home).exists()
    assert not (unit_path(home).parent / PROXY_SOCKET).exists()
    assert not (unit_path(home).parent / FIXTURES_SOCKET).exists()
    assert not wants.is_symlink()


@pytest.mark.parametrize(
    ("platform", "run", "calls"),
    [
        ("darwin", Recorder({("launchctl", "bootout"): NO_SUCH_PROCESS}), 1),
        ("darwin", missing, 0),
        ("linux", Recorder(), 0),
    ],
)
def test_uninstall_when_absent_says_so_and_succeeds(
    platform: str, run: Callable[[list[str]], subprocess.CompletedProcess[str]], calls: int
) -> None:
    report = service.uninstall(platform=platform, run=run)

    assert report.ok
    assert "not installed" in service.render(report)
    if isinstance(run, Recorder):
        assert len(run.calls) == calls


def test_uninstall_linux_without_systemctl_removes_the_files_and_names_the_command(home: Path) -> None:
    service.install(None, platform="linux", run=Recorder())
    wants = unit_path(home).parent / "default.target.wants" / UNIT
    wants.parent.mkdir()
    wants.symlink_to(unit_path(home))

    report = service.uninstall(platform="linux", run=missing)

    assert not report.ok
    assert not unit_path(home).exists() and not wants.is_symlink()
    assert f"systemctl --user stop {UNIT}" in service.render(report)


def test_uninstall_darwin_when_bootout_fails_names_the_command(home: Path) -> None:
    service.install(None, platform="darwin", run=Recorder())
    run = Recorder({("launchctl", "bootout"): NOT_PERMITTED})

    report = service.uninstall(platform="darwin", run=run)

    assert not report.ok and not plist_path(home).exists()
    assert f"run by hand: launchctl bootout {TARGET}" in service.render(report)


# -- status ------------------------------------------------------------------------------------

LAUNCHCTL_RUNNING = f"""\
{TARGET} = {{
\tactive count = 1
\tpath = /Users/ana/Library/LaunchAgents/{LABEL}.plist
\ttype = LaunchAgent
\tstate = running

\tprogram = /Users/ana/.venv/bin/python
\targuments = {{
\t\t/Users/ana/.venv/bin/python
\t\t-m
\t\tcanary.cli
\t\tdaemon
\t}}

\tworking directory = /Users/ana/Library/Application Support/guard-canary

\tinherited environment = {{
\t\tSSH_AUTH_SOCK => /private/tmp/com.apple.launchd.x/Listeners
\t}}

\tdomain = gui/501 [100005]
\tasid = 100005
\tminimum runtime = 10
\texit timeout = 5
\truns = 1
\tpid = 4242
\timmediate reason = speculative
\tforks = 0
\texecs = 1
\tlast exit code = (never exited)

\tendpoints = {{
\t\t"io.github.x" = {{
\t\t\tport = 0x1a03
\t\t\tstate = active
\t\t}}
\t}}

\tspawn type = daemon (3)
\tproperties = keepalive | runatload | inferred program
}}
"""

LAUNCHCTL_STOPPED = f"""\
{TARGET} = {{
\tactive count = 0
\tpath = /Users/ana/Library/LaunchAgents/{LABEL}.plist
\ttype = LaunchAgent
\tstate = not running

\tprogram = /Users/ana/.venv/bin/python
\truns = 4
\tlast exit code = 78: EX_CONFIG

\tproperties = keepalive | runatload | inferred program
}}
"""


def show(pid: int, code: int, load: str, active: str, sub: str) -> str:
    """`systemctl show -p ...` output: one Key=value a line, in systemd's own order, not the -p order."""
    return f"MainPID={pid}\nExecMainStatus={code}\nLoadState={load}\nActiveState={active}\nSubState={sub}\n"


SHOW_RUNNING = show(4242, 0, "loaded", "active", "running")
SHOW_FAILED = show(0, 2, "loaded", "failed", "failed")
SHOW_RESTARTING = show(0, 1, "loaded", "activating", "auto-restart")
SHOW_NOT_FOUND = show(0, 0, "not-found", "inactive", "dead")


@pytest.mark.parametrize(
    ("platform", "reply", "running", "pid", "detail"),
    [
        # launchd: running, with its pid (the nested `state = active` of an endpoint is not the job's)
        ("darwin", done(out=LAUNCHCTL_RUNNING), True, 4242, "launchd state: running"),
        # launchd: loaded, exited with a config error
        ("darwin", done(out=LAUNCHCTL_STOPPED), False, None, "last exit code 78: EX_CONFIG"),
        # launchd: not loaded at all
        ("darwin", NOT_LOADED_LAUNCHD, False, None, "not loaded"),
        # launchctl is not there: unknown, not an error
        ("darwin", FileNotFoundError, None, None, "launchctl was not found"),
        # systemd: running
        ("linux", done(out=SHOW_RUNNING), True, 4242, "systemd state: active (running)"),
        # systemd: failed with exit status 2
        ("linux", done(out=SHOW_FAILED), False, None, "last exit status 2"),
        # systemd: between two restarts
        ("linux", done(out=SHOW_RESTARTING), False, None, "activating (auto-restart)"),
        # systemd: the unit is unknown
        ("linux", done(out=SHOW_NOT_FOUND), False, None, "not loaded"),
        # systemd: no user session (a container)
        ("linux", NO_BUS, None, None, "Failed to connect to bus"),
    ],
)
def test_status_parsing(
    platform: str, reply: Reply, running: bool | None, pid: int | None, detail: str
) -> None:
    prefix = ("launchctl",) if platform == "darwin" else ("systemctl",)
    run = Recorder({prefix: reply})

    st = service.status(platform=platform, run=run)

    assert run.calls == ([["launchctl", "print", TARGET]] if platform == "darwin" else [SHOW])
    assert (st.running, st.pid) == (running, pid)
    assert detail in st.detail
    assert st.installed is False


def test_status_reports_the_file(home: Path) -> None:
    service.install(None, platform="linux", run=Recorder())

    st = service.status(platform="linux", run=Recorder({("systemctl",): done(out=SHOW_RUNNING)}))

    assert replace(st, sockets=(), config=None) == ServiceStatus(
        "linux", unit_path(home), True, True, 4242, "systemd state: active (running)", project="default")
    assert [s.name for s in st.sockets] == [FIXTURES_SOCKET, PROXY_SOCKET]  # asked about, each installed one
    text = service.render(st)
    assert f"{unit_path(home)} (installed)" in text
    assert "running, pid 4242" in text
    assert f"journalctl --user -u {UNIT} -f" in text


def test_render_of_an_unknown_status() -> None:
    st = ServiceStatus("darwin", Path("/p.plist"), False, None, None, "could not run it")
    text = service.render(st)
    assert "daemon: unknown" in text and "(not installed)" in text and "launchd agent" in text


def test_render_of_a_report_is_its_messages() -> None:
    report = ServiceReport("linux", Path("/u"), True, [], ["wrote /u", "logs: x"], True)
    assert service.render(report) == "wrote /u\nlogs: x"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("systemctl") is None, reason="systemctl is not installed")
def test_status_with_the_real_systemctl_never_raises() -> None:
    st = service.status(platform="linux")
    assert st.platform == "linux"
    assert st.running in (True, False, None)
    assert st.detail


@pytest.mark.parametrize("platform", ["linux", "darwin"])
@pytest.mark.parametrize("xdg", ["absolute", "relative"])
def test_the_service_daemon_finds_the_state_folder_the_installing_shell_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, platform: str, xdg: str
) -> None:
    """A shell with ``$XDG_STATE_HOME`` installs the service: the daemon it starts, in an environment of the
    unit's alone, keeps its store where ``canary status`` in that shell reads it (a relative one is read by
    neither)."""
    monkeypatch.delenv("CANARY_STATE_DIR")
    monkeypatch.chdir(tmp_path)
    value = str(tmp_path / "shell-state") if xdg == "absolute" else "shell-state"
    monkeypatch.setenv("XDG_STATE_HOME", value)
    _, contents = service.plan(None, platform=platform)
    if platform == "linux":
        svc = parse_unit(contents.decode())["Service"]
        env = dict(shlex.split(v)[0].replace("%%", "%").split("=", 1) for k, v in svc if k == "Environment")
    else:
        env = plistlib.loads(contents)["EnvironmentVariables"]
    assert env.get("XDG_STATE_HOME") == value, env
    found = subprocess.run(
        [sys.executable, "-c", "from canary import locations; print(locations.state_dir())"],
        env={**env, "HOME": os.environ["HOME"]}, cwd="/", capture_output=True, text=True, check=True)
    assert found.stdout.strip() == str(locations.state_dir().absolute())


def test_the_service_carries_the_variables_the_config_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``webhook = "env:VAR"`` and ``webhook_proxy = "env"`` read the daemon's environment when an alert is
    sent: the service carries VAR and the proxy variables from the installing shell, and nothing else of it."""
    from click.testing import CliRunner

    from canary.cli.main import main

    monkeypatch.setenv("SLACK_URL", "https://hooks.example/T0/secret")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("OTHER_SECRET", "not for the unit")
    config = tmp_path / "canary.toml"
    config.write_text("defs = []\n[alerts]\ndesktop = false\nwebhook = 'env:SLACK_URL'\nwebhook_proxy = 'env'\n")
    done = CliRunner().invoke(main, ["service", "install", "--dry-run", "--config", str(config)])
    assert done.exit_code == 0, done.output
    assert 'Environment="SLACK_URL=https://hooks.example/T0/secret"' in done.output
    assert 'Environment="HTTPS_PROXY=http://proxy.internal:3128"' in done.output
    assert "OTHER_SECRET" not in done.output
    config.write_text("defs = []\n[alerts]\ndesktop = false\n")
    plain = CliRunner().invoke(main, ["service", "install", "--dry-run", "--config", str(config)])
    assert "SLACK_URL" not in plain.output and "HTTPS_PROXY" not in plain.output


def test_pass_env_names_what_the_service_carries_for_an_agent_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[daemon] pass_env`` names variables an ``[agent] command`` needs (its API key): the service carries
    them from the installing shell, on Linux and macOS alike; ``canary check`` warns of one not set here,
    and refuses a name that is no variable's."""
    from click.testing import CliRunner

    from canary.cli.main import main

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    config = tmp_path / "canary.toml"
    config.write_text("defs = []\n[agent]\ncommand = ['python', 'agent.py', '{prompt}']\n[daemon]\n"
                      "pass_env = ['ANTHROPIC_API_KEY', 'HF_TOKEN']\n[alerts]\ndesktop = false\n")
    done = CliRunner().invoke(main, ["service", "install", "--dry-run", "--config", str(config)])
    assert done.exit_code == 0, done.output
    assert 'Environment="ANTHROPIC_API_KEY=sk-ant-test"' in done.output and "HF_TOKEN" not in done.output
    _, plist = service.plan(config, platform="darwin", carry=service.carried(load_config(path=config)))
    assert plistlib.loads(plist)["EnvironmentVariables"]["ANTHROPIC_API_KEY"] == "sk-ant-test"
    checked = CliRunner().invoke(main, ["check", "--config", str(config)])
    assert checked.exit_code == 0, checked.output
    assert ("daemon.pass_env: $HF_TOKEN is not set here, so a service installed from this shell runs "
            "without it") in checked.stderr, checked.stderr
    config.write_text("defs = []\n[daemon]\npass_env = ['NOT-A-NAME']\n")
    bad = CliRunner().invoke(main, ["check", "--config", str(config)])
    assert bad.exit_code == 2 and "daemon.pass_env" in bad.stderr and "NOT-A-NAME" in bad.stderr, bad.stderr
