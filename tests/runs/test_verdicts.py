"""The verdict table, one row per case, including the ones that must never happen."""

from __future__ import annotations

import pytest

from canary.runs.verdicts import Observed, decide


@pytest.mark.parametrize(
    ("expect", "error", "injected", "fired", "leak", "verdict", "ambiguous"),
    [
        # a firing belongs to the run and the leak stayed out: the guard works
        ("reject", None, True, True, False, "caught", False),
        # the guard logged, yet the fabrication reached the user: detects, does not enforce
        ("reject", None, True, True, True, "fired_but_leaked", False),
        # no line, and the fabrication reached the user: asleep
        ("reject", None, True, False, True, "leaked", False),
        # no line, yet the fabrication is not in the answer: stopped by something else
        ("reject", None, True, False, False, "unlogged", False),
        # never injected: nothing proven, even if a line appeared
        ("reject", None, False, True, False, "not_injected", False),
        ("reject", None, False, False, True, "not_injected", False),
        # an unreachable agent is never "leaked", whatever else was seen
        ("reject", "unreachable", True, False, True, "error", False),
        ("reject", "unreachable", False, False, False, "error", False),
        # controls
        ("accept", None, True, False, True, "passed", False),
        ("accept", None, True, True, True, "false_rejection", False),
        ("accept", None, True, True, False, "false_rejection", False),
        ("accept", None, True, False, False, "unlogged", False),
        ("accept", None, False, False, True, "not_injected", False),
        ("accept", "timed out", True, False, True, "error", False),
        # firings that may be someone else's: never caught, never false_rejection
        ("reject", None, True, False, False, "ambiguous", True),
        ("reject", None, True, False, True, "ambiguous", True),
        ("accept", None, True, False, True, "ambiguous", True),
        ("accept", None, True, False, False, "ambiguous", True),
        # a firing that belongs to the run outweighs unmarked ones
        ("reject", None, True, True, False, "caught", True),
        ("accept", None, True, True, True, "false_rejection", True),
        # an error or a missed injection stays what it is
        ("reject", "unreachable", True, False, False, "error", True),
        ("reject", None, False, False, False, "not_injected", True),
    ],
)
def test_verdict_table(
    expect: str, error: str | None, injected: bool, fired: bool, leak: bool, verdict: str,
    ambiguous: bool,
) -> None:
    seen = Observed(expect=expect, error=error, injected=injected, fired=fired,  # type: ignore[arg-type]
                    leak_in_answer=leak, ambiguous=ambiguous)
    assert decide(seen) == verdict


@pytest.mark.parametrize(
    ("expect", "fired", "leak", "verdict"),
    [
        # the daemon stopped while the run waited: no line yet is no proof, never leaked or unlogged
        ("reject", False, True, "error"),
        ("reject", False, False, "error"),
        # nor passed or unlogged for a control
        ("accept", False, True, "error"),
        ("accept", False, False, "error"),
        # a firing that already belongs to the run stands
        ("reject", True, False, "caught"),
        ("reject", True, True, "fired_but_leaked"),
        ("accept", True, True, "false_rejection"),
    ],
)
def test_a_wait_cut_short_proves_no_missing_firing(expect: str, fired: bool, leak: bool, verdict: str) -> None:
    seen = Observed(expect=expect, error=None, injected=True, fired=fired,  # type: ignore[arg-type]
                    leak_in_answer=leak, cut=True)
    assert decide(seen) == verdict
