"""The launchd LaunchAgent on macOS: the plist (with its ``Sockets``), and the launchctl steps.

Each project has its own agent, labelled ``io.github.guard-canary.daemon.<project>``; its plist's
``ProgramArguments`` name the config it runs with, so an install tells its own agent from
another project's.
"""

from __future__ import annotations

import os
import plistlib
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from canary.daemon.service.common import (
    LABEL,
    Names,
    Outcome,
    Runner,
    SocketStatus,
    call,
    log_paths,
    manual,
    program_arguments,
    refuse_control,
    service_environment,
    state_directory,
    write_private,
)

#: launchctl's answers when the job is not loaded (3: "No such process", 113: "Could not find service").
_NOT_LOADED_CODES = (3, 113)
_NOT_LOADED_TEXT = ("could not find", "no such process", "not loaded", "not-found")
#: How often a bootstrap is retried right after a bootout: launchd tears the old job down asynchronously.
_BOOTSTRAP_TRIES = 3


def agents_dir() -> Path:
    """``~/Library/LaunchAgents``."""
    return Path.home() / "Library" / "LaunchAgents"


def plist_path(names: Names | None = None) -> Path:
    """``~/Library/LaunchAgents/<label>.plist``."""
    return agents_dir() / f"{(names or Names(None)).label}.plist"


def installed_agents(where: Path) -> list[tuple[Names, Path]]:
    """Every guard-canary plist in ``where``: each project's, and an older version's."""
    found: list[tuple[Names, Path]] = []
    for path in sorted(where.glob(f"{LABEL}*.plist")):
        label = path.name.removesuffix(".plist")
        if label == LABEL:
            found.append((Names(None), path))
        elif label.startswith(f"{LABEL}.") and label != f"{LABEL}.":
            found.append((Names(label.removeprefix(f"{LABEL}.")), path))
    return found


def _job(path: Path) -> dict[str, Any]:
    try:
        job = plistlib.loads(path.read_bytes())
    except (OSError, plistlib.InvalidFileException, ValueError):
        return {}
    return job if isinstance(job, dict) else {}


def plist_config(path: Path) -> tuple[bool, Path | None]:
    """(known, config) of an installed plist: the ``--config`` of its ProgramArguments."""
    argv = _job(path).get("ProgramArguments")
    if not isinstance(argv, list) or not argv:
        return False, None
    if "--config" in argv[:-1]:
        return True, Path(str(argv[argv.index("--config") + 1]))
    return True, None


def plist_listens(path: Path) -> list[str]:
    """The host:port of every ``Sockets`` entry of an installed plist."""
    entries = _job(path).get("Sockets", {})
    listens = []
    for entry in entries.values() if isinstance(entries, dict) else ():
        if isinstance(entry, dict):
            node, port = str(entry.get("SockNodeName", "")), str(entry.get("SockServiceName", ""))
            listens.append(f"[{node}]:{port}" if ":" in node else f"{node}:{port}")
    return listens


def _split(listen: str) -> tuple[str, str]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), port


def sockets_entry(listens: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The plist's ``Sockets``: one listening TCP socket per name, which launchd holds across restarts."""
    entry: dict[str, dict[str, str]] = {}
    for name, listen in listens.items():
        host, port = _split(refuse_control(f"the {name} listen address", listen))
        entry[name] = {
            "SockNodeName": host,
            "SockServiceName": port,
            "SockType": "stream",
            "SockFamily": "IPv6" if ":" in host else "IPv4",
        }
    return entry


def plist(config_path: Path | None, listens: Mapping[str, str], names: Names, *,
          carry: Sequence[str] = ()) -> bytes:
    """The LaunchAgent's plist, XML; ``carry``: variables its daemon reads."""
    out, err = log_paths(config_path, names.project)
    job: dict[str, Any] = {
        "Label": names.label,
        "ProgramArguments": program_arguments(config_path),
        "RunAtLoad": True,
        # Like systemd's Restart=on-failure: a crash is restarted, a deliberate clean exit stays down.
        "KeepAlive": {"SuccessfulExit": False},
        "StandardOutPath": str(out),
        "StandardErrorPath": str(err),
        "WorkingDirectory": str(state_directory()),
        "EnvironmentVariables": service_environment(carry=carry),
        "ProcessType": "Background",
        "ThrottleInterval": 10,
    }
    if listens:
        job["Sockets"] = sockets_entry(listens)
    return plistlib.dumps(job, fmt=plistlib.FMT_XML, sort_keys=True)


def logs_hint(path: Path | None = None) -> str:
    """The command that follows the agent's output (the files its plist at ``path`` names)."""
    job = _job(path) if path is not None else {}
    out, err = str(job.get("StandardOutPath", "")), str(job.get("StandardErrorPath", ""))
    if not out or not err:
        default_out, default_err = log_paths()
        out, err = str(default_out), str(default_err)
    return f"tail -f {shlex.quote(err)} {shlex.quote(out)}"


def domain() -> str:
    """The launchd domain of this user's GUI session."""
    return f"gui/{os.getuid()}"


def target(names: Names | None = None) -> str:
    """The job's launchctl service target."""
    return f"{domain()}/{(names or Names(None)).label}"


def not_loaded(outcome: Outcome) -> bool:
    """Whether launchctl said the job is not loaded."""
    if outcome.returncode is None:
        return False
    text = (outcome.stderr + outcome.stdout).lower()
    return outcome.returncode in _NOT_LOADED_CODES or any(t in text for t in _NOT_LOADED_TEXT)


def load_steps(path: Path, names: Names) -> list[list[str]]:
    """enable, then bootstrap: a job once disabled with `launchctl disable` refuses to bootstrap."""
    return [["launchctl", "enable", target(names)], ["launchctl", "bootstrap", domain(), str(path)]]


def dry_run_steps(path: Path, names: Names) -> list[list[str]]:
    """What an install would run (the bootout only if an older version is loaded)."""
    return [["launchctl", "bootout", target(names)], *load_steps(path, names)]


def install(run: Runner, path: Path, names: Names, issued: list[list[str]], messages: list[str]) -> bool:
    """Load the written plist, booting an older version out first; stop at the first failure."""
    enable, bootstrap = load_steps(path, names)
    probe = call(run, ["launchctl", "print", target(names)], issued)
    if probe.returncode is None:
        messages.append(probe.describe())
        return False
    if probe.ok:
        # A loaded job keeps its old plist until it is booted out; kickstart alone would not reread it.
        bootout = ["launchctl", "bootout", target(names)]
        out = call(run, bootout, issued)
        if not out.ok and not not_loaded(out):
            messages.append(out.describe())
            return False
        messages.append(f"unloaded the running {names.label} to load the new plist")
    done = call(run, enable, issued)
    if not done.ok:
        messages.append(done.describe())
        return False
    for attempt in range(_BOOTSTRAP_TRIES):
        done = call(run, bootstrap, issued)
        if done.ok or not probe.ok or done.returncode is None:
            break
        if attempt + 1 < _BOOTSTRAP_TRIES:
            time.sleep(1.0)
    if not done.ok:
        messages.append(done.describe())
        return False
    messages.append(f"loaded {names.label} into {domain()}")
    return True


def take_back(run: Runner, names: Names, previous: Mapping[Path, bytes | None], issued: list[list[str]],
              messages: list[str]) -> None:
    """Undo a failed install: the plist as it was (none, for a first install), loaded again if it was one."""
    path = plist_path(names)
    before = previous.get(path)
    call(run, ["launchctl", "bootout", target(names)], issued)
    if before is None:
        path.unlink(missing_ok=True)
        messages.append(f"nothing was left installed: {path} was removed")
        return
    write_private(path, before)
    call(run, ["launchctl", "bootstrap", domain(), str(path)], issued)
    messages.append(f"the previous {path.name} was put back as it was")


def uninstall(run: Runner, names: Names, issued: list[list[str]], messages: list[str]) -> bool:
    """Boot one project's job out and remove its plist; other projects' stay as they are."""
    path = plist_path(names)
    present = path.exists()
    bootout = ["launchctl", "bootout", target(names)]
    # launchd keeps a job loaded after its plist is deleted, so the bootout is tried either way.
    out = call(run, bootout, issued)
    ok = True
    if out.ok:
        messages.append(f"unloaded {names.label} from {domain()}")
    elif not_loaded(out) or (out.returncode is None and not present):
        if present:
            messages.append(f"{names.label} was not loaded")
    else:
        messages += [out.describe(), manual([bootout])]
        ok = False
    if present:
        path.unlink()
        messages.append(f"removed {path}")
    elif out.ok:
        messages.append(f"no plist at {path}")
    else:
        messages.append(f"not installed: no plist at {path}; nothing to do")
    return ok


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


def plist_sockets(path: Path, loaded: bool | None) -> tuple[SocketStatus, ...]:
    """The ``Sockets`` entries of the installed plist; launchd holds them while the agent is loaded."""
    entries = _job(path).get("Sockets", {})
    if not isinstance(entries, dict):
        return ()
    state = {True: "held by launchd", False: "not held: the agent is not loaded", None: "unknown"}[loaded]
    result = []
    for name, entry in sorted(entries.items()):
        node = str(entry.get("SockNodeName", "")) if isinstance(entry, dict) else ""
        port = str(entry.get("SockServiceName", "")) if isinstance(entry, dict) else ""
        listen = f"[{node}]:{port}" if ":" in node else f"{node}:{port}"
        result.append(SocketStatus(str(name), listen, state, loaded))
    return tuple(result)
