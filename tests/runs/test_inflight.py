"""The registry the proxy consults: inject once, at the right call, never after expiry."""

from __future__ import annotations

import re

import pytest

from canary.config.definitions import MatchAt
from canary.proxy.app import ModelCall
from canary.runs.attribution import TaskIds, run_marks
from canary.runs.registry import ActiveRun, Registry
from canary.runs.verdicts import attributed


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
    assert run.candidates == []
    registry.intercept(call("k3v9abcdefghijklmnop"))
    # an unmarked line is only a candidate: it is the run's when no other work happened
    assert registry.attribute("citation", "no nonce", clock.now) is None
    assert registry.attribute("citation", "no nonce", clock.now - 30) is None  # written before
    assert registry.attribute("quote", "no nonce", clock.now) is None  # other guard
    assert [c.line for c in run.candidates] == ["no nonce"]
    tied = attributed(run)
    assert (tied.mark, [line for _, line in tied.firings]) == ("time", ["no nonce"])


def test_other_work_makes_an_unmarked_firing_ambiguous() -> None:
    registry, run, clock = make("first")
    registry.intercept(call("k3v9abcdefghijklmnop"))
    registry.attribute("citation", "CitationGuard: rejected", clock.now)
    assert registry.intercept(call("an organic task")) is None  # passes through, counted
    assert run.foreign_calls == 1
    tied = attributed(run)
    assert (tied.mark, tied.firings, [c.line for c in tied.ambiguous]) == (
        None, [], ["CitationGuard: rejected"])


def test_activity_without_the_nonce_is_other_work() -> None:
    registry, run, clock = make("first")
    registry.intercept(call("k3v9abcdefghijklmnop"))
    registry.observe("task finished t42", clock.now, activity=True)  # perhaps the run's own
    registry.observe("task finished t41", clock.now - 60, activity=True)  # before the run
    assert run.foreign_activity == 0
    registry.observe("task finished t43", clock.now, activity=True)
    assert run.foreign_activity == 1
    registry, run, clock = make("first")
    registry.observe("task finished k3v9abcdefghijklmnop", clock.now, activity=True)  # the run's
    registry.observe("task finished t42", clock.now, activity=True)
    assert run.foreign_activity == 1


def test_a_line_naming_another_value_of_the_runs_kind_is_someone_elses() -> None:
    registry, run, clock = make("first")
    run.marks = run_marks({"fake_version": "3.14.7"}, ["v{fake_version}"], [])
    registry.intercept(call("k3v9abcdefghijklmnop"))
    registry.intercept(call("an organic task"))
    assert registry.attribute("citation", "guard=version value=124.42.1", clock.now) is None
    assert registry.attribute("citation", "guard=version value=13.14.72", clock.now) is None
    tied = attributed(run)
    assert (tied.mark, tied.ambiguous) == (None, [])  # both lines are about other answers
    assert registry.attribute("citation", "guard=version value=3.14.7.", clock.now) == 1
    assert registry.attribute("citation", "guard=version value=v3.14.7", clock.now) == 1
    assert registry.attribute("citation", "guard=version value=xv3.14.7", clock.now) is None
    assert attributed(run).mark == "value"


def test_the_task_id_is_learned_from_a_line_with_the_nonce() -> None:
    clock = Clock()
    ids = TaskIds("task=(?P<id>[0-9a-f]+)", re.compile("task=(?P<id>[0-9a-f]+)"), "text")
    registry = Registry(has_upstream=True, clock=clock, task_ids=ids)
    run = ActiveRun(run_id=5, guard="version", nonce="k3v9abcdefghijklmnop", inject_at="first",
                    inject_text="x", repair_text=None, page="", started=clock.now,
                    deadline=clock.now + 60)
    registry.add(run)
    registry.observe("task=00ff fetched http://127.0.0.1/r/other", clock.now, activity=False)
    registry.observe("task=beef fetched http://127.0.0.1/r/k3v9abcdefghijklmnop", clock.now,
                     activity=False)
    assert run.task_id == "beef"
    registry.intercept(call("k3v9abcdefghijklmnop"))
    registry.intercept(call("organic"))
    assert registry.attribute("version", "task=00ff VersionGuard: rejected", clock.now) is None
    assert registry.attribute("date", "task=beef DateGuard: rejected", clock.now) == 5  # any guard
    assert registry.attribute("version", "task=beef VersionGuard: rejected", clock.now) == 5
    tied = attributed(run)
    assert (tied.mark, len(tied.firings), tied.ambiguous) == ("task", 1, [])


def test_jsonl_task_ids_are_read_from_a_field() -> None:
    ids = TaskIds("ctx.task_id", None, "jsonl")
    assert ids.of('{"ctx": {"task_id": "t-9"}, "msg": "x"}') == "t-9"
    assert ids.of('{"ctx.task_id": 17}') == "17"
    assert ids.of('{"task": "t-9"}') is None
    assert ids.of("not json task_id") is None


def test_the_strongest_mark_names_the_attribution() -> None:
    registry, run, clock = make("first")
    run.marks = run_marks({"fake_version": "3.14.7"}, ["{fake_version}"], [])
    registry.intercept(call("k3v9abcdefghijklmnop"))
    assert registry.attribute("citation", "rejected value=3.14.7", clock.now) == 1
    assert registry.attribute("citation", "rejected k3v9abcdefghijklmnop", clock.now + 1) == 1
    registry.attribute("citation", "rejected", clock.now + 2)  # unmarked: not counted with marks
    tied = attributed(run)
    assert (tied.mark, len(tied.firings)) == ("nonce", 2)


def test_a_runs_marks_are_its_own_values_never_a_constant_text() -> None:
    values = {"nonce": "k3v9abcdefghijklmnop", "fake_version": "3.14.7", "true_number": "4821",
              "fake_number": "1234"}
    marks = run_marks(values, ["The latest is {fake_version}.", "{fake_version}"], ["{fake_version}"])
    assert marks.values == ("3.14.7",)  # the unused fake_number is no mark
    control = run_marks(values, ["Rose etude"], ["Rose etude"], prefixes=("fake", "true"))
    assert (control.values, control.shapes) == ((), None)
    grounded = run_marks(values, ["{true_number} euros"], ["{true_number} euros"],
                         prefixes=("fake", "true"))
    assert grounded.values == ("4821", "4821 euros")
    assert grounded.carries_other_value("rejected amount=5500") and not grounded.carries_other_value(
        "2026-11-29T10:00:00.612Z rejected amount=4821")


def test_another_canarys_model_call_is_other_work_too() -> None:
    registry, first, clock = make("first")
    second = ActiveRun(run_id=2, guard="quote", nonce="zzzzabcdefghijklmnop", inject_at="first",
                       inject_text="x", repair_text=None, page="", started=clock.now,
                       deadline=clock.now + 60)
    registry.add(second)
    registry.intercept(call("zzzzabcdefghijklmnop"))
    assert (first.foreign_calls, second.foreign_calls) == (1, 0)


def test_a_jsonl_task_id_ties_the_guards_line() -> None:
    clock = Clock()
    registry = Registry(has_upstream=True, clock=clock, task_ids=TaskIds("task_id", None, "jsonl"))
    run = ActiveRun(run_id=9, guard="citation", nonce="k3v9abcdefghijklmnop", inject_at="first",
                    inject_text="x", repair_text=None, page="", started=clock.now,
                    deadline=clock.now + 60)
    registry.add(run)
    registry.observe('{"task_id": "q-17", "msg": "fetched http://h/r/k3v9abcdefghijklmnop"}',
                     clock.now, activity=False)
    registry.intercept(call("k3v9abcdefghijklmnop"))
    registry.intercept(call("organic"))
    assert registry.attribute("citation", '{"task_id": "q-18", "event": "guard_reject"}', None) is None
    assert registry.attribute("citation", '{"task_id": "q-17", "event": "guard_reject"}', None) == 9
    tied = attributed(run)
    assert (tied.mark, len(tied.firings), tied.ambiguous) == ("task", 1, [])


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
