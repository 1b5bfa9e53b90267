"""From definitions to the collectors' rules: one matcher per configuration."""

from __future__ import annotations

import re

from canary.config.settings import Config
from canary.locations import state_dir
from collectors.rules import Rule
from collectors.scan import Matcher
from collectors.timestamps import TimestampParser

ACTIVITY = "activity"


def build_matcher(config: Config) -> Matcher:
    """Rules for every guard and the activity pattern, with the configured timestamp parser."""
    rules = [_rule(guard.name, guard.pattern or guard.match) for guard in config.guards]
    activity = config.logs.activity
    activity_rule = None
    if activity is not None:
        activity_rule = _rule(ACTIVITY, config.logs.activity_pattern or activity)
    timestamps = TimestampParser(config.logs.timestamp, config.logs.timestamp_format)
    return Matcher(rules, activity_rule, timestamps=timestamps, cache_dir=state_dir() / "scan-cache")


def _rule(name: str, match: object) -> Rule:
    if isinstance(match, re.Pattern):
        return Rule.regex(name, match)
    if isinstance(match, str):
        return Rule.regex(name, match)
    if isinstance(match, dict):
        return Rule.json_fields(name, match)
    raise TypeError(f"unsupported match for {name}: {match!r}")
