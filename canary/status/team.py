"""The whole team's view of a shared store: every project's daemon on every machine, and its guards.

Each site (one project's daemon on one machine, ``canary.store.sites``) decides its own guards'
statuses and stores each change as a transition; this view reads, for every site, its
heartbeat and each guard's latest transition. It needs no other project's definitions. A site
whose heartbeat is older than its daemon's ticks allow (``canary.status.liveness``), or that said
it stopped, has a stale daemon: its statuses are what it last decided, and nothing has checked them
since.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from canary.status.liveness import DEFAULT_TICK, PACE_KEY, parse, stale_after
from canary.vocabulary import Status, as_utc, iso

if TYPE_CHECKING:
    from canary.store.engine import Store

__all__ = ["SiteGuard", "SiteView", "team_document", "team_view"]


@dataclass(frozen=True)
class SiteGuard:
    """One guard of one site, as its daemon last decided it."""

    guard: str
    status: str
    reason: str
    since: datetime | None


@dataclass(frozen=True)
class SiteView:
    """One project's daemon on one machine, and its guards."""

    project: str
    machine: str
    beat: datetime | None
    stopped: datetime | None
    guards: list[SiteGuard] = field(default_factory=list)
    tick: float = DEFAULT_TICK  # seconds between the daemon's beats

    def running(self, now: datetime) -> bool:
        """Whether the daemon beat within its ticks and did not say it stopped."""
        return (self.beat is not None and self.stopped is None
                and now - self.beat <= stale_after(self.tick))


_LATEST = ("SELECT guard, status, reason, at FROM {t} AS t WHERE NOT EXISTS (SELECT 1 FROM {t} AS u "
           "WHERE u.guard = t.guard AND (u.at > t.at OR (u.at = t.at AND u.id > t.id))) ORDER BY guard")


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return as_utc(value)
    return as_utc(datetime.fromisoformat(str(value)))


def _site(conn: Any, prefix: str, project: str, machine: str) -> SiteView:
    from sqlalchemy import text

    beat = conn.execute(text(f"SELECT beat, stopped FROM {prefix}heartbeat LIMIT 1")).first()
    rows = conn.execute(text(_LATEST.format(t=f"{prefix}transitions"))).all()
    reasons = _reasons_now(conn, prefix)
    guards = [SiteGuard(str(g), str(s), _reason(reasons, str(g), str(s), str(r)), _time(at))
              for g, s, r, at in rows]
    last, stopped = (_time(beat[0]), _time(beat[1])) if beat else (None, None)
    pace = conn.execute(text(f"SELECT value FROM {prefix}meta WHERE key = :key"), {"key": PACE_KEY}).scalar()
    return SiteView(project, machine, last, stopped, guards, parse(pace).tick)


def _reasons_now(conn: Any, prefix: str) -> dict[str, Any]:
    """Each guard's [status, reason] as its daemon last decided them; {} from a daemon that kept none."""
    import json

    from sqlalchemy import text

    from canary.status.transitions import REASONS_KEY

    row = conn.execute(text(f"SELECT value FROM {prefix}meta WHERE key = :key"), {"key": REASONS_KEY}).first()
    try:
        doc = json.loads(row[0]) if row is not None and row[0] else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _reason(reasons: dict[str, Any], guard: str, status: str, recorded: str) -> str:
    """The latest reason decided for the guard's status, else the one recorded when it began."""
    now = reasons.get(guard)
    if isinstance(now, list) and len(now) == 2 and now[0] == status and isinstance(now[1], str):
        return now[1]
    return recorded


def team_view(store: Store) -> list[SiteView]:
    """Every site of the store, by project then machine (a SQLite store: its one project)."""
    from canary.store.sites import list_sites, quoted

    with store.engine.connect() as conn:
        if store.engine.dialect.name != "postgresql":
            return [_site(conn, "", store.site.project, store.site.machine)]
        views = []
        for site in list_sites(store.engine):
            present = conn.exec_driver_sql(
                "SELECT to_regclass(%(t)s), to_regclass(%(h)s)",
                {"t": f"{quoted(site.schema)}.transitions", "h": f"{quoted(site.schema)}.heartbeat"}).first()
            if present is None or None in tuple(present):
                continue  # a site still being made
            views.append(_site(conn, f"{quoted(site.schema)}.", site.project, site.machine))
        return views


def _alerting(status: str) -> bool:
    try:
        return Status(status).alerting
    except ValueError:  # a status a newer version wrote
        return False


def team_document(views: list[SiteView], *, now: datetime) -> dict[str, Any]:
    """``canary status --all-projects --json``: each site's daemon and guards."""
    sites = []
    for view in views:
        running = view.running(now)
        sites.append({
            "project": view.project, "machine": view.machine,
            "daemon": {"running": running, "heartbeat": iso(view.beat), "stale": not running,
                       "stopped": iso(view.stopped)},
            "guards": [{"guard": g.guard, "status": g.status, "reason": g.reason, "since": iso(g.since),
                        "alerting": _alerting(g.status)} for g in view.guards],
        })
    return {"projects": sites}
