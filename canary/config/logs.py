"""``[logs] correlate``: how a log line names its task, so a run can claim its own lines."""

from __future__ import annotations

import re

from canary.config.tomlcheck import Table, compile_regex


def check_correlate(t: Table, log_format: str) -> tuple[str | None, re.Pattern[str] | None]:
    """``[logs] correlate``: a regex with a group named id (text), or a field name (jsonl)."""
    keys = (*t.keys, "correlate")
    value = t.string("correlate")
    if value is None:
        return None, None
    if not value.strip():
        t.sink.error(keys, "an empty correlate names no task id; remove the key or give "
                     "a regex like 'task=(?P<id>[0-9a-f-]+)'")
        return None, None
    if log_format == "jsonl":
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
            t.sink.error(keys, "[logs] format is 'jsonl', so correlate is the name of the field "
                         f"that holds the task id, like 'task_id'; got {value!r}")
            return None, None
        return value, None
    pattern = compile_regex(t.sink, keys, value)
    if pattern is None:
        return None, None
    if "id" not in pattern.groupindex:
        t.sink.error(keys, "expected a regex with a group named id, like "
                     "'task=(?P<id>[0-9a-f-]+)'; this one has no (?P<id>...) group")
        return None, None
    return value, pattern
