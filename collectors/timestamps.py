"""The time of a log line, read from the line itself (ISO 8601, syslog, common log, JSON fields).

Firings are windowed by the time the agent wrote them, not by the time they were read, so a
backlog read after a restart lands in the hours it belongs to (log-tailing.md, F24).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta, timezone, tzinfo

__all__ = ["TimestampParser"]

_FIELDS = ("ts", "time", "timestamp")
_BOM = b"\xef\xbb\xbf"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MONTHS = {
    name.encode(): number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
# A syslog stamp (no year) may be up to this far after `now` before it is taken as last year's:
# clocks of writer and reader drift, and zones may differ.
_FUTURE_SLACK = timedelta(days=1)

_AUTO = re.compile(
    rb"""
    \s*(?:\xef\xbb\xbf)?\s*\[?
    (?:<\d{1,3}>(?:[1-9]\d?\ )?)?                     # syslog PRI, and the RFC 5424 version
    (?:
        (?P<iso>\d{4}-\d{2}-\d{2}[Tt\ ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)
        (?P<off>[Zz]|[+-]\d{2}(?::?\d{2})?|\ [+-]\d{2}:?\d{2}|\ (?:UTC|GMT)\b)?
    |
        (?P<mon>[A-Za-z]{3})\ {1,2}(?P<day>\d{1,2})\ (?P<hms>\d{2}:\d{2}:\d{2})
        (?:\.(?P<frac>\d+))?
    |
        (?:\S+\ \S+\ \S+\ \[)?                           # common log: host ident user [
        (?P<cday>\d{1,2})/(?P<cmon>[A-Za-z]{3})/(?P<cyear>\d{4}):(?P<chms>\d{2}:\d{2}:\d{2})
        (?:\ (?P<coff>[+-]\d{4}))?
    )
    """,
    re.VERBOSE,
)
# The most common stamp, ``2026-11-29T10:00:00.123Z`` at the start of a line, read without
# the general pattern: the seconds part is parsed once per second of log.
_ISO_Z = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{3}|\d{6})Z")
_SECONDS_KEPT = 4096
_NUMBER = re.compile(rb"\s*(-?\d+(?:\.\d+)?)\s*\Z")
_YEAR_DIRECTIVES = ("%Y", "%y", "%G", "%c", "%x")


class TimestampParser:
    """Finds the time a log line was written; ``parse`` returns it in UTC, or None."""

    def __init__(
        self, mode: str = "auto", fmt: str | None = None, *, default_tz: tzinfo | None = None
    ) -> None:
        """``mode``: "auto" or a regex with a group named ``ts``; ``fmt``: a strptime format for it.

        ``default_tz`` is the zone of stamps that carry no offset; None means the local zone.
        Raises ValueError for a regex that does not compile or has no ``ts`` group.
        """
        self._tz = default_tz
        self._seconds: dict[bytes, datetime] = {}
        self._fmt = fmt
        self._fmt_has_year = fmt is not None and any(d in fmt for d in _YEAR_DIRECTIVES)
        self._custom: re.Pattern[bytes] | None = None
        if mode == "auto":
            if fmt is not None:
                raise ValueError("a timestamp format needs a timestamp regex with a group named ts")
            return
        try:
            pattern = re.compile(mode.encode("utf-8"))
        except (re.error, ValueError) as exc:
            raise ValueError(f"timestamp regex {mode!r} does not compile: {exc}") from exc
        if "ts" not in pattern.groupindex:
            raise ValueError(f"timestamp regex {mode!r} has no group named ts: write (?P<ts>...)")
        self._custom = pattern

    def parse(
        self,
        line: bytes,
        fields: Mapping[str, object] | None = None,
        *,
        now: datetime | None = None,
    ) -> datetime | None:
        """The line's time as an aware UTC datetime, or None when it has no recognisable stamp.

        ``fields`` is the line's already-decoded JSON object, if any: its ``ts``, ``time`` or
        ``timestamp`` field wins. ``now`` dates year-less (syslog) stamps; default: the clock,
        read only for such a stamp.
        """
        if now is not None and now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        try:
            if fields is not None:
                found = self._from_fields(fields, now)
                if found is not None:
                    return found
            if self._custom is not None:
                return self._from_custom(line, now)
            found = self._from_text(line, now)
            if found is not None or fields is not None:
                return found
            return self._from_json_line(line, now)
        except (ValueError, OverflowError, OSError):
            # Out-of-range dates (month 13, year 0) and platform limits of the local zone.
            return None

    def _from_fields(self, fields: Mapping[str, object], now: datetime | None) -> datetime | None:
        for key in _FIELDS:
            value = fields.get(key)
            found: datetime | None = None
            try:
                if isinstance(value, str):
                    found = self._from_stamp(value.encode("utf-8", "replace"), now)
                elif isinstance(value, int | float) and not isinstance(value, bool):
                    found = _from_epoch(value)
            except (ValueError, OverflowError, OSError):
                continue  # an impossible date in one field; a later field may hold a good one
            if found is not None:
                return found
        return None

    def _from_json_line(self, line: bytes, now: datetime | None) -> datetime | None:
        body = line.lstrip()
        if body.startswith(_BOM):
            body = body[len(_BOM) :].lstrip()
        if not body.startswith(b"{"):
            return None
        try:
            decoded = json.loads(body.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            return None
        if not isinstance(decoded, dict):
            return None
        return self._from_fields(decoded, now)

    def _from_custom(self, line: bytes, now: datetime | None) -> datetime | None:
        assert self._custom is not None
        match = self._custom.search(line)
        if match is None:
            return None
        raw = match.group("ts")
        if not raw:
            return None
        if self._fmt is None:
            return self._from_stamp(raw, now)
        text = raw.decode("utf-8", "replace").strip()
        if self._fmt_has_year:
            return self._to_utc(datetime.strptime(text, self._fmt))
        # Give strptime the year explicitly: a year-less parse defaults to 1900, which has no
        # Feb 29 (and newer Pythons warn about it).
        fmt = self._fmt + " %Y"

        def build(year: int) -> datetime:
            return datetime.strptime(f"{text} {year}", fmt)

        return self._with_inferred_year(build, now)

    def _from_stamp(self, raw: bytes, now: datetime | None) -> datetime | None:
        """A stamp on its own (a JSON field, a custom ``ts`` group): any auto form, or epoch."""
        found = self._from_text(raw, now)
        if found is not None:
            return found
        number = _NUMBER.match(raw)
        if number is None:
            return None
        digits = number.group(1)
        return _from_epoch(float(digits) if b"." in digits else int(digits))

    def _from_text(self, line: bytes, now: datetime | None) -> datetime | None:
        fast = _ISO_Z.match(line)
        if fast is not None:
            return self._from_iso_z(fast.group(1), fast.group(2))
        match = _AUTO.match(line)
        if match is None:
            return None
        iso = match.group("iso")
        if iso is not None:
            return self._from_iso(iso, match.group("off"))
        mon = match.group("mon")
        if mon is not None:
            return self._from_syslog(match, now)
        return self._from_common(match)

    def _from_iso_z(self, seconds: bytes, fraction: bytes) -> datetime:
        """``seconds`` + ``.fraction`` + ``Z``, as ``_from_iso`` reads it."""
        whole = self._seconds.get(seconds)
        if whole is None:
            if len(self._seconds) >= _SECONDS_KEPT:
                self._seconds.clear()
            whole = self._seconds[seconds] = datetime.fromisoformat(
                seconds.decode("ascii") + "+00:00"
            ).astimezone(UTC)
        micro = int(fraction) * (1000 if len(fraction) == 3 else 1)
        return whole.replace(microsecond=micro)

    def _from_iso(self, iso: bytes, off: bytes | None) -> datetime:
        text = iso.decode("ascii")
        if off is not None:
            offset = off.strip().decode("ascii")
            text += "+00:00" if offset in {"Z", "z", "UTC", "GMT"} else offset
        return self._to_utc(datetime.fromisoformat(text))

    def _from_syslog(self, match: re.Match[bytes], now: datetime | None) -> datetime | None:
        month = _MONTHS.get(match.group("mon").lower())
        if month is None:
            return None
        day = int(match.group("day"))
        hms = match.group("hms")
        hour, minute, second = int(hms[0:2]), int(hms[3:5]), int(hms[6:8])
        frac = match.group("frac")
        micro = int(frac[:6].ljust(6, b"0")) if frac else 0

        def build(year: int) -> datetime:
            return datetime(year, month, day, hour, minute, second, micro)

        return self._with_inferred_year(build, now)

    def _from_common(self, match: re.Match[bytes]) -> datetime | None:
        month = _MONTHS.get(match.group("cmon").lower())
        if month is None:
            return None
        hms = match.group("chms")
        hour, minute, second = int(hms[0:2]), int(hms[3:5]), int(hms[6:8])
        stamp = datetime(
            int(match.group("cyear")), month, int(match.group("cday")), hour, minute, second
        )
        coff = match.group("coff")
        if coff is None:
            return self._to_utc(stamp)
        sign = -1 if coff[:1] == b"-" else 1
        offset = timedelta(hours=int(coff[1:3]), minutes=int(coff[3:5])) * sign
        return stamp.replace(tzinfo=timezone(offset)).astimezone(UTC)

    def _with_inferred_year(
        self, build: Callable[[int], datetime], now: datetime | None
    ) -> datetime | None:
        """This year's stamp, or last year's if this year's is over a day ahead of ``now``."""
        if now is None:
            now = datetime.now(UTC)
        year = now.astimezone(self._tz).year if self._tz is not None else now.astimezone().year
        try:
            stamp = self._to_utc(build(year))
            if stamp <= now + _FUTURE_SLACK:
                return stamp
        except ValueError:
            pass  # Feb 29 in a common year: last year may hold it.
        return self._to_utc(build(year - 1))

    def _to_utc(self, stamp: datetime) -> datetime:
        if stamp.tzinfo is None:
            # A naive astimezone() reads the stamp as local time, DST included.
            stamp = stamp.replace(tzinfo=self._tz) if self._tz is not None else stamp.astimezone()
        return stamp.astimezone(UTC)


def _from_epoch(value: int | float) -> datetime | None:
    """Epoch seconds, or milli/micro/nanoseconds told apart by magnitude."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    size = abs(value)
    if isinstance(value, int):
        if size >= 10**17:
            return _EPOCH + timedelta(microseconds=value // 1000)
        if size >= 10**14:
            return _EPOCH + timedelta(microseconds=value)
        if size >= 10**11:
            return _EPOCH + timedelta(milliseconds=value)
        return _EPOCH + timedelta(seconds=value)
    for limit, scale in ((1e17, 1e9), (1e14, 1e6), (1e11, 1e3)):
        if size >= limit:
            value /= scale
            break
    return datetime.fromtimestamp(value, UTC)
