"""From definitions to the collectors' rules: one matcher per configuration."""

from __future__ import annotations

import re
from pathlib import Path

from canary.config.settings import Config
from canary.locations import private_state_dir
from canary.vocabulary import CORRELATE_RULE
from collectors.rules import Rule
from collectors.scan import Matcher
from collectors.timestamps import TimestampParser

ACTIVITY = "activity"


def build_matcher(config: Config, *, correlate: bool = False) -> Matcher:
    """Rules for every guard and the activity pattern, with the configured timestamp parser.

    With ``correlate``, lines that carry a task id (``[logs] correlate``) are hits too, under
    the rule name ``CORRELATE_RULE``, so a run in flight can learn its task id from them.
    """
    rules = [_rule(guard.name, guard.pattern or guard.match) for guard in config.guards
             if guard.match is not None]
    logs = config.logs
    if correlate and logs.correlate is not None:
        if logs.correlate_pattern is not None:
            rules.append(Rule.regex(CORRELATE_RULE, logs.correlate_pattern))
        else:
            field = re.escape(logs.correlate.rsplit(".", 1)[-1])
            rules.append(Rule.regex(CORRELATE_RULE, f'"{field}"\\s*:'))
    activity = config.logs.activity
    activity_rule = None
    if activity is not None:
        activity_rule = _rule(ACTIVITY, config.logs.activity_pattern or activity)
    timestamps = TimestampParser(config.logs.timestamp, config.logs.timestamp_format)
    return Matcher(rules, activity_rule, timestamps=timestamps, cache_dir=_cache_dir())


def _cache_dir() -> Path | None:
    """Where compiled patterns are kept for the next start: in the state folder, made owner-only
    if no daemon made it yet (the compile costs more than the scan of a small log); None where it
    cannot be made, which only costs a compile."""
    try:
        return private_state_dir() / "scan-cache"
    except OSError:
        return None


def _rule(name: str, match: object) -> Rule:
    if isinstance(match, re.Pattern):
        return Rule.regex(name, match)
    if isinstance(match, str):
        return Rule.regex(name, match)
    if isinstance(match, dict):
        return Rule.json_fields(name, match)
    raise TypeError(f"unsupported match for {name}: {match!r}")
