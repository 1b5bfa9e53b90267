"""A guard's ``span`` and ``event`` matchers: what a span, a span event or an OTLP log record must be.

``span = { name = 'regex', attributes = { "key" = 'regex' } }``: the name regex is searched in
the span's name, each attribute regex in that attribute's value as text (a boolean reads
``true``/``false``, a number as written, a list or table as JSON); every one must match, and an
attribute that is absent never matches. ``event`` is the same for span events and log records.
"""

from __future__ import annotations

import re
from typing import Protocol

from canary.config.tomlcheck import KeyPath, Sink, compile_regex, type_name
from canary.records import frozen
from collectors.shapes import catastrophic

__all__ = ["MATCH_KEEP", "SignalMatch", "parse_signal_match"]

#: Characters of an attribute's value a regex is searched in (a guard's verdict sits near the start).
MATCH_KEEP = 65536
_KEYS = ("name", "attributes")


class Attributes(Protocol):
    """A signal's attributes as text, read one by one (a dict is one)."""

    def get(self, key: str, /) -> str | None:
        """The attribute's value as text, or None when it is absent."""


@frozen
class SignalMatch:
    """What a span (or an event, or a log record) must carry to be a firing of the guard."""

    spec: dict[str, object]  # the TOML table as written, to tell a changed definition
    name: re.Pattern[str] | None
    attributes: tuple[tuple[str, re.Pattern[str]], ...]

    def matched(self, name: str, attributes: Attributes) -> tuple[tuple[str, str], ...] | None:
        """The attributes that matched (in the definition's order), or None when it does not match."""
        if self.name is not None and self.name.search(name[:MATCH_KEEP]) is None:
            return None
        found: list[tuple[str, str]] = []
        for key, pattern in self.attributes:
            value = attributes.get(key)
            if value is None or pattern.search(value[:MATCH_KEEP]) is None:
                return None
            found.append((key, value))
        return tuple(found)


def _regex(sink: Sink, keys: KeyPath, value: object) -> re.Pattern[str] | None:
    if not isinstance(value, str):
        quoted = " (quote it: attribute values are matched as text)" if isinstance(
            value, bool | int | float) else ""
        sink.error(keys, f"expected a regex string, got {type_name(value)}{quoted}")
        return None
    if not value:
        sink.error(keys, "an empty regex matches everything; leave the key out instead")
        return None
    pattern = compile_regex(sink, keys, value)
    if pattern is None:
        return None
    reason = catastrophic(pattern.pattern, pattern.flags)
    if reason is not None:
        sink.error(keys, reason)
        return None
    return pattern


def parse_signal_match(sink: Sink, keys: KeyPath, value: object) -> SignalMatch | None:
    """A ``span`` or ``event`` table, checked; None (every problem reported) when it is unusable."""
    if not isinstance(value, dict):
        sink.error(keys, "expected a table like { name = 'guardrail', attributes = "
                   f"{{ \"openinference.span.kind\" = 'GUARDRAIL' }} }}, got {type_name(value)}")
        return None
    errors = sink.errors
    for key in value:
        if key not in _KEYS:
            sink.error((*keys, key), f"unknown key {key!r}: a {keys[-1]} matcher has name and attributes")
    name = _regex(sink, (*keys, "name"), value["name"]) if "name" in value else None
    attributes: list[tuple[str, re.Pattern[str]]] = []
    raw = value.get("attributes", {})
    if not isinstance(raw, dict):
        sink.error((*keys, "attributes"), "expected a table of attribute names and regexes, got "
                   f"{type_name(raw)}")
        raw = {}
    for key, regex in raw.items():
        pattern = _regex(sink, (*keys, "attributes", key), regex)
        if pattern is not None:
            attributes.append((key, pattern))
    if "name" not in value and not raw and sink.errors == errors:
        sink.error(keys, "an empty matcher matches everything: give a name regex, attributes, or both")
    if sink.errors > errors:
        return None
    return SignalMatch(dict(value), name, tuple(attributes))
