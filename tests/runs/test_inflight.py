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


def test_the_in_process_hook_answers_only_the_injection_point_and_its_agent_asks_its_own_model() -> None:
    """No upstream is the hook's normal case: every call but the injection point is 204 (None), the
    agent's own model answers it; only a proxied call with no model server behind needs the repair."""
    registry, run, _ = make("first", upstream=False)

    def hook_call(body: str) -> ModelCall:
        return ModelCall("/canary/v1/answer", "inprocess", body.encode(), False)

    assert registry.intercept(hook_call("k3v9abcdefghijklmnop")) == run.inject_text
    escaped = 'k3v9abcdefghijklmnop {"content": "Fake \\"answer\\" https://x.example.org"} rejected'
    assert registry.intercept(hook_call(escaped)) is None
    assert run.repair_requested is not None
    assert registry.intercept(hook_call("k3v9abcdefghijklmnop once more")) is None


def test_another_canarys_model_call_is_other_work_too() -> None:
    registry, first, clock = make("first")
    second = ActiveRun(run_id=2, guard="quote", nonce="zzzzabcdefghijklmnop", inject_at="first",
                       inject_text="x", repair_text=None, page="", started=clock.now,
                       deadline=clock.now + 60)
    registry.add(second)
    registry.intercept(call("zzzzabcdefghijklmnop"))
    assert (first.foreign_calls, second.foreign_calls) == (1, 0)


class BlockingMatch(MatchAt):
    """An `inject_at` match whose search holds until released: a slow search, made deterministic."""

    def __init__(self) -> None:
        import threading

        super().__init__(re.compile("x"))
        object.__setattr__(self, "entered", threading.Event())
        object.__setattr__(self, "release", threading.Event())

    def found(self, body: bytes) -> bool:
        self.entered.set()  # type: ignore[attr-defined]
        self.release.wait(10)  # type: ignore[attr-defined]
        return True


def test_a_slow_inject_at_regex_never_holds_the_registry() -> None:
    """While one run's `inject_at = { match }` regex runs, the fixture server and other runs go on."""
    import threading

    pattern = BlockingMatch()
    registry, run, _ = make(pattern)
    other = ActiveRun(
        run_id=2, guard="quote", nonce="k3v9zzzzzzzzzzzzzzzz", inject_at="first",
        inject_text="other", repair_text=None, page="<p>other</p>", started=1000.0, deadline=1060.0,
    )
    registry.add(other)
    result: list[object] = []
    slow = threading.Thread(target=lambda: result.append(registry.intercept(call(f"x {run.nonce}"))))
    slow.start()
    try:
        assert pattern.entered.wait(5)  # type: ignore[attr-defined]
        served: list[object] = []
        fetch = threading.Thread(target=lambda: served.append(registry.fetch_page(other.nonce)))
        fetch.start()
        fetch.join(5)
        assert served == ["<p>other</p>"], "the fixture server waited on another run's regex"
    finally:
        pattern.release.set()  # type: ignore[attr-defined]
        slow.join(5)
    assert result == [run.inject_text]


def test_an_inject_at_match_is_searched_in_linear_time() -> None:
    """`(.*a){6}$` backtracks for the sixth power of a body's length in `re`; the body is searched
    natively, so a 200 kB body with no match is answered at once, and a matching one is injected."""
    import time

    pattern = MatchAt(re.compile(r"(.*a){6}$"))
    registry, run, _ = make(pattern)
    body = '{"content": "k3v9abcdefghijklmnop ' + "a" * 5 + "b" * 200_000 + '"}'
    started = time.perf_counter()
    assert registry.intercept(call(body)) is None
    assert time.perf_counter() - started < 2.0  # in `re`: hours
    assert registry.intercept(call("k3v9abcdefghijklmnop a a a a a a")) == run.inject_text


@pytest.mark.parametrize(("pattern", "body", "found"), [
    (r'"role":\s*"tool"', '{"role":  "tool"}', True),
    (r"(?i)TOOL_result", '{"x": "tool_Result"}', True),
    (r"caf\w", '{"x": "café"}', True),  # Unicode classes, as `re` reads the text
    (r"\bresult\b", '{"x": "tool_result"}', False),
    (r"^\{", '{"x": 1}', True),
    (r"done$", '{"x": 1}\ndone\n', True),
    (r"x.y", "x\ny", False),
    (r"\xff", "\udcff", False),  # invalid UTF-8 reads as U+FFFD, never as the byte
])
def test_the_native_search_agrees_with_re(pattern: str, body: str, found: bool) -> None:
    raw = body.encode("utf-8", "surrogateescape")
    assert (re.search(pattern, raw.decode("utf-8", "replace")) is not None) == found
    assert MatchAt(re.compile(pattern)).found(raw) == found


def test_a_model_call_naming_the_runs_conversation_is_the_runs() -> None:
    registry, run, _ = make("first")
    registry.converse(run.nonce, "42")  # too short to tell a body by
    assert registry.intercept(call('{"user": "42"}')) is None and run.foreign_calls == 1
    registry.converse(run.nonce, 'conv-"7f3a9c"')
    assert registry.intercept(call('{"user": "conv-\\"7f3a9c\\""}')) == run.inject_text
    assert run.calls == 1
    registry.remove(run.nonce)
    assert registry.intercept(call('{"user": "conv-\\"7f3a9c\\""}')) is None
