"""``canary audit``: count every guard's firings in the logs as they are now.

Reads every matched file from its start, rotated copies (``.1``, ``.gz``, dated
names) included, and never touches the read positions the daemon keeps. Lines
are placed in the window by their own timestamps; a firing whose line carries
no timestamp cannot be placed, so with a window it is reported apart as
``untimed`` rather than guessed in or out.

OTLP JSON export files (``--otlp``, the Collector's file exporter) are read the same way: each
span, span event or log record a guard's ``span`` or ``event`` matches is one firing, placed
by its own time (``canary.traces.files``).

A firing whose line carries the nonce of a run the store holds, or whose line the store keeps
with a run (read read-only, ``canary.store.nonces``: a line tied to a run by any rule is the
run's for every guard it matches), is a canary firing, counted apart from the organic ones, as
the collectors store it; with no store, every firing is organic.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from canary.config.definitions import GuardDef
from canary.config.settings import Config
from canary.config.urls import redact_url
from canary.logs.matching import build_matcher
from canary.logs.parts import read_file
from canary.store.nonces import RUN_LINES_SQL, RUN_TRACES_SQL, SIGNAL_PATH, RunMarks, read_only_marks
from canary.store.reads import sqlite_path
from canary.vocabulary import iso
from collectors.files import expand, rotated_siblings
from collectors.scan import Hit


@dataclass
class GuardAudit:
    """One guard's firings in the audited window."""

    guard: str
    firings: int = 0
    first: datetime | None = None
    last: datetime | None = None
    untimed: int = 0
    canary: int = 0  # of ``firings``: lines of a stored run (its nonce, or a line stored with it)
    #: When something it fires through was not read (no log line for a ``match``, no span for a
    #: ``span``, no span or no log record for an ``event``): what was not, and what would read it. Its
    #: zero then proves nothing.
    unread: str | None = None
    #: No line of agent activity was read in the window ([logs] activity configured, none matched): its
    #: zero then proves nothing either.
    idle: bool = False

    def merge(self, other: GuardAudit) -> None:
        """Add the firings ``other`` counted (in another part of the logs) to these."""
        self.firings += other.firings
        self.untimed += other.untimed
        self.canary += other.canary
        if other.first is not None and (self.first is None or other.first < self.first):
            self.first = other.first
        if other.last is not None and (self.last is None or other.last > self.last):
            self.last = other.last

    @property
    def organic(self) -> int:
        """Firings from real use: those that carry no stored run's nonce."""
        return self.firings - self.canary

    @property
    def flag(self) -> str | None:
        """``asleep`` when the guard never fired in the window, everything it fires through was read
        and the agent was active in it; ``unread`` when it never fired and something it fires through
        was not read (a guard of log lines and spans with no ``--otlp`` file, an ``event`` guard with
        spans but no log record); ``idle`` when it never fired and no line of agent activity was read:
        either way its zero proves nothing. None when it fired, in any of them."""
        if self.firings or self.untimed:
            return None
        return "unread" if self.unread else "idle" if self.idle else "asleep"


@dataclass
class FileAudit:
    """What was read from one file."""

    path: str
    lines: int = 0
    bytes: int = 0
    error: str | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass
class AuditReport:
    """Everything ``canary audit`` prints."""

    since: datetime | None
    until: datetime
    guards: list[GuardAudit]
    files: list[FileAudit] = field(default_factory=list)
    activity: int = 0
    activity_configured: bool = False
    store_problem: str | None = None  # the store's runs could not be read: every firing counted organic

    @property
    def lines(self) -> int:
        """Lines read across every file."""
        return sum(f.lines for f in self.files)

    @property
    def asleep(self) -> list[str]:
        """Guards flagged asleep."""
        return [g.guard for g in self.guards if g.flag == "asleep"]

    @property
    def unread(self) -> list[str]:
        """Guards flagged unread: inconclusive."""
        return [g.guard for g in self.guards if g.flag == "unread"]

    @property
    def idle(self) -> list[str]:
        """Guards flagged idle: inconclusive."""
        return [g.guard for g in self.guards if g.flag == "idle"]

    def to_json(self) -> dict[str, Any]:
        """The contract's ``canary audit --json`` document."""
        return {
            "since": iso(self.since),
            "until": iso(self.until),
            "lines": self.lines,
            "activity": self.activity if self.activity_configured else None,
            "guards": [
                {
                    "guard": g.guard,
                    "firings": g.firings,
                    "organic": g.organic,
                    "canary": g.canary,
                    "first": iso(g.first),
                    "last": iso(g.last),
                    "flag": g.flag,
                    "untimed": g.untimed,
                    "unread": g.unread if g.flag == "unread" else None,
                }
                for g in self.guards
            ],
            "files": [
                {"path": f.path, "lines": f.lines, "bytes": f.bytes, "error": f.error,
                 "warnings": f.warnings}
                for f in self.files
            ],
        }


def audit_files(config: Config) -> list[Path]:
    """Every file the audit reads: the globs' matches and their rotated copies, each once."""
    seen_ids: set[tuple[int, int]] = set()
    out: list[Path] = []
    candidates: list[Path] = []
    for path in expand(config.logs.paths):
        candidates.extend(rotated_siblings(path))
        candidates.append(path)
    for path in candidates:
        try:
            st = os.stat(path)
        except OSError:
            out.append(path)  # reported as unreadable when read
            continue
        ident = (st.st_dev, st.st_ino)
        if ident in seen_ids:
            continue
        seen_ids.add(ident)
        out.append(path)
    return out


def audit(
    config: Config,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    now: datetime | None = None,
    otlp: Sequence[Path] = (),
) -> AuditReport:
    """Read every log file (and each ``otlp`` export file) from its start and count firings per
    guard between since and until."""
    moment = now or datetime.now(UTC)
    end = until or moment
    matcher = build_matcher(config)
    skew = config.logs.clock_skew
    report = AuditReport(
        since=since,
        until=end,
        guards=[GuardAudit(g.name) for g in config.guards],
        activity_configured=config.logs.activity is not None,
    )
    marks, report.store_problem = _stored_marks(config)
    window = Window(since, end, moment, skew, marks)
    names = [g.guard for g in report.guards]
    for path in audit_files(config):
        read, tallies = read_file(path, matcher, lambda: Tally(window, names), count_activity=since is None)
        report.activity += read.activity
        for tally in tallies:
            tally.into(report)
        ahead = next((told for tally in tallies if (told := tally.told(path, skew))), [])
        warnings = read.warnings + ([f"{path}: {read.dropped} more warnings"] if read.dropped else []) + ahead
        report.files.append(FileAudit(str(path), lines=read.lines, bytes=read.bytes, error=read.error,
                                      warnings=warnings))
    log_lines = report.lines  # the export files are not yet among the files
    logs = {f.path for f in report.files}
    spans, records = _audit_exports(config, report, otlp, Tally(window, names))
    exported = {f.path for f in report.files} - logs
    for guard, entry in zip(config.guards, report.guards, strict=True):
        entry.unread = unread(guard, logs=log_lines > 0, spans=spans > 0, records=records > 0,
                              found=any(f.error is None for f in report.files if f.path not in exported))
        entry.idle = report.activity_configured and report.activity == 0
    return report


#: What a part's tally sends back from its child: the guards' counts, the activity, the first line ahead.
_TallyState = tuple[dict[str, GuardAudit], int, tuple[int, datetime | None] | None]


@dataclass(frozen=True)
class Window:
    """What a hit is counted against: the window, the moment of the audit and the clock skew it
    allows, and what marks a canary firing."""

    since: datetime | None
    until: datetime
    moment: datetime
    skew: timedelta
    marks: RunMarks


class Tally:
    """Firings per guard and activity lines, counted from the hits of one part of the logs; a
    part read in another process sends back only its counts."""

    def __init__(self, window: Window, names: Sequence[str]) -> None:
        self.window = window
        self.guards = {name: GuardAudit(name) for name in names}
        self.activity = 0
        self.ahead: Hit | None = None  # the first line stamped too far ahead of the clock

    def __getstate__(self) -> _TallyState:
        ahead = (self.ahead.offset, self.ahead.ts) if self.ahead is not None else None
        return self.guards, self.activity, ahead

    def __setstate__(self, state: _TallyState) -> None:
        self.guards, self.activity, ahead = state
        self.ahead = Hit(ahead[0], "", (), False, ahead[1]) if ahead is not None else None

    def told(self, path: Path, skew: timedelta) -> list[str]:
        """The warning of a line stamped too far ahead, as the daemon tells it; none without one."""
        hit = self.ahead
        if hit is None or hit.ts is None:
            return []
        return [f"{path}: a line at offset {hit.offset} is stamped {hit.ts.isoformat()}, more than "
                f"{skew.total_seconds():g} s ahead of this clock (clock skew?); such lines count at the "
                "time they are read"]

    def into(self, report: AuditReport) -> None:
        """Add these counts to the report's."""
        report.activity += self.activity
        for entry in report.guards:
            entry.merge(self.guards[entry.guard])

    def add(self, hits: list[Hit], *, canary: bool = False) -> None:
        """Count the hits of a read of a log; a stamp too far ahead counts when read (now), as the
        collectors count it. ``canary``: they are a run's, whatever they carry (a span in its trace)."""
        moment, ahead = self.window.moment, self.window.moment + self.window.skew
        for hit in hits:
            placed = hit
            if hit.ts is not None and hit.ts > ahead:
                placed = Hit(hit.offset, hit.text, hit.guards, hit.activity, moment)
                if self.ahead is None and hit.offset >= 0:  # a span has no offset: its file tells
                    self.ahead = hit
            self.count(placed, canary=canary)

    def count(self, hit: Hit, *, canary: bool = False) -> None:
        """Count one hit at its own time."""
        since, until = self.window.since, self.window.until
        windowed = since is not None
        if not windowed and not hit.guards:
            self.activity += hit.activity  # no window and no guard: the line's time is not needed
            return
        ts = hit.ts
        in_window = since is None or (ts is not None and since <= ts <= until)
        if hit.activity and in_window:
            self.activity += 1
        for name in hit.guards:
            entry = self.guards[name]
            if ts is None and windowed:
                # Without its own time a line cannot be placed in the window.
                entry.untimed += 1
                continue
            if not in_window:
                continue
            entry.firings += 1
            if canary or self.window.marks.canary(hit.offset, hit.text):
                entry.canary += 1
            if ts is not None:
                if entry.first is None or ts < entry.first:
                    entry.first = ts
                if entry.last is None or ts > entry.last:
                    entry.last = ts


def _audit_exports(config: Config, report: AuditReport, paths: Sequence[Path],
                   tally: Tally) -> tuple[int, int]:
    """Count the firings in OTLP JSON export files; a span in two files is counted once. The spans and
    the log records read."""
    if not paths:
        return 0, 0
    from canary.traces.files import OtlpFile, read_export_file
    from canary.traces.matching import SignalRules

    rules = SignalRules(config.guards)
    seen: set[tuple[str, str]] = set()
    spans = records = 0
    for path in paths:
        read = OtlpFile(str(path))
        file_audit = FileAudit(str(path))
        report.files.append(file_audit)
        firings = rules.firings(read_export_file(path, read))  # what came before a cut counts
        file_audit.lines, file_audit.bytes, file_audit.warnings = read.lines, read.bytes, read.warnings
        file_audit.error = read.error
        spans, records = spans + read.spans, records + read.log_records
        for firing in firings:
            if (firing.guard, firing.key) in seen:
                continue
            seen.add((firing.guard, firing.key))
            ts = datetime.fromtimestamp(firing.ts, UTC) if firing.ts is not None else None
            text = f"{firing.evidence}\n{firing.context}"
            traced = firing.trace_id is not None and firing.trace_id in tally.window.marks.traces
            # a span in a trace of a run's model calls is the run's; ahead past the skew: counted now
            tally.add([Hit(-1, text, (firing.guard,), False, ts)], canary=traced)
    tally.into(report)
    return spans, records


def unread(guard: GuardDef, *, logs: bool, spans: bool, records: bool, found: bool = False) -> str | None:
    """What would make a zero of ``guard`` conclusive when a way it fires was not read (``logs``: a
    log line was read; ``spans``, ``records``: a span, a log record of an export file); None when
    every one was. A span read is read with its events; an ``event`` fires on span events and on log
    records, so it needs both. ``found``: log files were read, and held no line."""
    missing: list[str] = []
    otlp: list[str] = []
    if guard.match is not None and not logs:
        missing.append("log line")
    if (guard.span is not None or guard.event is not None) and not spans:
        missing.append("span" if guard.span is not None else "span event")
        otlp.append("traces")
    if guard.event is not None and not records:
        missing.append("log record")
        otlp.append("logs")
    if not missing:
        return None
    if missing == ["log line"] and found:
        return "no log line was read: the files [logs] paths matches hold none yet"
    hows = (["[logs] paths that match the agent's logs"] if "log line" in missing else []) + (
        [f"--otlp FILE with the agent's {' and '.join(otlp)}"] if otlp else [])
    return f"no {' or '.join(missing)} was read: give {', and '.join(hows)}"


def _stored_marks(config: Config) -> tuple[RunMarks, str | None]:
    """What ties a line to the store's runs, read without writing, and what went wrong if it could
    not be read."""
    url = config.store.url
    path = sqlite_path(url)
    try:
        if path is not None:
            return read_only_marks(path), None
        return _marks_over(config), None
    except Exception as exc:  # any driver's error: the audit goes on, all organic
        said = getattr(exc, "orig", None) or exc  # the driver's own sentence, not SQLAlchemy's wrapping
        first = (str(said).strip().splitlines() or [type(said).__name__])[0]
        return RunMarks(), redact_url(first)


def _marks_over(config: Config) -> RunMarks:
    """The runs' marks in a store at any other SQLAlchemy URL, in the project's own rows (a
    PostgreSQL store's site schema); none when it has no runs table."""
    from sqlalchemy import create_engine, inspect, text

    from canary.store.sites import Site, search_site

    engine = create_engine(config.store.url)
    if engine.dialect.name == "postgresql":
        search_site(engine, Site(config.project, config.store.machine or ""))
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("runs"):
                return RunMarks()
            nonces = frozenset(str(n) for (n,) in conn.execute(text("SELECT nonce FROM runs")))
            rows = conn.execute(text(RUN_LINES_SQL), {"signal": SIGNAL_PATH}).all()
            traced = inspect(conn).has_table("run_traces")
            traces = conn.execute(text(RUN_TRACES_SQL)).all() if traced else []
            return RunMarks(nonces, frozenset((int(o), str(t)) for o, t in rows),
                            frozenset(str(t) for (t,) in traces))
    finally:
        engine.dispose()
