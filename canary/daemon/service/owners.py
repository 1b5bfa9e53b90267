"""Which services are installed, for which project and config, and what an install may not take.

Each project's service is named after the project (``guard-canary-<project>.service``, the launchd
label ``io.github.guard-canary.daemon.<project>``), and its file names the config it runs with.
An install refuses to replace a service of the same name that runs another config, and refuses a
listening port another installed service already holds: the second project would otherwise take
the first one's unit, or fail to bind its sockets, and the first would stop being watched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from canary.daemon.service import launchd, systemd
from canary.daemon.service.common import DARWIN, Names
from canary.errors import UsageError

__all__ = ["InstalledService", "check_install", "installed_services", "same_config"]


@dataclass(frozen=True)
class InstalledService:
    """One installed service file: whose it is and what it holds."""

    names: Names
    path: Path
    config_known: bool  # False: the file does not say which config it runs with
    config: Path | None
    listens: tuple[str, ...]


def installed_services(platform: str) -> list[InstalledService]:
    """Every guard-canary service file of this user, each project's and an older version's."""
    if platform == DARWIN:
        return [InstalledService(names, path, *launchd.plist_config(path), tuple(launchd.plist_listens(path)))
                for names, path in launchd.installed_agents(launchd.agents_dir())]
    where = systemd.unit_dir()
    return [InstalledService(names, path, *systemd.unit_config(path),
                             tuple(systemd.socket_listens(where, names)))
            for names, path in systemd.installed_services(where)]


def _resolved(path: Path | None) -> Path | None:
    return None if path is None else Path(path).expanduser().resolve()


def same_config(one: Path | None, other: Path | None) -> bool:
    """Whether two config paths name the same file."""
    return _resolved(one) == _resolved(other)


def _port(listen: str) -> str:
    return listen.rpartition(":")[2]


def check_install(names: Names, config: Path | None, listens: Mapping[str, str],
                  installed: list[InstalledService]) -> list[InstalledService]:
    """The older version's service this install replaces (the same config's), if any; a
    UsageError when the install would take another project's service or port."""
    replaced = []
    for other in installed:
        if other.names == names:
            if other.config_known and not same_config(other.config, config):
                raise UsageError(
                    f"{other.path.name} is already installed for another config, {other.config or '(none)'}: "
                    f"two configs cannot share the project name {names.project!r}. Set another "
                    f"`project = \"...\"` in {config or 'canary.toml'}, or remove that one first with "
                    f"`canary service uninstall --project {names.project}`",
                    option="service",
                )
            continue
        if other.names.project is None and other.config_known and same_config(other.config, config):
            replaced.append(other)  # this project's service as an older version named it
            continue
        for key, listen in listens.items():
            taken = [held for held in other.listens if _port(held) == _port(listen)]
            if taken:
                raise UsageError(
                    f"the {key} address {listen} of project {names.project!r} is on a port that "
                    f"{other.names.shown} already holds ({taken[0]}, in {other.path}); give this "
                    f"project other ports in {config or 'canary.toml'} ([model] listen, [fixtures] listen)",
                    option="service",
                )
    return replaced
