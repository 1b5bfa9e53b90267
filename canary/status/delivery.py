"""Whether each alert channel can deliver on this machine: the notifier a desktop alert needs, the
program an alert command runs. ``canary check`` makes a channel that cannot a problem, ``canary
alerts test`` a failure, ``canary status`` a warning; a webhook is tried, never probed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from canary.records import frozen

if TYPE_CHECKING:
    from canary.config.settings import AlertsConfig

__all__ = ["CHANNELS", "Blocked", "blocked_channels", "enabled_channels", "notifier", "nowhere",
           "shown_channels", "status_warnings"]

#: The channels, in the order their deliveries are created (``canary.alerts.channels.CHANNELS``).
CHANNELS = ("desktop", "webhook", "command")


def enabled_channels(config: AlertsConfig) -> tuple[str, ...]:
    """The channels the config turns on, in ``CHANNELS`` order (no HTTP client imported)."""
    on = {"desktop": config.desktop, "webhook": config.webhook is not None, "command": bool(config.command)}
    return tuple(name for name in CHANNELS if on[name])


def notifier(platform: str) -> str | None:
    """The desktop notifier program on ``platform`` (a ``sys.platform`` value), None where there is none."""
    if platform == "darwin":
        return "osascript"
    return None if platform in ("win32", "cygwin") else "notify-send"


@frozen
class Blocked:
    """An enabled channel that cannot deliver on this machine, and why."""

    channel: str
    reason: str  # "notify-send not found on PATH"
    written: bool  # turned on in canary.toml (desktop alerts are also on by default)


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def which(program: str) -> str | None:
    """``shutil.which`` for a program named without a folder (shutil costs ``canary status`` more
    to import than the lookup itself)."""
    if sys.platform == "win32":
        import shutil

        return shutil.which(program)
    for folder in os.get_exec_path():
        path = Path(folder or ".", program)
        if _executable(path):
            return str(path)
    return None


def _runnable(program: str, folder: Path | None = None) -> bool:
    """Whether ``program`` can run: one named with a folder from ``folder`` (where it runs), else on PATH."""
    if os.sep in program or (os.altsep and os.altsep in program):
        return _executable((folder or Path.cwd()) / Path(program).expanduser())
    return which(program) is not None


def blocked_channels(config: AlertsConfig, *, platform: str = sys.platform) -> list[Blocked]:
    """The enabled channels whose program cannot be found here (a webhook is tried, not probed)."""
    out = []
    if config.desktop:
        tool = notifier(platform)
        if tool is None:
            out.append(Blocked("desktop", f"no desktop notifier on {platform}", config.desktop_set))
        elif which(tool) is None:
            out.append(Blocked("desktop", f"{tool} not found on PATH", config.desktop_set))
    if config.command and not _runnable(config.command[0], config.folder):
        out.append(Blocked("command", f"{config.command[0]!r} not found on PATH, or not executable", True))
    return out


def shown_channels(config: AlertsConfig, blocked: list[Blocked]) -> tuple[str, ...]:
    """The channels worth listing: enabled ones, less a desktop that is only on by default and cannot be."""
    hidden = {b.channel for b in blocked if not b.written}
    return tuple(c for c in enabled_channels(config) if c not in hidden)


def nowhere(config: AlertsConfig, blocked: list[Blocked]) -> str | None:
    """The sentence when no enabled channel can deliver, because of a default that cannot (else None)."""
    if not blocked or shown_channels(config, blocked) or any(b.written for b in blocked):
        return None
    return (f"no alert channel can deliver here: desktop alerts are on by default, but {blocked[0].reason}, "
            "and no webhook or command is set, so every alert would be lost; set [alerts] webhook or "
            "command, install the notifier, or write desktop = false to be told only by `canary status`")


def status_warnings(
    config: AlertsConfig, *, platform: str = sys.platform, config_path: Path | None = None
) -> list[str]:
    """``canary status``'s lines about channels that cannot deliver here (the check they name reads
    ``config_path``)."""
    from canary.config.commandline import command_line

    check = command_line("canary check", config_path)
    blocked = blocked_channels(config, platform=platform)
    what = {"desktop": "desktop notifications cannot be shown here",
            "command": "the alert command cannot run here"}
    lines = [f"alerts: {what[b.channel]} ({b.reason}); `{check}` says what to do" for b in blocked
             if b.written]
    lost = nowhere(config, blocked)
    return [*lines, f"alerts: {lost}"] if lost else lines


