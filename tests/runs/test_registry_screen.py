"""The registry as the proxy's front asks it: a live nonce sends a call to the full path, and a call
passed straight through counts as it would have counted there."""

from __future__ import annotations

import time

from canary.proxy.app import model_call
from canary.runs.inflight import ActiveRun
from canary.runs.registry import Registry
from canary.runs.values import new_nonce

TRACE = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"


def _registry_with_run() -> tuple[Registry, ActiveRun]:
    registry = Registry(has_upstream=True)
    now = time.time()
    run = ActiveRun(1, "citation", new_nonce(), "first", "x", None, "page", started=now, deadline=now + 60)
    registry.add(run)
    return registry, run


def test_live_is_true_only_for_a_body_carrying_a_run_in_flight() -> None:
    registry, run = _registry_with_run()
    assert registry.live(f'{{"q": "see https://{run.nonce}.example.org"}}'.encode())
    assert not registry.live(b'{"q": "an organic call"}')
    registry.remove(run.nonce)
    assert not registry.live(run.nonce.encode())


def test_a_call_passed_by_counts_as_intercept_counts_it() -> None:
    screened, run_a = _registry_with_run()
    asked, run_b = _registry_with_run()
    screened.passed(TRACE)
    call = model_call("POST", "/v1/chat/completions", b'{"q": "an organic call"}')
    assert call is not None
    call.traceparent = TRACE
    assert asked.intercept(call) is None
    assert run_a.foreign_calls == run_b.foreign_calls == 1
    assert screened.traced_elsewhere("ab" * 16) and asked.traced_elsewhere("ab" * 16)


def test_every_change_of_the_runs_in_flight_is_told() -> None:
    registry = Registry(has_upstream=True)
    told: list[list[str]] = []
    registry.on_change = told.append
    now = time.time()
    run = ActiveRun(1, "citation", new_nonce(), "first", "x", None, "page", started=now, deadline=now + 60)
    registry.add(run)
    registry.remove(run.nonce)
    assert told == [[run.nonce], []]
