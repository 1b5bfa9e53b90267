"""Durations as users write them: ``90s``, ``15m``, ``6h``, ``7d`` (and combinations like ``1h30m``)."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+")


class DurationError(ValueError):
    """A duration string that does not parse; the message says what is accepted."""


def parse_duration(text: str) -> timedelta:
    """Parse ``90s``, ``15m``, ``6h``, ``7d``, ``2w`` or a sum such as ``1h30m``; must be positive."""
    if not isinstance(text, str):
        raise DurationError(f"expected a duration string like '90s', '15m', '6h' or '7d', got {text!r}")
    compact = text.strip().replace(" ", "")
    if not _WHOLE.fullmatch(compact):
        raise DurationError(
            f"{text!r} is not a duration: write a number and a unit, like '90s', '15m', '6h' or '7d'"
        )
    seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(compact))
    if seconds <= 0:
        raise DurationError(f"{text!r} must be longer than zero")
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """The shortest exact form of a duration, e.g. ``timedelta(hours=6)`` -> ``6h``."""
    seconds = delta.total_seconds()
    for unit in ("w", "d", "h", "m", "s"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
