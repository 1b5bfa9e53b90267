"""The launchd LaunchAgent on macOS: the plist (with its ``Sockets``), and the launchctl steps."""

from __future__ import annotations

import os
import plistlib
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from canary.daemon.service.common import (
    LABEL,
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
)

#: launchctl's answers when the job is not loaded (3: "No such process", 113: "Could not find service").
_NOT_LOADED_CODES = (3, 113)
_NOT_LOADED_TEXT = ("could not find", "no such process", "not loaded", "not-found")
#: How often a bootstrap is retried right after a bootout: launchd tears the old job down asynchronously.
_BOOTSTRAP_TRIES = 3


def plist_path() -> Path:
    """``~/Library/LaunchAgents/<LABEL>.plist``."""
    return Path.home() / "Library" / "LaunchAgents" / f"{LABEL}.plist"


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


def plist(config_path: Path | None, listens: Mapping[str, str]) -> bytes:
    """The LaunchAgent's plist, XML."""
    out, err = log_paths()
    job: dict[str, Any] = {
        "Label": LABEL,
        "ProgramArguments": program_arguments(config_path),
        "RunAtLoad": True,
        # Like systemd's Restart=on-failure: a crash is restarted, a deliberate clean exit stays down.
        "KeepAlive": {"SuccessfulExit": False},
        "StandardOutPath": str(out),
        "StandardErrorPath": str(err),
        "WorkingDirectory": str(state_directory()),
        "EnvironmentVariables": service_environment(),
        "ProcessType": "Background",
        "ThrottleInterval": 10,
    }
    if listens:
        job["Sockets"] = sockets_entry(listens)
    return plistlib.dumps(job, fmt=plistlib.FMT_XML, sort_keys=True)


def logs_hint() -> str:
    """The command that follows the agent's output."""
    out, err = log_paths()
    return f"tail -f {shlex.quote(str(err))} {shlex.quote(str(out))}"


def domain() -> str:
    """The launchd domain of this user's GUI session."""
    return f"gui/{os.getuid()}"


def target() -> str:
    """The job's launchctl service target."""
    return f"{domain()}/{LABEL}"


def not_loaded(outcome: Outcome) -> bool:
    """Whether launchctl said the job is not loaded."""
    if outcome.returncode is None:
        return False
    text = (outcome.stderr + outcome.stdout).lower()
    return outcome.returncode in _NOT_LOADED_CODES or any(t in text for t in _NOT_LOADED_TEXT)


def load_steps(path: Path) -> list[list[str]]:
    """enable, then bootstrap: a job once disabled with `launchctl disable` refuses to bootstrap."""
    return [["launchctl", "enable", target()], ["launchctl", "bootstrap", domain(), str(path)]]


def dry_run_steps(path: Path) -> list[list[str]]:
    """What an install would run (the bootout only if an older version is loaded)."""
    return [["launchctl", "bootout", target()], *load_steps(path)]


def install(run: Runner, path: Path, issued: list[list[str]], messages: list[str]) -> bool:
    """Load the written plist, booting an older version out first."""
    enable, bootstrap = load_steps(path)
    probe = call(run, ["launchctl", "print", target()], issued)
    if probe.returncode is None:
        messages += [probe.describe(), manual([enable, bootstrap])]
        return False
    rest: list[list[str]] = [enable, bootstrap]
    if probe.ok:
        # A loaded job keeps its old plist until it is booted out; kickstart alone would not reread it.
        bootout = ["launchctl", "bootout", target()]
        out = call(run, bootout, issued)
        if not out.ok and not not_loaded(out):
            messages += [out.describe(), manual([bootout, *rest])]
            return False
        messages.append(f"unloaded the running {LABEL} to load the new plist")
    done = call(run, enable, issued)
    if not done.ok:
        messages += [done.describe(), manual(rest)]
        return False
    for attempt in range(_BOOTSTRAP_TRIES):
        done = call(run, bootstrap, issued)
        if done.ok or not probe.ok or done.returncode is None:
            break
        if attempt + 1 < _BOOTSTRAP_TRIES:
            time.sleep(1.0)
    if not done.ok:
        messages += [done.describe(), manual([bootstrap])]
        return False
    messages.append(f"loaded {LABEL} into {domain()}")
    return True


def uninstall(run: Runner, path: Path, issued: list[list[str]], messages: list[str]) -> bool:
    """Boot the job out and remove its plist."""
    present = path.exists()
    bootout = ["launchctl", "bootout", target()]
    # launchd keeps a job loaded after its plist is deleted, so the bootout is tried either way.
    out = call(run, bootout, issued)
    ok = True
    if out.ok:
        messages.append(f"unloaded {LABEL} from {domain()}")
    elif not_loaded(out) or (out.returncode is None and not present):
        if present:
            messages.append(f"{LABEL} was not loaded")
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
    try:
        entries = plistlib.loads(path.read_bytes()).get("Sockets", {})
    except (OSError, plistlib.InvalidFileException, ValueError, AttributeError):
        return ()
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
