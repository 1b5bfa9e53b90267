"""`canary service`: run `canary daemon` as a background service of the current user, one per project.

On macOS a launchd LaunchAgent (``~/Library/LaunchAgents/io.github.guard-canary.daemon.<project>.plist``)
whose ``Sockets`` hold the proxy's and the fixture server's listeners; on Linux a systemd user
unit (``$XDG_CONFIG_HOME/systemd/user/guard-canary-<project>.service``) with one ``.socket`` unit
per listener. Either way the service manager owns the listening sockets, so connections made while
the daemon restarts wait in the kernel's queue instead of being refused. The files are generated
here, written, then handed to ``launchctl`` or ``systemctl --user``. Every external command goes
through one ``run`` callable, so tests record the commands instead of executing them.

Two projects' services live side by side: an install never takes another project's service or
port (``canary.daemon.service.owners``), and an install that fails leaves the files as they were
before it (none, for a first install). An uninstall removes one project's service only.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from canary import locations
from canary.config.commandline import command_line
from canary.daemon.service import launchd, systemd
from canary.daemon.service.common import (
    DARWIN,
    LABEL,
    LINUX,
    SOCKET_NAMES,
    UNIT,
    Names,
    Outcome,
    Runner,
    ServiceReport,
    ServiceStatus,
    SocketStatus,
    call,
    carried,
    config_arg,
    log_paths,
    platform_name,
    program_arguments,
    run_command,
    service_environment,
    write_private,
)
from canary.daemon.service.launchd import parse_launchctl_print
from canary.daemon.service.owners import check_install, installed_services
from canary.daemon.service.systemd import (
    parse_systemctl_show,
    socket_unit,
    systemd_env_quote,
    systemd_exec_quote,
)

__all__ = [
    "DARWIN", "LABEL", "LINUX", "SOCKET_NAMES", "UNIT", "Names", "ServiceReport", "ServiceStatus",
    "carried", "default_listens", "install", "installed", "log_paths", "logs_hint", "names_of",
    "parse_launchctl_print", "parse_systemctl_show", "plan", "plan_files", "program_arguments",
    "render", "run_command", "service_environment", "service_path", "socket_unit", "status",
    "status_all", "systemd_env_quote", "systemd_exec_quote", "uninstall",
]


def default_listens() -> dict[str, str]:
    """The proxy's and the fixture server's default addresses, for a service installed without a config."""
    from canary.config.settings import FixturesConfig, ModelConfig

    return {"proxy": ModelConfig().listen, "fixtures": FixturesConfig().listen}


def names_of(project: str | None, config_path: Path | None = None) -> Names:
    """The service names of ``project`` (by default the project named after the config's folder)."""
    return Names(project or locations.default_project(config_arg(config_path)))


def service_path(*, platform: str | None = None, project: str | None = None) -> Path:
    """Where the plist or service unit of a project lives on this platform."""
    return _path_of(platform_name(platform), names_of(project))


def _path_of(platform: str, names: Names) -> Path:
    return launchd.plist_path(names) if platform == DARWIN else systemd.unit_dir() / names.unit


def installed(*, platform: str | None = None, project: str | None = None) -> bool:
    """Whether the project's plist or service unit is installed (nothing is asked of the service manager)."""
    try:
        return service_path(platform=platform, project=project).is_file()
    except Exception:
        return False


def logs_hint(*, platform: str | None = None, project: str | None = None, path: Path | None = None) -> str:
    """The command that follows a project's service output."""
    names = names_of(project)
    if platform_name(platform) == DARWIN:
        return launchd.logs_hint(path if path is not None else launchd.plist_path(names))
    return f"journalctl --user -u {names.unit} -f"


def plan_files(
    config_path: Path | None, *, platform: str | None = None, listens: Mapping[str, str] | None = None,
    project: str | None = None, carry: Sequence[str] = (),
) -> list[tuple[Path, bytes]]:
    """Every file the install writes and its exact contents, the plist or service unit first; ``carry``
    names the variables of this environment the daemon reads (``carried``)."""
    sockets = dict(default_listens() if listens is None else listens)
    names = names_of(project, config_path)
    if platform_name(platform) == DARWIN:
        return [(launchd.plist_path(names), launchd.plist(config_path, sockets, names, carry=carry))]
    return systemd.files(config_path, sockets, names, carry=carry)


def plan(
    config_path: Path | None, *, platform: str | None = None, listens: Mapping[str, str] | None = None,
    project: str | None = None, carry: Sequence[str] = (),
) -> tuple[Path, bytes]:
    """Where the plist or service unit goes and its exact contents; writes nothing."""
    return plan_files(config_path, platform=platform, listens=listens, project=project, carry=carry)[0]


def _dry_run(name: str, planned: list[tuple[Path, bytes]], steps: list[list[str]],
             names: Names) -> ServiceReport:
    messages: list[str] = []
    for where, contents in planned:
        messages += [f"would write {where}:", contents.decode().rstrip("\n")]
    if name == DARWIN:
        messages.append("would run (the bootout only if an older version is loaded):")
    else:
        messages.append("would run:")
    messages += [f"  {shlex.join(c)}" for c in steps]
    return ServiceReport(name, planned[0][0], False, steps, messages, True, names.project)


def install(
    config_path: Path | None,
    *,
    platform: str | None = None,
    run: Runner = run_command,
    dry_run: bool = False,
    listens: Mapping[str, str] | None = None,
    project: str | None = None,
    carry: Sequence[str] = (),
) -> ServiceReport:
    """Write the project's plist or units and load them; installing again rewrites them and restarts
    the daemon. Raises UsageError when the service or a port belongs to another project."""
    name = platform_name(platform)
    names = names_of(project, config_path)
    sockets = dict(default_listens() if listens is None else listens)
    planned = plan_files(config_path, platform=name, listens=sockets, project=names.project, carry=carry)
    path = planned[0][0]
    replaced = check_install(names, config_arg(config_path), sockets, installed_services(name))
    if dry_run:
        steps = (launchd.dry_run_steps(path, names) if name == DARWIN
                 else systemd.install_steps(sockets, names))
        return _dry_run(name, planned, steps, names)

    issued: list[list[str]] = []
    messages: list[str] = []
    for old in replaced:  # this project's service as an older version named it gives way first
        messages.append(f"replacing {old.path.name}, installed by an older version for this config")
        (launchd.uninstall if name == DARWIN else systemd.uninstall)(run, old.names, issued, messages)
    if name == DARWIN:
        for logfile in log_paths(config_path, names.project):
            locations.private_dir(logfile.parent, tighten=locations.is_owned(logfile.parent))
    previous = {where: where.read_bytes() if where.is_file() else None for where, _ in planned}
    for where, contents in planned:
        changed = write_private(where, contents)
        messages.append(f"wrote {where}" + ("" if changed else " (unchanged)"))
    if name == DARWIN:
        ok = launchd.install(run, path, names, issued, messages)
    else:
        ok = systemd.install(run, sockets, names, issued, messages)
    if ok:
        messages.append("the daemon runs now and starts again at every login")
        messages.append(f"logs: {logs_hint(platform=name, project=names.project, path=path)}")
    else:
        (launchd.take_back if name == DARWIN else systemd.take_back)(run, names, previous, issued, messages)
        messages.append(_no_manager_advice(name))
    return ServiceReport(name, path, ok, issued, messages, ok, names.project)


def _no_manager_advice(platform: str) -> str:
    manager = "launchd" if platform == DARWIN else "systemd --user"
    return (f"the service was not installed; without {manager}, run `canary daemon` under a supervisor "
            "of your own, or see what an install writes and runs with `canary service install --dry-run`")


def uninstall(*, platform: str | None = None, run: Runner = run_command,
              project: str | None = None) -> ServiceReport:
    """Stop and unload one project's service and remove its files; when nothing is installed, say so
    and succeed. Every other project's service is left as it is."""
    name = platform_name(platform)
    names = names_of(project)
    path = service_path(platform=name, project=names.project)
    issued: list[list[str]] = []
    messages: list[str] = []
    if name == DARWIN:
        ok = launchd.uninstall(run, names, issued, messages)
    else:
        ok = systemd.uninstall(run, names, issued, messages)
    return ServiceReport(name, path, False, issued, messages, ok, names.project)


def status(*, platform: str | None = None, run: Runner = run_command,
           project: str | None = None) -> ServiceStatus:
    """Whether one project's file is installed and what the service manager says of it; never raises."""
    name = platform_name(platform)
    return _status_of(name, names_of(project), run)


def status_all(*, platform: str | None = None, run: Runner = run_command,
               project: str | None = None) -> list[ServiceStatus]:
    """The status of every project's installed service (and of ``project``'s, installed or not)."""
    name = platform_name(platform)
    found = [s.names for s in installed_services(name)]
    if project is not None and Names(project) not in found:
        found.append(Names(project))
    return [_status_of(name, names, run) for names in found]


def _status_of(name: str, names: Names, run: Runner) -> ServiceStatus:
    path = _path_of(name, names)
    is_installed = path.is_file()
    issued: list[list[str]] = []
    if name == DARWIN:
        out = call(run, ["launchctl", "print", launchd.target(names)], issued)
        running, pid, detail = parse_launchctl_print(out.stdout) if out.ok else _status_failure(name, out)
        loaded = True if out.ok else (False if launchd.not_loaded(out) else None)
        sockets = launchd.plist_sockets(path, loaded) if is_installed else ()
        config = launchd.plist_config(path)[1] if is_installed else None
    else:
        argv = ["systemctl", "--user", "show", names.unit, "-p", systemd.SHOW_PROPERTIES]
        out = call(run, argv, issued)
        running, pid, detail = parse_systemctl_show(out.stdout) if out.ok else _status_failure(name, out)
        sockets = _systemd_sockets(path, names, run, issued)
        config = systemd.unit_config(path)[1] if is_installed else None
    return ServiceStatus(name, path, is_installed, running, pid, detail, sockets, names.project, config)


def _systemd_sockets(path: Path, names: Names, run: Runner,
                     issued: list[list[str]]) -> tuple[SocketStatus, ...]:
    units = systemd.installed_socket_names(path.parent, names)
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


def _render_status(st: ServiceStatus) -> list[str]:
    if st.running is None:
        state = "unknown"
    elif st.running:
        state = "running" + (f", pid {st.pid}" if st.pid is not None else "")
    else:
        state = "not running"
    who = f"project {st.project}" if st.project is not None else "no project (installed by an older version)"
    lines = [
        f"guard-canary service of {who} ({_kind(st.platform)})",
        f"  file:   {st.path} ({'installed' if st.installed else 'not installed'})",
        *([f"  config: {st.config}"] if st.config is not None else []),
        f"  daemon: {state}",
        f"  detail: {st.detail}",
    ]
    if st.installed or st.sockets:
        none = ("  sockets: none installed; connections are refused while the daemon restarts "
                f"(run `{command_line('canary service install', st.config)}` again to add them)")
        lines += [f"  socket: {s.name}" + (f" on {s.listen}" if s.listen else "") + f": {s.state}"
                  for s in st.sockets] or [none]
    lines.append(f"  logs:   {logs_hint(platform=st.platform, project=st.project, path=st.path)}"
                 if st.project is not None else f"  logs:   {_legacy_logs(st)}")
    return lines


def _legacy_logs(st: ServiceStatus) -> str:
    if st.platform == DARWIN:
        return launchd.logs_hint(st.path)
    return f"journalctl --user -u {UNIT} -f"


def render(report: ServiceReport | ServiceStatus | list[ServiceStatus]) -> str:
    """The text `canary service` prints for a report, a status, or every project's status."""
    if isinstance(report, ServiceReport):
        return "\n".join(report.messages)
    if isinstance(report, list):
        if not report:
            return "no guard-canary service is installed (`canary service install` installs this project's)"
        return "\n\n".join("\n".join(_render_status(st)) for st in report)
    return "\n".join(_render_status(report))
