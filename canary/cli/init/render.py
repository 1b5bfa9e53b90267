"""Writing ``canary init``'s files: canary.toml and one definition per guard, as TOML text."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

from canary.cli.init.advice import base_url_advice, upstream_kind
from canary.cli.init.mine import shown
from canary.cli.init.model import (
    FIXTURES_LISTEN,
    PROXY_LISTEN,
    InitSettings,
    LogScan,
    Proposal,
)
from canary.locations import bundled_defs_dir

# -- writing the files ---------------------------------------------------------------------------


def toml_string(value: str) -> str:
    """``value`` as a TOML string; a literal '...' one when it holds backslashes (a regex) and can."""
    if "\\" in value and "'" not in value and not any(ord(c) < 32 or c == "\x7f" for c in value):
        return f"'{value}'"
    return json.dumps(value, ensure_ascii=False)


def _toml_value(value: object) -> str:
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        inner = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return f"{{ {inner} }}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)


def match_value(match: str | dict[str, object]) -> str:
    """A match as the definitions write it: a regex in a literal string when it can be."""
    if isinstance(match, str) and "'" not in match and not any(ord(c) < 32 for c in match):
        return f"'{match}'"
    return _toml_value(match)


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def comment(text: str, width: int = 150) -> str:
    """``text`` on one line, control characters (C0, DEL, C1) blanked, cut to ``width``."""
    flat = re.sub(r"[\x00-\x1f\x7f-\x9f]", " ", text).strip()
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def canary_sections(template: Path) -> str:
    """A template file's ``[[canary]]`` tables, with the comment lines just above the first one."""
    lines = template.read_text(encoding="utf-8").splitlines(keepends=True)
    first = next((i for i, line in enumerate(lines) if line.strip() == "[[canary]]"), len(lines))
    while first > 0 and lines[first - 1].startswith("#"):
        first -= 1
    return "".join(lines[first:])


def render_definition(proposal: Proposal, sources: str) -> str:
    """The definition file of a proposed guard: header, [guard], and canaries for its kind."""
    templates = proposal.template_files
    description = f"Rejections logged like: {comment(shown(proposal.templates[0].text), 100)}"
    for path in templates[:1]:
        with path.open("rb") as handle:
            description = str(tomllib.load(handle).get("guard", {}).get("description", description))
    lines = [
        f"# Proposed by `canary init` from {proposal.count} line{'s' if proposal.count != 1 else ''} "
        f"of {sources}, like:",
        f"#   {comment(proposal.example)}",
        "# `match` finds the stable part of those lines: edit it if your guard's line changes.",
    ]
    if templates:
        names = ", ".join(p.name for p in templates)
        lines += [f"# The canaries come from the bundled {proposal.kind} template ({names}): make each",
                  "# prompt lead your agent to the step this guard checks, then `canary run "
                  f"{proposal.name}`."]
    lines += ["[guard]", f"name = {toml_string(proposal.name)}",
              f"description = {toml_string(description)}",
              f"match = {match_value(proposal.match)}", 'window = "24h"', 'grace = "1h"', ""]
    if templates:
        lines.extend(canary_sections(path).rstrip("\n") + "\n" for path in templates)
    else:
        lines += ["# No canary yet: copy a [[canary]] from one of the templates in",
                  f"# {bundled_defs_dir()} and make its inject a fabrication this guard rejects."]
    return "\n".join(lines).rstrip("\n") + "\n"


def _upstream(url: str | None) -> str | None:
    """The model server's root: the proxy relays paths as they come, /v1 included."""
    if not url:
        return None
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    return re.sub(r"/(?:v1|v1beta|api)$", "", url)


def _proxy_listen(upstream: str | None) -> str:
    port = urlsplit(upstream).port if upstream else None
    return "127.0.0.1:11445" if port == int(PROXY_LISTEN.rpartition(":")[2]) else PROXY_LISTEN


def _config_glob(pattern: str, directory: Path) -> str:
    """A log glob as canary.toml should hold it: relative to the config's directory when inside it."""
    if pattern.startswith("~"):
        return pattern
    path = Path(pattern)
    absolute = path if path.is_absolute() else Path.cwd() / path
    try:
        return absolute.relative_to(directory.absolute()).as_posix()
    except ValueError:
        return absolute.as_posix()


#: What ``canary.toml`` says while ``canaries_defs/`` is empty; ``canary init --template`` replaces it.
NO_DEFS_YET = ("defs = []                                # no definition yet; once canaries_defs/ "
               'holds one:\n# defs = ["canaries_defs/*.toml"]')


def render_config(directory: Path, settings: InitSettings, scan: LogScan, *, activity: bool,
                  has_defs: bool = True) -> str:
    """The ``canary.toml`` text for these settings and this scan."""
    upstream = _upstream(settings.model_upstream)
    lines = ["# Written by `canary init`; `canary check` validates it. Edit freely."]
    if has_defs:
        lines += ['defs = ["canaries_defs/*.toml"]', ""]
    else:
        lines += [*NO_DEFS_YET.split("\n"), ""]
    if settings.agent_url:
        lines += ["[agent]                                  # how canaries reach your agent",
                  f"url = {toml_string(settings.agent_url)}",
                  'body = { prompt = "{prompt}" }           # the JSON your agent takes; {prompt} is the '
                  "canary's question",
                  'answer = "answer"                        # dotted path to the answer in the reply; '
                  '"" = the whole body',
                  'timeout = "180s"', ""]
    elif settings.agent_command:
        lines += ["[agent]                                  # how canaries reach your agent (the answer "
                  "is its stdout)", f"command = {_toml_value(list(settings.agent_command))}",
                  'timeout = "180s"', ""]
    else:
        lines += ["# [agent]                                # how canaries reach your agent: one of",
                  '# url = "http://127.0.0.1:8700/ask"',
                  '# command = ["my-agent", "ask", "{prompt}"]', ""]
    lines += ["[model]                                  # point your agent's model base URL here",
              f'listen = "{_proxy_listen(upstream)}"']
    if upstream:
        lines.append(f"upstream = {toml_string(upstream)}  # your real model server")
        kind = upstream_kind(upstream)
        if kind in ("anthropic", "gemini"):
            lines += [f"# your agent: {line}" for line in base_url_advice(_proxy_listen(upstream), kind)]
    else:
        lines.append("# upstream = \"http://127.0.0.1:11434\"   # your real model server; without one, "
                     "calls after a canary's injection get its `repair` text")
    lines += ["", "[fixtures]", f'listen = "{FIXTURES_LISTEN}"', "", "[logs]",
              f"paths = {_toml_value([_config_glob(p, directory) for p in settings.logs])}",
              f'format = "{scan.log_format}"']
    if scan.activity is not None:
        entry = f"activity = {match_value(scan.activity.match)}"
        note = f"   # one match = one unit of agent work ({scan.activity.count} lines now)"
        lines.append((entry if activity else f"# {entry}") + note)
    return "\n".join(lines) + "\n"


