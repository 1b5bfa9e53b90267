"""`canary service`: run `canary daemon` as a background service of the current user.

On macOS a launchd LaunchAgent (``~/Library/LaunchAgents/<LABEL>.plist``) whose ``Sockets``
hold the proxy's and the fixture server's listeners; on Linux a systemd user unit
(``$XDG_CONFIG_HOME/systemd/user/guard-canary.service``) with one ``.socket`` unit per listener.
Either way the service manager owns the listening sockets, so connections made while the daemon
restarts wait in the kernel's queue instead of being refused. The files are generated here,
written, then handed to ``launchctl`` or ``systemctl --user``. Every external command goes
through one ``run`` callable, so tests record the commands instead of executing them. When the
service manager is missing or refuses, the files are still written and the report names the
commands to run by hand.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from canary.daemon.service import launchd, systemd
from canary.daemon.service.common import (
    DARWIN,
    LABEL,
    LINUX,
    SOCKET_NAMES,
    UNIT,
    Outcome,
    Runner,
    ServiceReport,
    ServiceStatus,
    SocketStatus,
    call,
    log_paths,
    platform_name,
    program_arguments,
    run_command,
    service_environment,
    write_private,
)
from canary.daemon.service.launchd import parse_launchctl_print
from canary.daemon.service.systemd import (
    parse_systemctl_show,
    socket_unit,
    systemd_env_quote,
    systemd_exec_quote,
)

__all__ = [
    "DARWIN", "LABEL", "LINUX", "SOCKET_NAMES", "UNIT", "ServiceReport", "ServiceStatus",
    "default_listens", "install", "installed", "log_paths", "logs_hint", "parse_launchctl_print",
    "parse_systemctl_show", "plan", "plan_files", "program_arguments", "render", "run_command",
    "service_environment", "service_path", "socket_unit", "status", "systemd_env_quote",
    "systemd_exec_quote", "uninstall",
]


def default_listens() -> dict[str, str]:
    """The proxy's and the fixture server's default addresses, for a service installed without a config."""
    from canary.config.settings import FixturesConfig, ModelConfig

    return {"proxy": ModelConfig().listen, "fixtures": FixturesConfig().listen}


def service_path(*, platform: str | None = None) -> Path:
    """Where the plist or service unit of this platform lives."""
    if platform_name(platform) == DARWIN:
        return launchd.plist_path()
    return systemd.unit_dir() / UNIT


def installed(*, platform: str | None = None) -> bool:
    """Whether the plist or service unit is installed (nothing is asked of the service manager)."""
    try:
        return service_path(platform=platform).is_file()
    except Exception:
        return False


def logs_hint(*, platform: str | None = None) -> str:
    """The command that follows the service's output."""
    if platform_name(platform) == DARWIN:
        return launchd.logs_hint()
    return f"journalctl --user -u {UNIT} -f"


def plan_files(
    config_path: Path | None, *, platform: str | None = None, listens: Mapping[str, str] | None = None
) -> list[tuple[Path, bytes]]:
    """Every file the install writes and its exact contents, the plist or service unit first."""
    sockets = dict(default_listens() if listens is None else listens)
    if platform_name(platform) == DARWIN:
        return [(launchd.plist_path(), launchd.plist(config_path, sockets))]
    return systemd.files(config_path, sockets)


def plan(
    config_path: Path | None, *, platform: str | None = None, listens: Mapping[str, str] | None = None
) -> tuple[Path, bytes]:
    """Where the plist or service unit goes and its exact contents; writes nothing."""
    return plan_files(config_path, platform=platform, listens=listens)[0]


def install(
    config_path: Path | None,
    *,
    platform: str | None = None,
    run: Runner = run_command,
    dry_run: bool = False,
    listens: Mapping[str, str] | None = None,
) -> ServiceReport:
    """Write the plist or units and load them; installing again rewrites them and restarts the daemon."""
    name = platform_name(platform)
    sockets = dict(default_listens() if listens is None else listens)
    planned = plan_files(config_path, platform=name, listens=sockets)
    path = planned[0][0]
    steps = launchd.dry_run_steps(path) if name == DARWIN else systemd.install_steps(sockets)
    if dry_run:
        messages: list[str] = []
        for where, contents in planned:
            messages += [f"would write {where}:", contents.decode().rstrip("\n")]
        if name == DARWIN:
            messages.append("would run (the bootout only if an older version is loaded):")
        else:
            messages.append("would run:")
        messages += [f"  {shlex.join(c)}" for c in steps]
        return ServiceReport(name, path, False, steps, messages, True)

    if name == DARWIN:
        for logfile in log_paths():
            logfile.parent.mkdir(parents=True, exist_ok=True)
    messages = []
    for where, contents in planned:
        changed = write_private(where, contents)
        messages.append(f"wrote {where}" + ("" if changed else " (unchanged)"))
    issued: list[list[str]] = []
    if name == DARWIN:
        ok = launchd.install(run, path, issued, messages)
    else:
        ok = systemd.install(run, sockets, issued, messages)
    if ok:
        messages.append("the daemon runs now and starts again at every login")
    messages.append(f"logs: {logs_hint(platform=name)}")
    return ServiceReport(name, path, True, issued, messages, ok)


def uninstall(*, platform: str | None = None, run: Runner = run_command) -> ServiceReport:
    """Stop and unload the service and remove its files; when nothing is installed, say so and succeed."""
    name = platform_name(platform)
    path = service_path(platform=name)
    issued: list[list[str]] = []
    messages: list[str] = []
    if name == DARWIN:
        ok = launchd.uninstall(run, path, issued, messages)
    else:
        ok = systemd.uninstall(run, path, issued, messages)
    return ServiceReport(name, path, False, issued, messages, ok)


def status(*, platform: str | None = None, run: Runner = run_command) -> ServiceStatus:
    """Whether the file is installed and what the service manager says about the daemon; never raises."""
    name = platform_name(platform)
    path = service_path(platform=name)
    is_installed = path.is_file()
    issued: list[list[str]] = []
    if name == DARWIN:
        out = call(run, ["launchctl", "print", launchd.target()], issued)
        running, pid, detail = parse_launchctl_print(out.stdout) if out.ok else _status_failure(name, out)
        loaded = True if out.ok else (False if launchd.not_loaded(out) else None)
        sockets = launchd.plist_sockets(path, loaded) if is_installed else ()
    else:
        argv = ["systemctl", "--user", "show", UNIT, "-p", systemd.SHOW_PROPERTIES]
        out = call(run, argv, issued)
        running, pid, detail = parse_systemctl_show(out.stdout) if out.ok else _status_failure(name, out)
        sockets = _systemd_sockets(path, run, issued)
    return ServiceStatus(name, path, is_installed, running, pid, detail, sockets)


def _systemd_sockets(path: Path, run: Runner, issued: list[list[str]]) -> tuple[SocketStatus, ...]:
    units = [p.name for p in systemd.installed_sockets(path.parent)]
    if not units:
        return ()
    out = call(run, systemd.socket_show(units), issued)
    if out.ok:
        return systemd.parse_socket_show(out.stdout, units)
    return tuple(SocketStatus(unit, "", out.describe(), None) for unit in units)


def _status_failure(platform: str, out: Outcome) -> tuple[bool | None, int | None, str]:
    if launchd.not_loaded(out):
        return False, None, "not loaded"
    hint = systemd.no_user_manager_hint(out) if platform == LINUX else None
    return None, None, out.describe() + (f"; {hint}" if hint else "")


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
    ]
    if st.installed or st.sockets:
        none = ("  sockets: none installed; connections are refused while the daemon restarts "
                "(run `canary service install` again to add them)")
        lines += [f"  socket: {s.name}" + (f" on {s.listen}" if s.listen else "") + f": {s.state}"
                  for s in st.sockets] or [none]
    lines.append(f"  logs:   {logs_hint(platform=st.platform)}")
    return "\n".join(lines)
