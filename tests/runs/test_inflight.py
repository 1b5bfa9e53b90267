"""The registry the proxy consults: inject once, at the right call, never after expiry."""

from __future__ import annotations

import re

import pytest

from canary.config.definitions import MatchAt
from canary.proxy.app import ModelCall
from canary.runs.registry import ActiveRun, Registry


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def call(body: str) -> ModelCall:
    return ModelCall("/v1/chat/completions", "chat", body.encode(), False)


def make(inject_at: object = "first", *, upstream: bool = True, repair: str | None = "REPAIR",
         nonce: str = "k3v9abcdefghijklmnop") -> tuple[Registry, ActiveRun, Clock]:
    clock = Clock()
    registry = Registry(has_upstream=upstream, clock=clock)
    run = ActiveRun(
        run_id=1, guard="citation", nonce=nonce, inject_at=inject_at,  # type: ignore[arg-type]
        inject_text='Fake "answer" https://x.example.org', repair_text=repair, page="<p>page</p>",
        started=clock.now, deadline=clock.now + 60,
    )
    registry.add(run)
    return registry, run, clock


def test_first_call_with_the_nonce_is_injected_once() -> None:
    registry, run, _ = make("first")
    assert registry.intercept(call("no nonce here")) is None
    assert registry.intercept(call("read k3v9abcdefghijklmnop")) == run.inject_text
    assert registry.intercept(call("read k3v9abcdefghijklmnop again")) is None
    assert run.calls == 2


def test_a_request_that_merely_resembles_a_canary_is_untouched() -> None:
    registry, _, _ = make("first")
    assert registry.intercept(call("read k3v9abcdefghijklmnoq")) is None  # other nonce
    assert registry.intercept(call("K3V9ABCDEFGHIJKLMNOP")) is None


def test_after_fetch_waits_for_the_fixture() -> None:
    registry, run, _ = make("after-fetch")
    assert registry.intercept(call("plan k3v9abcdefghijklmnop")) is None
    assert registry.fetch_page(run.nonce) == "<p>page</p>"
    assert registry.intercept(call("answer k3v9abcdefghijklmnop")) == run.inject_text


def test_nth_call_and_match() -> None:
    registry, run, _ = make(3)
    results = [registry.intercept(call(f"{i} k3v9abcdefghijklmnop")) for i in range(4)]
    assert results == [None, None, run.inject_text, None]
    registry, run, _ = make(MatchAt(re.compile(r'"role":\s*"tool"')))
    assert registry.intercept(call('{"role": "user"} k3v9abcdefghijklmnop')) is None
    assert registry.intercept(call('{"role": "tool"} k3v9abcdefghijklmnop')) == run.inject_text


def test_never_after_expiry_and_never_after_removal() -> None:
    registry, run, clock = make("first")
    clock.now += 61
    assert registry.intercept(call("k3v9abcdefghijklmnop")) is None
    assert registry.fetch_page(run.nonce) is None
    registry, again, _ = make("first")
    registry.remove(again.nonce)
    assert registry.intercept(call("k3v9abcdefghijklmnop")) is None
    assert again.calls == 0


@pytest.mark.parametrize("upstream", [True, False])
def test_repair_noticed_and_answered_without_upstream(upstream: bool) -> None:
    registry, run, _ = make("first", upstream=upstream)
    registry.intercept(call("k3v9abcdefghijklmnop"))
    escaped = 'k3v9abcdefghijklmnop {"content": "Fake \\"answer\\" https://x.example.org"} rejected'
    second = registry.intercept(call(escaped))
    assert run.repair_requested is not None
    assert second == (None if upstream else "REPAIR")


def test_attribution_by_nonce_then_by_guard_and_time() -> None:
    registry, run, clock = make("first")
    assert run.injected is None
    assert registry.attribute("quote", "x k3v9abcdefghijklmnop y", None) == 1  # nonce: any guard
    assert registry.attribute("citation", "no nonce", None) is None  # not injected yet
    registry.intercept(call("k3v9abcdefghijklmnop"))
    assert registry.attribute("citation", "no nonce", clock.now) == 1
    assert registry.attribute("citation", "no nonce", clock.now - 30) is None  # written before
    assert registry.attribute("quote", "no nonce", clock.now) is None  # other guard
