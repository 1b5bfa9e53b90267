"""Strict reading of TOML files: typed table access that reports every problem with its key.

Used by ``canary.config.settings`` and ``canary.config.definitions``. A :class:`Sink` collects the
problems of one file and places each on its line; a :class:`Table` reads one
TOML table, reports unknown keys (with "did you mean ...?") and wrong types,
and returns None for a value it could not use so parsing can go on.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Sequence
from datetime import date, time, timedelta
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from canary.config.durations import DurationError, parse_duration
from canary.config.placeholders import scan
from canary.config.positions import KeyPath, locate
from canary.config.urls import redact_url
from canary.errors import Problem
from collectors.patterns import prefilter
from collectors.shapes import catastrophic, polynomial

__all__ = [
    "KeyPath",
    "Sink",
    "Table",
    "check_matcher",
    "check_placeholders",
    "closest",
    "compile_regex",
    "dotted",
    "is_http_url",
    "is_loopback",
    "load_toml",
    "locate",
    "type_name",
]

_DURATION_HINT = "a duration like '90s', '15m', '6h' or '7d'"
_LISTEN = re.compile(r"\[(?P<v6>[^\]]+)\]:(?P<p6>\d+)|(?P<host>[^:\[\]]+):(?P<port>\d+)")


def dotted(keys: KeyPath) -> str:
    """``("canary", 1, "every")`` -> ``canary[1].every``."""
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


def type_name(value: object) -> str:
    """How a TOML value's type reads in a message: 'a string', 'an integer (5)', 'a table'."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a float ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, date | time):
        return f"a date/time ({value})"
    return type(value).__name__


class Sink:
    """The problems found in one file; each is placed on its line when its key can be found."""

    def __init__(self, path: Path | None, text: str = "") -> None:
        self.path = path
        self.text = text
        self.problems: list[Problem] = []

    @property
    def errors(self) -> int:
        """How many errors (not warnings) were reported so far."""
        return sum(1 for p in self.problems if p.severity == "error")

    @property
    def path_or_empty(self) -> Path:
        """The file's path, or ``Path()`` for text that came from no file."""
        return self.path if self.path is not None else Path()

    def error(self, keys: KeyPath, message: str, suggestion: str | None = None) -> None:
        """Report an error at ``keys``."""
        self._add(keys, message, suggestion, "error")

    def warning(self, keys: KeyPath, message: str, suggestion: str | None = None) -> None:
        """Report a warning at ``keys``."""
        self._add(keys, message, suggestion, "warning")

    def _add(self, keys: KeyPath, message: str, suggestion: str | None,
             severity: Literal["error", "warning"]) -> None:
        line = locate(self.text, keys) if self.text and keys else None
        self.problems.append(Problem(self.path, dotted(keys), message, suggestion, severity, line))


def load_toml(path: Path) -> tuple[dict[str, object] | None, Sink]:
    """Read and parse one TOML file; on failure the data is None and the sink says why."""
    sink = Sink(path)
    try:
        sink.text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        sink.problems.append(Problem(path, "", f"cannot read the file: {exc}"))
        return None, sink
    try:
        return tomllib.loads(sink.text), sink
    except tomllib.TOMLDecodeError as exc:
        from canary.config.tomlsyntax import syntax_error  # only a file that does not parse pays for it

        line, message = syntax_error(sink.text, str(exc))
        sink.problems.append(Problem(path, "", f"invalid TOML: {message}", line=line))
        return None, sink


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice ``word`` was most likely meant to be, if one is close."""
    import difflib  # only a problem pays for it

    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_name(kind: str, name: str, known: Iterable[str], *, plural: str | None = None) -> str:
    """``no guard named 'x' (did you mean 'y'?); the guards are: a, b``, for any kind of name."""
    names = sorted(set(known))
    hint = closest(name, names)
    text = f"no {kind} named {name!r}" + (f" (did you mean {hint!r}?)" if hint else "")
    if names:
        return text + f"; the {plural or kind + 's'} are: {', '.join(names)}"
    return text + f"; no {kind} is defined"


class Table:
    """Typed, strict access to one TOML table; unknown keys are reported on creation."""

    def __init__(self, sink: Sink, keys: KeyPath, data: dict[str, object],
                 allowed: Sequence[str]) -> None:
        self.sink = sink
        self.keys = keys
        self.data = data
        #: Known keys that an unknown key was probably meant to be; not reported missing again.
        self.misspelled: set[str] = set()
        for key in data:
            if key not in allowed:
                guess = closest(key, allowed)
                known = "" if guess else f"; known keys here: {', '.join(allowed)}"
                sink.error((*keys, key), f"unknown key{known}", guess)
                if guess is not None:
                    self.misspelled.add(guess)

    closest = staticmethod(closest)

    def get(self, name: str) -> object | None:
        """The raw value, or None when absent."""
        return self.data.get(name)

    def has(self, name: str) -> bool:
        """Whether the key is present."""
        return name in self.data

    def missing(self, name: str, hint: str) -> None:
        """Report a required key that is absent (unless an unknown key was probably it)."""
        if name in self.misspelled:
            return
        self.sink.error((*self.keys, name), f"required key is missing: {hint}")

    def wrong(self, name: str, expected: str) -> None:
        """Report a value of the wrong type."""
        value = self.data[name]
        self.sink.error((*self.keys, name), f"expected {expected}, got {type_name(value)}")

    def string(self, name: str, *, required: bool = False, hint: str = "a string") -> str | None:
        """A string value; None when absent (reported if required) or of another type."""
        value = self.data.get(name)
        if value is None:
            if required:
                self.missing(name, hint)
            return None
        if not isinstance(value, str):
            self.wrong(name, "a string")
            return None
        return value

    def boolean(self, name: str, default: bool) -> bool:
        """A boolean value, or ``default`` when absent or invalid (reported)."""
        value = self.data.get(name, default)
        if not isinstance(value, bool):
            self.wrong(name, "true or false")
            return default
        return value

    def duration(self, name: str, default: timedelta | None) -> timedelta | None:
        """A positive duration; ``default`` when absent, None when invalid (reported)."""
        value = self.data.get(name)
        if value is None:
            return default
        keys = (*self.keys, name)
        if not isinstance(value, str):
            extra = "; write it as a string with a unit" if isinstance(value, int | float) else ""
            self.sink.error(keys, f"expected {_DURATION_HINT}, got {type_name(value)}{extra}")
            return None
        try:
            return parse_duration(value)
        except DurationError as exc:
            if "zero" in str(exc):
                self.sink.error(keys, f"expected a duration longer than zero, got {value!r}")
            else:
                self.sink.error(keys, f"expected {_DURATION_HINT}, got {value!r}")
            return None

    def strings(self, name: str, *, required: bool = False, single_ok: bool = False,
                hint: str = "a list of strings") -> tuple[str, ...] | None:
        """A list of strings (or one string when ``single_ok``); None when absent or invalid."""
        value = self.data.get(name)
        if value is None:
            if required:
                self.missing(name, hint)
            return None
        if single_ok and isinstance(value, str):
            return (value,)
        if not isinstance(value, list):
            self.wrong(name, "a string or a list of strings" if single_ok else "a list of strings")
            return None
        bad = [i for i, item in enumerate(value) if not isinstance(item, str)]
        for i in bad:
            self.sink.error((*self.keys, name, i), f"expected a string, got {type_name(value[i])}")
        return None if bad else tuple(value)

    def http_url(self, name: str) -> str | None:
        """An http(s) URL; None when absent, the value as written when invalid (reported)."""
        url = self.string(name)
        if url is not None and not is_http_url(url):
            self.sink.error((*self.keys, name), f"expected an http:// or https:// URL, got "
                            f"{redact_url(url)!r}")
        return url

    def listen(self, name: str, default: str) -> str:
        """A ``host:port`` address; a non-loopback host needs ``allow_remote = true`` beside it."""
        value = self.string(name)
        if value is None:
            return default
        keys = (*self.keys, name)
        found = _LISTEN.fullmatch(value)
        if found is None:
            self.sink.error(keys, f"expected host:port like {default!r} (IPv6 as '[::1]:port'), "
                            f"got {value!r}")
            return value
        host = found.group("v6") or found.group("host")
        port = int(found.group("p6") or found.group("port"))
        if not 1 <= port <= 65535:
            self.sink.error(keys, f"the port must be between 1 and 65535, got {port}")
        if not is_loopback(host) and self.data.get("allow_remote") is not True:
            self.sink.error(keys, f"{host!r} is not a loopback address, so other machines could "
                            "reach this listener; use 127.0.0.1, or set allow_remote = true in "
                            f"[{dotted(self.keys)}]")
        return value

    def table(self, name: str) -> dict[str, object] | None:
        """A table value; None when absent or of another type (reported)."""
        value = self.data.get(name)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.wrong(name, f"a table [{dotted((*self.keys, name))}]")
            return None
        return value


def compile_regex(sink: Sink, keys: KeyPath, pattern: str) -> re.Pattern[str] | None:
    """Compile a user's regex; a bad one is reported with re's message and position."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        sink.error(keys, f"not a valid regex: {exc.msg}{where} in {pattern!r}")
        return None


def check_matcher(
    sink: Sink, keys: KeyPath, value: object, log_format: str
) -> tuple[str | dict[str, object] | None, re.Pattern[str] | None]:
    """A guard ``match`` or ``[logs] activity``: a regex for text logs, a field table for jsonl."""
    if log_format == "jsonl":
        if not isinstance(value, dict):
            got = "a regex string" if isinstance(value, str) else type_name(value)
            sink.error(keys, "[logs] format is 'jsonl', so this must be a table of fields like "
                       f"{{ event = \"guard_reject\" }}; got {got} (regexes are for format 'text')")
            return None, None
        if not value:
            sink.error(keys, "an empty table matches every line; name at least one field")
            return None, None
        bad = [k for k, v in value.items() if isinstance(v, date | time)]
        for field in bad:
            sink.error((*keys, field), "JSON has no dates: quote the value to compare a string")
        return (None, None) if bad else (dict(value), None)
    if not isinstance(value, str):
        got = "a table" if isinstance(value, dict) else type_name(value)
        sink.error(keys, f"[logs] format is {log_format!r}, so this must be a regex string; got "
                   f"{got} (tables of fields are for format 'jsonl')")
        return None, None
    if not value:
        sink.error(keys, "an empty regex matches every line")
        return None, None
    pattern = compile_regex(sink, keys, value)
    if pattern is not None and value.startswith(".*"):
        sink.warning(keys, "a leading '.*' makes scanning much slower and never changes what "
                     "a search finds; drop it")
    if pattern is not None and not _scannable(sink, keys, pattern):
        return None, None
    return value, pattern


def _scannable(sink: Sink, keys: KeyPath, pattern: re.Pattern[str]) -> bool:
    """Refuse shapes that backtrack for ages; say what the native engine can only prefilter."""
    reason = catastrophic(pattern.pattern, pattern.flags)
    if reason is not None:
        sink.error(keys, reason)
        return False
    try:
        widened = prefilter(pattern).widened
    except ValueError:
        widened = []
    shape = polynomial(pattern.pattern, pattern.flags)
    if widened or shape:
        from collectors.rules import LINE_BUDGET  # the matcher's rules: only these warnings need them
    if shape:
        sink.warning(keys, f"{shape}; each line is searched within {LINE_BUDGET:g} s, and a line over "
                     "it is not counted for this guard")

    for construct in dict.fromkeys(widened):
        sink.warning(keys, f"{construct}, which the native engine cannot express: it picks lines "
                     f"by the rest of the pattern and confirms each one with re's semantics "
                     f"within {LINE_BUDGET:g} s per line")
    return True


def check_placeholders(sink: Sink, keys: KeyPath, text: str, allowed: frozenset[str]) -> None:
    """Report unknown ``{names}`` (with a did-you-mean) and stray braces in ``text``."""
    found = scan(text)
    for name in sorted(found.names - allowed):
        guess = closest(name, allowed)
        if not name.isidentifier():
            detail = "; write '{{' and '}}' for literal braces"
        elif guess:
            detail = ""
        else:
            detail = f"; known: {', '.join('{' + n + '}' for n in sorted(allowed))}"
        sink.error(keys, f"unknown placeholder {{{name}}}{detail}",
                   None if guess is None else f"{{{guess}}}")
    for offset in found.stray:
        sink.error(keys, f"a lone {text[offset]!r} at position {offset}; write '{{{{' or "
                   "'}}' for a literal brace")


def is_http_url(url: str) -> bool:
    """Whether ``url`` is an absolute http:// or https:// URL."""
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def is_loopback(host: str) -> bool:
    """Whether a listener on ``host`` is reachable only from this machine."""
    if host in ("localhost", "127.0.0.1", "::1"):  # the usual ones, without loading ipaddress
        return True
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
