"""Which run a firing belongs to: the contract's rules 0-4, as a table and over real runs in flight."""

from __future__ import annotations

import re

import pytest

from canary.proxy.app import ModelCall
from canary.runs.attribution import Attribution, attributed, tie
from canary.runs.inflight import ActiveRun, Candidate, Claim
from canary.runs.marks import TaskIds, run_marks
from canary.runs.registry import Registry
from canary.store.attributing import Sighting, StoredRun


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def call(body: str) -> ModelCall:
    return ModelCall("/v1/chat/completions", "chat", body.encode(), False)


def make(inject_at: object = "first", *, nonce: str = "k3v9abcdefghijklmnop") -> tuple[Registry, ActiveRun, Clock]:
    clock = Clock()
    registry = Registry(has_upstream=True, clock=clock)
    run = ActiveRun(
        run_id=1, guard="citation", nonce=nonce, inject_at=inject_at,  # type: ignore[arg-type]
        inject_text='Fake "answer" https://x.example.org', repair_text="REPAIR", page="<p>page</p>",
        started=clock.now, deadline=clock.now + 60,
    )
    registry.add(run)
    return registry, run, clock


def fire(attribution: Attribution, guard: str, text: str, ts: float | None) -> int | None:
    """A guard's line as the store offers it, carrying no stored run's nonce."""
    return attribution.attribute(Sighting(guard, text, ts), None)


def test_attribution_by_nonce_then_by_guard_and_time() -> None:
    registry, run, clock = make("first")
    attribution = Attribution(registry, clock=clock)
    assert run.injected is None
    assert fire(attribution, "quote", "x k3v9abcdefghijklmnop y", None) == 1  # nonce: any guard
    assert fire(attribution, "citation", "no nonce", None) is None  # not injected yet
    assert run.candidates == []
    registry.intercept(call("k3v9abcdefghijklmnop"))
    # an unmarked line is only a candidate: it is the run's when no other work happened
    assert fire(attribution, "citation", "no nonce", clock.now) is None
    assert fire(attribution, "citation", "no nonce", clock.now - 30) is None  # written before
    assert fire(attribution, "quote", "no nonce", clock.now) is None  # other guard
    assert [c.line for c in run.candidates] == ["no nonce"]
    tied = attributed(run)
    assert (tied.mark, [line for _, line in tied.firings]) == ("time", ["no nonce"])


def test_other_work_makes_an_unmarked_firing_ambiguous() -> None:
    registry, run, clock = make("first")
    attribution = Attribution(registry, clock=clock)
    registry.intercept(call("k3v9abcdefghijklmnop"))
    fire(attribution, "citation", "CitationGuard: rejected", clock.now)
    assert registry.intercept(call("an organic task")) is None  # passes through, counted
    assert run.foreign_calls == 1
    tied = attributed(run)
    assert (tied.mark, tied.firings, [c.line for c in tied.ambiguous]) == (
        None, [], ["CitationGuard: rejected"])


def test_activity_without_the_nonce_is_other_work() -> None:
    registry, run, clock = make("first")
    attribution = Attribution(registry, clock=clock)
    registry.intercept(call("k3v9abcdefghijklmnop"))
    attribution.observe("task finished t42", clock.now, activity=True)  # perhaps the run's own
    attribution.observe("task finished t41", clock.now - 60, activity=True)  # before the run
    assert run.foreign_activity == 0
    attribution.observe("task finished t43", clock.now, activity=True)
    assert run.foreign_activity == 1
    registry, run, clock = make("first")
    attribution = Attribution(registry, clock=clock)
    attribution.observe("task finished k3v9abcdefghijklmnop", clock.now, activity=True)  # the run's
    attribution.observe("task finished t42", clock.now, activity=True)
    assert run.foreign_activity == 1


def test_a_line_naming_another_value_of_the_runs_kind_is_someone_elses() -> None:
    registry, run, clock = make("first")
    attribution = Attribution(registry, clock=clock)
    run.marks = run_marks({"fake_version": "3.14.7"}, ["v{fake_version}"], [])
    registry.intercept(call("k3v9abcdefghijklmnop"))
    registry.intercept(call("an organic task"))
    assert fire(attribution, "citation", "guard=version value=124.42.1", clock.now) is None
    assert fire(attribution, "citation", "guard=version value=13.14.72", clock.now) is None
    tied = attributed(run)
    assert (tied.mark, tied.ambiguous) == (None, [])  # both lines are about other answers
    assert fire(attribution, "citation", "guard=version value=3.14.7.", clock.now) == 1
    assert fire(attribution, "citation", "guard=version value=v3.14.7", clock.now) == 1
    assert fire(attribution, "citation", "guard=version value=xv3.14.7", clock.now) is None
    assert attributed(run).mark == "value"


def test_the_task_id_is_learned_from_a_line_with_the_nonce() -> None:
    clock = Clock()
    ids = TaskIds("task=(?P<id>[0-9a-f]+)", re.compile("task=(?P<id>[0-9a-f]+)"), "text")
    registry = Registry(has_upstream=True, clock=clock)
    attribution = Attribution(registry, ids, clock=clock)
    run = ActiveRun(run_id=5, guard="version", nonce="k3v9abcdefghijklmnop", inject_at="first",
                    inject_text="x", repair_text=None, page="", started=clock.now,
                    deadline=clock.now + 60)
    registry.add(run)
    attribution.observe("task=00ff fetched http://127.0.0.1/r/other", clock.now, activity=False)
    attribution.observe("task=beef fetched http://127.0.0.1/r/k3v9abcdefghijklmnop", clock.now,
                     activity=False)
    assert run.task_id == "beef"
    registry.intercept(call("k3v9abcdefghijklmnop"))
    registry.intercept(call("organic"))
    assert fire(attribution, "version", "task=00ff VersionGuard: rejected", clock.now) is None
    assert fire(attribution, "date", "task=beef DateGuard: rejected", clock.now) == 5  # any guard
    assert fire(attribution, "version", "task=beef VersionGuard: rejected", clock.now) == 5
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
    attribution = Attribution(registry, clock=clock)
    run.marks = run_marks({"fake_version": "3.14.7"}, ["{fake_version}"], [])
    registry.intercept(call("k3v9abcdefghijklmnop"))
    assert fire(attribution, "citation", "rejected value=3.14.7", clock.now) == 1
    assert fire(attribution, "citation", "rejected k3v9abcdefghijklmnop", clock.now + 1) == 1
    fire(attribution, "citation", "rejected", clock.now + 2)  # unmarked, and nothing else ran: the run's
    tied = attributed(run)
    assert (tied.mark, len(tied.firings), len(tied.by_time)) == ("nonce", 3, 1)


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


def test_a_jsonl_task_id_ties_the_guards_line() -> None:
    clock = Clock()
    registry = Registry(has_upstream=True, clock=clock)
    attribution = Attribution(registry, TaskIds("task_id", None, "jsonl"), clock=clock)
    run = ActiveRun(run_id=9, guard="citation", nonce="k3v9abcdefghijklmnop", inject_at="first",
                    inject_text="x", repair_text=None, page="", started=clock.now,
                    deadline=clock.now + 60)
    registry.add(run)
    attribution.observe('{"task_id": "q-17", "msg": "fetched http://h/r/k3v9abcdefghijklmnop"}',
                     clock.now, activity=False)
    registry.intercept(call("k3v9abcdefghijklmnop"))
    registry.intercept(call("organic"))
    assert fire(attribution, "citation", '{"task_id": "q-18", "event": "guard_reject"}', None) is None
    assert fire(attribution, "citation", '{"task_id": "q-17", "event": "guard_reject"}', None) == 9
    tied = attributed(run)
    assert (tied.mark, len(tied.firings), tied.ambiguous) == ("task", 1, [])




# -- the precedence, as a table -------------------------------------------------------------

T = 1000.0  # when both runs were injected
A_NONCE, B_NONCE = "k3v9aaaaaaaaaaaaaaaa", "k3v9bbbbbbbbbbbbbbbb"
FINISHED, ELSEWHERE = StoredRun(7, finished=True), StoredRun(8, finished=False)


def two_runs() -> list[ActiveRun]:
    """Run 1 of the citation guard and run 2 of the quote guard, both injected at T."""
    a = ActiveRun(run_id=1, guard="citation", nonce=A_NONCE, inject_at="first", inject_text="x",
                  repair_text=None, page="", started=T, deadline=T + 60, inject_in_request=True,
                  marks=run_marks({"fake_version": "3.14.7"}, ["{fake_version}"], []),
                  task_id="tA", trace_ids={"trace-a"})
    b = ActiveRun(run_id=2, guard="quote", nonce=B_NONCE, inject_at="first", inject_text="y",
                  repair_text=None, page="", started=T, deadline=T + 60, inject_in_request=True,
                  task_id="tB", trace_ids={"trace-b"})
    return [a, b]


Flags = tuple[int, bool, bool, bool]  # a candidate: (run id, other_task, other_value, other_trace)


@pytest.mark.parametrize(
    ("guard", "text", "trace", "task", "stored", "at", "tied", "rule", "candidates"),
    [
        # rule 0: the trace id of one of the run's model calls ties any guard's firing
        ("quote", "QuoteGuard: rejected", "trace-a", None, None, T, 1, "trace", []),
        # rule 0 before rule 1: the span's trace outweighs another run's nonce in its text
        ("quote", f"rejected {B_NONCE}", "trace-a", None, None, T, 1, "trace", []),
        # rule 0 before a finished run's nonce, and before a task id
        ("quote", "rejected", "trace-a", "tB", FINISHED, T, 1, "trace", []),
        # a trace id of no run in flight ties nothing by itself: the nonce still does
        ("quote", f"rejected {A_NONCE}", "trace-z", None, None, T, 1, "nonce", []),
        # rule 1: the nonce of a run in flight ties any guard's firing, even before the injection
        ("quote", f"rejected {A_NONCE}", None, None, None, T - 30, 1, "nonce", []),
        # rule 1 before rule 2: the nonce outweighs another run's task id
        ("citation", f"rejected {A_NONCE}", None, "tB", None, T, 1, "nonce", []),
        # a finished run's late line is its own, never offered to the runs in flight
        ("citation", "rejected 3.14.7", None, "tA", FINISHED, T, 7, "nonce", []),
        # a stored run in flight elsewhere (its nonce, not here) outweighs a task id and a value
        ("citation", "rejected 3.14.7", None, "tA", ELSEWHERE, T, 8, "nonce", []),
        # rule 2: the task id ties any guard's firing
        ("citation", "rejected", None, "tB", None, T, 2, "task", []),
        # rule 2 before rule 3: the task id outweighs another run's value
        ("citation", "rejected 3.14.7", None, "tB", None, T, 2, "task", []),
        # rule 3: one of the run's values, a firing of its guard in its span
        ("citation", "rejected 3.14.7", None, None, None, T, 1, "value", []),
        # a value of the run is no mark for another guard's firing
        ("quote", "rejected 3.14.7", None, None, None, T, None, None, [(2, False, False, False)]),
        # rule 4: an unmarked firing of the run's guard in its span is only a candidate
        ("citation", "rejected", None, None, None, T, None, None, [(1, False, False, False)]),
        # the span starts at the injection, less a second of clock skew
        ("citation", "rejected", None, None, None, T - 0.9, None, None, [(1, False, False, False)]),
        ("citation", "rejected", None, None, None, T - 1.1, None, None, []),
        # a candidate that carries a task id is another task's: the run's would have tied it
        ("citation", "rejected", None, "tZ", None, T, None, None, [(1, True, False, False)]),
        # one that names another value of the run's kind is about someone else's answer
        ("citation", "rejected 124.42.1", None, None, None, T, None, None, [(1, False, True, False)]),
        # a span in a trace no model call carried is only a candidate: the agent may report its
        # guard outside the trace of its model calls
        ("citation", "rejected", "trace-z", None, None, T, None, None, [(1, False, False, False)]),
    ],
)
def test_the_precedence_table(guard: str, text: str, trace: str | None, task: str | None,
                              stored: StoredRun | None, at: float, tied: int | None, rule: str | None,
                              candidates: list[Flags]) -> None:
    found = tie(Sighting(guard, text, at, 40, trace), stored, two_runs(), moment=at, task=task)
    assert (found.run_id, found.rule) == (tied, rule)
    assert (found.run.run_id if found.run else None) == (tied if tied in (1, 2) else None)
    assert [(r.run_id, c.other_task, c.other_value, c.other_trace) for r, c in found.candidates] == candidates
    assert all((c.offset, c.ts, c.line, c.trace_id) == (40, at, text, trace) for _, c in found.candidates)


@pytest.mark.parametrize(
    ("guard", "trace", "tied", "rule", "candidates"),
    [
        # a span in the trace of a model call of no run is another's, never the run's even by time
        ("citation", "trace-z", None, None, [(1, False, False, True)]),
        # a trace the run's call and another call both carried names neither: no rule 0, and for
        # the run that carried it the span is a plain candidate; for another run it is another's
        ("citation", "trace-a", None, None, [(1, False, False, False)]),
        ("quote", "trace-a", None, None, [(2, False, False, True)]),
    ],
)
def test_a_trace_other_model_calls_carried(guard: str, trace: str, tied: int | None, rule: str | None,
                                           candidates: list[Flags]) -> None:
    found = tie(Sighting(guard, "rejected", T, 40, trace), None, two_runs(), moment=T, task=None,
                elsewhere=True)
    assert (found.run_id, found.rule) == (tied, rule)
    assert [(r.run_id, c.other_task, c.other_value, c.other_trace) for r, c in found.candidates] == candidates


def claim(mark: str, ts: float = T, guard: str = "citation") -> Claim:
    return Claim(guard, mark, ts, f"line by {mark}")  # type: ignore[arg-type]


def candidate(*, other_task: bool = False, other_value: bool = False, other_trace: bool = False) -> Candidate:
    return Candidate(0, T, "unmarked", other_task, other_value, None, other_trace)


@pytest.mark.parametrize(
    ("claims", "candidates", "foreign_calls", "mark", "firings", "ambiguous"),
    [
        # the strongest rule any of the run's own firings met names the attribution
        ([claim("value", T + 1), claim("trace", T + 2), claim("nonce", T)], [], 0, "trace", 3, 0),
        ([claim("task"), claim("value")], [candidate()], 5, "task", 2, 0),
        # a claim of another guard (a nonce line of another guard) is no firing of the run's guard
        ([claim("nonce", guard="quote")], [], 0, None, 0, 0),
        # rule 4: unmarked firings are the run's when the agent did no other work
        ([], [candidate(), candidate()], 0, "time", 2, 0),
        # ... and make it ambiguous when it did
        ([], [candidate()], 1, None, 0, 1),
        # one naming another value of the run's kind is someone else's, not a reason for doubt
        ([], [candidate(other_value=True)], 1, None, 0, 0),
        # another task's or another trace's firing is never the run's, even with no other work
        ([], [candidate(other_task=True)], 0, None, 0, 0),
        ([], [candidate(other_trace=True)], 0, None, 0, 0),
    ],
)
def test_the_verdict_time_table(claims: list[Claim], candidates: list[Candidate], foreign_calls: int,
                                mark: str | None, firings: int, ambiguous: int) -> None:
    run = two_runs()[0]
    run.claims, run.candidates, run.foreign_calls = claims, candidates, foreign_calls
    tied = attributed(run)
    assert (tied.mark, len(tied.firings), len(tied.ambiguous)) == (mark, firings, ambiguous)
    assert [ts for ts, _ in tied.firings] == sorted(ts for ts, _ in tied.firings)


def test_a_trace_id_of_the_runs_model_call_ties_its_span_through_the_attribution() -> None:
    registry, run, clock = make("first")
    attribution = Attribution(registry, clock=clock)
    run.trace_ids.add("4bf92f3577b34da6a3ce929d0e0e4736")
    span = Sighting("quote", "QuoteGuard: rejected", clock.now, trace_id="4bf92f3577b34da6a3ce929d0e0e4736")
    assert attribution.attribute(span, None) == 1
    assert [(c.guard, c.mark) for c in run.claims] == [("quote", "trace")]
    registry.remove(run.nonce)
    assert attribution.attribute(span, None) is None  # out of flight: nothing ties it any more


TRACE_A, TRACE_Z = "4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"


def traced(nonce: str, trace: str, *, upper: bool = False) -> ModelCall:
    """A model call carrying a W3C traceparent header for ``trace``."""
    header = f"00-{trace}-00f067aa0ba902b7-01"
    return ModelCall("/v1/chat/completions", "chat", f'{{"messages": [{{"content": "{nonce}"}}]}}'.encode(),
                     traceparent=header.upper() if upper else header)


def test_the_registry_records_the_trace_ids_of_a_runs_calls_and_of_the_others() -> None:
    registry, run, clock = make("first")
    attribution = Attribution(registry, clock=clock)
    registry.intercept(traced(run.nonce, TRACE_A, upper=True))  # the trace id is read in lowercase
    registry.intercept(traced("no nonce here", TRACE_Z))
    assert run.trace_ids == {TRACE_A}
    assert (registry.traced_elsewhere(TRACE_Z), registry.traced_elsewhere(TRACE_A)) == (True, False)
    assert attribution.attribute(Sighting("quote", "QuoteGuard: rejected", clock.now, trace_id=TRACE_A), None) == 1
    # a guard span in the other call's trace is someone else's, never the run's, even by time
    assert attribution.attribute(Sighting("citation", "rejected", clock.now, trace_id=TRACE_Z), None) is None
    assert [c.someone_elses for c in run.candidates] == [True]


def test_a_trace_another_call_also_carried_ties_nothing_by_itself() -> None:
    registry, run, clock = make("first")
    attribution = Attribution(registry, clock=clock)
    registry.intercept(traced(run.nonce, TRACE_A))
    registry.intercept(traced("an organic request in the same trace", TRACE_A))
    assert attribution.attribute(Sighting("quote", "QuoteGuard: rejected", clock.now, trace_id=TRACE_A), None) is None


@pytest.mark.parametrize("header", [None, "", "garbage", f"00-{'0' * 32}-00f067aa0ba902b7-01",
                                    f"00-{TRACE_A}-{'0' * 16}-01", f"ff-{TRACE_A}-00f067aa0ba902b7-01",
                                    f"00-{TRACE_A[:-1]}-00f067aa0ba902b7-01"])
def test_an_invalid_traceparent_records_nothing(header: str | None) -> None:
    registry, run, _ = make("first")
    registry.intercept(ModelCall("/v1/chat/completions", "chat", run.nonce.encode(), traceparent=header))
    assert run.trace_ids == set()


def test_a_draft_line_before_a_marked_one_is_the_runs_too_when_nothing_else_ran() -> None:
    """A control's agent rejects its draft (a bare line), then its correction (naming the run's
    value): with no other work in the span both lines are the run's, none is left organic."""
    registry, run, clock = make("first")
    attribution = Attribution(registry, clock=clock)
    run.marks = run_marks({"true_version": "3.14.7"}, ["{true_version}"], ["{true_version}"],
                          prefixes=("fake", "true"))
    registry.intercept(call("k3v9abcdefghijklmnop"))
    assert fire(attribution, "citation", "VersionGuard: rejected draft", clock.now) is None
    assert fire(attribution, "citation", "VersionGuard: rejected value=3.14.7", clock.now + 1) == 1
    tied = attributed(run)
    assert tied.mark == "value"
    assert [line for _, line in tied.firings] == ["VersionGuard: rejected draft",
                                                  "VersionGuard: rejected value=3.14.7"]
    assert [c.line for c in tied.by_time] == ["VersionGuard: rejected draft"]  # stored with the run
    # amid other work, the bare line may be someone else's: it stays organic, the marked one decides
    registry, run, clock = make("first")
    attribution = Attribution(registry, clock=clock)
    run.marks = run_marks({"true_version": "3.14.7"}, ["{true_version}"], ["{true_version}"],
                          prefixes=("fake", "true"))
    registry.intercept(call("k3v9abcdefghijklmnop"))
    registry.intercept(call("an organic task"))
    fire(attribution, "citation", "VersionGuard: rejected draft", clock.now)
    fire(attribution, "citation", "VersionGuard: rejected value=3.14.7", clock.now + 1)
    tied = attributed(run)
    assert (tied.mark, len(tied.firings), tied.by_time) == ("value", 1, [])


@pytest.mark.parametrize(("line", "other"), [
    ("DateGuard: rejected date=2019-03-14 not in observations", True),
    ("DateGuard: rejected date=14 March 2019 not in observations", True),
    ("DateGuard: rejected date=March 14, 2019 not in observations", True),
    ("DateGuard: rejected date=Mar 14, 2019", True),
    ("DateGuard: rejected date=2019-03-14: not seen", True),
    ("DateGuard: rejected date=15 January 2021 not in observations", False),  # the run's own date
    ("DateGuard: rejected date=January 15, 2021", False),
    ("2026-11-29T10:00:00.612Z DateGuard: rejected", False),  # the line's own time names no date
    ("2026-11-29 10:00:00,612 DateGuard: rejected", False),
])
def test_a_date_line_names_another_value_in_any_usual_writing(line: str, other: bool) -> None:
    marks = run_marks({"true_date": "2021-01-15"}, ["{true_date}"], ["{true_date}"],
                      prefixes=("fake", "true"))
    assert marks.carries_other_value(line) is other


def test_the_runs_date_written_out_is_its_value() -> None:
    marks = run_marks({"fake_date": "2021-01-15"}, ["{fake_date}"], [])
    assert marks.carries_value("DateGuard: rejected date=January 15, 2021 not in observations")
    assert marks.carries_value("DateGuard: rejected date=15 Jan 2021")
    assert not marks.carries_value("DateGuard: rejected date=January 16, 2021")


def test_a_line_read_before_the_fabrication_was_injected_cannot_have_caught_it() -> None:
    """The agent rejected a URL carrying the run's nonce (its model made one up from the fixture's) before
    the proxy gave it the fabrication: the line is the run's (stored with it, never organic), but it is
    no evidence the guard caught what was injected after it."""
    registry, run, clock = make("first")
    attribution = Attribution(registry, clock=clock)
    assert fire(attribution, "citation", "CitationGuard: rejected https://k3v9abcdefghijklmnop.x/sub", None) == 1
    clock.now += 1
    registry.intercept(call("k3v9abcdefghijklmnop"))  # injected now
    tied = attributed(run)
    assert (tied.mark, tied.firings) == (None, [])
    clock.now += 1
    assert fire(attribution, "citation", "CitationGuard: rejected https://k3v9abcdefghijklmnop.x/permit",
                None) == 1
    tied = attributed(run)
    assert tied.mark == "nonce"
    assert [line for _, line in tied.firings] == ["CitationGuard: rejected https://k3v9abcdefghijklmnop.x/permit"]


def test_a_firing_stamped_in_whole_seconds_is_never_drawn_before_the_injection_it_answered() -> None:
    """A log stamped to the second floors the firing's time: read after the injection, it happened after
    it, and the run's trace draws it so (``sent>fetched>injected>FIRED``), never before."""
    from canary.runs.conversation import Conversation
    from canary.runs.runner import _trace
    from canary.vocabulary import Stage

    registry, run, clock = make("first")
    attribution = Attribution(registry, clock=clock)
    clock.now = 1000.6
    registry.intercept(call("k3v9abcdefghijklmnop"))  # injected at 1000.6
    clock.now = 1000.9
    fire(attribution, "citation", "1970-01-01T00:16:40Z CitationGuard: rejected k3v9abcdefghijklmnop", 1000.0)
    trace = _trace(run, attributed(run), Conversation(["no"], answered=1001.5), 1000.0)
    assert trace[Stage.INJECTED] == 0.6
    assert trace[Stage.FIRED] is not None and trace[Stage.FIRED] >= trace[Stage.INJECTED], trace
    # a stamp seconds before the injection is no rounding: it is drawn where it says, for the reader to see
    registry, run, clock = make("first")
    attribution = Attribution(registry, clock=clock)
    clock.now = 1003.0
    registry.intercept(call("k3v9abcdefghijklmnop"))
    fire(attribution, "citation", "CitationGuard: rejected k3v9abcdefghijklmnop", 1000.5)
    early = _trace(run, attributed(run), Conversation(["no"], answered=1004.0), 1000.0)
    assert (early[Stage.FIRED], early[Stage.INJECTED]) == (0.5, 3.0)
