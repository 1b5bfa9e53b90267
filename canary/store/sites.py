"""Whose rows a store holds: a site is one project's daemon on one machine.

A SQLite store holds one project: the first project that opens it is written in its ``meta``
table, and another project is refused. A PostgreSQL store is shared: each site keeps its rows
in a schema of its own, ``<project>@<machine>`` (every connection's ``search_path``), so every
table, query, migration and rollup is the same as SQLite's, and no daemon ever writes another's
rows or read positions. The schema ``guard_canary`` lists the sites (``sites``), for the views
of the whole team.
"""

from __future__ import annotations

import hashlib
import re
import socket
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import event

from canary.locations import DEFAULT_PROJECT
from canary.store.owners import another_config, another_project

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

__all__ = ["MACHINE_NAME", "REGISTRY", "Site", "SiteRow", "claim_owner", "claim_sqlite", "list_sites",
           "quoted", "register", "search_site", "this_machine"]

#: The schema that lists every site of a shared store.
REGISTRY = "guard_canary"
#: A machine's name: written into schema names and shown in the team's views.
MACHINE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_IDENTIFIER_BYTES = 63  # PostgreSQL's longest identifier


def this_machine() -> str:
    """This host's name, lowercased, other characters as ``-`` ("localhost" if nothing is left)."""
    name = re.sub(r"[^a-z0-9._-]+", "-", socket.gethostname().lower()).strip("-._")[:63]
    return name or "localhost"


@dataclass(frozen=True)
class Site:
    """One project's daemon on one machine: the owner of a set of rows in a shared store."""

    project: str = DEFAULT_PROJECT
    machine: str = ""

    def __post_init__(self) -> None:
        if not self.machine:
            object.__setattr__(self, "machine", this_machine())

    @property
    def schema(self) -> str:
        """The site's schema in a shared store: ``<project>@<machine>``, cut and hashed past 63 bytes."""
        name = f"{self.project}@{self.machine}"
        if len(name.encode()) <= _IDENTIFIER_BYTES:
            return name
        return f"{name[:54]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"

    def __str__(self) -> str:
        return f"{self.project}@{self.machine}"


def quoted(identifier: str) -> str:
    """A PostgreSQL identifier in double quotes (a site's name holds no quote: see the name rules)."""
    return '"' + identifier.replace('"', '""') + '"'


def search_site(engine: Engine, site: Site) -> None:
    """Every connection of a PostgreSQL engine reads and writes the site's own schema."""

    @event.listens_for(engine, "connect", insert=True)
    def _search_path(dbapi_connection: Any, _record: Any) -> None:
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        cursor = dbapi_connection.cursor()
        cursor.execute(f"SET search_path TO {quoted(site.schema)}")
        cursor.close()
        dbapi_connection.autocommit = autocommit


def _lock_key(text: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_xact_lock``."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def register(conn: Connection, site: Site, now: datetime) -> None:
    """Make the site's schema and list it (PostgreSQL), once, whoever else opens a store at once.

    Runs in the migration's transaction, under a lock of the whole registry: two daemons
    creating the registry or one site's schema at once would otherwise both try.
    """
    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_lock_key(REGISTRY)})")
    conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {quoted(REGISTRY)}")
    conn.exec_driver_sql(
        f"CREATE TABLE IF NOT EXISTS {quoted(REGISTRY)}.sites (schema_name VARCHAR PRIMARY KEY, "
        "project VARCHAR NOT NULL, machine VARCHAR NOT NULL, created TIMESTAMP WITH TIME ZONE NOT NULL)"
    )
    conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {quoted(site.schema)}")
    from sqlalchemy import text

    conn.execute(text(f"INSERT INTO {quoted(REGISTRY)}.sites (schema_name, project, machine, created) "
                      "VALUES (:schema, :project, :machine, :now) ON CONFLICT (schema_name) DO NOTHING"),
                 {"schema": site.schema, "project": site.project, "machine": site.machine, "now": now})


def claim_sqlite(conn: Connection, project: str, shown_url: str, *, write: bool = True) -> None:
    """Write the project into a SQLite store's meta the first time (unless not ``write``); refuse
    another project's store."""
    from sqlalchemy import text

    row = conn.execute(text("SELECT value FROM meta WHERE key = 'project'")).first()
    refused = another_project(str(row[0]) if row is not None else None, project, shown_url)
    if refused is not None:
        raise refused
    if row is None and write:
        conn.execute(text("INSERT INTO meta (key, value) VALUES ('project', :p)"), {"p": project})


def claim_owner(conn: Connection, owner: str, site: Site, shown_url: str, *, write: bool = True) -> None:
    """Write the config the site's rows belong to the first time (unless not ``write``); refuse
    another config of the same project and machine while the first config's file exists (a moved
    folder gives its rows over)."""
    from sqlalchemy import text

    row = conn.execute(text("SELECT value FROM meta WHERE key = 'owner'")).first()
    recorded = str(row[0]) if row is not None else None
    refused = another_config(recorded, owner, site.project, site.machine, shown_url)
    if refused is not None:
        raise refused
    if not write or recorded == owner:
        return
    if row is None:
        conn.execute(text("INSERT INTO meta (key, value) VALUES ('owner', :o)"), {"o": owner})
    else:
        conn.execute(text("UPDATE meta SET value = :o WHERE key = 'owner'"), {"o": owner})


@dataclass(frozen=True)
class SiteRow:
    """One site listed in a shared store."""

    schema: str
    project: str
    machine: str


def list_sites(engine: Engine) -> list[SiteRow]:
    """Every site of a shared store (PostgreSQL), by project then machine; [] for SQLite."""
    if engine.dialect.name != "postgresql":
        return []
    from sqlalchemy import text

    with engine.connect() as conn:
        present = conn.execute(text("SELECT 1 FROM pg_namespace WHERE nspname = :n"), {"n": REGISTRY}).first()
        if present is None:
            return []
        rows: list[Any] = list(conn.execute(text(
            f"SELECT schema_name, project, machine FROM {quoted(REGISTRY)}.sites ORDER BY project, machine")))
    return [SiteRow(str(s), str(p), str(m)) for s, p, m in rows]
