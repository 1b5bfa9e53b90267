"""``canary init``: from an agent's logs to a ``canary.toml`` and one definition per guard found.

Lines that read like a guard's rejection are grouped by message template (timestamps, quoted
strings, URLs, ids and numbers masked). Each group gets a regex for the stable part of its
lines, widened until it matches no line of another group, and is counted the way ``canary
audit`` counts it. A guard of a kind the bundled templates know gets their canaries. No file
is written over unless the user says yes to that file.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

import click

from canary.locations import bundled_defs_dir
from canary.vocabulary import EXIT_OK, EXIT_USAGE
from collectors.files import open_log
from collectors.rules import parse_json_line

if TYPE_CHECKING:
    from canary.config.definitions import GuardDef
    from canary.config.settings import Config

__all__ = [
    "InitResult",
    "InitSettings",
    "LogScan",
    "Proposal",
    "Template",
    "init_command",
    "init_project",
    "mask",
    "run_init",
    "scan_logs",
]

LogFormat = Literal["text", "jsonl"]
Piece = tuple[str | None, str]  # (mask kind or None for literal text, the text)

PROXY_LISTEN = "127.0.0.1:11435"
FIXTURES_LISTEN = "127.0.0.1:11436"
EXAMPLES = 5
MAX_TEMPLATES = 50_000

_MASK = re.compile(
    r"(?P<TS>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\d{1,2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2}(?: [+-]\d{4})?"
    r"|\b[A-Z][a-z]{2} {1,2}\d{1,2} \d{2}:\d{2}:\d{2}\b|\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b)"
    r"|(?P<Q>\"(?:[^\"\\\n]|\\.)*\"|“[^”\n]*”|«[^»\n]*»|(?<![\w'])'[^'\n]*'(?!\w))"
    r"|(?P<URL>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+)"
    r"|(?P<ID>\b[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b"
    r"|\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9_-]{6,}\b)"
    r"|(?P<N>\d+(?:[.,]\d+)*)"
)
#: What a masked piece becomes inside a proposed regex.
_PIECE_RE = {
    "Q": r"(?:\"[^\"]*\"|'[^']*'|“[^”]*”|«[^»]*»)",
    "URL": r"\S+",
    "ID": r"[\w-]+",
    "N": r"\d+(?:[.,]\d+)*",
}
_REJECT = re.compile(
    r"\b(?:reject(?:ed|s|ing|ions?)?|bounc(?:e|ed|es|ing)|ungrounded|hallucinat\w*|fabricat\w*"
    r"|not (?:found )?(?:verbatim )?in (?:the )?(?:observations?|sources?|tool output|fetched \w+))"
    r"\b(?![=\w])"
    r"|\b(?:guard|grounding|citation)\w*\b.*?\b(?:fail(?:ed|s|ure)?|blocked|violations?|denied)\b",
    re.I,
)
_CHECKER = r"(?:Guard|Grounding|Check|Checker|Validator|Denial|Filter|Rail|Policy|Contract)"
_STRONG = re.compile(
    rf"\b(?P<id>[A-Z][A-Za-z0-9]*{_CHECKER}|[A-Za-z][\w.-]*[Gg]uard)\b\s*[:\]]?\s*"
    r"(?:rejected|rejects|rejection|bounced|blocked|failed|fired|violation)\b"
)
_GUARD_FIELD = re.compile(r"\b(?:guard|check|validator|rule)\s*[=:]\s*\"?(?P<id>[A-Za-z][\w.-]*)")
_ACTIVITY = re.compile(
    r"\b(?:task|request|job|run|turn|query|conversation|session)\b[^=\ue000]{0,30}?"
    r"\b(?:finished|completed|complete|done|answered|succeeded|ended)\b",
    re.I,
)
_LEVELS = frozenset({"TRACE", "DEBUG", "INFO", "NOTICE", "WARN", "WARNING", "ERROR", "CRITICAL", "FATAL"})
_TS_KEYS = frozenset({"ts", "time", "timestamp", "@timestamp", "asctime", "date", "created", "datetime"})
_LEVEL_KEYS = frozenset({"level", "levelname", "severity", "lvl", "loglevel"})
_NAME_KEYS = ("guard", "check", "validator", "rule", "name", "event", "msg", "message")
_MARK = "\ue000"  # a masked piece inside a template's text, never in a real log line

#: Guard kinds the bundled templates cover: how a guard's line names it, and its template files.
KINDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("provenance", r"provenance|never opened|not opened|unopened|snippet", ("provenance.toml",)),
    ("citation", r"citation|cite|\burl|\blink", ("citation.toml",)),
    ("quote", r"quote|verbatim", ("quote.toml", "quote_fused.toml")),
    ("version", r"version", ("version.toml", "version_sibling.toml")),
    ("date", r"\bdate", ("date.toml",)),
    ("money", r"money|currenc|amount|price|euro|dollar|lira|€", ("money.toml",)),
    ("arithmetic", r"arithmetic|\bsum\b|total|addition", ("arithmetic.toml",)),
    ("exclusion", r"exclu|skip", ("exclusion.toml",)),
    ("number", r"number|numeric|entit|span|figure", ("number.toml", "number_blindspots.toml")),
    ("denial", r"denial|deny|denies|empty|\b404\b|not found(?! (?:verbatim )?in)|missing", (
        "denial.toml", "denial_phrasings.toml")),
)


def mask(line: str) -> tuple[Piece, ...]:
    """A line split into literal text and masked values (kinds TS, Q, URL, ID, N)."""
    pieces: list[Piece] = []
    at = 0
    for found in _MASK.finditer(line):
        if found.start() > at:
            pieces.append((None, line[at : found.start()]))
        pieces.append((found.lastgroup, found.group(0)))
        at = found.end()
    if at < len(line):
        pieces.append((None, line[at:]))
    return tuple(pieces)


def _marked(pieces: Sequence[Piece]) -> str:
    """The template text: each masked piece as ``\\ue000KIND\\ue000``, literal text as it is."""
    return "".join(f"{_MARK}{kind}{_MARK}" if kind else value for kind, value in pieces).strip()


def shown(template: str) -> str:
    """A template as people read it: ``<N>``, ``<URL>``..."""
    return re.sub(f"{_MARK}(\\w+){_MARK}", r"<\1>", template)


def _to_regex(fragment: str) -> str:
    """A piece of template text as a regex: literal parts escaped, masked parts generalised."""
    parts = fragment.split(_MARK)
    return "".join(_PIECE_RE.get(part, r"\S+") if i % 2 else re.escape(part).replace("\\ ", " ")
                   for i, part in enumerate(parts))


@dataclass
class Template:
    """Lines that differ only in their masked values."""

    text: str
    fields: tuple[tuple[str, str], ...] = ()  # jsonl: the fields whose values never vary
    count: int = 0
    examples: list[str] = field(default_factory=list)
    key: str = ""  # the words that make it a rejection ('CitationGuard: rejected'); "" if it is not one
    ident: str = ""  # the guard the line names ('CitationGuard'), if it names one
    strong: bool = False  # it names its guard

    def add(self, line: str) -> None:
        """Count one more line of this template."""
        self.count += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(line)


@dataclass
class Proposal:
    """One guard found in the logs: its name, match, kind and the lines it matches."""

    name: str
    match: str | dict[str, object]
    count: int
    strong: bool
    kind: str | None
    templates: list[Template]
    covered_by: Path | None = None  # an existing definition already matching these lines

    @property
    def example(self) -> str:
        """One real line of the guard's most frequent template."""
        return max(self.templates, key=lambda t: t.count).examples[0]

    @property
    def template_files(self) -> tuple[Path, ...]:
        """The bundled templates whose canaries this guard gets."""
        files = next((names for kind, _, names in KINDS if kind == self.kind), ())
        return tuple(bundled_defs_dir() / name for name in files)


@dataclass
class LogScan:
    """What ``scan_logs`` found: files, line counts, the proposed guards and agent activity."""

    patterns: tuple[str, ...]
    files: list[Path]
    unreadable: list[tuple[Path, str]]
    lines: int
    log_format: LogFormat
    proposals: list[Proposal]
    activity: Proposal | None


@dataclass(frozen=True)
class InitSettings:
    """What ``canary init`` was told: how to reach the agent, its logs and its model server."""

    agent_url: str | None = None
    agent_command: tuple[str, ...] | None = None
    logs: tuple[str, ...] = ()
    model_upstream: str | None = None


@dataclass
class InitResult:
    """The scan, the guards chosen, and what happened to each file."""

    scan: LogScan
    chosen: list[Proposal]
    config_path: Path
    files: list[tuple[Path, str]]  # (path, "written" | "replaced" | "kept" | "unchanged")


# -- reading the logs ----------------------------------------------------------------------------


def log_files(patterns: Sequence[str], base: Path) -> list[Path]:
    """Every file ``canary audit`` would read for these globs: matches and rotated copies, once each."""
    from canary.logs.audit import audit_files

    return audit_files(_bare_config(patterns, base))


def _bare_config(patterns: Sequence[str], base: Path, guards: Sequence[GuardDef] = (),
                 log_format: LogFormat = "text", activity: str | None = None) -> Config:
    from canary.config.definitions import absolute_glob
    from canary.config.settings import Config, LogsConfig

    logs = LogsConfig(tuple(absolute_glob(p, base) for p in patterns), log_format, activity,
                      re.compile(activity) if activity else None)
    return Config(logs=logs, guards=tuple(guards))


def _lines(path: Path) -> Iterator[str]:
    """The complete lines of a log file, decoded as the collectors decode them."""
    with open_log(path) as stream:
        pending = b""
        first = True
        while chunk := stream.read(1 << 20):
            if first:
                chunk = chunk.removeprefix(b"\xef\xbb\xbf")
                first = False
            parts = (pending + chunk).split(b"\n")
            pending = parts.pop()
            for raw in parts:
                yield raw.removesuffix(b"\r").decode("utf-8", "replace")


def _sniff_format(files: Sequence[Path]) -> LogFormat:
    seen = objects = 0
    for path in files:
        try:
            for i, line in enumerate(_lines(path)):
                if i >= 50:
                    break
                if line.strip():
                    seen += 1
                    objects += parse_json_line(line) is not None
        except (OSError, EOFError, ValueError):
            continue
    return "jsonl" if seen and objects >= 0.8 * seen else "text"


def _flat(obj: dict[str, object], prefix: str = "") -> Iterator[tuple[str, object]]:
    for key, value in obj.items():
        if isinstance(value, dict) and not prefix:
            yield from _flat(value, f"{key}.")
        else:
            yield f"{prefix}{key}", value


def _template_of(line: str, log_format: LogFormat) -> tuple[str, tuple[tuple[str, str], ...]]:
    if log_format == "text":
        return _marked(mask(line)), ()
    obj = parse_json_line(line)
    if obj is None:
        return _marked(mask(line)), ()
    stable: list[tuple[str, str]] = []
    varying: list[str] = []
    for key, value in _flat(obj):
        if key.lower() in _TS_KEYS:
            continue
        if isinstance(value, str) and len(value) <= 80 and all(k is None for k, _ in mask(value)):
            stable.append((key, value))
        else:
            varying.append(key)
    fields = tuple(sorted(stable))
    words = [f"{k}={v}" for k, v in fields] + [f"{k}={_MARK}V{_MARK}" for k in sorted(varying)]
    return " ".join(words), fields


def _classify(template: Template) -> None:
    """Whether the template reads like a rejection, and which guard it names, if any."""
    text = template.text.replace("_", " ") if template.fields else template.text
    strong = _STRONG.search(text)
    reject = _REJECT.search(text)
    named = _GUARD_FIELD.search(text)
    if strong is not None:
        template.key, template.ident = re.sub(r"\s+", " ", strong.group(0)), strong.group("id")
    elif reject is not None:
        template.key = named.group(0) if named is not None else reject.group(0).lower()
        template.ident = named.group("id") if named is not None else ""
    template.strong = bool(template.ident)


def scan_logs(patterns: Sequence[str], base: Path, *, log_format: LogFormat | None = None) -> LogScan:
    """Read every file the globs match (rotated copies too) and propose a guard per rejection."""
    files = log_files(patterns, base)
    fmt = log_format or _sniff_format(files)
    templates: dict[str, Template] = {}
    unreadable: list[tuple[Path, str]] = []
    total = 0
    for path in files:
        try:
            for line in _lines(path):
                total += 1
                text, fields = _template_of(line, fmt)
                entry = templates.get(text)
                if entry is None:
                    if len(templates) >= MAX_TEMPLATES:
                        continue
                    entry = templates[text] = Template(text, fields)
                    _classify(entry)
                entry.add(line)
        except (OSError, EOFError, ValueError) as exc:
            unreadable.append((path, f"{type(exc).__name__}: {exc}"))
    readable = [p for p in files if p not in {u for u, _ in unreadable}]
    all_templates = list(templates.values())
    proposals = (_propose_text(all_templates) if fmt == "text" else _propose_jsonl(all_templates))
    activity = _activity(all_templates) if fmt == "text" else None
    _name(proposals)
    scan = LogScan(tuple(patterns), readable, unreadable, total, fmt, proposals, activity)
    _recount(scan, base)
    return scan


# -- proposing a match per guard -------------------------------------------------------------


def _words(text: str) -> list[tuple[int, int]]:
    """The spans of space-separated words in a template's text (a masked piece is part of its word)."""
    return [m.span() for m in re.finditer(r"\S+", text)]


def _grow(template: Template, start: int, end: int, fits: Callable[[str], bool]) -> str:
    """The regex of the fewest whole words around ``text[start:end]`` that ``fits``.

    Words are added on the left and the right in turn, never reaching back into a leading
    timestamp or level; when nothing fits, the widest window is returned.
    """
    text = template.text
    words = _words(text)
    skip = 0
    for a, b in words:
        word = text[a:b]
        if f"{_MARK}TS{_MARK}" not in word and word.strip("[]:") not in _LEVELS:
            break
        skip += 1
    first = next((i for i, (_, b) in enumerate(words) if b > start), 0)
    last = max((i for i, (a, _) in enumerate(words) if a < end), default=first)
    first = max(first, min(skip, last))
    left = True
    while True:
        regex = _to_regex(text[words[first][0] : words[last][1]].rstrip(",;."))
        can_left, can_right = first > skip, last < len(words) - 1
        if fits(regex) or not (can_left or can_right):
            return regex
        if (left and can_left) or not can_right:
            first -= 1
        else:
            last += 1
        left = not left


def _matches(regex: str, template: Template) -> bool:
    compiled = re.compile(regex)
    return all(compiled.search(line) for line in template.examples)


def _propose_text(templates: list[Template]) -> list[Proposal]:
    rejecting = sorted((t for t in templates if t.key), key=lambda t: -t.count)
    groups: dict[str, list[Template]] = {}
    for template in rejecting:
        groups.setdefault(template.key, []).append(template)
    proposals: list[Proposal] = []
    queue = list(groups.values())
    while queue:
        group = queue.pop(0)
        lead = group[0]
        inside = {id(t) for t in group}
        others = [line for t in templates if id(t) not in inside for line in t.examples]

        def fits(regex: str, lead: Template = lead, others: list[str] = others) -> bool:
            compiled = re.compile(regex)
            return all(compiled.search(line) for line in lead.examples) and not any(
                compiled.search(line) for line in others)

        anchor = (_STRONG.search(lead.text) or _GUARD_FIELD.search(lead.text)
                  or _REJECT.search(lead.text))
        start, end = anchor.span() if anchor else (0, len(lead.text))
        regex = _grow(lead, start, end, fits)
        if not _matches(regex, lead):  # a value the masks generalise badly: match the line itself
            regex = re.escape(lead.examples[0])
        covered = [t for t in group if _matches(regex, t)]
        rest = [t for t in group if not _matches(regex, t)]
        if rest:
            queue.append(rest)
        proposals.append(Proposal("", regex, sum(t.count for t in covered), lead.strong, None, covered))
    return proposals


def _propose_jsonl(templates: list[Template]) -> list[Proposal]:
    merged: dict[str, Proposal] = {}
    for template in sorted((t for t in templates if t.key), key=lambda t: -t.count):
        fields = {k: v for k, v in template.fields if k.lower() not in _LEVEL_KEYS}
        if not fields:
            continue
        key = json.dumps(fields, sort_keys=True)
        if key in merged:
            merged[key].templates.append(template)
            merged[key].count += template.count
        else:
            merged[key] = Proposal("", dict(fields), template.count, template.strong, None, [template])
    return list(merged.values())


def _activity(templates: list[Template]) -> Proposal | None:
    found = [(t, m) for t in templates if not t.key and (m := _ACTIVITY.search(t.text))]
    if not found:
        return None
    lead, hit = max(found, key=lambda pair: pair[0].count)
    others = [line for t in templates if not _ACTIVITY.search(t.text) for line in t.examples]

    def fits(regex: str) -> bool:
        compiled = re.compile(regex)
        return not any(compiled.search(line) for line in others)

    regex = _grow(lead, *hit.span(), fits)
    return Proposal("activity", regex, lead.count, True, None, [lead])


def _kind(proposal: Proposal) -> str | None:
    """The guard kind a bundled template covers: from the guard's name first, else its line."""
    lead = proposal.templates[0]
    for text in (lead.ident, shown(lead.text)):
        for kind, pattern, _ in KINDS:
            if re.search(pattern, text, re.I):
                return kind
    return None


def _slug(text: str) -> str:
    text = re.sub(rf"(?<=[a-z0-9])(?:{_CHECKER[3:-1]})$", "", text) or text
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", text).lower()
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:40] or "guard"


def _name(proposals: list[Proposal]) -> None:
    """Each proposal's kind, and a unique name: the kind where one guard has it, else its own."""
    for proposal in proposals:
        proposal.kind = _kind(proposal)
    by_kind: dict[str, list[Proposal]] = {}
    for proposal in proposals:
        if proposal.kind is not None and proposal.strong:
            by_kind.setdefault(proposal.kind, []).append(proposal)
    taken: set[str] = set()
    for proposal in sorted(proposals, key=lambda p: (not p.strong, -p.count)):
        ident = proposal.templates[0].ident
        if proposal.kind and proposal.strong and by_kind[proposal.kind][0] is proposal:
            name = proposal.kind
        elif ident:
            name = _slug(ident)
        else:
            words = re.findall(r"[A-Za-z]+", re.sub(r"\\.", "", str(proposal.match)))
            name = _slug("-".join(words[:3]))
        base, n = name, 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        taken.add(name)
        proposal.name = name


def _recount(scan: LogScan, base: Path) -> None:
    """Count each proposal exactly as ``canary audit`` will, over every line of every file."""
    from canary.logs.audit import audit

    guards = [_guard_def(p, i) for i, p in enumerate(scan.proposals)]
    activity = str(scan.activity.match) if scan.activity else None
    config = _bare_config(scan.patterns, base, guards, scan.log_format, activity)
    report = audit(config, now=datetime.now(UTC) + timedelta(days=1))
    counts = {g.guard: g.firings + g.untimed for g in report.guards}
    for i, proposal in enumerate(scan.proposals):
        proposal.count = counts[f"p{i}"]
    if scan.activity is not None:
        scan.activity.count = report.activity


def _guard_def(proposal: Proposal, index: int) -> GuardDef:
    from canary.config.definitions import GuardDef

    pattern = re.compile(proposal.match) if isinstance(proposal.match, str) else None
    day, hour = timedelta(days=1), timedelta(hours=1)
    return GuardDef(f"p{index}", "", Path(), proposal.match, pattern, day, hour, ())


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


def _match_value(match: str | dict[str, object]) -> str:
    """A match as the definitions write it: a regex in a literal string when it can be."""
    if isinstance(match, str) and "'" not in match and not any(ord(c) < 32 for c in match):
        return f"'{match}'"
    return _toml_value(match)


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _comment(text: str, width: int = 150) -> str:
    flat = re.sub(r"[\x00-\x1f\x7f]", " ", text).strip()
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
    description = f"Rejections logged like: {_comment(shown(proposal.templates[0].text), 100)}"
    for path in templates[:1]:
        with path.open("rb") as handle:
            description = str(tomllib.load(handle).get("guard", {}).get("description", description))
    lines = [
        f"# Proposed by `canary init` from {proposal.count} line{'s' if proposal.count != 1 else ''} "
        f"of {sources}, like:",
        f"#   {_comment(proposal.example)}",
        "# `match` finds the stable part of those lines: edit it if your guard's line changes.",
    ]
    if templates:
        names = ", ".join(p.name for p in templates)
        lines += [f"# The canaries come from the bundled {proposal.kind} template ({names}): make each",
                  "# prompt lead your agent to the step this guard checks, then `canary run "
                  f"{proposal.name}`."]
    lines += ["[guard]", f"name = {toml_string(proposal.name)}",
              f"description = {toml_string(description)}",
              f"match = {_match_value(proposal.match)}", 'window = "24h"', 'grace = "1h"', ""]
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
    return re.sub(r"/(?:v1|api)$", "", url)


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


def render_config(directory: Path, settings: InitSettings, scan: LogScan, *, activity: bool,
                  has_defs: bool = True) -> str:
    """The ``canary.toml`` text for these settings and this scan."""
    upstream = _upstream(settings.model_upstream)
    lines = ["# Written by `canary init`; `canary check` validates it. Edit freely."]
    if has_defs:
        lines += ['defs = ["canaries_defs/*.toml"]', ""]
    else:
        lines += ['defs = []                                # no definition yet; once canaries_defs/ '
                  "holds one:", '# defs = ["canaries_defs/*.toml"]', ""]
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
    else:
        lines.append("# upstream = \"http://127.0.0.1:11434\"   # your real model server; without one, "
                     "calls after a canary's injection get its `repair` text")
    lines += ["", "[fixtures]", f'listen = "{FIXTURES_LISTEN}"', "", "[logs]",
              f"paths = {_toml_value([_config_glob(p, directory) for p in settings.logs])}",
              f'format = "{scan.log_format}"']
    if scan.activity is not None:
        entry = f"activity = {_match_value(scan.activity.match)}"
        note = f"   # one match = one unit of agent work ({scan.activity.count} lines now)"
        lines.append((entry if activity else f"# {entry}") + note)
    return "\n".join(lines) + "\n"


def _existing(defs_dir: Path) -> list[tuple[Path, str, object]]:
    """(file, guard name, match) of every definition already in the folder."""
    out: list[tuple[Path, str, object]] = []
    for path in sorted(defs_dir.glob("*.toml")):
        try:
            with path.open("rb") as handle:
                guard = tomllib.load(handle).get("guard", {})
        except (OSError, tomllib.TOMLDecodeError):
            continue
        if isinstance(guard, dict) and isinstance(guard.get("name"), str):
            out.append((path, guard["name"], guard.get("match")))
    return out


def _covers(match: object, proposal: Proposal) -> bool:
    examples = [line for t in proposal.templates for line in t.examples]
    if isinstance(match, str):
        try:
            compiled = re.compile(match)
        except re.error:
            return False
        return all(compiled.search(line) for line in examples)
    if isinstance(match, dict):
        objs = [parse_json_line(line) or {} for line in examples]
        return all(all(obj.get(k) == v for k, v in match.items()) for obj in objs)
    return False


def mark_covered(scan: LogScan, directory: Path) -> None:
    """Note the proposals an existing definition already matches; rename those whose name is taken."""
    existing = _existing(directory / "canaries_defs")
    owners = {name: path for path, name, _ in existing}
    taken = {p.name for p in scan.proposals}
    for proposal in scan.proposals:
        owner = next((path for path, _, match in existing if _covers(match, proposal)), None)
        if owner is not None:
            proposal.covered_by = owner
            continue
        base, n = proposal.name, 2
        while owners.get(proposal.name, directory / "canaries_defs" / f"{proposal.name}.toml") != (
                directory / "canaries_defs" / f"{proposal.name}.toml") or (
                proposal.name != base and proposal.name in taken):
            proposal.name, n = f"{base}-{n}", n + 1
        taken.add(proposal.name)


def plan_files(directory: Path, settings: InitSettings, scan: LogScan, chosen: Sequence[Proposal],
               *, activity: bool = True) -> list[tuple[Path, str]]:
    """Every file init would write, with its text."""
    sources = ", ".join(settings.logs) or "the logs"
    has_defs = bool(chosen) or any((directory / "canaries_defs").glob("*.toml"))
    planned = [(directory / "canary.toml",
                render_config(directory, settings, scan, activity=activity, has_defs=has_defs))]
    planned += [(directory / "canaries_defs" / f"{p.name}.toml", render_definition(p, sources))
                for p in chosen]
    return planned


def write_files(
    planned: Sequence[tuple[Path, str]], overwrite: Callable[[Path], bool]
) -> list[tuple[Path, str]]:
    """Write each file; an existing one is replaced only when ``overwrite(path)`` says yes."""
    done: list[tuple[Path, str]] = []
    for path, text in planned:
        if path.exists():
            if path.read_text(encoding="utf-8", errors="replace") == text:
                done.append((path, "unchanged"))
                continue
            if not overwrite(path):
                done.append((path, "kept"))
                continue
            action = "replaced"
        else:
            action = "written"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        done.append((path, action))
    return done


def init_project(
    directory: Path,
    settings: InitSettings,
    *,
    accept: Callable[[Proposal], bool] | None = None,
    overwrite: Callable[[Path], bool] | None = None,
    activity: bool = True,
    scan: LogScan | None = None,
) -> InitResult:
    """Scan the logs, keep the proposals ``accept`` takes (default: the strong ones), write the files.

    ``overwrite`` decides for each existing file whose text would change; by default nothing
    existing is replaced. Proposals an existing definition already covers are never written.
    """
    directory = directory.absolute()
    if scan is None:
        scan = scan_logs(settings.logs, Path.cwd())
        mark_covered(scan, directory)
    take = accept or (lambda p: p.strong)
    chosen = [p for p in scan.proposals if p.covered_by is None and take(p)]
    planned = plan_files(directory, settings, scan, chosen, activity=activity)
    files = write_files(planned, overwrite or (lambda path: False))
    return InitResult(scan, chosen, directory / "canary.toml", files)


# -- the command -------------------------------------------------------------------------------


def _proposal_lines(scan: LogScan) -> list[str]:
    lines = []
    for proposal in scan.proposals:
        kind = f"   {proposal.kind} template" if proposal.template_files else ""
        covered = f"   (already in {proposal.covered_by.name})" if proposal.covered_by else ""
        flag = "" if proposal.strong else "   (weak: no guard named in the line)"
        lines.append(f"  {proposal.name:<12} {proposal.count:>6} lines   match "
                     f"{_match_value(proposal.match)}{kind}{covered}{flag}")
        for template in proposal.templates[:3]:
            lines.append(f"      {template.count:>6}  {_comment(shown(template.text), 110)}")
    return lines


def _split_list(answer: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in re.split(r"[,\n]", answer) if part.strip())


def _agent_target(answer: str) -> tuple[str | None, tuple[str, ...] | None]:
    answer = answer.strip()
    if not answer:
        return None, None
    if re.match(r"https?://", answer):
        return answer, None
    return None, _with_prompt(tuple(shlex.split(answer)))


def _with_prompt(command: tuple[str, ...]) -> tuple[str, ...]:
    return command if any("{prompt}" in arg for arg in command) else (*command, "{prompt}")


def run_init(
    directory: str = ".",
    *,
    agent_url: str | None = None,
    agent_command: str | None = None,
    logs: Sequence[str] = (),
    model_upstream: str | None = None,
    yes: bool = False,
) -> int:
    """``canary init``: ask for what is missing, scan, propose, write, check, audit; the exit code."""
    from canary.cli.printers import audit_table
    from canary.config.settings import load_config, summarize
    from canary.errors import ConfigError
    from canary.logs.audit import audit

    ask = not yes
    root = Path(directory).absolute()
    url, command = agent_url, _with_prompt(tuple(shlex.split(agent_command))) if agent_command else None
    if url is None and command is None and ask:
        url, command = _agent_target(click.prompt(
            "How do canaries reach your agent? Its HTTP endpoint (http://127.0.0.1:8700/ask) or the "
            "command that asks it (my-agent ask); empty to decide later", default="", show_default=False))
    found = tuple(logs)
    if not found and ask:
        found = _split_list(click.prompt("Your agent's log files (globs, comma-separated)", default="",
                                         show_default=False))
    upstream = model_upstream
    if upstream is None and ask:
        upstream = click.prompt(
            "Your real model server (Ollama http://127.0.0.1:11434, llama.cpp or mlx_lm "
            "http://127.0.0.1:8080, LM Studio http://127.0.0.1:1234, vLLM http://127.0.0.1:8000); "
            "empty if none",
            default="", show_default=False) or None
    settings = InitSettings(url, command, found, upstream)

    scan = scan_logs(found, Path.cwd())
    mark_covered(scan, root)
    click.echo(f"\nRead {scan.lines} lines in {len(scan.files)} file(s) ({scan.log_format}).")
    for path, error in scan.unreadable:
        click.echo(f"warning: could not read {path}: {error}", err=True)
    if not found or not scan.files:
        click.echo("No log file to read: no guard can be proposed from logs.")
    if scan.proposals:
        click.echo("Lines that read like a guard's rejection, by the guard each names:")
        click.echo("\n".join(_proposal_lines(scan)))
    elif scan.files:
        click.echo("No line reads like a guard's rejection (reject, guard, grounding, bounce, citation...).")
    if scan.activity is not None:
        click.echo(f"Agent activity: {_match_value(scan.activity.match)} ({scan.activity.count} lines).")

    chosen = [p for p in scan.proposals if p.covered_by is None and (
        click.confirm(f"Add guard {p.name!r} ({p.count} lines)?", default=p.strong) if ask else p.strong)]
    use_activity = scan.activity is not None and (not ask or click.confirm(
        f"Count {_match_value(scan.activity.match)} as one unit of agent work?", default=True))

    def overwrite(path: Path) -> bool:
        return ask and click.confirm(f"{path} exists and would change. Replace it?", default=False)

    result = init_project(root, settings, accept=lambda p: p in chosen, overwrite=overwrite,
                          activity=use_activity, scan=scan)
    click.echo("")
    for path, action in result.files:
        note = "  (exists; left as it was)" if action == "kept" else ""
        click.echo(f"{action:<9} {path}{note}")
    guards_dir = root / "canaries_defs"
    if not any(guards_dir.glob("*.toml")):
        click.echo(f"No definition in {guards_dir} yet: copy a template from {bundled_defs_dir()} "
                   "and set its match to your guard's line.")

    click.echo("\n$ canary check")
    try:
        config = load_config(path=result.config_path)
    except ConfigError as exc:
        for problem in exc.problems:
            click.echo(problem.render(), err=True)
        click.echo(f"{len(exc.problems)} problem(s) in the files above; fix them and run `canary check`.")
        return EXIT_USAGE
    click.echo(summarize(config))
    click.echo("\n$ canary audit")
    click.echo(audit_table(audit(config, now=datetime.now(UTC))))
    click.echo("\n" + _next_steps(config, settings))
    return EXIT_OK


def _next_steps(config: Config, settings: InitSettings) -> str:
    listen = config.model.listen
    relay = (f"it relays every call to {config.model.upstream}, except a canary's"
             if config.model.upstream else
             "with no [model] upstream it answers only canary calls: set upstream to your model server")
    steps = [
        "Next:",
        f"  1. Point your agent's model base URL at the proxy on {listen}",
        f"     ({relay}):",
        f'       openai SDK, LangChain, pydantic-ai:  base_url="http://{listen}/v1"  (or OPENAI_BASE_URL)',
        f'       ollama:                              Client(host="http://{listen}")  (or OLLAMA_HOST)',
        "  2. Read each canaries_defs/*.toml: make each prompt lead your agent to the step its guard",
        "     checks, and make sure the guard's log line carries the offending value.",
        "  3. canary run          # every canary once, a verdict per guard",
    ]
    if not (settings.agent_url or settings.agent_command):
        steps.insert(1, "  0. Tell canary.toml how to reach your agent: [agent] url or command.")
    return "\n".join(steps)


@click.command(name="init")
@click.option("--agent-url", default=None, help="The agent's HTTP endpoint canaries send a prompt to.")
@click.option("--agent-command", default=None,
              help="Or: the command that asks the agent (its answer is stdout).")
@click.option("--logs", multiple=True, help="A glob of the agent's log files (repeat for more).")
@click.option("--model-upstream", default=None, help="The real model server the proxy relays to.")
@click.option("--dir", "directory", default=".", type=click.Path(file_okay=False),
              help="Where to write canary.toml and canaries_defs/ (default: here).")
@click.option("--yes", is_flag=True, help="Ask nothing: take the proposed guards; never replace a file.")
def init_command(*, agent_url: str | None, agent_command: str | None, logs: tuple[str, ...],
                 model_upstream: str | None, directory: str, yes: bool) -> None:
    """Propose a guard per rejection line in your agent's logs, write canary.toml and canaries_defs/,
    then check and audit them."""
    if agent_url and agent_command:
        click.echo("error: give --agent-url or --agent-command, not both", err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(run_init(directory, agent_url=agent_url, agent_command=agent_command, logs=logs,
                      model_upstream=model_upstream, yes=yes))
