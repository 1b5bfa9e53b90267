"""The status table: one row per case, boundary instants included."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canary.status.evaluate import CanaryFact, GuardFacts, RunFact, evaluate
from canary.status.reasons import clock_time
from canary.vocabulary import Status
from tests.profiles import examples

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)
EVERY = 6 * H
GRACE = 1 * H
WINDOW = 24 * H
LONG_AGO = NOW - 30 * 24 * H


def run(verdict: str, ago: timedelta, *, canary: str = "fake", variant: int = 0, expect: str = "reject") -> RunFact:
    return RunFact(canary, variant, expect, verdict, NOW - ago)


def facts(*runs: RunFact, canaries: tuple[str, ...] = ("fake",), **kw: object) -> GuardFacts:
    defaults: dict[str, object] = {
        "organic": 3, "activity": 50, "lines": 1000, "watched_since": LONG_AGO,
    }
    defaults.update(kw)
    facts_ = [
        CanaryFact(name, EVERY, tuple(sorted((r for r in runs if r.canary == name), key=lambda r: r.at, reverse=True)))
        for name in canaries
    ]
    return GuardFacts("g", WINDOW, GRACE, facts_, **defaults)  # type: ignore[arg-type]


CASES = [
    # nothing at all is known: no log line read yet, no canary run
    ("new", facts(organic=0, activity=0, lines=0, watched_since=None), Status.NEW),
    # muted: paused even though its canary leaked
    ("muted", facts(run("leaked", H), muted_until=NOW + H), Status.PAUSED),
    # the mute has expired at exactly this instant: back to what the facts say
    ("mute-expired-at-now", facts(run("leaked", H), muted_until=NOW), Status.ASLEEP),
    # the latest conclusive run leaked
    ("leaked", facts(run("leaked", H), run("caught", 2 * H)), Status.ASLEEP),
    ("fired-but-leaked", facts(run("fired_but_leaked", H)), Status.ASLEEP),
    ("unlogged", facts(run("unlogged", H)), Status.ASLEEP),
    # an error after a leak does not hide the leak (error is not conclusive)
    ("error-after-leak", facts(run("error", H), run("leaked", 2 * H)), Status.ASLEEP),
    # zero firings over a whole window of activity, no canaries
    ("zero-firings-whole-window", facts(canaries=(), organic=0), Status.ASLEEP),
    # the same, but the logs have been followed for less than a window: nothing proven yet
    ("zero-firings-partial-window", facts(canaries=(), organic=0, watched_since=NOW - WINDOW + H), Status.NEW),
    # followed for exactly one window: a whole window
    ("zero-firings-exactly-a-window", facts(canaries=(), organic=0, watched_since=NOW - WINDOW), Status.ASLEEP),
    # zero firings, but the agent did nothing: silence proves nothing
    ("zero-firings-idle-agent", facts(canaries=(), organic=0, activity=0), Status.NEW),
    # no activity pattern: lines read stand in for activity
    ("zero-firings-no-activity-pattern", facts(canaries=(), organic=0, activity=None, lines=10), Status.ASLEEP),
    # zero organic firings but a canary caught in the window: quiet, not asleep
    ("quiet", facts(run("caught", H), organic=0), Status.QUIET),
    ("alive-through-canary", facts(run("caught", H)), Status.ALIVE),
    ("alive-no-canaries-fired", facts(canaries=(), organic=2), Status.ALIVE),
    # a control that passed counts like a caught canary
    ("control-passed", facts(run("caught", H), run("passed", H, canary="ctl", expect="accept"), canaries=("fake", "ctl")), Status.ALIVE),
    # a control rejected: degraded
    ("control-false-rejection", facts(run("caught", H), run("false_rejection", H, canary="ctl", expect="accept"), canaries=("fake", "ctl")), Status.DEGRADED),
    # variants disagree: the latest run is caught, an earlier variant leaked in the window
    ("variants-disagree", facts(run("caught", H, variant=0), run("leaked", 3 * H, variant=1)), Status.DEGRADED),
    # a disagreement older than the window is forgotten
    ("disagreement-outside-window", facts(run("caught", H, variant=0), run("leaked", 25 * H, variant=1)), Status.ALIVE),
    # only errors and not_injected: inconclusive
    ("only-errors", facts(run("error", H), run("not_injected", 2 * H)), Status.INCONCLUSIVE),
    # last conclusive run older than every + grace
    ("stale-caught", facts(run("caught", EVERY + GRACE + timedelta(seconds=1))), Status.INCONCLUSIVE),
    # exactly every + grace old: still fresh
    ("caught-at-the-boundary", facts(run("caught", EVERY + GRACE)), Status.ALIVE),
    # two canaries, one never ran
    ("one-canary-never-ran", facts(run("caught", H), canaries=("fake", "other")), Status.INCONCLUSIVE),
    # the daemon just started: the second canary is not due yet, so nothing is stale (no alert flaps)
    ("second-canary-pending-after-start", facts(run("caught", H / 6), canaries=("fake", "other"), watched_since=NOW - H), Status.NEW),
    # ...but once every + grace has passed since the logs are watched, a canary that never ran is stale
    ("second-canary-overdue", facts(run("caught", H / 6), canaries=("fake", "other"), watched_since=NOW - EVERY - GRACE - H), Status.INCONCLUSIVE),
    # logs unreadable
    ("logs-unreadable", facts(run("caught", H), logs_readable=False), Status.INCONCLUSIVE),
    # a guard that fires only through spans: the receiver has taken in nothing, so the logs' activity
    # proves nothing of it
    ("span-guard-no-signals", facts(canaries=(), organic=0, unread=("spans",)), Status.INCONCLUSIVE),
    ("span-guard-silent", facts(canaries=(), organic=0, unread=()), Status.ASLEEP),
    ("span-guard-fired", facts(canaries=(), organic=2, unread=("spans",)), Status.ALIVE),
    ("span-guard-caught", facts(run("caught", H), organic=0, unread=("spans",)), Status.QUIET),
    # its canary failed: that decides, whatever was not read
    ("span-guard-leaked", facts(run("leaked", H), organic=0, unread=("spans",)), Status.ASLEEP),
    # an event guard with spans taken in but no log record: it may fire only in log records
    ("event-guard-no-log-record", facts(canaries=(), organic=0, unread=("log records",)), Status.INCONCLUSIVE),
    # a log-line guard whose logs cannot be read now: the window's silence proves nothing
    ("logs-unreadable-silent", facts(canaries=(), organic=0, logs_readable=False), Status.INCONCLUSIVE),
    # has canaries that never ran in a month of watched logs, only organic firings: no proof, and it alerts
    ("canaries-never-ran", facts(), Status.INCONCLUSIVE),
    # the same with nothing at all in the logs
    ("canaries-never-ran-idle", facts(organic=0, activity=0, lines=0), Status.INCONCLUSIVE),
    # no log line read yet, but the daemon has been up for longer than every + grace: the canary is overdue
    ("canary-never-ran-empty-logs", facts(organic=0, activity=0, lines=0, watched_since=None, daemon_since=LONG_AGO),
     Status.INCONCLUSIVE),
    # ...and not yet when the daemon started within every + grace
    ("canary-not-due-after-daemon-start",
     facts(organic=0, activity=0, lines=0, watched_since=None, daemon_since=NOW - EVERY), Status.NEW),
    # ambiguous proves nothing, like error
    ("only-ambiguous", facts(run("ambiguous", H), run("ambiguous", 2 * H)), Status.INCONCLUSIVE),
    ("ambiguous-after-leak", facts(run("ambiguous", H), run("leaked", 2 * H)), Status.ASLEEP),
    ("ambiguous-after-caught", facts(run("ambiguous", H), run("caught", 2 * H)), Status.ALIVE),
    # variants: the latest conclusive run of every (canary, variant), whichever ran last
    ("variants-disagree-failing-ran-last",
     facts(run("unlogged", H, variant=2), run("caught", 2 * H, variant=0), run("caught", 3 * H, variant=1)),
     Status.DEGRADED),
    ("variants-disagree-caught-ran-last",
     facts(run("caught", H, variant=0), run("caught", 2 * H, variant=1), run("unlogged", 3 * H, variant=2)),
     Status.DEGRADED),
    ("every-variant-failed", facts(run("unlogged", H, variant=0), run("leaked", 2 * H, variant=1)), Status.ASLEEP),
    # a variant that failed and then was caught counts by its latest run
    ("variant-recovered", facts(run("caught", H, variant=0), run("leaked", 2 * H, variant=0)), Status.ALIVE),
    ("variant-relapsed", facts(run("leaked", H, variant=0), run("caught", 2 * H, variant=0)), Status.ASLEEP),
    # two canaries: one caught, the other leaked
    ("canaries-disagree", facts(run("caught", H), run("leaked", 2 * H, canary="other"), canaries=("fake", "other")),
     Status.DEGRADED),
    # a leak a day and more ago, only errors since: the leak is still the latest proof
    ("old-leak-errors-since", facts(run("error", H), run("leaked", 30 * H)), Status.ASLEEP),
    # both variants last proved outside the window: they still disagree, in either order
    ("old-variants-disagree", facts(run("caught", 30 * H, variant=0), run("leaked", 26 * H, variant=1)), Status.DEGRADED),
    ("old-variants-disagree-reversed", facts(run("leaked", 30 * H, variant=1), run("caught", 26 * H, variant=0)),
     Status.DEGRADED),
    # a control passed after it was rejected: healthy again
    ("control-passed-after-rejection",
     facts(run("caught", H), run("passed", H, canary="ctl", expect="accept"),
           run("false_rejection", 2 * H, canary="ctl", expect="accept"), canaries=("fake", "ctl")),
     Status.ALIVE),
]


@pytest.mark.parametrize(("case", "given", "expected"), CASES, ids=[c[0] for c in CASES])
def test_status_table(case: str, given: GuardFacts, expected: Status) -> None:
    result = evaluate(given, now=NOW)
    assert result.status is expected, result.reason
    assert result.reason


def test_reasons_say_what_to_act_on() -> None:
    leaked = evaluate(facts(run("leaked", H)), now=NOW)
    assert "canary fake leaked at" in leaked.reason
    assert "the answer reached the user; the guard wrote no line" in leaked.reason
    stale = evaluate(facts(run("error", H), run("caught", 10 * H)), now=NOW)
    assert "no conclusive run since" in stale.reason and "every 6h + grace 1h" in stale.reason
    assert "error" in stale.reason
    unmarked = evaluate(facts(run("ambiguous", H), run("caught", 10 * H)), now=NOW)
    assert unmarked.status is Status.INCONCLUSIVE
    assert "its last run ended ambiguous at" in unmarked.reason
    assert "the only firings carried no mark of the run while the agent did other work" in unmarked.reason
    zero = evaluate(facts(canaries=(), organic=0), now=NOW)
    assert "no firing in the last 1d while the agent logged 50 unit(s) of work" in zero.reason


def test_kill_rate_counts_conclusive_reject_runs_in_the_window() -> None:
    result = evaluate(
        facts(run("caught", H), run("leaked", 2 * H), run("error", 3 * H), run("caught", 30 * H)),
        now=NOW,
    )
    assert result.kill_rate == pytest.approx(0.5)
    assert result.last_verdict == "caught"
    assert evaluate(facts(), now=NOW).kill_rate is None


def test_kill_rate_leaves_out_ambiguous_runs_controls_and_the_window_edge() -> None:
    result = evaluate(
        facts(
            run("caught", H), run("ambiguous", 2 * H), run("unlogged", 3 * H), run("unlogged", WINDOW),
            run("caught", WINDOW + timedelta(seconds=1)),
            run("passed", H, canary="ctl", expect="accept"), run("false_rejection", 2 * H, canary="ctl", expect="accept"),
            canaries=("fake", "ctl"),
        ),
        now=NOW,
    )
    assert result.kill_rate == pytest.approx(1 / 3)  # caught, unlogged, unlogged at the window's start


MATRIX = [("caught", 0), ("caught", 1), ("unlogged", 2)]  # English variants caught, the Turkish one unlogged


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))), ids=str)
def test_a_variant_matrix_gives_one_status_whatever_ran_last(order: tuple[int, ...]) -> None:
    runs = [run(MATRIX[i][0], (k + 1) * H, variant=MATRIX[i][1]) for k, i in enumerate(order)]
    result = evaluate(facts(*runs), now=NOW)
    assert result.status is Status.DEGRADED, result.reason
    assert result.reason.startswith("canaries disagree: fake variant 2 unlogged at")
    assert result.reason.endswith("; kill rate 67% in 1d")
    assert "variant 0 caught" in result.reason and "variant 1 caught" in result.reason


def test_every_failed_variant_is_named_when_all_fail() -> None:
    result = evaluate(facts(run("unlogged", H, variant=1), run("leaked", 2 * H, variant=0)), now=NOW)
    assert result.reason.startswith("canary fake unlogged at")
    assert "every variant failed: fake variant 1 unlogged at" in result.reason
    assert "fake variant 0 leaked at" in result.reason


def test_a_canary_that_never_ran_is_named() -> None:
    result = evaluate(facts(), now=NOW)
    assert result.reason == "canary fake has never run (every 6h + grace 1h)"


def test_evidence_is_the_deciding_runs_line_or_the_last_organic_firing() -> None:
    caught = RunFact("fake", 0, "reject", "caught", NOW - H, "CitationGuard: rejected https://n1.example.org")
    alive = evaluate(facts(caught, last_organic_line="CitationGuard: rejected organic"), now=NOW)
    assert alive.status is Status.ALIVE and alive.evidence == caught.evidence
    leaked = evaluate(facts(run("leaked", H), last_organic_line="CitationGuard: rejected organic"), now=NOW)
    assert leaked.status is Status.ASLEEP and leaked.evidence is None  # no line backs a leak
    fired = evaluate(facts(canaries=(), last_organic_line="CitationGuard: rejected organic"), now=NOW)
    assert fired.status is Status.ALIVE and fired.evidence == "CitationGuard: rejected organic"
    never = evaluate(facts(last_organic_line="CitationGuard: rejected organic"), now=NOW)
    assert never.status is Status.INCONCLUSIVE and never.evidence == "CitationGuard: rejected organic"



FAILED_VERDICTS = ("leaked", "fired_but_leaked", "unlogged")
INCONCLUSIVE_VERDICTS = ("error", "not_injected", "ambiguous")
VARIANT = st.integers(0, 3)


@settings(max_examples=examples(200), deadline=None)
@given(
    finals=st.lists(st.sampled_from(("caught", *FAILED_VERDICTS)), min_size=1, max_size=4),
    history=st.lists(st.tuples(VARIANT, st.sampled_from(("caught", *FAILED_VERDICTS, *INCONCLUSIVE_VERDICTS)))),
    trailing=st.lists(st.tuples(VARIANT, st.sampled_from(INCONCLUSIVE_VERDICTS))),
    data=st.data(),
)
def test_status_is_a_function_of_each_variants_latest_conclusive_verdict(
    finals: list[str], history: list[tuple[int, str]], trailing: list[tuple[int, str]], data: st.DataObject
) -> None:
    """Whatever ran before or after, and whichever variant ran last, only each variant's last proof counts."""
    minute = timedelta(minutes=1)
    runs = [run(verdict, 3 * H - k * minute, variant=v) for k, (v, verdict) in enumerate(history)]
    order = data.draw(st.permutations(range(len(finals))))  # the variants' last proofs, in any order
    runs += [run(finals[v], 2 * H - k * minute, variant=v) for k, v in enumerate(order)]
    runs += [run(verdict, H - k * minute, variant=v) for k, (v, verdict) in enumerate(trailing)]
    runs = [r for r in runs if r.variant < len(finals)]
    result = evaluate(facts(*runs), now=NOW)
    if all(v == "caught" for v in finals):
        expected = Status.ALIVE
    elif "caught" not in finals:
        expected = Status.ASLEEP
    else:
        expected = Status.DEGRADED
    assert result.status is expected, result.reason


def test_a_guard_known_to_have_fired_before_the_window_is_never_said_to_have_no_firing_yet() -> None:
    """No canary, no firing in the window, and nothing that makes the silence a finding: the reason says
    when it last fired and why the silence proves nothing, never "no firing yet"."""
    before = NOW - 3 * WINDOW
    idle = evaluate(facts(canaries=(), organic=0, activity=0, last_firing=before), now=NOW)
    assert idle.status is Status.NEW
    assert idle.reason == (f"no canary, and no firing in the last 1d (the last at {clock_time(before, NOW)}); "
                           "the agent logged no unit of work in it, so the silence proves nothing: a canary "
                           "would prove the guard awake"), idle.reason
    partial = evaluate(facts(canaries=(), organic=0, last_firing=before, watched_since=NOW - 2 * H), now=NOW)
    assert partial.status is Status.NEW
    assert partial.reason.endswith("; the logs have been followed for less than the window, so the silence "
                                   "proves nothing yet: a canary would prove the guard awake"), partial.reason
    never = evaluate(facts(canaries=(), organic=0, activity=0), now=NOW)
    assert never.reason == "no canary run and no firing yet"
