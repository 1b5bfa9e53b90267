"""A verdict is said in one set of words: the status reason, the dashboard's run list and ``canary run``."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from canary.sentences import explain, meaning
from canary.status.evaluate import evaluate
from canary.vocabulary import REJECT_FAILURES, Verdict
from dashboard.queries import RunRow
from dashboard.render import outcome
from tests.runs.test_record import RECORD
from tests.status.test_status import NOW, H, facts, run


def _row(verdict: str, error: str | None = None) -> RunRow:
    return RunRow(
        id=1, guard="citation", canary="fake", variant=0, expect="reject", verdict=verdict,
        started=datetime(2026, 11, 29, 11, 0, tzinfo=UTC), duration_s=1.0, trace={}, leaked=None,
        firings=0, evidence=None, injected_text="", leak_text=None, answer=None, error=error,
    )


@pytest.mark.parametrize("verdict", list(Verdict))
def test_the_dashboard_says_what_the_verdict_means(verdict: Verdict) -> None:
    said = outcome(_row(verdict.value))
    assert said == meaning(verdict.value)
    assert said != verdict.value  # every verdict has a sentence, not just its name


def test_an_error_with_a_reason_is_told_with_it() -> None:
    assert outcome(_row("error", "connection refused")) == "error: connection refused"


@pytest.mark.parametrize("verdict", sorted(REJECT_FAILURES))
def test_a_failed_canary_s_reason_ends_in_the_same_sentence(verdict: str) -> None:
    reason = evaluate(facts(run(verdict, H)), now=NOW).reason
    assert reason.startswith(f"canary fake {verdict.replace('_', ' ')} at ")
    assert reason.endswith(f": {meaning(verdict)}")


@pytest.mark.parametrize("verdict", ["error", "not_injected", "ambiguous"])
def test_an_inconclusive_last_run_is_told_in_the_same_sentence(verdict: str) -> None:
    reason = evaluate(facts(run(verdict, H), run("caught", 10 * H)), now=NOW).reason
    assert reason.endswith(f": {meaning(verdict)}")


@pytest.mark.parametrize("verdict", ["error", "false_rejection"])
def test_canary_run_s_explanation_begins_with_the_same_words(verdict: str) -> None:
    assert explain(replace(RECORD, verdict=Verdict(verdict), error="boom")).startswith(meaning(verdict))
