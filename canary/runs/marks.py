"""The marks of a run a log line may carry besides its nonce: its task id, its own values.

Pure functions over text. A run's *marks* are the values it put into the
agent's path (the drawn ``{fake_*}`` values its injection uses, the leak text,
a control's grounded text); a value is found only as a whole token, so the
fake version ``3.14.7`` is not found in ``13.14.72``. A line *carries a value
of the run's kind* when it holds a token shaped like one of those values (a
version, a four-digit number, a date, a URL; a date also written out, ``14 March
2019`` or ``March 14, 2019``, as guards log the dates they find in answers): a
guard line that names a value of that kind, but none of the run's, is about
someone else's answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date

from canary.config.placeholders import fill, placeholders_in
from collectors.rules import parse_json_line

_BEFORE = r"(?<![\w.])"
_AFTER = r"(?![\w]|\.\w)"
#: Token shapes of the drawn values (canary.runs.values), by placeholder kind.
_SHAPES: dict[str, str] = {
    "number": r"(?<![\w.:-])\d{4}(?![\w:-]|\.\d)",
    "version": _BEFORE + r"v?\d+\.\d+\.\d+" + _AFTER,
    "url": r"https?://[^\s\"'<>]+",
}


_MONTH = (r"(?P<{g}>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
          r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?")
_ORDINAL = r"(?:st|nd|rd|th)?"
#: A date as ISO (not a timestamp's: no time follows), ``14 March 2019`` or ``March 14, 2019``.
_DATES = re.compile(
    r"(?<![\w.-])(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})(?!\w|:\d|[ T]\d)"
    rf"|(?<![\w.])(?P<d2>\d{{1,2}}){_ORDINAL}\s+{_MONTH.format(g='m2')}\s+(?P<y2>\d{{4}})(?!\w)"
    rf"|(?<![\w.]){_MONTH.format(g='m3')}\s+(?P<d3>\d{{1,2}}){_ORDINAL},?\s+(?P<y3>\d{{4}})(?!\w)",
    re.IGNORECASE,
)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


def dates_in(text: str) -> set[str]:
    """Every date the text names, in any of the usual writings, as ``YYYY-MM-DD``."""
    found: set[str] = set()
    for m in _DATES.finditer(text):
        if m.group("y"):
            year, month, day = m.group("y"), int(m.group("m")), m.group("d")
        else:
            named = m.group("m2") or m.group("m3")
            year, day = m.group("y2") or m.group("y3"), m.group("d2") or m.group("d3")
            month = _MONTHS.index(named[:3].lower()) + 1
        try:
            found.add(date(int(year), month, int(day)).isoformat())
        except ValueError:
            continue
    return found


@dataclass(frozen=True)
class RunMarks:
    """The values a run put into the agent's path, and the shapes of their kinds."""

    values: tuple[str, ...]
    shapes: re.Pattern[str] | None
    dates: bool = False  # a date is among the kinds: a date is found however it is written

    def carries_value(self, text: str) -> bool:
        """Whether the line holds one of the run's values as a whole token (a date in any writing)."""
        if any(_token(value).search(text) for value in self.values):
            return True
        return self.dates and not dates_in(text).isdisjoint(self.values)

    def carries_other_value(self, text: str) -> bool:
        """Whether the line holds a value of the run's kind that is none of the run's."""
        own = {v.removeprefix("v") for v in self.values}
        if self.dates and not dates_in(text) <= own:
            return True
        if self.shapes is None:
            return False
        return any(m.group(0).rstrip(".,;:!?)").removeprefix("v") not in own
                   for m in self.shapes.finditer(text))


def _token(value: str) -> re.Pattern[str]:
    # A number may be written with a leading v (v3.14.7), the way versions are.
    before = (_BEFORE + "v?" if value[:1].isdigit() else _BEFORE) if value[:1].isalnum() else ""
    after = _AFTER if value[-1:].isalnum() else ""
    return re.compile(before + re.escape(value) + after)


def run_marks(values: Mapping[str, str], templates: Iterable[str], texts: Iterable[str | None],
              *, prefixes: tuple[str, ...] = ("fake",)) -> RunMarks:
    """The marks of a run: the drawn values (of ``prefixes``) its ``templates`` use, and ``texts`` filled.

    A text with no placeholder is the same in every run, so it cannot tie a line to this one.
    """
    names: set[str] = set()
    for template in templates:
        names |= placeholders_in(template)
    drawn = sorted(n for n in names if n in values and n.split("_", 1)[0] in prefixes)
    kinds = {n.split("_", 1)[1] for n in drawn}
    own = [values[n] for n in drawn] + [fill(t, values) for t in texts if t and placeholders_in(t)]
    shapes = [_SHAPES[k] for k in sorted(kinds) if k in _SHAPES]
    return RunMarks(tuple(dict.fromkeys(v for v in own if v.strip())),
                    re.compile("|".join(shapes)) if shapes else None, dates="date" in kinds)


class TaskIds:
    """Reads a line's task id: ``[logs] correlate`` as a regex (text) or a field name (jsonl)."""

    def __init__(self, correlate: str | None, pattern: re.Pattern[str] | None, log_format: str) -> None:
        self.enabled = correlate is not None
        self._pattern = pattern
        self._field = correlate if log_format == "jsonl" else None

    def of(self, text: str) -> str | None:
        """The task id the line carries, or None."""
        if self._pattern is not None:
            m = self._pattern.search(text)
            return m.group("id") if m and m.group("id") else None
        if self._field is None:
            return None
        obj = parse_json_line(text)
        node: object = obj
        if obj is not None and self._field in obj:
            node = obj[self._field]
        else:
            for part in self._field.split("."):
                if not isinstance(node, dict) or part not in node:
                    return None
                node = node[part]
        if isinstance(node, str | int) and not isinstance(node, bool) and str(node):
            return str(node)
        return None
