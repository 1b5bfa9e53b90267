"""Whose rows a store holds, as its ``meta`` says, and the refusal of a config they are not.

A SQLite store holds one project (``meta`` key ``project``); a site's rows belong to one config
(key ``owner``, the config file's absolute path) while that file exists. The daemon writes these
claims as it opens its store (``canary.store.sites``); ``canary status`` reads them, with no
SQLAlchemy and writing nothing, and refuses another's store with the same reason (``refuse``).
"""

from __future__ import annotations

from pathlib import Path

from canary.errors import StoreError
from canary.store.reads import Reader

__all__ = ["another_config", "another_project", "refuse"]


def another_project(recorded: str | None, project: str, shown_url: str) -> StoreError | None:
    """Why a SQLite store that ``recorded`` project claimed is not ``project``'s; None when it is."""
    if recorded is None or recorded == project:
        return None
    return StoreError(
        f"the store at {shown_url} belongs to project {recorded!r}, not {project!r}: a SQLite store "
        "holds one project. Give this project its own store (leave [store] url out), or share "
        "one PostgreSQL store (postgresql+psycopg://...), where each project keeps its own rows",
        url=shown_url,
    )


def another_config(recorded: str | None, owner: str, project: str, machine: str | None,
                   shown_url: str) -> StoreError | None:
    """Why a site whose rows the config ``recorded`` claimed is not ``owner``'s: that file still
    exists; None when the rows are ``owner``'s or free to take (a moved folder gives them over).
    ``machine`` None: this host's name."""
    if recorded is None or recorded == owner or not Path(recorded).is_file():
        return None
    if machine is None:
        from canary.store.sites import this_machine

        machine = this_machine()
    return StoreError(
        f"project {project!r} on machine {machine!r} in the store at {shown_url} belongs to "
        f"the config {recorded}, not {owner}: two configs writing one project's rows would count each "
        "other's firings as their own. Give this config a `project` of its own (or [store] machine); "
        f"if {recorded} was moved here, delete the old file", url=shown_url)


def refuse(reader: Reader, *, project: str, machine: str | None, owner: Path | None, shown_url: str) -> None:
    """Raise the StoreError the daemon raises for this config (``owner``), when the store read is
    another's (``machine`` None: this host's name)."""
    rows = reader.rows("SELECT key, value FROM meta WHERE key IN ('project', 'owner')")
    claims = {str(k): str(v) for k, v in rows}
    if reader.sqlite:
        refused = another_project(claims.get("project"), project, shown_url)
        if refused is not None:
            raise refused
    if owner is not None:
        refused = another_config(claims.get("owner"), str(owner.resolve()), project, machine, shown_url)
        if refused is not None:
            raise refused
