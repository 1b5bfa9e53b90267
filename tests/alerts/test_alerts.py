"""Alerts: planning deliveries from transition rows, sending them, retrying, and the channels."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import socket
import stat
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, select
from sqlmodel import col
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from canary.alerts import channels as notify
from canary.alerts.channels import AlertPayload, default_sender, desktop_command
from canary.alerts.planning import (
    BACKOFF,
    LEASE,
    MAX_ATTEMPTS,
    PLANNED_KEY,
    alert_kind,
    alert_text,
    backoff,
    deliver_pending,
    plan_alerts,
)
from canary.config.settings import AlertsConfig
from canary.errors import DeliveryError
from canary.proxy.serving import BackgroundServer
from canary.status.mutes import mute, unmute
from canary.store.engine import Store
from canary.store.tables import Delivery, Meta, Transition
from canary.vocabulary import as_utc

T0 = datetime(2026, 11, 29, 10, 2, tzinfo=UTC)
REPEAT = timedelta(hours=6)
REASON = "canary fake-url leaked at 10:02: the answer reached the user; the guard wrote no line"
EVIDENCE = "2026-11-29T10:00:00.612Z CitationGuard: rejected https://k3v9.example.org/permit"
ALL = AlertsConfig(desktop=True, webhook="http://127.0.0.1:9/hook", command=("true",), repeat=REPEAT)
WEBHOOK_ONLY = AlertsConfig(desktop=False, webhook="http://127.0.0.1:9/hook", repeat=REPEAT)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(f"sqlite:///{tmp_path}/c.db")
    yield opened
    opened.close()


@pytest.fixture(autouse=True)
def local_time_is_utc_plus_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Texts show local clock times; pin the zone (a POSIX rule, no tz database needed)."""
    monkeypatch.setenv("TZ", "XXX-1")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a new process would, with no missing tool reported yet."""
    monkeypatch.setattr(notify, "_warned_missing", set())


def add(store: Store, previous: str | None, status: str, *, at: datetime = T0, guard: str = "citation",
        reason: str = REASON, evidence: str | None = None) -> int:
    row = {"guard": guard, "at": at, "status": status, "previous": previous, "reason": reason,
           "evidence": evidence}
    with store.engine.begin() as conn:
        key = conn.execute(insert(Transition).values(row)).inserted_primary_key
    assert key is not None
    return int(key[0])


def deliveries(store: Store) -> list[Any]:
    with store.engine.connect() as conn:
        return list(conn.execute(select(Delivery).order_by(col(Delivery.id))).all())


class Recorder:
    """A Sender that remembers every call and answers from a script of outcomes."""

    def __init__(self, *outcomes: str | BaseException | None) -> None:
        self.calls: list[tuple[str, AlertPayload]] = []
        self.outcomes = list(outcomes)

    def __call__(self, channel: str, payload: AlertPayload) -> str | None:
        self.calls.append((channel, payload))
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


# -- pure pieces -------------------------------------------------------------


@pytest.mark.parametrize(
    ("previous", "status", "kind"),
    [
        ("alive", "asleep", "change"),  # the headline case
        ("quiet", "degraded", "change"),
        ("alive", "inconclusive", "change"),
        ("asleep", "degraded", "change"),  # from one alerting status to another is news
        ("new", "asleep", "change"),  # a guard asleep from its first evaluation
        (None, "asleep", "change"),  # the first transition ever recorded for a guard
        ("asleep", "asleep", None),  # no change of status
        ("asleep", "alive", "recovery"),
        ("inconclusive", "quiet", "recovery"),
        ("new", "alive", None),  # a guard coming up healthy is no news
        (None, "alive", None),
        ("alive", "quiet", None),
        ("alive", "paused", None),  # a mute starting
        ("asleep", "paused", None),
        ("asleep", "new", None),
        ("alive", "new", None),
    ],
)
def test_alert_kind(previous: str | None, status: str, kind: str | None) -> None:
    assert alert_kind(previous, status) == kind


def test_backoff_grows_and_is_capped() -> None:
    assert [backoff(n) for n in range(1, 9)] == [
        timedelta(seconds=30), timedelta(minutes=2), timedelta(minutes=10), timedelta(minutes=30),
        timedelta(hours=1), timedelta(hours=1), timedelta(hours=1), timedelta(hours=1),
    ]


def test_alert_texts() -> None:
    assert alert_text("change", "citation", "asleep", REASON, T0, now=T0) == (
        "guard-canary: citation is ASLEEP — canary fake-url leaked at 10:02: the answer reached the user; "
        "the guard wrote no line"
    )
    assert alert_text("recovery", "citation", "alive", "canary fake-url caught at 11:00", T0, now=T0) == (
        "guard-canary: citation recovered (alive) — canary fake-url caught at 11:00"
    )
    assert alert_text("reminder", "citation", "asleep", REASON, T0, now=T0 + timedelta(hours=1)) == (
        f"guard-canary: citation still ASLEEP since 11:02 — {REASON}"  # local time, UTC+1
    )
    two_days = alert_text("reminder", "citation", "asleep", "x\ny", T0, now=T0 + timedelta(days=2))
    assert two_days == "guard-canary: citation still ASLEEP since 2026-11-29 11:02 — x y"


# -- planning ----------------------------------------------------------------


def test_a_guard_falling_asleep_gets_one_delivery_per_channel(store: Store) -> None:
    tid = add(store, "alive", "asleep")
    assert plan_alerts(store, ALL, now=T0) == 3
    rows = deliveries(store)
    assert [(r.channel, r.kind, r.state, r.transition_id, r.guard) for r in rows] == [
        ("desktop", "change", "pending", tid, "citation"),
        ("webhook", "change", "pending", tid, "citation"),
        ("command", "change", "pending", tid, "citation"),
    ]
    assert all(as_utc(r.next_try) == T0 and as_utc(r.created) == T0 and r.attempts == 0 for r in rows)


def test_only_enabled_channels_get_deliveries(store: Store) -> None:
    add(store, "alive", "asleep")
    assert plan_alerts(store, WEBHOOK_ONLY, now=T0) == 1
    assert [r.channel for r in deliveries(store)] == ["webhook"]


def test_no_channel_plans_nothing_but_moves_on(store: Store) -> None:
    add(store, "alive", "asleep")
    assert plan_alerts(store, AlertsConfig(desktop=False), now=T0) == 0
    # that transition is planned; channels enabled later are told the current state, once
    assert plan_alerts(store, ALL, now=T0) == 3
    assert plan_alerts(store, ALL, now=T0) == 0
    assert [(d.kind, d.channel) for d in deliveries(store)] == [
        ("change", "desktop"), ("change", "webhook"), ("change", "command")
    ]


def test_recovery_creates_recovery_deliveries(store: Store) -> None:
    add(store, "alive", "asleep")
    plan_alerts(store, WEBHOOK_ONLY, now=T0)
    back = add(store, "asleep", "alive", at=T0 + timedelta(hours=1), reason="canary fake-url caught at 11:02")
    assert plan_alerts(store, WEBHOOK_ONLY, now=T0 + timedelta(hours=1)) == 1
    last = deliveries(store)[-1]
    assert (last.kind, last.transition_id, last.channel) == ("recovery", back, "webhook")


@pytest.mark.parametrize(("previous", "status"), [("new", "alive"), ("alive", "paused"), (None, "quiet"),
                                                  ("asleep", "paused")])
def test_transitions_that_are_no_news_create_nothing(store: Store, previous: str | None, status: str) -> None:
    add(store, previous, status)
    assert plan_alerts(store, ALL, now=T0) == 0
    assert deliveries(store) == []


@pytest.mark.parametrize(
    ("before", "after", "kinds"),
    [
        ("asleep", "asleep", []),  # still asleep after the mute: reminders carry on, no new change
        ("alive", "asleep", ["change"]),  # fell asleep while muted: the user has not heard of it
        ("asleep", "alive", ["recovery"]),  # recovered while muted
        ("alive", "alive", []),
        ("asleep", "degraded", ["change"]),
    ],
)
def test_leaving_a_pause_is_judged_against_the_status_before_it(
    store: Store, before: str, after: str, kinds: list[str]
) -> None:
    add(store, "new", before, at=T0)
    plan_alerts(store, WEBHOOK_ONLY, now=T0)
    planned = len(deliveries(store))
    add(store, before, "paused", at=T0 + timedelta(minutes=1))
    add(store, "paused", after, at=T0 + timedelta(minutes=30))
    plan_alerts(store, WEBHOOK_ONLY, now=T0 + timedelta(minutes=30))
    assert [r.kind for r in deliveries(store)[planned:]] == kinds


def test_planning_twice_creates_nothing_new(store: Store) -> None:
    add(store, "alive", "asleep")
    assert plan_alerts(store, ALL, now=T0) == 3
    assert plan_alerts(store, ALL, now=T0) == 0
    assert plan_alerts(store, ALL, now=T0 + timedelta(minutes=5)) == 0
    assert len(deliveries(store)) == 3
    with store.engine.connect() as conn:
        cursor = conn.execute(select(col(Meta.value)).where(col(Meta.key) == PLANNED_KEY)).scalar_one()
    assert cursor == "1"
    add(store, "alive", "degraded", guard="other")
    assert plan_alerts(store, ALL, now=T0 + timedelta(minutes=6)) == 3


def test_two_planners_at_once_plan_each_transition_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/c.db"
    stores = [Store(url), Store(url)]
    for n in range(20):
        add(stores[0], "alive", "asleep", guard=f"g{n}")
    barrier = threading.Barrier(2)
    counts: list[int] = []

    def plan(store: Store) -> None:
        barrier.wait()
        counts.append(plan_alerts(store, ALL, now=T0))

    threads = [threading.Thread(target=plan, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert sorted(counts) == [0, 60]
        assert len(deliveries(stores[0])) == 60
    finally:
        for each in stores:
            each.close()


def test_a_crash_between_plan_and_deliver_still_delivers_exactly_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/c.db"
    first = Store(url)
    add(first, "alive", "asleep", evidence=EVIDENCE)
    assert plan_alerts(first, ALL, now=T0) == 3
    first.close()  # the daemon dies here

    second = Store(url)
    try:
        send = Recorder()
        assert plan_alerts(second, ALL, now=T0 + timedelta(seconds=5)) == 0
        assert deliver_pending(second, ALL, now=T0 + timedelta(seconds=5), send=send) == 3
        assert deliver_pending(second, ALL, now=T0 + timedelta(hours=1), send=send) == 0
        assert [c for c, _ in send.calls] == ["desktop", "webhook", "command"]
        assert {r.state for r in deliveries(second)} == {"sent"}
        assert all(as_utc(r.sent_at) == T0 + timedelta(seconds=5) for r in deliveries(second))
    finally:
        second.close()


def test_a_crash_while_sending_sends_again_after_the_lease(store: Store) -> None:
    add(store, "alive", "asleep")
    plan_alerts(store, WEBHOOK_ONLY, now=T0)
    with pytest.raises(KeyboardInterrupt):  # killed mid-send, before the outcome was recorded
        deliver_pending(store, WEBHOOK_ONLY, now=T0, send=Recorder(KeyboardInterrupt()))
    assert deliveries(store)[0].state == "pending"
    send = Recorder()
    assert deliver_pending(store, WEBHOOK_ONLY, now=T0 + LEASE - timedelta(seconds=1), send=send) == 0
    assert deliver_pending(store, WEBHOOK_ONLY, now=T0 + LEASE, send=send) == 1
    assert len(send.calls) == 1


# -- reminders -----------------------------------------------------------------


def kinds_at(store: Store, config: AlertsConfig, now: datetime) -> list[str]:
    before = len(deliveries(store))
    plan_alerts(store, config, now=now)
    return [r.kind for r in deliveries(store)[before:]]


def test_reminders_every_repeat_while_still_asleep(store: Store) -> None:
    tid = add(store, "alive", "asleep")
    assert kinds_at(store, WEBHOOK_ONLY, T0) == ["change"]
    assert kinds_at(store, WEBHOOK_ONLY, T0 + REPEAT - timedelta(seconds=1)) == []
    assert kinds_at(store, WEBHOOK_ONLY, T0 + REPEAT) == ["reminder"]
    assert deliveries(store)[-1].transition_id == tid
    assert kinds_at(store, WEBHOOK_ONLY, T0 + REPEAT + timedelta(hours=1)) == []
    assert kinds_at(store, WEBHOOK_ONLY, T0 + 2 * REPEAT - timedelta(seconds=1)) == []
    assert kinds_at(store, WEBHOOK_ONLY, T0 + 2 * REPEAT) == ["reminder"]
    assert kinds_at(store, ALL, T0 + 3 * REPEAT) == ["reminder", "reminder", "reminder"]


def test_no_reminder_after_recovery(store: Store) -> None:
    add(store, "alive", "asleep")
    plan_alerts(store, WEBHOOK_ONLY, now=T0)
    add(store, "asleep", "alive", at=T0 + timedelta(hours=1))
    assert kinds_at(store, WEBHOOK_ONLY, T0 + timedelta(hours=1)) == ["recovery"]
    assert kinds_at(store, WEBHOOK_ONLY, T0 + 3 * REPEAT) == []


def test_no_reminders_while_muted_and_they_resume_after(store: Store) -> None:
    add(store, "alive", "asleep")
    plan_alerts(store, WEBHOOK_ONLY, now=T0)
    mute(store, "citation", timedelta(hours=8), now=T0 + timedelta(minutes=1))
    until = T0 + timedelta(hours=8, minutes=1)
    assert kinds_at(store, WEBHOOK_ONLY, T0 + REPEAT) == []
    assert kinds_at(store, WEBHOOK_ONLY, until - timedelta(seconds=1)) == []
    assert kinds_at(store, WEBHOOK_ONLY, until) == ["reminder"]  # the mute ends at `until`
    assert kinds_at(store, WEBHOOK_ONLY, until + timedelta(hours=1)) == []
    assert kinds_at(store, WEBHOOK_ONLY, until + REPEAT) == ["reminder"]


def test_a_reminder_tells_since_when_across_a_pause(store: Store) -> None:
    add(store, "alive", "asleep", at=T0)
    add(store, "asleep", "paused", at=T0 + timedelta(hours=1))
    add(store, "paused", "asleep", at=T0 + timedelta(hours=2), reason="still leaking")
    assert kinds_at(store, WEBHOOK_ONLY, T0 + timedelta(hours=2)) == ["change"]
    send = Recorder()
    deliver_pending(store, WEBHOOK_ONLY, now=T0 + timedelta(hours=2), send=send)
    later = T0 + timedelta(hours=2) + REPEAT  # a repeat after the last alert, the change on unmuting
    assert kinds_at(store, WEBHOOK_ONLY, later - timedelta(seconds=1)) == []
    assert kinds_at(store, WEBHOOK_ONLY, later) == ["reminder"]
    deliver_pending(store, WEBHOOK_ONLY, now=later, send=send)
    reminder = send.calls[-1][1]
    assert reminder["kind"] == "reminder"
    assert reminder["since"] == "2026-11-29T10:02:00Z"  # asleep since before the mute
    assert reminder["text"] == "guard-canary: citation still ASLEEP since 11:02 — still leaking"


# -- delivering ------------------------------------------------------------------


def test_the_payload_has_every_field(store: Store) -> None:
    add(store, "alive", "asleep", evidence=EVIDENCE)
    plan_alerts(store, WEBHOOK_ONLY, now=T0)
    send = Recorder()
    assert deliver_pending(store, WEBHOOK_ONLY, now=T0, send=send) == 1
    assert send.calls == [("webhook", {
        "guard": "citation", "status": "asleep", "previous": "alive", "reason": REASON,
        "since": "2026-11-29T10:02:00Z", "evidence": EVIDENCE, "kind": "change",
        "text": f"guard-canary: citation is ASLEEP — {REASON}",
    })]


def test_deliveries_of_a_muted_guard_are_marked_muted_and_never_fire(store: Store) -> None:
    add(store, "alive", "asleep")
    add(store, "alive", "asleep", guard="other")
    plan_alerts(store, WEBHOOK_ONLY, now=T0)
    mute(store, "citation", timedelta(hours=1), now=T0)
    send = Recorder()
    assert deliver_pending(store, WEBHOOK_ONLY, now=T0, send=send) == 1
    assert [p["guard"] for _, p in send.calls] == ["other"]
    rows = {r.guard: r for r in deliveries(store)}
    assert rows["citation"].state == "muted"
    assert rows["citation"].last_error == "muted until 2026-11-29T11:02:00Z"
    unmute(store, "citation")
    assert deliver_pending(store, WEBHOOK_ONLY, now=T0 + timedelta(hours=2), send=send) == 0
    assert len(send.calls) == 1


def test_failures_back_off_then_give_up_as_failed_and_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    add(store, "alive", "asleep")
    plan_alerts(store, WEBHOOK_ONLY, now=T0)
    send = Recorder(*[DeliveryError("webhook http://127.0.0.1:9 answered 503: busy")] * MAX_ATTEMPTS)
    now = T0
    tries = []
    with caplog.at_level(logging.INFO, logger="canary.alerts.planning"):
        for _ in range(MAX_ATTEMPTS):
            assert deliver_pending(store, WEBHOOK_ONLY, now=now - timedelta(seconds=1), send=send) == 0
            assert deliver_pending(store, WEBHOOK_ONLY, now=now, send=send) == 0
            tries.append(now)
            row = deliveries(store)[0]
            if row.state == "pending":
                now = as_utc(row.next_try)
    assert len(send.calls) == MAX_ATTEMPTS
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert gaps == [*BACKOFF, BACKOFF[-1], BACKOFF[-1]]
    row = deliveries(store)[0]
    assert (row.state, row.attempts, row.last_error) == (
        "failed", MAX_ATTEMPTS, "webhook http://127.0.0.1:9 answered 503: busy"
    )
    assert deliver_pending(store, WEBHOOK_ONLY, now=now + timedelta(days=1), send=send) == 0
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "failed after 8 attempts" in errors[0].getMessage()
    assert "citation" in errors[0].getMessage()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == MAX_ATTEMPTS - 1


def test_a_later_alert_waits_for_an_earlier_one_on_the_same_channel(store: Store) -> None:
    add(store, "alive", "asleep")
    plan_alerts(store, ALL, now=T0)
    down = DeliveryError("connection refused")
    send = Recorder(None, down, None)  # desktop ok, webhook down, command ok
    assert deliver_pending(store, ALL, now=T0, send=send) == 2
    add(store, "asleep", "alive", at=T0 + timedelta(seconds=10))
    plan_alerts(store, ALL, now=T0 + timedelta(seconds=10))
    assert deliver_pending(store, ALL, now=T0 + timedelta(seconds=10), send=send) == 2
    assert [(c, p["kind"]) for c, p in send.calls[3:]] == [("desktop", "recovery"), ("command", "recovery")]
    assert deliver_pending(store, ALL, now=T0 + BACKOFF[0], send=send) == 2
    assert [(c, p["kind"]) for c, p in send.calls[5:]] == [("webhook", "change"), ("webhook", "recovery")]


def test_an_unexpected_error_in_a_sender_is_recorded_and_retried(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    add(store, "alive", "asleep")
    plan_alerts(store, WEBHOOK_ONLY, now=T0)
    assert deliver_pending(store, WEBHOOK_ONLY, now=T0, send=Recorder(ValueError("bug"))) == 0
    row = deliveries(store)[0]
    assert (row.state, row.attempts, row.last_error) == ("pending", 1, "ValueError: bug")
    assert any("raised unexpectedly" in r.getMessage() for r in caplog.records)
    assert deliver_pending(store, WEBHOOK_ONLY, now=T0 + BACKOFF[0], send=Recorder()) == 1


def test_a_channel_no_longer_configured_is_skipped(store: Store) -> None:
    add(store, "alive", "asleep")
    plan_alerts(store, WEBHOOK_ONLY, now=T0)
    assert deliver_pending(store, AlertsConfig(desktop=False), now=T0) == 0
    row = deliveries(store)[0]
    assert (row.state, row.last_error) == ("skipped", "the webhook is no longer configured")


# -- webhook -----------------------------------------------------------------------


class Receiver:
    """A local webhook receiver: answers from a script of status codes, can hang on demand."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.bodies: list[bytes] = []
        self.hang = threading.Event()
        self.release = threading.Event()
        self.app = Starlette(routes=[Route("/hook/{token}", self.hook, methods=["POST"])])

    async def hook(self, request: Request) -> Response:
        self.bodies.append(await request.body())
        if self.hang.is_set():
            while not self.release.is_set():
                await asyncio.sleep(0.01)
        status = self.statuses.pop(0) if self.statuses else 200
        return Response("upstream is down" if status >= 400 else "ok", status_code=status)


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    running = Receiver()
    with BackgroundServer(running.app, name="webhook receiver") as server:
        yield running, f"{server.url}/hook/s3cret"
        running.release.set()


def test_webhook_fails_twice_then_succeeds_at_the_backoff_times(
    store: Store, receiver: tuple[Receiver, str]
) -> None:
    hook, url = receiver
    hook.statuses = [500, 500]
    config = AlertsConfig(desktop=False, webhook=url, repeat=REPEAT)
    add(store, "alive", "asleep", evidence=EVIDENCE)
    plan_alerts(store, config, now=T0)

    assert deliver_pending(store, config, now=T0) == 0
    row = deliveries(store)[0]
    assert (row.state, row.attempts, as_utc(row.next_try)) == ("pending", 1, T0 + BACKOFF[0])
    assert "answered 500: upstream is down" in row.last_error
    assert "s3cret" not in row.last_error  # webhook paths are secrets

    assert deliver_pending(store, config, now=T0 + BACKOFF[0] - timedelta(seconds=1)) == 0
    assert len(hook.bodies) == 1
    second = T0 + BACKOFF[0]
    assert deliver_pending(store, config, now=second) == 0
    assert as_utc(deliveries(store)[0].next_try) == second + BACKOFF[1]
    assert deliver_pending(store, config, now=second + BACKOFF[1]) == 1

    row = deliveries(store)[0]
    assert (row.state, row.attempts, as_utc(row.sent_at)) == ("sent", 3, second + BACKOFF[1])
    assert len(hook.bodies) == 3
    assert json.loads(hook.bodies[-1]) == {
        "guard": "citation", "status": "asleep", "previous": "alive", "reason": REASON,
        "since": "2026-11-29T10:02:00Z", "evidence": EVIDENCE, "kind": "change",
        "text": f"guard-canary: citation is ASLEEP — {REASON}",
    }


def test_webhook_url_from_the_environment_is_read_at_send_time(
    store: Store, receiver: tuple[Receiver, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    hook, url = receiver
    config = AlertsConfig(desktop=False, webhook="env:CANARY_TEST_HOOK", repeat=REPEAT)
    add(store, "alive", "asleep")
    plan_alerts(store, config, now=T0)
    monkeypatch.delenv("CANARY_TEST_HOOK", raising=False)
    assert deliver_pending(store, config, now=T0) == 0
    row = deliveries(store)[0]
    assert row.last_error == "the webhook URL comes from $CANARY_TEST_HOOK, which is not set"
    monkeypatch.setenv("CANARY_TEST_HOOK", url)
    assert deliver_pending(store, config, now=T0 + BACKOFF[0]) == 1
    assert json.loads(hook.bodies[0])["guard"] == "citation"


def test_resolve_webhook_rejects_a_variable_that_is_not_a_url() -> None:
    assert notify.resolve_webhook("http://x/y", {}) == "http://x/y"
    assert notify.resolve_webhook("env:HOOK", {"HOOK": "https://h/1"}) == "https://h/1"
    with pytest.raises(DeliveryError, match=r"\$HOOK should hold an http\(s\) URL"):
        notify.resolve_webhook("env:HOOK", {"HOOK": "ftp://h"})


def test_a_webhook_that_never_answers_times_out_and_is_retried(
    store: Store, receiver: tuple[Receiver, str]
) -> None:
    hook, url = receiver
    config = AlertsConfig(desktop=False, webhook=url, repeat=REPEAT)
    add(store, "alive", "asleep")
    plan_alerts(store, config, now=T0)
    hook.hang.set()
    assert deliver_pending(store, config, now=T0, send=default_sender(config, webhook_timeout=0.3)) == 0
    row = deliveries(store)[0]
    assert (row.state, row.attempts) == ("pending", 1)
    assert "no answer within 0.3s" in row.last_error
    hook.release.set()
    hook.hang.clear()
    assert deliver_pending(store, config, now=T0 + BACKOFF[0]) == 1
    assert deliveries(store)[0].state == "sent"


def test_a_webhook_nobody_listens_on_is_a_delivery_error() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(DeliveryError, match=rf"webhook http://127\.0\.0\.1:{port}: ConnectError"):
        notify.webhook(payload(), f"http://127.0.0.1:{port}/hook")


# -- command -----------------------------------------------------------------------

WRITE_ARGV = "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))"


def test_the_command_gets_its_placeholders_filled(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "argv.json"
    argv = (sys.executable, "-c", WRITE_ARGV, str(out), "{guard}", "{status}", "{previous}", "{reason}",
            "{since}", "{evidence}", "{text}", "{{literal}}")
    config = AlertsConfig(desktop=False, command=argv, repeat=REPEAT)
    add(store, "alive", "asleep")
    plan_alerts(store, config, now=T0)
    assert deliver_pending(store, config, now=T0) == 1
    assert json.loads(out.read_text()) == [
        "citation", "asleep", "alive", REASON, "2026-11-29T10:02:00Z", "",
        f"guard-canary: citation is ASLEEP — {REASON}", "{literal}",
    ]


def test_a_failing_command_is_retried_with_its_stderr(store: Store) -> None:
    argv = (sys.executable, "-c", "import sys; sys.stderr.write('boom: no route\\n'); sys.exit(3)")
    config = AlertsConfig(desktop=False, command=argv, repeat=REPEAT)
    add(store, "alive", "asleep")
    plan_alerts(store, config, now=T0)
    assert deliver_pending(store, config, now=T0) == 0
    row = deliveries(store)[0]
    assert (row.state, row.attempts, as_utc(row.next_try)) == ("pending", 1, T0 + BACKOFF[0])
    assert row.last_error == f"{sys.executable} exited 3: boom: no route"


def test_a_command_that_hangs_or_is_missing_is_a_delivery_error(tmp_path: Path) -> None:
    with pytest.raises(DeliveryError, match=r"did not finish within 0\.2s"):
        notify.command(payload(), [sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2)
    with pytest.raises(DeliveryError, match="cannot run"):
        notify.command(payload(), [str(tmp_path / "no-such-program")])


# -- desktop -----------------------------------------------------------------------


def payload(text: str = f"guard-canary: citation is ASLEEP — {REASON}", kind: str = "change",
            status: str = "asleep") -> AlertPayload:
    return {"guard": "citation", "status": status, "previous": "alive", "reason": REASON,
            "since": "2026-11-29T10:02:00Z", "evidence": None, "kind": kind, "text": text}


def test_desktop_command_on_macos_escapes_quotes_and_backslashes() -> None:
    text = 'guard-canary: citation is ASLEEP — said "C:\\tmp" \\" end'
    assert desktop_command(payload(text), "darwin") == [
        "osascript",
        "-e",
        'display notification "guard-canary: citation is ASLEEP — said \\"C:\\\\tmp\\" \\\\\\" end" '
        'with title "guard-canary" subtitle "citation: ASLEEP"',
    ]


def test_desktop_command_on_linux() -> None:
    text = f"guard-canary: citation is ASLEEP — {REASON}"
    assert desktop_command(payload(text), "linux") == [
        "notify-send", "--app-name=guard-canary", "--urgency=critical", "--", "citation: ASLEEP", text,
    ]
    recovered = payload("guard-canary: citation recovered (alive) — ok", kind="recovery", status="alive")
    assert desktop_command(recovered, "linux") == [
        "notify-send", "--app-name=guard-canary", "--urgency=normal", "--", "citation: ALIVE",
        "guard-canary: citation recovered (alive) — ok",
    ]
    assert desktop_command(payload(), "win32") is None


def fake_tool(directory: Path, name: str, out: Path) -> None:
    """An executable that writes its argv (after the program) to ``out`` as JSON."""
    script = directory / name
    script.write_text(f"#!{sys.executable}\nimport json, sys\n"
                      f"open({str(out)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.mark.skipif(sys.platform == "win32", reason="a script as a fake notifier needs a POSIX shebang")
@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_desktop_runs_the_notifier_with_that_argv(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, platform: str
) -> None:
    bin_dir, out = tmp_path / "bin", tmp_path / "argv.json"
    bin_dir.mkdir()
    tool = "osascript" if platform == "darwin" else "notify-send"
    fake_tool(bin_dir, tool, out)
    monkeypatch.setenv("PATH", str(bin_dir))
    config = AlertsConfig(desktop=True, repeat=REPEAT)
    add(store, "alive", "asleep")
    plan_alerts(store, config, now=T0)
    sent = deliver_pending(store, config, now=T0, send=default_sender(config, platform=platform))
    assert sent == 1
    expected = desktop_command(payload(), platform)
    assert expected is not None
    assert json.loads(out.read_text()) == expected[1:]


def test_a_missing_notifier_is_skipped_with_one_warning(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    config = AlertsConfig(desktop=True, repeat=REPEAT, desktop_set=True)  # `desktop = true` written
    add(store, "alive", "asleep")
    add(store, "alive", "degraded", guard="other")
    plan_alerts(store, config, now=T0)
    send = default_sender(config, platform="linux")
    with caplog.at_level(logging.WARNING, logger="canary.alerts.planning"):
        assert deliver_pending(store, config, now=T0, send=send) == 0
        add(store, "asleep", "alive", at=T0 + timedelta(minutes=1))
        plan_alerts(store, config, now=T0 + timedelta(minutes=1))
        assert deliver_pending(store, config, now=T0 + timedelta(minutes=1), send=send) == 0
    skipped = [(r.state, r.attempts, r.last_error) for r in deliveries(store)]
    assert skipped == [("skipped", 1, "notify-send not found")] * 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "desktop alerts are skipped: notify-send not found (webhook and command alerts still go out)"
    ]
    assert deliver_pending(store, config, now=T0 + timedelta(days=1), send=send) == 0


def test_a_failing_notifier_is_a_delivery_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "notify-send"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stderr.write('no session bus')\nsys.exit(1)\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(DeliveryError, match="exited 1: no session bus"):
        notify.desktop(payload(), platform="linux")


def test_enabled_channels() -> None:
    assert notify.enabled_channels(ALL) == ("desktop", "webhook", "command")
    assert notify.enabled_channels(AlertsConfig(desktop=False, command=())) == ()
