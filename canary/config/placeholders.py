"""Placeholders in canary text: ``{nonce}``, ``{fixture_url}``, ``{fake_number}`` and the rest.

Text is scanned with one grammar everywhere: ``{{`` and ``}}`` are literal
braces, ``{name}`` is a placeholder, and any other brace is a stray one that
the loaders report (a lone brace would otherwise be filled or kept depending on
who reads it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from canary.records import frozen

#: The placeholders a canary's prompt, fixture, inject, leak and repair may use,
#: each drawn fresh for every run.
PLACEHOLDERS: frozenset[str] = frozenset(
    {
        "nonce",
        "fixture_url",
        "fixture_url_alias",
        "true_number",
        "fake_number",
        "true_version",
        "fake_version",
        "true_date",
        "fake_date",
        "true_quote",
        "fake_quote",
        "fake_url",
        "true_quote_2",
        "fake_fused_quote",
        "true_version_2",
        "sibling_version",
        "decoy_number",
        "fake_claim",
        "sum_part_1",
        "sum_part_2",
        "sum_part_3",
        "sum_total",
        "fake_total",
    }
)

#: Placeholders in the agent's url, body, headers or command.
AGENT_PLACEHOLDERS: frozenset[str] = frozenset({"prompt", "inject", "nonce", "conversation"})

#: Placeholders in the alert command.
ALERT_PLACEHOLDERS: frozenset[str] = frozenset(
    {"guard", "status", "previous", "reason", "since", "evidence", "text"}
)

_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


@frozen
class Scan:
    """What a text holds: the placeholder names used and the offsets of stray braces."""

    names: frozenset[str]
    stray: tuple[int, ...]


def scan(text: str) -> Scan:
    """Every ``{name}`` in ``text`` (escaped braces skipped) and where any stray brace sits."""
    names: set[str] = set()
    stray: list[int] = []
    for token in _TOKEN.finditer(text):
        if token.group(1) is not None:
            names.add(token.group(1))
        elif token.group(0) in ("{", "}"):
            stray.append(token.start())
    return Scan(frozenset(names), tuple(stray))


def placeholders_in(text: str) -> set[str]:
    """The placeholder names ``text`` uses, known or not (``{{`` and ``}}`` are not names)."""
    return set(scan(text).names)


def fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with every ``{name}`` replaced from ``values`` and ``{{``/``}}`` unescaped.

    A name missing from ``values`` raises KeyError; a stray brace is kept as is.
    """

    def replace(token: re.Match[str]) -> str:
        name = token.group(1)
        if name is not None:
            return values[name]
        whole = token.group(0)
        return whole[0] if whole in ("{{", "}}") else whole

    return _TOKEN.sub(replace, text)
