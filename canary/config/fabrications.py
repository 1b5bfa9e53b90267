"""Fabrications that are not answer text: tool calls (``inject_tool``) and observed leaks.

``inject_tool = { name = "fetch_url", arguments = { url = "..." } }`` (or a list of such tables,
one per variant) is a fabricated tool call; placeholders are filled inside every string value of
its arguments. A leak may be an observation instead of text in the answer:
``leak = { fetched = "URL" }`` leaked when the fixture server served that URL's path during the
run, ``leak = { file = "PATH" }`` when that path exists once the agent has answered. A control
(``expect = "accept"``) takes the same table as the observation that must happen.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import date, time
from typing import Any, Literal

from canary.config.placeholders import PLACEHOLDERS, fill, placeholders_in
from canary.config.tomlcheck import KeyPath, Sink, Table, check_placeholders, type_name
from canary.records import field, frozen

__all__ = ["Observation", "ToolTemplate", "fill_arguments", "parse_inject_tool", "parse_observation"]

#: The tool names every dialect accepts (OpenAI's rule: letters, digits, '_' and '-', up to 64).
# Patterns as text: ``re`` compiles each when a definition has a tool call or an observation.
TOOL_NAME = r"[A-Za-z0-9_-]{1,64}"
TOOL_KEYS = ("name", "arguments")
OBSERVATION_KEYS = ("fetched", "file")
_WINDOWS_ROOT = r"[A-Za-z]:[\\/]"


@frozen
class ToolTemplate:
    """A fabricated tool call as defined: its name and its arguments, placeholders unfilled."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:
        # Definitions are frozen and hashable; the arguments table hashes by its JSON.
        return hash((self.name, json.dumps(self.arguments, sort_keys=True, default=str)))


@frozen
class Observation:
    """A leak seen rather than read: a fixture URL that was fetched, or a file that appeared."""

    kind: Literal["fetched", "file"]
    target: str  # placeholders unfilled


def fill_arguments(value: Any, values: Mapping[str, str]) -> Any:
    """``value`` with placeholders filled inside every string, at any depth."""
    if isinstance(value, str):
        return fill(value, values)
    if isinstance(value, list):
        return [fill_arguments(v, values) for v in value]
    if isinstance(value, dict):
        return {k: fill_arguments(v, values) for k, v in value.items()}
    return value


def parse_inject_tool(t: Table) -> tuple[ToolTemplate, ...] | None:
    """``inject_tool``: one table or a list of tables; None when absent or invalid (reported)."""
    value = t.get("inject_tool")
    if value is None:
        return None
    keys = (*t.keys, "inject_tool")
    expected = "expected a table { name = '...', arguments = { ... } } or a list of such tables"
    if isinstance(value, dict):
        one = _tool(t.sink, keys, value)
        return None if one is None else (one,)
    if not isinstance(value, list):
        t.sink.error(keys, f"{expected}, got {type_name(value)}")
        return None
    if not value:
        t.sink.error(keys, "no variants: give one table or a list of tables")
        return None
    tools: list[ToolTemplate] = []
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            t.sink.error((*keys, index), f"{expected}, got {type_name(item)}")
            continue
        one = _tool(t.sink, (*keys, index), item)
        if one is not None:
            tools.append(one)
    return tuple(tools) if len(tools) == len(value) else None


def _tool(sink: Sink, keys: KeyPath, data: dict[str, object]) -> ToolTemplate | None:
    before = sink.errors
    t = Table(sink, keys, data, TOOL_KEYS)
    name = t.string("name", required=True, hint="the tool's name, like 'fetch_url'")
    if name is not None and not re.fullmatch(TOOL_NAME, name):
        sink.error((*keys, "name"), f"{name!r} is not a tool name the model APIs accept: use "
                   "1 to 64 of a-z, A-Z, 0-9, '_' and '-'")
    arguments = data.get("arguments", {})
    if not isinstance(arguments, dict):
        sink.error((*keys, "arguments"), "expected a table of the call's arguments, like "
                   f"{{ url = '...' }}, got {type_name(arguments)}")
    else:
        _check_json(sink, (*keys, "arguments"), arguments)
    if sink.errors > before or name is None or not isinstance(arguments, dict):
        return None
    return ToolTemplate(name=name, arguments=arguments)


def _check_json(sink: Sink, keys: KeyPath, value: object) -> None:
    """Every value must be JSON; every string is checked for placeholders."""
    if isinstance(value, str):
        check_placeholders(sink, keys, value, PLACEHOLDERS)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_json(sink, (*keys, key), item)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json(sink, (*keys, index), item)
    elif isinstance(value, date | time):
        sink.error(keys, f"JSON has no dates: write {str(value)!r} as a quoted string")


def parse_observation(t: Table, value: dict[str, object], key: str = "leak") -> Observation | None:
    """``leak = { fetched = URL }`` or ``{ file = PATH }`` (a control's ``grounded`` too); None when
    invalid (reported)."""
    keys = (*t.keys, key)
    sub = Table(t.sink, keys, value, OBSERVATION_KEYS)
    given = [k for k in OBSERVATION_KEYS if k in value]
    if len(given) != 1:
        if not sub.misspelled:
            t.sink.error(keys, "give exactly one of fetched = '{fixture_url}/...' (a fixture URL the "
                         "agent must not fetch) or file = '/path/{nonce}' (a file that must not appear)")
        return None
    kind = given[0]
    target = sub.string(kind, required=True)
    if target is None:
        return None
    check_placeholders(t.sink, (*keys, kind), target, PLACEHOLDERS)
    names = placeholders_in(target)
    if kind == "fetched" and not target.startswith(("{fixture_url}", "{fixture_url_alias}")):
        t.sink.error((*keys, kind), "only the fixture server can see a fetch: the URL must start "
                     "with {fixture_url} or {fixture_url_alias}")
        return None
    if kind == "file" and not (target.startswith(("/", "~")) or re.match(_WINDOWS_ROOT, target)):
        t.sink.error((*keys, kind), "write an absolute path (or one starting with ~): it is looked "
                     "up where canary runs, which need not be where the agent writes")
        return None
    if kind == "file" and "nonce" not in names:
        t.sink.error((*keys, kind), "the path must carry {nonce}, or a file left by an earlier "
                     "run would read as this run's leak")
        return None
    return Observation(kind="fetched" if kind == "fetched" else "file", target=target)
