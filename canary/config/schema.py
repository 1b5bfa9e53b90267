"""The shape of a configuration table: each key's type, default, check and help, declared once.

A :class:`Section` lists the keys of one TOML table (``[model]``, ``[[canary]]``...). It
opens a table strictly (an unknown key is an error with "did you mean ...?"), reads
each key through its type with its default, and gives the keys, defaults and help
that ``canary init`` writes and ``docs/configuration.md`` lists.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from canary.config.durations import format_duration, parse_duration
from canary.config.tomlcheck import KeyPath, Sink, Table
from canary.records import frozen
from canary.terminal import BIDI_CONTROLS

__all__ = ["Fields", "Key", "Kind", "Section", "parse_size", "toml_string", "toml_value"]

_UNSET: Any = object()
_SIZE = re.compile(r"(?P<n>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[KMG]i?B|B)?", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
_SIZE_HINT = "a size in bytes like 67108864 or '64 MiB' (B, KB, MB, GB, KiB, MiB, GiB)"


def _same(value: Any) -> Any:
    return value


@frozen
class Kind:
    """A key's type: its name in the reference, how a value is read, how a default is parsed."""

    name: str
    #: (table, key, default, required) -> the value, or ``default`` when absent or unusable (reported).
    read: Callable[[Table, Key, Any, bool], Any]
    #: The default as written in TOML -> the value the program uses.
    parse: Callable[[Any], Any] = _same


@frozen
class Key:
    """One key of a section: name, type, default (as written in TOML), what is checked, what it does."""

    name: str
    kind: Kind
    default: object
    help: str
    check: str = ""
    required: bool = False
    hint: str = ""  # what a missing required key should hold
    shown: str = ""  # the default as the reference shows it (markdown), when not the TOML value

    @property
    def value(self) -> Any:
        """The default as the program uses it (a timedelta for a duration, a tuple for a list)."""
        # A copy: a default table or list handed out must not change the next one.
        return None if self.default is None else self.kind.parse(copy.deepcopy(self.default))

    @property
    def shown_default(self) -> str:
        """The default as the reference shows it."""
        if self.shown:
            return self.shown
        return "" if self.default is None else toml_value(self.default)


@frozen
class Section:
    """The keys of one TOML table, and the tables nested in it."""

    header: str  # "model", "canary.turn"; "" for a file's top level
    help: str
    keys: tuple[Key, ...]
    children: tuple[Section, ...] = ()
    array: bool = False  # written [[header]], one table per item

    @property
    def names(self) -> tuple[str, ...]:
        """Every key allowed in the table: its own keys, then its nested tables."""
        return (*(k.name for k in self.keys), *(c.header.rpartition(".")[2] for c in self.children))

    @property
    def title(self) -> str:
        """``[model]``, ``[[canary]]``; "top level" for a file's top level."""
        if not self.header:
            return "top level"
        return f"[[{self.header}]]" if self.array else f"[{self.header}]"

    def key(self, name: str) -> Key:
        """The key called ``name`` (a KeyError names a key the section does not declare)."""
        for key in self.keys:
            if key.name == name:
                return key
        raise KeyError(f"{self.title} declares no key {name!r}")

    def default(self, name: str) -> Any:
        """The default of ``name`` as the program uses it."""
        return self.key(name).value

    @property
    def defaults(self) -> Any:
        """Every key's default as an attribute (``MODEL.defaults.listen``), for dataclass fields."""
        return SimpleNamespace(**{key.name: key.value for key in self.keys})

    def open(self, sink: Sink, keys: KeyPath, data: Mapping[str, object]) -> Fields:
        """A strict view of ``data`` as this section; its unknown keys are reported now."""
        return Fields(self, sink, keys, dict(data))


class Fields(Table):
    """A :class:`Table` that knows its section: ``read`` takes each key's type and default from it."""

    def __init__(self, section: Section, sink: Sink, keys: KeyPath, data: dict[str, object]) -> None:
        super().__init__(sink, keys, data, section.names)
        self.section = section

    def read(self, name: str, *, default: Any = _UNSET, required: bool | None = None) -> Any:
        """The value of ``name`` read by its type; its default when absent or unusable (reported)."""
        key = self.section.key(name)
        return key.kind.read(self, key, key.value if default is _UNSET else default,
                             key.required if required is None else required)

    def read_all(self, *names: str) -> dict[str, Any]:
        """``{name: value}`` for each name (default: every key, in order), to build a config by keyword."""
        return {name: self.read(name) for name in names or (k.name for k in self.section.keys)}


# -- the kinds -----------------------------------------------------------------------------------


def _string(t: Table, key: Key, default: Any, required: bool) -> Any:
    value = t.string(key.name, required=required, hint=key.hint or "a string")
    return default if value is None else value


def _word(t: Table, key: Key, default: Any, required: bool) -> Any:
    # An empty string reads as the default, as a missing key does.
    return t.string(key.name, required=required, hint=key.hint or "a string") or default


def _boolean(t: Table, key: Key, default: Any, required: bool) -> Any:
    return t.boolean(key.name, default)


def _duration(t: Table, key: Key, default: Any, required: bool) -> Any:
    value = t.duration(key.name, default)
    return default if value is None else value


def _strings(t: Table, key: Key, default: Any, required: bool) -> Any:
    value = t.strings(key.name, required=required, hint=key.hint or "a list of strings")
    return default if value is None else value


def _globs(t: Table, key: Key, default: Any, required: bool) -> Any:
    value = t.strings(key.name, single_ok=True)
    return default if value is None else value


def _listen(t: Table, key: Key, default: Any, required: bool) -> Any:
    return t.listen(key.name, default)


def _http_url(t: Table, key: Key, default: Any, required: bool) -> Any:
    value = t.http_url(key.name)
    return default if value is None else value


def _table(t: Table, key: Key, default: Any, required: bool) -> Any:
    value = t.table(key.name)
    return default if value is None else value


def _raw(t: Table, key: Key, default: Any, required: bool) -> Any:
    value = t.get(key.name)
    return default if value is None else value


def parse_size(value: object) -> int | None:
    """A size in bytes from an integer or a string like ``'64 MiB'``; None when it is neither."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and (found := _SIZE.fullmatch(value.strip())):
        return int(float(found.group("n")) * _SIZE_UNITS[(found.group("unit") or "b").lower()])
    return None


def _size(t: Table, key: Key, default: Any, required: bool) -> Any:
    value = t.get(key.name)
    if value is None:
        return default
    size = parse_size(value)
    if size is None:
        t.sink.error((*t.keys, key.name), f"expected {_SIZE_HINT}, got {value!r}")
        return default
    if size < 1:
        t.sink.error((*t.keys, key.name), f"expected a size of at least one byte, got {value!r}")
        return default
    return size


def _tuple(value: Any) -> Any:
    return tuple(value)


def _dict(value: Any) -> Any:
    return dict(value)


STRING = Kind("string", _string)
WORD = Kind("string", _word)
BOOLEAN = Kind("boolean", _boolean)
DURATION = Kind("duration", _duration, parse_duration)
STRINGS = Kind("list of strings", _strings, _tuple)
GLOBS = Kind("string or list of strings", _globs, _tuple)
LISTEN = Kind("host:port", _listen)
HTTP_URL = Kind("URL", _http_url)
SIZE = Kind("size", _size, parse_size)
TABLE = Kind("table", _table, _dict)


def raw(name: str) -> Kind:
    """A kind read as the TOML value itself, checked by the section's own reader."""
    return Kind(name, _raw)


# -- TOML text -----------------------------------------------------------------------------------


def toml_string(value: str) -> str:
    """``value`` as a TOML string; a literal '...' one when it holds backslashes (a regex) and can.

    Control characters and bidirectional controls are written as escapes: the file is read in
    terminals and diffs, where they would act."""
    if "\\" in value and "'" not in value and plain(value):
        return f"'{value}'"
    return json.dumps(value, ensure_ascii=False).translate(_BIDI_ESCAPES)


def plain(value: str) -> bool:
    """Whether ``value`` holds no control character (C0, DEL) and no bidirectional control."""
    return not any(ord(c) < 32 or c == "\x7f" or ord(c) in _BIDI_ESCAPES for c in value)


_BIDI_ESCAPES = {code: f"\\u{code:04x}" for code in BIDI_CONTROLS}


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def toml_value(value: object) -> str:
    """``value`` as TOML writes it: strings, booleans, durations, arrays and inline tables."""
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        return toml_string(format_duration(value))
    if isinstance(value, dict):
        inner = ", ".join(f"{_toml_key(k)} = {toml_value(v)}" for k, v in value.items())
        return f"{{ {inner} }}" if inner else "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)
