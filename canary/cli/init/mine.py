"""Mining the agent's logs: lines masked into templates, a guard proposed per rejection template.

Lines that read like a guard's rejection are grouped by message template (timestamps, quoted
strings, URLs, ids and numbers masked). Each group gets a regex for the stable part of its
lines, widened until it matches no line of another group, and is counted the way ``canary
audit`` counts it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from canary.cli.init.model import (
    KINDS,
    MAX_TEMPLATES,
    LogFormat,
    LogScan,
    Piece,
    Proposal,
    Template,
)
from collectors.files import open_log, read_errors
from collectors.rules import parse_json_line
from collectors.scan import MAX_LINE

if TYPE_CHECKING:
    from canary.config.definitions import GuardDef
    from canary.config.settings import Config

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
_CHECKER = r"(?:Guard|Grounding|Check|Checker|Validator|Denial|Filter|Rail|Policy|Contract|Allowlist)"
_STRONG = re.compile(
    rf"\b(?P<id>[A-Z][A-Za-z0-9]*{_CHECKER}|[A-Za-z][\w.-]*[Gg]uard|Sandbox)\b\s*[:\]]?\s*"
    r"(?:rejected|rejects|rejection|bounced|blocked|failed|fired|violation|refused)\b"
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
#: Characters of a text line its template is made of: a rejection says what it is near its start,
#: and masking a whole long line (a tool's output) costs seconds a megabyte.
TEMPLATE_CHARS = 4096




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

# -- reading the logs ----------------------------------------------------------------------------


def log_files(patterns: Sequence[str], base: Path) -> list[Path]:
    """Every file ``canary audit`` would read for these globs: matches and rotated copies, once each."""
    from canary.logs.audit import audit_files

    return audit_files(_bare_config(patterns, base))


def _bare_config(patterns: Sequence[str], base: Path, guards: Sequence[GuardDef] = (),
                 log_format: LogFormat = "text", activity: str | None = None) -> Config:
    from canary.config.definitions import absolute_glob
    from canary.config.settings import Config, LogsConfig

    logs = LogsConfig(paths=tuple(absolute_glob(p, base) for p in patterns), format=log_format,
                      activity=activity, activity_pattern=re.compile(activity) if activity else None)
    return Config(logs=logs, guards=tuple(guards))


def _capped(pending: bytes, part: bytes) -> tuple[bytes, bool]:
    """``pending`` and ``part`` joined, kept to ``MAX_LINE`` bytes; and whether bytes were dropped."""
    room = MAX_LINE - len(pending)
    return (pending + part[: max(room, 0)], len(part) > room) if part else (pending, False)


def _lines(path: Path, cut: list[int] | None = None) -> Iterator[str]:
    """The complete lines of a log file, decoded as the collectors decode them, and like theirs
    cut to their first ``MAX_LINE`` bytes (each line cut adds one to ``cut[0]``), without the run of
    NULs a line may start with, and with each NUL inside a line as U+FFFD."""
    with open_log(path) as stream:
        pending, over = b"", False
        first = True
        while chunk := stream.read(1 << 20):
            if first:
                chunk = chunk.removeprefix(b"\xef\xbb\xbf")
                first = False
            *complete, rest = chunk.split(b"\n")
            for part in complete:
                raw, dropped = _capped(pending, part)
                if (over or dropped) and cut is not None:
                    cut[0] += 1
                pending, over = b"", False
                # as the collectors read it: a hole of NULs at a line's start is no part of it (a writer
                # without O_APPEND, truncated); a NUL inside a line is kept, as U+FFFD
                text = raw.lstrip(b"\0").removesuffix(b"\r").decode("utf-8", "replace")
                yield text.replace("\0", "\ufffd")
            pending, dropped = _capped(pending, rest)
            over = over or dropped


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
        except read_errors():
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
    cut = [0]
    for path in files:
        try:
            for line in _lines(path, cut):
                total += 1
                text, fields = _template_of(line if fmt == "jsonl" else line[:TEMPLATE_CHARS], fmt)
                entry = templates.get(text)
                if entry is None:
                    if len(templates) >= MAX_TEMPLATES:
                        continue
                    entry = templates[text] = Template(text, fields)
                    _classify(entry)
                entry.add(line)
        except read_errors() as exc:
            unreadable.append((path, f"{type(exc).__name__}: {exc}"))
    readable = [p for p in files if p not in {u for u, _ in unreadable}]
    all_templates = list(templates.values())
    proposals = (_propose_text(all_templates) if fmt == "text" else _propose_jsonl(all_templates))
    activity = _activity(all_templates) if fmt == "text" else None
    _name(proposals)
    scan = LogScan(tuple(patterns), readable, unreadable, total, fmt, proposals, activity, cut[0])
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
    from canary.config.sections import GUARD

    pattern = re.compile(proposal.match) if isinstance(proposal.match, str) else None
    return GuardDef(name=f"p{index}", description="", path=Path(), match=proposal.match, pattern=pattern,
                    window=GUARD.default("window"), grace=GUARD.default("grace"), canaries=())

