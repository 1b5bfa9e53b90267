"""Alerts, sent from transition rows in two steps that can each run alone and be repeated.

``plan_alerts`` turns transitions into delivery rows, one per enabled channel:
a *change* when a guard enters ``asleep``, ``degraded`` or ``inconclusive``, a
*recovery* when it goes from one of those to ``alive`` or ``quiet``, and a
*reminder* every ``repeat`` while it stays in one and is not muted. A channel
with no delivery of a guard's current alerting spell (one added since) gets a
*change* for it once, so it learns the present state. The id of
the last transition planned is kept in ``meta`` under ``alerts.planned_through``
and moves in the same transaction as the rows it produced, so a crash plans a
transition either fully or not at all, never twice.

``deliver_pending`` sends the deliveries that are due. Each is claimed first
(its ``next_try`` pushed ahead by ``LEASE``), sent outside any transaction,
then recorded: ``sent``; ``pending`` again with a backed-off ``next_try`` after
a failure; ``failed`` after ``MAX_ATTEMPTS``; ``skipped`` when a channel cannot
work here (no ``notify-send``); ``muted`` when its guard is muted as it falls
due. A muted delivery never fires later: the mute expires, and reminders
resume from there. A crash after sending but before recording sends that one
alert again once the lease runs out: an alert may repeat, it is never lost.
Deliveries of one guard on one channel go out in the order they were planned.

A transition out of ``paused`` is judged against the status the guard had
before the mute: ``asleep -> paused -> asleep`` is no news (reminders cover
it), ``alive -> paused -> asleep`` is a change.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, insert, select, update
from sqlmodel import col

from canary.alerts.channels import AlertPayload, Sender, default_sender, enabled_channels, excerpt
from canary.config.settings import AlertsConfig
from canary.errors import DeliveryError
from canary.status import upstream
from canary.status.mutes import active_mutes
from canary.status.reasons import clock_time
from canary.store.engine import Store
from canary.store.tables import Delivery, Meta, Transition
from canary.vocabulary import ALERTING, HEALTHY, Status, as_utc, iso

log = logging.getLogger("canary.alerts.planning")

#: The ``meta`` key holding the id of the last transition turned into deliveries.
PLANNED_KEY = "alerts.planned_through"
#: Waits after the 1st, 2nd, ... failed attempt; the last one repeats.
BACKOFF = (
    timedelta(seconds=30),
    timedelta(minutes=2),
    timedelta(minutes=10),
    timedelta(minutes=30),
    timedelta(hours=1),
)
#: Attempts before a delivery is given up as ``failed``.
MAX_ATTEMPTS = 8
#: How long a claimed delivery is held before another pass may take it (longer than any send).
LEASE = timedelta(minutes=5)
#: Transitions looked back through to find when a guard entered its status.
_LOOKBACK = 500

# The model server's states travel the same way (as the pseudo-guard canary.status.upstream.MODEL_SERVER).
_ALERTING = {s.value for s in ALERTING} | {upstream.UNREACHABLE}
_HEALTHY = {s.value for s in HEALTHY} | {upstream.REACHABLE}


def alert_kind(previous: str | None, status: str) -> str | None:
    """``change``, ``recovery`` or None for a guard going from ``previous`` to ``status``.

    ``previous`` is the status before any pause (None when the guard had none).
    """
    if status in _ALERTING and previous != status:
        return "change"
    if status in _HEALTHY and previous in _ALERTING:
        return "recovery"
    return None


def backoff(attempts: int) -> timedelta:
    """The wait before the next try after ``attempts`` failed attempts (1 or more)."""
    return BACKOFF[min(max(attempts, 1), len(BACKOFF)) - 1]


def alert_text(kind: str, guard: str, status: str, reason: str, since: datetime, *, now: datetime) -> str:
    """The one line a chat service or a notification shows."""
    why = excerpt(reason, 1000)
    if kind == "recovery":
        return f"guard-canary: {guard} recovered ({status}) — {why}"
    if kind == "reminder":
        return f"guard-canary: {guard} still {status.upper()} since {clock_time(since, now)} — {why}"
    return f"guard-canary: {guard} is {status.upper()} — {why}"


# -- planning ----------------------------------------------------------------


def plan_alerts(store: Store, config: AlertsConfig, *, now: datetime) -> int:
    """Create the deliveries for new transitions and due reminders; return how many were created."""
    now = as_utc(now)
    channels = enabled_channels(config)
    created = 0
    with store.engine.begin() as conn:
        through = _claim_cursor(conn)
        rows = conn.execute(
            select(col(Transition.id), col(Transition.guard), col(Transition.status),
                   col(Transition.previous))
            .where(col(Transition.id) > through)
            .order_by(col(Transition.id))
        ).all()
        for tid, guard, status, previous in rows:
            before = _status_before_pause(conn, guard, _id(tid)) if previous == Status.PAUSED else previous
            kind = alert_kind(before, status)
            if kind is not None:
                created += _add(conn, channels, (_id(tid), guard, kind), now)
        if rows:
            through = _id(rows[-1][0])
            conn.execute(update(Meta).where(col(Meta.key) == PLANNED_KEY).values(value=str(through)))
        created += _plan_reminders(conn, channels, config.repeat, through, now)
        created += _plan_new_channels(conn, channels, through, now)
    return created


def _claim_cursor(conn: Connection) -> int:
    """The planned-through id, read after a write so concurrent planners queue up behind us."""
    touched = conn.execute(
        update(Meta).where(col(Meta.key) == PLANNED_KEY).values(value=col(Meta.value))
    ).rowcount
    if not touched:
        conn.execute(insert(Meta).values(key=PLANNED_KEY, value="0"))
        return 0
    return int(conn.execute(select(col(Meta.value)).where(col(Meta.key) == PLANNED_KEY)).scalar_one())


def _status_before_pause(conn: Connection, guard: str, tid: int) -> str | None:
    return conn.execute(
        select(col(Transition.status))
        .where(col(Transition.guard) == guard, col(Transition.id) < tid,
               col(Transition.status) != Status.PAUSED.value)
        .order_by(col(Transition.id).desc())
        .limit(1)
    ).scalar()


def _add(conn: Connection, channels: tuple[str, ...], alert: tuple[int, str, str], now: datetime) -> int:
    """One pending delivery per channel for ``alert`` (transition id, guard, kind)."""
    if not channels:
        return 0
    tid, guard, kind = alert
    conn.execute(insert(Delivery), [
        {"transition_id": tid, "guard": guard, "kind": kind, "channel": channel, "state": "pending",
         "attempts": 0, "next_try": now, "created": now}
        for channel in channels
    ])
    return len(channels)


def _plan_reminders(
    conn: Connection, channels: tuple[str, ...], repeat: timedelta, through: int, now: datetime
) -> int:
    """Reminders for guards still alerting, unmuted, and not told for ``repeat``."""
    if not channels:
        return 0
    latest = (
        select(func.max(col(Transition.id)).label("id"))
        .where(col(Transition.id) <= through)
        .group_by(col(Transition.guard))
        .subquery()
    )
    rows = conn.execute(
        select(col(Transition.id), col(Transition.guard), col(Transition.status), col(Transition.at))
        .join(latest, col(Transition.id) == latest.c.id)
        .where(col(Transition.status).in_(sorted(_ALERTING)))
        .order_by(col(Transition.id))
    ).all()
    muted = active_mutes(conn, now)
    created = 0
    for tid, guard, _status, at in rows:
        if guard in muted:
            continue
        last = conn.execute(
            select(func.max(col(Delivery.created)))
            .where(col(Delivery.guard) == guard, col(Delivery.kind).in_(("change", "reminder")))
        ).scalar()
        anchor = last if last is not None else at
        if now - anchor >= repeat:
            created += _add(conn, channels, (_id(tid), guard, "reminder"), now)
    return created


def _plan_new_channels(conn: Connection, channels: tuple[str, ...], through: int, now: datetime) -> int:
    """A ``change`` on each channel that has no delivery of a guard's current alerting transition.

    A channel added while a guard is already asleep learns the current state once, from its
    own delivery row; the channels that were told stay on their reminder schedule.
    """
    if not channels:
        return 0
    created = 0
    muted = active_mutes(conn, now)
    for tid, guard, status in _alerting_now(conn, through):
        if guard in muted:
            continue
        first, _entered = _spell(conn, guard, tid, status)
        told = set(conn.execute(
            select(col(Delivery.channel))
            .where(col(Delivery.guard) == guard, col(Delivery.transition_id) >= first)
        ).scalars())
        missing = tuple(c for c in channels if c not in told)
        created += _add(conn, missing, (tid, guard, "change"), now)
    return created


def _alerting_now(conn: Connection, through: int) -> list[tuple[int, str, str]]:
    """(transition id, guard, status) of every guard whose latest planned transition is alerting."""
    latest = (
        select(func.max(col(Transition.id)).label("id"))
        .where(col(Transition.id) <= through)
        .group_by(col(Transition.guard))
        .subquery()
    )
    return [
        (_id(tid), str(guard), str(status)) for tid, guard, status in conn.execute(
            select(col(Transition.id), col(Transition.guard), col(Transition.status))
            .join(latest, col(Transition.id) == latest.c.id)
            .where(col(Transition.status).in_(sorted(_ALERTING)))
            .order_by(col(Transition.id))
        )
    ]


# -- delivering --------------------------------------------------------------


def deliver_pending(store: Store, config: AlertsConfig, *, now: datetime, send: Sender | None = None) -> int:
    """Send every due pending delivery, oldest first per guard and channel; return how many were sent."""
    now = as_utc(now)
    sender = send if send is not None else default_sender(config)
    with store.engine.connect() as conn:
        pending = conn.execute(
            select(col(Delivery.id), col(Delivery.guard), col(Delivery.channel), col(Delivery.next_try))
            .where(col(Delivery.state) == "pending")
            .order_by(col(Delivery.id))
        ).all()
    waiting: set[tuple[str, str]] = set()
    sent = 0
    for did, guard, channel, next_try in pending:
        key = (guard, channel)
        if key in waiting:
            continue
        if next_try > now:
            waiting.add(key)  # a later alert must not overtake this one on the same channel
            continue
        state = deliver_one(store, _id(did), now=now, send=sender)
        if state == "sent":
            sent += 1
        elif state in ("pending", None):
            waiting.add(key)
    return sent


def deliver_one(store: Store, delivery_id: int, *, now: datetime, send: Sender) -> str | None:
    """Claim, send and record one due delivery; its new state, or None if it was not due or taken."""
    now = as_utc(now)
    with store.engine.begin() as conn:
        claimed = conn.execute(
            update(Delivery)
            .where(col(Delivery.id) == delivery_id, col(Delivery.state) == "pending",
                   col(Delivery.next_try) <= now)
            .values(next_try=now + LEASE)
        ).rowcount
        if not claimed:
            return None
        row = conn.execute(select(Delivery).where(col(Delivery.id) == delivery_id)).one()
        until, _why = active_mutes(conn, now).get(row.guard, (None, None))
        if until is not None:
            _set(conn, delivery_id, state="muted", last_error=f"muted until {iso(until)}")
            log.info("%s alert for %s via %s not sent: muted until %s", row.kind, row.guard, row.channel,
                     iso(until))
            return "muted"
        payload = build_payload(conn, row.transition_id, row.kind, now=now)
    attempts = row.attempts + 1
    what = f"{row.kind} alert for {row.guard} via {row.channel}"
    if payload is None:
        error = f"its transition {row.transition_id} no longer exists"
        _record(store, delivery_id, state="failed", attempts=attempts, last_error=error)
        log.error("%s failed: %s", what, error)
        return "failed"
    try:
        note = send(row.channel, payload)
    except Exception as exc:  # one channel's fault must not stop the others; it is recorded and retried
        error = excerpt(str(exc) or type(exc).__name__, 500)
        if not isinstance(exc, DeliveryError):
            log.exception("%s raised unexpectedly", what)
            error = f"{type(exc).__name__}: {error}"
        if attempts >= MAX_ATTEMPTS:
            _record(store, delivery_id, state="failed", attempts=attempts, last_error=error)
            log.error("%s failed after %d attempts, giving up: %s", what, attempts, error)
            return "failed"
        retry = now + backoff(attempts)
        _record(store, delivery_id, state="pending", attempts=attempts, last_error=error, next_try=retry)
        log.warning("%s failed (attempt %d of %d), next try at %s: %s", what, attempts, MAX_ATTEMPTS,
                    iso(retry), error)
        return "pending"
    if note is not None:
        _record(store, delivery_id, state="skipped", attempts=attempts, last_error=note)
        return "skipped"
    _record(store, delivery_id, state="sent", attempts=attempts, last_error=None, sent_at=now)
    log.info("%s sent", what)
    return "sent"


def build_payload(conn: Connection, transition_id: int, kind: str, *, now: datetime) -> AlertPayload | None:
    """The payload of one alert about one transition; None if the transition is gone."""
    t = conn.execute(select(Transition).where(col(Transition.id) == transition_id)).first()
    if t is None:
        return None
    since = t.at if kind != "reminder" else _spell(conn, t.guard, _id(t.id), t.status)[1]
    assert since is not None  # the transition was just read
    return {
        "guard": t.guard,
        "status": t.status,
        "previous": t.previous,
        "reason": t.reason,
        "since": iso(since),
        "evidence": t.evidence,
        "kind": kind,
        "text": alert_text(kind, t.guard, t.status, t.reason, since, now=now),
    }


def _spell(conn: Connection, guard: str, tid: int, status: str) -> tuple[int, datetime | None]:
    """The first transition of the spell in ``status`` that includes transition ``tid`` (pauses
    skipped): its id, and when the guard entered ``status`` (None when ``tid`` is not stored)."""
    rows = conn.execute(
        select(col(Transition.id), col(Transition.status), col(Transition.at))
        .where(col(Transition.guard) == guard, col(Transition.id) <= tid)
        .order_by(col(Transition.id).desc())
        .limit(_LOOKBACK)
    ).all()
    start, entered = tid, (rows[0][2] if rows else None)
    for each_id, each, at in rows:
        if each == status:
            start, entered = _id(each_id), at
        elif each != Status.PAUSED:
            break
    return start, entered


def _id(value: int | None) -> int:
    """A primary key read back from the store (never null there)."""
    assert value is not None
    return value


def _set(conn: Connection, delivery_id: int, **values: Any) -> None:
    conn.execute(update(Delivery).where(col(Delivery.id) == delivery_id).values(**values))


def _record(store: Store, delivery_id: int, **values: Any) -> None:
    with store.engine.begin() as conn:
        _set(conn, delivery_id, **values)
