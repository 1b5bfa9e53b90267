"""Muting a guard's alerts for a while: a mute always expires."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, select
from sqlmodel import col

from canary.errors import UsageError
from canary.status.evaluate import is_muted
from canary.store.engine import Store
from canary.store.sites import Site
from canary.store.tables import Mute
from canary.vocabulary import as_utc

#: The longest mute allowed; a forgotten mute must not silence a guard forever.
MAX_MUTE = timedelta(days=30)

__all__ = ["MAX_MUTE", "active_mutes", "is_muted", "mute", "no_site", "unmute"]


def no_site(site: Site) -> str:
    """Why a mute cannot be kept in a shared store that holds no rows of ``site`` yet."""
    return (f"no daemon of project {site.project} on machine {site.machine} has written to this shared "
            "store yet, so it holds none of the project's rows to keep a mute in (only the daemon creates "
            "them)")


def mute(
    store: Store, guard: str, duration: timedelta, *, now: datetime, reason: str | None = None
) -> datetime:
    """Mute a guard until now + duration (replacing any mute it had); return the end."""
    if duration > MAX_MUTE:
        from canary.config.durations import format_duration

        raise UsageError(f"--for: a mute lasts at most {format_duration(MAX_MUTE)}; got "
                         f"{format_duration(duration)}", option="--for")
    until = as_utc(now + duration)
    row = {"guard": guard, "until": until, "reason": reason, "created": now}
    with store.engine.begin() as conn:
        store.upsert(conn, Mute, [row], keys=["guard"], set_=row)
    return until


def unmute(store: Store, guard: str) -> bool:
    """Lift a guard's mute; False if it had none."""
    with store.engine.begin() as conn:
        result = conn.execute(delete(Mute).where(col(Mute.guard) == guard))
        return bool(result.rowcount)


def active_mutes(conn: Connection, now: datetime) -> dict[str, tuple[datetime, str | None]]:
    """Guard -> (end, reason) of every mute that holds at ``now`` (``is_muted``, in SQL)."""
    rows = conn.execute(
        select(col(Mute.guard), col(Mute.until), col(Mute.reason)).where(col(Mute.until) > now)
    )
    return {str(guard): (until, reason) for guard, until, reason in rows}
