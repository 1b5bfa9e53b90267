"""Writing ``canary init``'s files: canary.toml and one definition per guard, as TOML text."""

from __future__ import annotations

import re
import textwrap
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

from canary.cli.init.advice import base_url_advice, upstream_kind
from canary.cli.init.mine import shown
from canary.cli.init.model import (
    InitSettings,
    LogScan,
    Proposal,
)
from canary.config.schema import Section, plain, toml_string, toml_value
from canary.config.sections import AGENT, CONFIG, FIXTURES, LOGS, MODEL
from canary.locations import bundled_defs_dir
from canary.terminal import safe
from canary.vocabulary import counted

__all__ = ["NO_DEFS_YET", "WITH_DEFS", "comment", "key_line", "match_value", "render_config",
           "render_definition"]

_DEFAULT: object = object()

# -- writing the files ---------------------------------------------------------------------------


def match_value(match: str | dict[str, object]) -> str:
    """A match as the definitions write it: a regex in a literal string when it can be."""
    if isinstance(match, str) and "'" not in match and plain(match):
        return f"'{match}'"
    return toml_value(match)


def comment(text: str, width: int = 150) -> str:
    """``text`` on one line, control characters (C0, DEL, C1) blanked and bidirectional controls shown
    as ``\\uNNNN``, cut to ``width``."""
    flat = safe(re.sub(r"[\x00-\x1f\x7f-\x9f]", " ", text).strip())
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
    listen: str = MODEL.default("listen")
    port = urlsplit(upstream).port if upstream else None
    return "127.0.0.1:11445" if port == int(listen.rpartition(":")[2]) else listen


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


def key_line(section: Section, name: str, value: object = _DEFAULT, *, note: str = "",
             off: bool = False) -> str:
    """``name = value   # help`` for a key of ``section``; its default when no value is given."""
    key = section.key(name)
    text = f"{'# ' if off else ''}{name} = {toml_value(key.default if value is _DEFAULT else value)}"
    return f"{text:<40} # {note or key.help}"


def _header(section: Section) -> list[str]:
    """A section's help as comment lines, then its ``[header]``."""
    return [*(f"# {line}" for line in textwrap.wrap(section.help, 100)), f"[{section.header}]"]


#: ``defs`` reading the project's definitions folder.
WITH_DEFS = f"defs = {toml_value(CONFIG.key('defs').default)}"
#: What ``canary.toml`` says while ``canaries_defs/`` is empty; ``canary init --template`` replaces it.
NO_DEFS_YET = f"{'defs = []':<40} # no definition yet; once canaries_defs/ holds one:\n# {WITH_DEFS}"


def _agent_lines(settings: InitSettings) -> list[str]:
    if settings.agent_url:
        return [*_header(AGENT), key_line(AGENT, "url", settings.agent_url), key_line(AGENT, "body"),
                key_line(AGENT, "answer"), key_line(AGENT, "timeout")]
    if settings.agent_command:
        return [*_header(AGENT), key_line(AGENT, "command", list(settings.agent_command)),
                key_line(AGENT, "timeout")]
    return [*(f"# {line}" for line in textwrap.wrap(AGENT.help, 100)), "# [agent]",
            key_line(AGENT, "url", "http://127.0.0.1:8700/ask", off=True),
            key_line(AGENT, "command", ["my-agent", "ask", "{prompt}"], off=True)]


def render_config(directory: Path, settings: InitSettings, scan: LogScan, *, activity: bool,
                  has_defs: bool = True) -> str:
    """The ``canary.toml`` text for these settings and this scan, its keys and help from the sections."""
    upstream = _upstream(settings.model_upstream)
    lines = ["# Written by `canary init`; `canary check` validates it. Edit freely.",
             *(WITH_DEFS if has_defs else NO_DEFS_YET).split("\n"), "", *_agent_lines(settings), "",
             *_header(MODEL), key_line(MODEL, "listen", _proxy_listen(upstream))]
    if upstream:
        lines.append(key_line(MODEL, "upstream", upstream))
        kind = upstream_kind(upstream)
        if kind in ("anthropic", "gemini"):
            lines += [f"# your agent: {line}" for line in base_url_advice(_proxy_listen(upstream), kind)]
    else:
        lines.append(key_line(MODEL, "upstream", "http://127.0.0.1:11434", off=True,
                              note="your real model server; without one, calls after a canary's "
                              "injection get its `repair` text"))
    lines += ["", *_header(FIXTURES), key_line(FIXTURES, "listen"), "", *_header(LOGS),
              key_line(LOGS, "paths", [_config_glob(p, directory) for p in settings.logs]),
              key_line(LOGS, "format", scan.log_format)]
    if scan.activity is not None:
        lines.append(key_line(LOGS, "activity", scan.activity.match, off=not activity,
                              note=f"{LOGS.key('activity').help} "
                                   f"({counted(scan.activity.count, 'line')} now)"))
    return "\n".join(lines) + "\n"
