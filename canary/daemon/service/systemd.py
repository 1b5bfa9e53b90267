"""The systemd user units on Linux: the service, a ``.socket`` unit per listener, systemctl's steps.

Each project has its own units, ``guard-canary-<project>.service`` and
``guard-canary-<project>-<listener>.socket``. The socket units hold the proxy's and the fixture
server's listening sockets, so the kernel queues the agent's connections while the daemon
restarts; the service takes them by name (``FileDescriptorName=``, read back from
``$LISTEN_FDNAMES``). The service unit's first lines name its project and its config, so an
install can tell its own unit from another project's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from canary.daemon.service import common
from canary.daemon.service.common import (
    UNIT,
    Names,
    Outcome,
    Runner,
    SocketStatus,
    call,
)
from canary.errors import UsageError

#: LoadState tells "systemd does not know the unit" apart from "known but stopped".
SHOW_PROPERTIES = "LoadState,ActiveState,SubState,MainPID,ExecMainStatus"
#: What `canary service status` asks about each socket unit.
SOCKET_PROPERTIES = "Id,LoadState,ActiveState,SubState,Listen"
_NEEDS_QUOTES = frozenset(" \t\n\r\"'\\;")


def unit_dir() -> Path:
    """``$XDG_CONFIG_HOME/systemd/user`` (``~/.config/systemd/user`` by default)."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return base / "systemd" / "user"


def socket_unit(name: str, names: Names | None = None) -> str:
    """The socket unit's name for one listener (``proxy`` -> ``guard-canary-<project>-proxy.socket``)."""
    return (names or Names(None)).socket(name)


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


def systemd_path(what: str, path: Path) -> str:
    """A path for a one-path setting (WorkingDirectory=): control characters refused, ``%`` doubled.

    Such settings take the rest of the line as the path and do not unquote it, so quotes would
    become part of the path; with no control character allowed, no newline can end the line early.
    """
    text = common.refuse_control(what, str(path))
    if text != text.strip():
        raise UsageError(f"{what} begins or ends with white space, which systemd would drop: {text!r}",
                         option="service")
    return _escape_specifiers(text)


#: The service unit's first lines: its project, and the config it runs with (JSON, or null).
_PROJECT_LINE = "# guard-canary daemon of project "
_CONFIG_LINE = "# config: "


def service_unit(config_path: Path | None, sockets: Mapping[str, str], names: Names, *,
                 carry: Sequence[str] = ()) -> bytes:
    """The service unit; it takes the listed socket units' sockets; ``carry``: variables its daemon reads."""
    argv = common.program_arguments(config_path)
    exec_start = " ".join(systemd_exec_quote(a, executable=i == 0) for i, a in enumerate(argv))
    socket_names = " ".join(names.socket(n) for n in sockets)
    config = argv[argv.index("--config") + 1] if "--config" in argv else None
    lines = [
        f"{_PROJECT_LINE}{json.dumps(names.project)}",
        f"{_CONFIG_LINE}{json.dumps(config)}",
        "[Unit]",
        f"Description=guard-canary daemon of project {names.project}: proves which of an LLM agent's "
        "guards are awake",
        f"After={' '.join(['default.target', *socket_names.split()])}",
        *([f"Requires={socket_names}"] if socket_names else []),
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={exec_start}",
        *([f"Sockets={socket_names}"] if socket_names else []),
        "Restart=on-failure",
        "RestartSec=5",
        # SIGTERM drains: requests and streams in flight finish before the daemon exits.
        "TimeoutStopSec=90",
        *(f"Environment={systemd_env_quote(k, v)}"
          for k, v in common.service_environment(carry=carry).items()),
        f"WorkingDirectory={systemd_path('the state directory', common.state_directory())}",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ]
    return "\n".join(lines).encode()


def unit_config(path: Path) -> tuple[bool, Path | None]:
    """(known, config) of an installed service unit: the config its daemon runs with.

    ``known`` is False when the unit does not say (an older version's unit whose ExecStart names
    no config, or a file that cannot be read).
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False, None
    for line in text.splitlines():
        if line.startswith(_CONFIG_LINE):
            try:
                value = json.loads(line[len(_CONFIG_LINE):])
            except ValueError:
                return False, None
            return True, Path(value) if isinstance(value, str) else None
        if line.startswith("ExecStart=") and " --config " in line:
            # An older version's unit: the word after --config, as systemd_exec_quote wrote it.
            word = line.split(" --config ", 1)[1].rsplit(" daemon", 1)[0]
            return True, Path(word.strip('"').replace("%%", "%").replace("$$", "$"))
    return False, None


def installed_services(where: Path) -> list[tuple[Names, Path]]:
    """Every guard-canary service unit in ``where``: each project's, and an older version's."""
    found: list[tuple[Names, Path]] = []
    for path in sorted(where.glob("guard-canary*.service")):
        if path.name == UNIT:
            found.append((Names(None), path))
            continue
        project = path.name.removeprefix("guard-canary-").removesuffix(".service")
        if path.name.startswith("guard-canary-") and project:
            found.append((Names(project), path))
    return found


def socket_listens(where: Path, names: Names) -> list[str]:
    """The ListenStream= addresses of a service's installed socket units."""
    listens = []
    for path in installed_sockets(where, names):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        listens += [line.partition("=")[2].strip() for line in text.splitlines()
                    if line.startswith("ListenStream=")]
    return listens


def listen_stream(listen: str) -> str:
    """``127.0.0.1:11435`` or ``[::1]:11435`` as a ListenStream= value (the same text, checked)."""
    host, sep, port = common.refuse_control("a listen address", listen).rpartition(":")
    if not sep or not host or not port.isdigit() or any(c.isspace() for c in listen):
        raise ValueError(f"{listen!r} is not host:port")
    return listen


def socket_unit_text(name: str, listen: str, names: Names) -> bytes:
    """One ``.socket`` unit holding the listener ``name`` for the service."""
    lines = [
        "[Unit]",
        f"Description=guard-canary {name} socket of project {names.project}: holds connections while "
        "the daemon restarts",
        "",
        "[Socket]",
        f"ListenStream={listen_stream(listen)}",
        f"FileDescriptorName={name}",
        f"Service={names.unit}",
        "NoDelay=true",
        "",
        "[Install]",
        "WantedBy=sockets.target",
        "",
    ]
    return "\n".join(lines).encode()


def files(config_path: Path | None, sockets: Mapping[str, str], names: Names, *,
          carry: Sequence[str] = ()) -> list[tuple[Path, bytes]]:
    """Every unit file, the service first."""
    where = unit_dir()
    result = [(where / names.unit, service_unit(config_path, sockets, names, carry=carry))]
    result += [(where / names.socket(n), socket_unit_text(n, listen, names)) for n, listen in sockets.items()]
    return result


def install_steps(sockets: Mapping[str, str], names: Names) -> list[list[str]]:
    """systemctl's steps: reload, enable, free the ports, (re)open the sockets, restart the daemon."""
    units = [names.socket(n) for n in sockets]
    steps = [["systemctl", "--user", "daemon-reload"],
             ["systemctl", "--user", "enable", *units, names.unit]]
    if units:
        # An older daemon may hold the ports itself, and a socket unit cannot bind them while it does.
        steps += [["systemctl", "--user", "stop", names.unit], ["systemctl", "--user", "restart", *units]]
    # restart, not start: a reinstall must replace a daemon still running the old unit.
    return [*steps, ["systemctl", "--user", "restart", names.unit]]


def no_user_manager_hint(outcome: Outcome) -> str | None:
    """Advice when systemctl found no user session to talk to."""
    text = outcome.stderr.lower()
    if outcome.returncode is not None and ("bus" in text or "xdg_runtime_dir" in text):
        return (
            "no systemd user session is reachable here (containers and some SSH sessions have none); "
            "start `canary daemon` in the foreground instead, or log in normally "
            "(`loginctl enable-linger` keeps user services running after logout)"
        )
    return None


def install(run: Runner, sockets: Mapping[str, str], names: Names, issued: list[list[str]],
            messages: list[str]) -> bool:
    """Run the install steps; stop at the first failure and say why."""
    for step in install_steps(sockets, names):
        done = call(run, step, issued)
        if not done.ok:
            messages.append(done.describe())
            hint = no_user_manager_hint(done)
            if hint:
                messages.append(hint)
            return False
    messages.append(f"enabled and started {names.unit}" + "".join(f", {names.socket(n)}" for n in sockets))
    return True


def _wants(where: Path, names: Names) -> list[Path]:
    """The links `systemctl enable` makes for a service and its sockets."""
    return [where / "default.target.wants" / names.unit,
            *(where / "sockets.target.wants" / s for s in names.sockets)]


def take_back(run: Runner, names: Names, previous: Mapping[Path, bytes | None], issued: list[list[str]],
              messages: list[str]) -> None:
    """Undo a failed install: the files as they were before it (none, for a first install), and
    systemd told; a service that ran before is started again on its old units."""
    where = unit_dir()
    fresh = previous.get(where / names.unit) is None
    if fresh:
        call(run, ["systemctl", "--user", "disable", "--now", names.unit, *names.sockets], issued)
    for path, contents in previous.items():
        if contents is None:
            path.unlink(missing_ok=True)
        else:
            common.write_private(path, contents)
    if fresh:
        for link in _wants(where, names):
            if link.is_symlink():
                link.unlink()
    call(run, ["systemctl", "--user", "daemon-reload"], issued)
    if not fresh:
        again = [*installed_socket_names(where, names), names.unit]
        call(run, ["systemctl", "--user", "restart", *again], issued)
        messages.append(f"the previous {names.unit} was put back as it was")
    else:
        messages.append(f"nothing was left installed: {names.unit} and its socket units were removed")


def installed_sockets(where: Path, names: Names | None = None) -> list[Path]:
    """The socket unit files of one service installed beside it (exact names: never another project's)."""
    return sorted(path for s in (names or Names(None)).sockets if (path := where / s).is_file())


def installed_socket_names(where: Path, names: Names) -> list[str]:
    """The names of ``installed_sockets``."""
    return [p.name for p in installed_sockets(where, names)]


def socket_show(units: list[str]) -> list[str]:
    """The systemctl command asking for the state of ``units``."""
    return ["systemctl", "--user", "show", *units, "-p", SOCKET_PROPERTIES]


def parse_socket_show(text: str, units: list[str]) -> tuple[SocketStatus, ...]:
    """The state of each of ``units`` from `systemctl --user show UNIT... -p SOCKET_PROPERTIES`."""
    blocks: list[dict[str, str]] = [{}]
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not line.strip():
            blocks.append({})
        elif sep and key.strip() not in blocks[-1]:  # the first Listen= is the unit's address
            blocks[-1][key.strip()] = value.strip()
    found = {b["Id"]: b for b in blocks if "Id" in b}
    result = []
    for unit in units:
        props = found.get(unit, {})
        listen = props.get("Listen", "").rsplit(" (", 1)[0]
        if props.get("LoadState") == "not-found":
            result.append(SocketStatus(unit, listen, "not loaded", False))
        elif "ActiveState" not in props:
            result.append(SocketStatus(unit, listen, "systemctl printed no ActiveState", None))
        else:
            active, sub = props["ActiveState"], props.get("SubState", "")
            held = active == "active" and sub in ("listening", "running")
            result.append(SocketStatus(unit, listen, active + (f" ({sub})" if sub else ""), held))
    return tuple(result)


def uninstall(run: Runner, names: Names, issued: list[list[str]], messages: list[str]) -> bool:
    """Stop and disable one project's units and remove their files; other projects' stay as they are."""
    where = unit_dir()
    path = where / names.unit
    sockets = installed_sockets(where, names)
    if not path.exists() and not sockets:
        messages.append(f"not installed: no unit at {path}; nothing to do")
        return True
    disable = ["systemctl", "--user", "disable", "--now", names.unit, *(s.name for s in sockets)]
    out = call(run, disable, issued)
    ok = out.ok
    if out.ok:
        messages.append(f"stopped and disabled {' '.join(disable[4:])}")
    else:
        messages.append(out.describe())
        hint = no_user_manager_hint(out)
        if hint:
            messages.append(hint)
    for unit in [path, *sockets]:
        if unit.exists():
            unit.unlink()
            messages.append(f"removed {unit}")
    # What `disable` would have removed, so no dangling link is left when systemctl could not run.
    for wants in _wants(where, names):
        if wants.is_symlink():
            wants.unlink()
            messages.append(f"removed {wants}")
    reload = ["systemctl", "--user", "daemon-reload"]
    if out.ok:
        done = call(run, reload, issued)
        if not done.ok:
            messages += [done.describe(), common.manual([reload])]
            ok = False
    else:
        stop = ["systemctl", "--user", "stop", names.unit, *(s.name for s in sockets)]
        messages.append("if the daemon still runs, " + common.manual([stop, reload]))
    return ok


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
