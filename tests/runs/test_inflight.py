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


def test_another_canarys_model_call_is_other_work_too() -> None:
    registry, first, clock = make("first")
    second = ActiveRun(run_id=2, guard="quote", nonce="zzzzabcdefghijklmnop", inject_at="first",
                       inject_text="x", repair_text=None, page="", started=clock.now,
                       deadline=clock.now + 60)
    registry.add(second)
    registry.intercept(call("zzzzabcdefghijklmnop"))
    assert (first.foreign_calls, second.foreign_calls) == (1, 0)


class BlockingPattern:
    """A pattern whose search holds until released: a slow user regex, made deterministic."""

    def __init__(self) -> None:
        import threading

        self.entered = threading.Event()
        self.release = threading.Event()

    def search(self, text: str) -> object:
        self.entered.set()
        self.release.wait(10)
        return object()


def test_a_slow_inject_at_regex_never_holds_the_registry() -> None:
    """While one run's `inject_at = { match }` regex runs, the fixture server and other runs go on."""
    import threading

    pattern = BlockingPattern()
    registry, run, _ = make(MatchAt(pattern))  # type: ignore[arg-type]
    other = ActiveRun(
        run_id=2, guard="quote", nonce="k3v9zzzzzzzzzzzzzzzz", inject_at="first",
        inject_text="other", repair_text=None, page="<p>other</p>", started=1000.0, deadline=1060.0,
    )
    registry.add(other)
    result: list[object] = []
    slow = threading.Thread(target=lambda: result.append(registry.intercept(call(f"x {run.nonce}"))))
    slow.start()
    try:
        assert pattern.entered.wait(5)
        served: list[object] = []
        fetch = threading.Thread(target=lambda: served.append(registry.fetch_page(other.nonce)))
        fetch.start()
        fetch.join(5)
        assert served == ["<p>other</p>"], "the fixture server waited on another run's regex"
    finally:
        pattern.release.set()
        slow.join(5)
    assert result == [run.inject_text]
