"""The near-miss finder: a guard's literal text, and which nonce line is close enough to name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from canary.runs.unmatched import literal_of, near_miss, nonce_lines


@pytest.mark.parametrize(
    ("match", "literal"),
    [
        ("CitationGuard: rejected", "CitationGuard: rejected"),  # plain text stays as written
        (r"QuoteGuard: rejected quote=\S+", "QuoteGuard: rejected quote="),  # a class stands for no text
        (r"(?P<g>Span)Grounding:\s+rejected \[obs\]", "SpanGrounding: rejected [obs]"),  # escapes kept
        (r"guard (?:a|b) rejected[.!]{1,3}", "guard a b rejected"),  # alternation, set and count dropped
        ({"event": "guard_reject", "guard": "citation"}, "guard_reject citation"),  # jsonl: field values
    ],
)
def test_literal_of(match: str | dict[str, object], literal: str) -> None:
    assert literal_of(match) == literal


GUARDS: dict[str, str | dict[str, object]] = {"citation": "CitationGuard: rejected",
                                              "quote": "QuoteGuard: rejected quote="}


def test_the_nearest_guard_is_named_and_far_lines_are_not() -> None:
    lines = ["INFO task started prompt='Read http://127.0.0.1:9/k3v9abc/page and tell me'",
             "WARN CitationGuard rejected https://k3v9abc.example.org/permit"]
    found = near_miss(lines, GUARDS, own="quote")
    assert found is not None and (found.guard, found.line) == ("citation", lines[1])
    assert near_miss(lines[:1], GUARDS, own="citation") is None
    # A line some pattern already fits (another guard's, the activity's) is no near miss.
    assert near_miss(lines, GUARDS, own="citation", fitted=[re.compile("CitationGuard")]) is None


def test_nonce_lines_reads_the_tail_of_each_file(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("x" * 50 + " k3v9abc cut\n" + "other\n" + "WARN k3v9abc here\n")
    assert nonce_lines([str(tmp_path / "*.log")], "k3v9abc") == ["x" * 50 + " k3v9abc cut", "WARN k3v9abc here"]
    assert nonce_lines([str(log)], "k3v9abc", tail=30) == ["WARN k3v9abc here"]  # a cut first line is dropped


def test_a_line_is_what_the_collectors_call_a_line_a_carriage_return_inside_it_too(tmp_path: Path) -> None:
    """Lines end at a newline (a CRLF's \\r dropped), as the collectors read them: the line shown is the
    whole line the guard wrote, its time and prefix with it."""
    log = tmp_path / "agent.log"
    log.write_bytes(b"2026-12-07T10:00:00Z WARNING guards \x1b[2K\r\x08CitationGuard rejected k3v9abc\n"
                    b"2026-12-07T10:00:01Z INFO k3v9abc crlf\r\n")
    assert nonce_lines([str(log)], "k3v9abc") == [
        "2026-12-07T10:00:00Z WARNING guards \x1b[2K\r\x08CitationGuard rejected k3v9abc",
        "2026-12-07T10:00:01Z INFO k3v9abc crlf",
    ]
