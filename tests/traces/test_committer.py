"""The committer of span firings: what it cannot store is said, with how many, never lost in silence."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from canary.errors import StoreError
from canary.store.signals import SignalHit
from canary.traces.committer import Committer


def hits(n: int) -> list[SignalHit]:
    return [SignalHit("grounding", f"{i:032x}:{i:016x}", None, None, "span 'check'") for i in range(n)]


def test_a_stop_while_the_store_is_down_says_how_many_firings_were_lost(caplog: pytest.LogCaptureFixture) -> None:
    errors: list[str] = []

    def down(batch: Sequence[SignalHit]) -> int:
        raise StoreError("cannot reach the store")

    committer = Committer(down, failed=errors.append)
    assert committer.offer(hits(3)) and committer.offer(hits(2))
    with caplog.at_level(logging.ERROR, logger="canary.traces.committer"):
        committer.close(timeout=0.3)
    lost = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert lost and "5 firings seen in spans" in lost[0] and "lost" in lost[0]
    assert errors and "cannot be written" in errors[0]


def test_a_fault_of_its_own_is_told_to_the_receivers_counts() -> None:
    errors: list[str] = []

    def broken(batch: Sequence[SignalHit]) -> int:
        raise OverflowError("date value out of range")

    committer = Committer(broken, failed=errors.append)
    assert committer.offer(hits(2))
    assert committer.flush(5)
    committer.close()
    assert errors and "2 firings" in errors[-1] and "OverflowError" in errors[-1]
