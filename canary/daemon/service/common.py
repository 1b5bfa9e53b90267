"""What the launchd and systemd services share: paths, the daemon's argv and environment, commands."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from canary import locations
from canary.errors import UsageError

if TYPE_CHECKING:
    from canary.config.settings import Config

#: The launchd label an older version gave its one agent; a project's label is ``<LABEL>.<project>``.
LABEL = "io.github.guard-canary.daemon"
#: The systemd user unit an older version installed; a project's unit is ``guard-canary-<project>.service``.
UNIT = "guard-canary.service"
#: The names the service manager gives the sockets it holds, as the daemon asks for them.
SOCKET_NAMES = ("proxy", "fixtures")


@dataclass(frozen=True)
class Names:
    """What one project's service is called: its systemd units and its launchd label.

    ``project`` None names the one unnamed service an older version installed, so that it can be
    listed, and replaced by the same project's install.
    """

    project: str | None

    @property
    def unit(self) -> str:
        """The systemd service unit: ``guard-canary-<project>.service``."""
        return UNIT if self.project is None else f"guard-canary-{self.project}.service"

    def socket(self, listener: str) -> str:
        """The socket unit of one listener: ``guard-canary-<project>-proxy.socket``."""
        return f"{self.unit.removesuffix('.service')}-{listener}.socket"

    @property
    def sockets(self) -> tuple[str, ...]:
        """Every socket unit this service may have, one per listener."""
        return tuple(self.socket(n) for n in SOCKET_NAMES)

    @property
    def label(self) -> str:
        """The launchd label, also the plist's file name: ``io.github.guard-canary.daemon.<project>``."""
        return LABEL if self.project is None else f"{LABEL}.{self.project}"

    @property
    def shown(self) -> str:
        """The project as a sentence names it."""
        return f"project {self.project!r}" if self.project is not None else "an older version's service"

DARWIN = "darwin"
LINUX = "linux"

#: Environment variables whose values are paths: made absolute, since the service starts elsewhere.
_PATH_VARS = (locations.ENV_CONFIG, locations.ENV_CONFIG_DIR, locations.ENV_STATE_DIR)
#: Carried as it is: the daemon's platformdirs reads it as this shell's does (a relative one not at all).
_XDG_STATE = "XDG_STATE_HOME"
_COMMAND_TIMEOUT_S = 60.0

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
    project: str | None = None


@dataclass(frozen=True)
class SocketStatus:
    """One listening socket the service manager holds for the daemon; ``held`` None: it could not say."""

    name: str  # the socket unit, or the plist's Sockets entry
    listen: str
    state: str
    held: bool | None


@dataclass(frozen=True)
class ServiceStatus:
    """What `canary service status` found; ``running`` is None when the service manager could not say."""

    platform: str
    path: Path
    installed: bool
    running: bool | None
    pid: int | None
    detail: str
    sockets: tuple[SocketStatus, ...] = ()
    project: str | None = None  # None: the unnamed service of an older version
    config: Path | None = None  # the config the installed service runs with


def platform_name(platform: str | None) -> str:
    """``darwin`` or ``linux`` for this machine (or the one named); a UsageError elsewhere."""
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


def _is_control(char: str) -> bool:
    return unicodedata.category(char) == "Cc"


def refuse_control(what: str, value: str) -> str:
    """``value`` unchanged, or a UsageError if it holds a control character (a newline starts a directive)."""
    bad = sorted({f"\\x{ord(c):02x}" for c in value if _is_control(c)})
    if bad:
        raise UsageError(
            f"{what} contains control characters ({', '.join(bad)}); it cannot be written into a "
            f"service file: {value.encode('unicode_escape').decode('ascii')}",
            option="service",
        )
    return value


def state_directory() -> Path:
    """The daemon's working directory, absolute, checked for control characters."""
    path = locations.state_dir().absolute()
    refuse_control("the state directory", str(path))
    return path


def log_paths(config_path: Path | None = None, project: str | None = None) -> tuple[Path, Path]:
    """The launchd agent's stdout and stderr files, beside the project's daemon log."""
    log = locations.project_log(config_arg(config_path), project).absolute()
    refuse_control("the log path", str(log))
    stem = log.name.removesuffix(".log")
    return log.with_name(f"{stem}.out.log"), log.with_name(f"{stem}.err.log")


def config_arg(config_path: Path | None) -> Path | None:
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
    argv = [refuse_control("the Python interpreter's path", str(Path(sys.executable).absolute())),
            "-m", "canary.cli.main"]
    config = config_arg(config_path)
    if config is not None:
        argv += ["--config", refuse_control("the config path", str(config))]
    return [*argv, "daemon"]


def service_environment(
    environ: Mapping[str, str] | None = None, *, carry: Sequence[str] = ()
) -> dict[str, str]:
    """PATH (so osascript, notify-send and the agent's command are found), every CANARY_* now set,
    XDG_STATE_HOME when set (a service manager does not read the shell's profile: without it the
    daemon would keep its store and log where ``canary status`` in this shell does not look), and the
    variables of ``carry`` that are set (``carried``: those the config reads)."""
    env = os.environ if environ is None else environ
    result = {"PATH": refuse_control("$PATH", env.get("PATH") or os.defpath)}
    for key in sorted(env):
        if not key.startswith("CANARY_") and key != _XDG_STATE and key not in carry:
            continue
        value = env[key]
        if key in _PATH_VARS and value:
            value = str(Path(value).expanduser().absolute())
        result[key] = refuse_control(f"${key}", value)
    return result


#: What ``[alerts] webhook_proxy = "env"`` reads of the daemon's environment (httpx's ``trust_env``).
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "https_proxy", "http_proxy",
                   "all_proxy", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR")


def carried(config: Config) -> tuple[str, ...]:
    """The environment variables ``config`` has the daemon read: ``[daemon] pass_env``, ``webhook =
    "env:VAR"``'s, and the proxy's with ``webhook_proxy = "env"``."""
    webhook = config.alerts.webhook
    named = (webhook[len("env:"):],) if webhook is not None and webhook.startswith("env:") else ()
    return config.daemon.pass_env + named + (PROXY_VARIABLES if config.alerts.webhook_proxy == "env" else ())


# -- running commands --------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """One command's result, with a launch failure (binary missing, timeout) folded in."""

    argv: list[str]
    returncode: int | None  # None: the command could not be run at all
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """Whether the command ran and exited 0."""
        return self.returncode == 0

    def describe(self) -> str:
        """One line saying what failed."""
        cmd = shlex.join(self.argv)
        if self.returncode is None:
            return f"could not run `{cmd}`: {self.stderr}"
        said = (self.stderr.strip() or self.stdout.strip()).splitlines()
        tail = f": {said[-1]}" if said else ""
        return f"`{cmd}` failed (exit {self.returncode}){tail}"


def call(run: Runner, argv: list[str], issued: list[list[str]]) -> Outcome:
    """Run ``argv`` through ``run``, noting it in ``issued``; never raises."""
    issued.append(list(argv))
    try:
        done = run(list(argv))
    except FileNotFoundError:
        return Outcome(argv, None, "", f"{argv[0]} was not found on PATH")
    except subprocess.TimeoutExpired:
        return Outcome(argv, None, "", "it did not finish in time")
    except OSError as exc:
        return Outcome(argv, None, "", str(exc))
    return Outcome(argv, done.returncode, done.stdout or "", done.stderr or "")


def manual(commands: list[list[str]]) -> str:
    """The sentence naming the commands left for the user to run."""
    return "run by hand: " + " && ".join(shlex.join(c) for c in commands)


def write_private(path: Path, contents: bytes) -> bool:
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
