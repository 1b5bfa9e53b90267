"""Firings seen in spans in the store (SQLite and PostgreSQL): once per span and guard, and kept when the logs are counted again."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from canary.store.engine import Store
from canary.store.queries import window_counts
from canary.store.signals import SignalHit, commit_signals

NOW = datetime.now(UTC)


def hit(key: str, guard: str = "grounding") -> SignalHit:
    return SignalHit(guard, key, key.split(":", maxsplit=1)[0], NOW.timestamp(), f"span 'check' trace {key}")


def test_a_span_is_one_firing_of_each_guard_and_survives_a_recount(open_store: Callable[..., Store]) -> None:
    store = open_store()
    assert commit_signals(store, [hit("a" * 32 + ":" + "1" * 16), hit("b" * 32 + ":" + "1" * 16)]) == 2
    # sent again (a retried export), and once more for another guard
    assert commit_signals(store, [hit("a" * 32 + ":" + "1" * 16), hit("a" * 32 + ":" + "1" * 16, "other")]) == 1
    assert store.count_firings() == 3
    # a reload counts the guard's log firings again: its span firings stay, and stay counted
    store.recount(["grounding"], NOW - timedelta(hours=2), [])
    counts = window_counts(store.engine, NOW - timedelta(hours=2))
    assert (counts["grounding"].organic, counts["other"].organic) == (2, 1)
    assert store.count_firings() == 3
