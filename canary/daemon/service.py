"""`canary service`: run `canary daemon` as a background service of the current user.

On macOS a launchd LaunchAgent (``~/Library/LaunchAgents/<LABEL>.plist``), on
Linux a systemd user unit (``$XDG_CONFIG_HOME/systemd/user/guard-canary.daemon.service``).
The file is generated here, written, then handed to ``launchctl`` or
``systemctl --user``. Every external command goes through one ``run`` callable,
so tests record the commands instead of executing them. When the service
manager is missing or refuses, the file is still written and the report names
the commands to run by hand.
"""

from __future__ import annotations

import os
import plistlib
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from canary import locations
from canary.errors import UsageError

#: The launchd label, also the plist's file name.
LABEL = "io.github.guard-canary.daemon.loop"
#: The systemd user unit's name.
UNIT = "guard-canary.daemon.service"

DARWIN = "darwin"
LINUX = "linux"

#: Environment variables whose values are paths: made absolute, since the service starts elsewhere.
_PATH_VARS = (locations.ENV_CONFIG, locations.ENV_CONFIG_DIR, locations.ENV_STATE_DIR)
#: launchctl's answers when the job is not loaded (3: "No such process", 113: "Could not find service").
_NOT_LOADED_CODES = (3, 113)
_NOT_LOADED_TEXT = ("could not find", "no such process", "not loaded", "not-found")
#: How often a bootstrap is retried right after a bootout: launchd tears the old job down asynchronously.
_BOOTSTRAP_TRIES = 3
_COMMAND_TIMEOUT_S = 60.0
#: LoadState tells "systemd does not know the unit" apart from "known but stopped".
_SHOW_PROPERTIES = "LoadState,ActiveState,SubState,MainPID,ExecMainStatus"

Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]


def run_command(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run one external command, capturing its output; a non-zero exit is returned, not raised."""
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S)


@dataclass(frozen=True)
class ServiceReport:
    """What `canary service install|uninstall` did: the file, the commands issued, what to tell the user."""

    platform: str
    path: Path
    written: bool
    commands: list[list[str]]
    messages: list[str]
    ok: bool


@dataclass(frozen=True)
class ServiceStatus:
    """What `canary service status` found; ``running`` is None when the service manager could not say."""

    platform: str
    path: Path
    installed: bool
    running: bool | None
    pid: int | None
    detail: str


# -- where things go ---------------------------------------------------------------------------


def _platform(platform: str | None) -> str:
    name = (platform or sys.platform).lower()
    if name in (DARWIN, "macos"):
        return DARWIN
    if name.startswith(LINUX):
        return LINUX
    raise UsageError(
        f"canary service supports macOS (launchd) and Linux (systemd), not {name!r}; "
        "run `canary daemon` under your own supervisor instead",
        option="service",
    )


def _unit_dir() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return base / "systemd" / "user"


def service_path(*, platform: str | None = None) -> Path:
    """Where the plist or unit file of this platform lives."""
    if _platform(platform) == DARWIN:
        return Path.home() / "Library" / "LaunchAgents" / f"{LABEL}.plist"
    return _unit_dir() / UNIT


def log_paths() -> tuple[Path, Path]:
    """The launchd agent's stdout and stderr files, under the state directory's ``logs/``."""
    logs = locations.state_dir().absolute() / "logs"
    return logs / "daemon.out.log", logs / "daemon.err.log"


def logs_hint(*, platform: str | None = None) -> str:
    """The command that follows the service's output."""
    if _platform(platform) == DARWIN:
        out, err = log_paths()
        return f"tail -f {shlex.quote(str(err))} {shlex.quote(str(out))}"
    return f"journalctl --user -u {UNIT} -f"


# -- what the service runs ---------------------------------------------------------------------


def _config_arg(config_path: Path | None) -> Path | None:
    """The config the service is given: the explicit one, else the one `canary check` would find now.

    The service starts in the state directory, so a ``./canary.toml`` found from the current
    directory would be lost without this; when nothing exists yet, the daemon does its own lookup.
    """
    if config_path is not None:
        return Path(config_path).expanduser().absolute()
    for candidate, _where in locations.config_candidates(None):
        if candidate.is_file():
            return candidate.expanduser().absolute()
    return None


def program_arguments(config_path: Path | None) -> list[str]:
    """The daemon's argv: this interpreter, ``-m canary.cli.main [--config ABS] daemon``.

    ``sys.executable`` is kept as invoked, not resolved: a virtualenv's ``python`` is a symlink
    whose location is what selects the environment's packages.
    """
    argv = [str(Path(sys.executable).absolute()), "-m", "canary.cli.main"]
    config = _config_arg(config_path)
    if config is not None:
        argv += ["--config", str(config)]
    return [*argv, "daemon"]


def service_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """PATH (so osascript, notify-send and the agent's command are found) and every CANARY_* now set."""
    env = os.environ if environ is None else environ
    result = {"PATH": env.get("PATH") or os.defpath}
    for key in sorted(env):
        if not key.startswith("CANARY_"):
            continue
        value = env[key]
        if key in _PATH_VARS and value:
            value = str(Path(value).expanduser().absolute())
        result[key] = value
    return result


def _plist(config_path: Path | None) -> bytes:
    out, err = log_paths()
    job: dict[str, Any] = {
        "Label": LABEL,
        "ProgramArguments": program_arguments(config_path),
        "RunAtLoad": True,
        # Like systemd's Restart=on-failure: a crash is restarted, a deliberate clean exit stays down.
        "KeepAlive": {"SuccessfulExit": False},
        "StandardOutPath": str(out),
        "StandardErrorPath": str(err),
        "WorkingDirectory": str(locations.state_dir().absolute()),
        "EnvironmentVariables": service_environment(),
        "ProcessType": "Background",
        "ThrottleInterval": 10,
    }
    return plistlib.dumps(job, fmt=plistlib.FMT_XML, sort_keys=True)


def _escape_specifiers(value: str) -> str:
    return value.replace("%", "%%")


def _c_escape(value: str) -> str:
    return (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\t", "\\t")
        .replace("\r", "\\r")
    )


_NEEDS_QUOTES = frozenset(" \t\n\r\"'\\;")


def systemd_exec_quote(arg: str, *, executable: bool = False) -> str:
    """One ExecStart= word for systemd: ``%`` and ``$`` doubled, quoted with C escapes when needed."""
    # systemd never expands variables in the executable, so a `$$` there would stay doubled.
    text = _escape_specifiers(arg)
    if not executable:
        text = text.replace("$", "$$")
    if arg and not (_NEEDS_QUOTES & set(arg)):
        return text
    return f'"{_c_escape(text)}"'


def systemd_env_quote(key: str, value: str) -> str:
    """One Environment= assignment, double-quoted (no ``$`` expansion happens there, ``%`` does)."""
    return f'"{_c_escape(_escape_specifiers(f"{key}={value}"))}"'


def _unit(config_path: Path | None) -> bytes:
    argv = program_arguments(config_path)
    exec_start = " ".join(systemd_exec_quote(a, executable=i == 0) for i, a in enumerate(argv))
    lines = [
        "[Unit]",
        "Description=guard-canary daemon: proves which of an LLM agent's guards are awake",
        "After=default.target",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={exec_start}",
        "Restart=on-failure",
        "RestartSec=5",
        *(f"Environment={systemd_env_quote(k, v)}" for k, v in service_environment().items()),
        f"WorkingDirectory={_escape_specifiers(str(locations.state_dir().absolute()))}",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ]
    return "\n".join(lines).encode()


def plan(config_path: Path | None, *, platform: str | None = None) -> tuple[Path, bytes]:
    """Where the unit or plist goes and its exact contents; writes nothing."""
    name = _platform(platform)
    contents = _plist(config_path) if name == DARWIN else _unit(config_path)
    return service_path(platform=name), contents


# -- running commands --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Outcome:
    """One command's result, with a launch failure (binary missing, timeout) folded in."""

    argv: list[str]
    returncode: int | None  # None: the command could not be run at all
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        cmd = shlex.join(self.argv)
        if self.returncode is None:
            return f"could not run `{cmd}`: {self.stderr}"
        said = (self.stderr.strip() or self.stdout.strip()).splitlines()
        tail = f": {said[-1]}" if said else ""
        return f"`{cmd}` failed (exit {self.returncode}){tail}"


def _call(run: Runner, argv: list[str], issued: list[list[str]]) -> _Outcome:
    issued.append(list(argv))
    try:
        done = run(list(argv))
    except FileNotFoundError:
        return _Outcome(argv, None, "", f"{argv[0]} was not found on PATH")
    except subprocess.TimeoutExpired:
        return _Outcome(argv, None, "", "it did not finish in time")
    except OSError as exc:
        return _Outcome(argv, None, "", str(exc))
    return _Outcome(argv, done.returncode, done.stdout or "", done.stderr or "")


def _not_loaded(outcome: _Outcome) -> bool:
    if outcome.returncode is None:
        return False
    text = (outcome.stderr + outcome.stdout).lower()
    return outcome.returncode in _NOT_LOADED_CODES or any(t in text for t in _NOT_LOADED_TEXT)


def _manual(commands: list[list[str]]) -> str:
    return "run by hand: " + " && ".join(shlex.join(c) for c in commands)


def _no_user_manager_hint(outcome: _Outcome) -> str | None:
    text = outcome.stderr.lower()
    if outcome.returncode is not None and ("bus" in text or "xdg_runtime_dir" in text):
        return (
            "no systemd user session is reachable here (containers and some SSH sessions have none); "
            "start `canary daemon` in the foreground instead, or log in normally "
            "(`loginctl enable-linger` keeps user services running after logout)"
        )
    return None


def _write(path: Path, contents: bytes) -> bool:
    """Write atomically, owner-only (the environment block may hold secrets); True if it changed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    changed = not path.is_file() or path.read_bytes() != contents
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(contents)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return changed


def _domain() -> str:
    return f"gui/{os.getuid()}"


def _target() -> str:
    return f"{_domain()}/{LABEL}"


# -- install -----------------------------------------------------------------------------------


def install(
    config_path: Path | None,
    *,
    platform: str | None = None,
    run: Runner = run_command,
    dry_run: bool = False,
) -> ServiceReport:
    """Write the plist or unit and load it; installing again rewrites the file and restarts the daemon."""
    name = _platform(platform)
    path, contents = plan(config_path, platform=name)
    if dry_run:
        if name == DARWIN:
            steps = [["launchctl", "bootout", _target()], *_darwin_load_steps(path)]
        else:
            steps = _linux_install_steps()
        messages = [f"would write {path}:", contents.decode().rstrip("\n")]
        if name == DARWIN:
            messages.append("would run (the bootout only if an older version is loaded):")
        else:
            messages.append("would run:")
        messages += [f"  {shlex.join(c)}" for c in steps]
        return ServiceReport(name, path, False, steps, messages, True)

    if name == DARWIN:
        for logfile in log_paths():
            logfile.parent.mkdir(parents=True, exist_ok=True)
    changed = _write(path, contents)
    messages = [f"wrote {path}" + ("" if changed else " (unchanged)")]
    issued: list[list[str]] = []
    if name == DARWIN:
        ok = _install_darwin(run, path, issued, messages)
    else:
        ok = _install_linux(run, issued, messages)
    if ok:
        messages.append("the daemon runs now and starts again at every login")
    messages.append(f"logs: {logs_hint(platform=name)}")
    return ServiceReport(name, path, True, issued, messages, ok)


def _darwin_load_steps(path: Path) -> list[list[str]]:
    # enable first: a job once disabled with `launchctl disable` refuses to bootstrap.
    return [["launchctl", "enable", _target()], ["launchctl", "bootstrap", _domain(), str(path)]]


def _linux_install_steps() -> list[list[str]]:
    return [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", UNIT],
        # restart, not start: a reinstall must replace a daemon still running the old unit.
        ["systemctl", "--user", "restart", UNIT],
    ]


def _install_darwin(run: Runner, path: Path, issued: list[list[str]], messages: list[str]) -> bool:
    enable, bootstrap = _darwin_load_steps(path)
    probe = _call(run, ["launchctl", "print", _target()], issued)
    if probe.returncode is None:
        messages += [probe.describe(), _manual([enable, bootstrap])]
        return False
    rest: list[list[str]] = [enable, bootstrap]
    if probe.ok:
        # A loaded job keeps its old plist until it is booted out; kickstart alone would not reread it.
        bootout = ["launchctl", "bootout", _target()]
        out = _call(run, bootout, issued)
        if not out.ok and not _not_loaded(out):
            messages += [out.describe(), _manual([bootout, *rest])]
            return False
        messages.append(f"unloaded the running {LABEL} to load the new plist")
    done = _call(run, enable, issued)
    if not done.ok:
        messages += [done.describe(), _manual(rest)]
        return False
    for attempt in range(_BOOTSTRAP_TRIES):
        done = _call(run, bootstrap, issued)
        if done.ok or not probe.ok or done.returncode is None:
            break
        if attempt + 1 < _BOOTSTRAP_TRIES:
            time.sleep(1.0)
    if not done.ok:
        messages += [done.describe(), _manual([bootstrap])]
        return False
    messages.append(f"loaded {LABEL} into {_domain()}")
    return True


def _install_linux(run: Runner, issued: list[list[str]], messages: list[str]) -> bool:
    steps = _linux_install_steps()
    for i, step in enumerate(steps):
        done = _call(run, step, issued)
        if not done.ok:
            messages.append(done.describe())
            hint = _no_user_manager_hint(done)
            if hint:
                messages.append(hint)
            messages.append(_manual(steps[i:]))
            return False
    messages.append(f"enabled and started {UNIT}")
    return True


# -- uninstall ---------------------------------------------------------------------------------


def uninstall(*, platform: str | None = None, run: Runner = run_command) -> ServiceReport:
    """Stop and unload the service and remove its file; when nothing is installed, say so and succeed."""
    name = _platform(platform)
    path = service_path(platform=name)
    issued: list[list[str]] = []
    messages: list[str] = []
    if name == DARWIN:
        ok = _uninstall_darwin(run, path, issued, messages)
    else:
        ok = _uninstall_linux(run, path, issued, messages)
    return ServiceReport(name, path, False, issued, messages, ok)


def _uninstall_darwin(run: Runner, path: Path, issued: list[list[str]], messages: list[str]) -> bool:
    present = path.exists()
    bootout = ["launchctl", "bootout", _target()]
    # launchd keeps a job loaded after its plist is deleted, so the bootout is tried either way.
    out = _call(run, bootout, issued)
    ok = True
    if out.ok:
        messages.append(f"unloaded {LABEL} from {_domain()}")
    elif _not_loaded(out) or (out.returncode is None and not present):
        if present:
            messages.append(f"{LABEL} was not loaded")
    else:
        messages += [out.describe(), _manual([bootout])]
        ok = False
    if present:
        path.unlink()
        messages.append(f"removed {path}")
    elif out.ok:
        messages.append(f"no plist at {path}")
    else:
        messages.append(f"not installed: no plist at {path}; nothing to do")
    return ok


def _uninstall_linux(run: Runner, path: Path, issued: list[list[str]], messages: list[str]) -> bool:
    if not path.exists():
        messages.append(f"not installed: no unit at {path}; nothing to do")
        return True
    disable = ["systemctl", "--user", "disable", "--now", UNIT]
    out = _call(run, disable, issued)
    ok = out.ok
    if out.ok:
        messages.append(f"stopped and disabled {UNIT}")
    else:
        messages.append(out.describe())
        hint = _no_user_manager_hint(out)
        if hint:
            messages.append(hint)
    path.unlink()
    messages.append(f"removed {path}")
    # What `disable` would have removed, so no dangling link is left when systemctl could not run.
    wants = path.parent / "default.target.wants" / UNIT
    if wants.is_symlink():
        wants.unlink()
        messages.append(f"removed {wants}")
    reload = ["systemctl", "--user", "daemon-reload"]
    if out.ok:
        done = _call(run, reload, issued)
        if not done.ok:
            messages += [done.describe(), _manual([reload])]
            ok = False
    else:
        messages.append(
            "if the daemon still runs, " + _manual([["systemctl", "--user", "stop", UNIT], reload])
        )
    return ok


# -- status ------------------------------------------------------------------------------------


def status(*, platform: str | None = None, run: Runner = run_command) -> ServiceStatus:
    """Whether the file is installed and what the service manager says about the daemon; never raises."""
    name = _platform(platform)
    path = service_path(platform=name)
    installed = path.is_file()
    issued: list[list[str]] = []
    if name == DARWIN:
        out = _call(run, ["launchctl", "print", _target()], issued)
        running, pid, detail = parse_launchctl_print(out.stdout) if out.ok else _status_failure(out)
    else:
        argv = ["systemctl", "--user", "show", UNIT, "-p", _SHOW_PROPERTIES]
        out = _call(run, argv, issued)
        running, pid, detail = parse_systemctl_show(out.stdout) if out.ok else _status_failure(out)
    return ServiceStatus(name, path, installed, running, pid, detail)


def _status_failure(out: _Outcome) -> tuple[bool | None, int | None, str]:
    if _not_loaded(out):
        return False, None, "not loaded"
    hint = _no_user_manager_hint(out)
    return None, None, out.describe() + (f"; {hint}" if hint else "")


def _top_level_fields(text: str) -> dict[str, str]:
    """The ``key = value`` lines directly inside the outer ``{ }`` of `launchctl print` output."""
    fields: dict[str, str] = {}
    depth = 0
    for raw in text.splitlines():
        line = raw.strip()
        if line == "}" or line.startswith("}"):
            depth -= 1
            continue
        if line.endswith("{"):
            depth += 1
            continue
        if depth == 1 and " = " in line:
            key, _, value = line.partition(" = ")
            fields.setdefault(key.strip(), value.strip())
    return fields


def parse_launchctl_print(text: str) -> tuple[bool | None, int | None, str]:
    """(running, pid, detail) from `launchctl print gui/<uid>/<label>` output."""
    fields = _top_level_fields(text)
    state = fields.get("state")
    if state is None:
        return None, None, "launchctl printed no state"
    pid_text = fields.get("pid", "")
    pid = int(pid_text) if pid_text.isdigit() else None
    running = state == "running"
    detail = f"launchd state: {state}"
    last_exit = fields.get("last exit code")
    if last_exit and last_exit != "(never exited)":
        detail += f"; last exit code {last_exit}"
    return running, pid if running else None, detail


def parse_systemctl_show(text: str) -> tuple[bool | None, int | None, str]:
    """(running, pid, detail) from `systemctl --user show UNIT -p ...` output."""
    props: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    if props.get("LoadState") == "not-found":
        return False, None, "not loaded (systemd does not know it; try `systemctl --user daemon-reload`)"
    active = props.get("ActiveState")
    if active is None:
        return None, None, "systemctl printed no ActiveState"
    sub = props.get("SubState", "")
    pid_text = props.get("MainPID", "")
    pid = int(pid_text) if pid_text.isdigit() and int(pid_text) > 0 else None
    running = active == "active" and sub in ("running", "")
    detail = f"systemd state: {active}" + (f" ({sub})" if sub else "")
    code = props.get("ExecMainStatus", "")
    if not running and code not in ("", "0"):
        detail += f"; last exit status {code}"
    return running, pid if running else None, detail


# -- rendering ---------------------------------------------------------------------------------


def _kind(platform: str) -> str:
    return "launchd agent" if platform == DARWIN else "systemd user unit"


def render(report: ServiceReport | ServiceStatus) -> str:
    """The text `canary service` prints for a report or a status."""
    if isinstance(report, ServiceReport):
        return "\n".join(report.messages)
    st = report
    if st.running is None:
        state = "unknown"
    elif st.running:
        state = "running" + (f", pid {st.pid}" if st.pid is not None else "")
    else:
        state = "not running"
    lines = [
        f"guard-canary service ({_kind(st.platform)})",
        f"  file:   {st.path} ({'installed' if st.installed else 'not installed'})",
        f"  daemon: {state}",
        f"  detail: {st.detail}",
        f"  logs:   {logs_hint(platform=st.platform)}",
    ]
    return "\n".join(lines)
