"""Every table of the store, in one module.

Times are aware UTC datetimes: every time column is a ``UTCDateTime``.
The schema's versions are listed in
``canary.store.migrations.MIGRATIONS``; a table added here must be added there too.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Index, LargeBinary
from sqlmodel import Field, SQLModel

from canary.store.types import UTCDateTime


class Meta(SQLModel, table=True):
    """Key-value facts about the store itself (its schema version among them)."""

    __tablename__ = "meta"
    key: str = Field(primary_key=True)
    value: str


class Firing(SQLModel, table=True):
    """One log line (or span) that says a guard rejected something."""

    __tablename__ = "firings"
    __table_args__ = (Index("ix_firings_guard_ts", "guard", "ts"), Index("ix_firings_file_key", "file_key"))
    id: int | None = Field(default=None, primary_key=True)
    guard: str
    ts: datetime = Field(index=True, sa_type=UTCDateTime)  # the line's own time, else the time it was read
    ts_from_line: bool = True
    read_at: datetime = Field(sa_type=UTCDateTime)
    path: str
    file_key: str
    offset: int
    line: str
    run_id: int | None = Field(default=None, index=True)


class HourlyCount(SQLModel, table=True):
    """Firings per guard per hour of the lines' own time, organic and canary apart."""

    __tablename__ = "hourly_counts"
    guard: str = Field(primary_key=True)
    hour: datetime = Field(primary_key=True, sa_type=UTCDateTime)
    source: str = Field(primary_key=True)  # "organic" | "canary"
    count: int = 0


class HourlyActivity(SQLModel, table=True):
    """Per hour: activity lines (by their own time), and lines and bytes scanned (by read time)."""

    __tablename__ = "hourly_activity"
    hour: datetime = Field(primary_key=True, sa_type=UTCDateTime)
    activity: int = 0
    lines: int = 0
    bytes: int = 0


class MinuteActivity(SQLModel, table=True):
    """Per minute, as far back as the longest window begins: activity lines (by their own time)
    and lines scanned (by read time), so a window's first, partial hour is counted to the minute."""

    __tablename__ = "minute_activity"
    minute: datetime = Field(primary_key=True, sa_type=UTCDateTime)
    activity: int = 0
    lines: int = 0


class FilePosition(SQLModel, table=True):
    """How far each followed file has been read, and how to know it again."""

    __tablename__ = "file_positions"
    key: str = Field(primary_key=True)  # "dev:ino"
    dev: int
    ino: int
    path: str
    offset: int
    head_len: int
    head_hash: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    size: int
    lines: int = 0
    updated_at: datetime = Field(sa_type=UTCDateTime)
    # Since schema 4: the head's bytes, the tail before the offset, and what the file held
    # before its last truncation (a copytruncate copy continues from there).
    head: bytes = Field(default=b"", sa_column=Column(LargeBinary, nullable=False, server_default=""))
    tail_len: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    tail_hash: bytes = Field(default=b"", sa_column=Column(LargeBinary, nullable=False, server_default=""))
    prior: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))


class Run(SQLModel, table=True):
    """One execution of a canary; ``verdict`` is null while it is in flight."""

    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_guard_started", "guard", "started"),
        Index("ix_runs_pair_started", "guard", "canary", "variant", "started"),  # the status's reads
    )
    id: int | None = Field(default=None, primary_key=True)
    guard: str
    canary: str
    variant: int = 0
    expect: str = "reject"
    nonce: str = Field(unique=True)
    started: datetime = Field(sa_type=UTCDateTime)
    finished: datetime | None = Field(default=None, sa_type=UTCDateTime)
    duration_s: float | None = None
    verdict: str | None = None
    trace: str = "{}"  # JSON: stage -> seconds after sent, or null
    leaked: bool | None = None
    firings: int = 0
    attribution: str | None = None  # "trace" | "nonce" | "task" | "value" | "time": the rule that tied it
    foreign_calls: int = 0  # model calls without the run's nonce while it was in flight
    evidence: str | None = None
    injected_text: str = ""
    leak_text: str | None = None
    answer: str | None = None
    error: str | None = None
    leaked_turn: int | None = None  # multi-turn canaries: the first turn (from 1) whose answer held the leak
    # The fingerprint of the definition it ran under (canary.config.fingerprints); None: made before
    # runs were stamped.
    definition: str | None = None


class RunTrace(SQLModel, table=True):
    """A W3C trace id of one of a run's model calls (and of no call of no run's): a span in that
    trace is the run's, also after its verdict."""

    __tablename__ = "run_traces"
    trace_id: str = Field(primary_key=True)
    run_id: int = Field(primary_key=True)


class Transition(SQLModel, table=True):
    """A change of a guard's status, with the reason a person can act on."""

    __tablename__ = "transitions"
    __table_args__ = (Index("ix_transitions_guard_at", "guard", "at"),)
    id: int | None = Field(default=None, primary_key=True)
    guard: str
    at: datetime = Field(sa_type=UTCDateTime)
    status: str
    previous: str | None = None
    reason: str
    evidence: str | None = None


class Mute(SQLModel, table=True):
    """Alerts for a guard paused until a time; a mute always expires."""

    __tablename__ = "mutes"
    guard: str = Field(primary_key=True)
    until: datetime = Field(sa_type=UTCDateTime)
    reason: str | None = None
    created: datetime = Field(sa_type=UTCDateTime)


class Delivery(SQLModel, table=True):
    """One alert for one channel: pending, sent, or failed after its retries."""

    __tablename__ = "deliveries"
    __table_args__ = (Index("ix_deliveries_state_next", "state", "next_try"),)
    id: int | None = Field(default=None, primary_key=True)
    transition_id: int = Field(index=True)
    guard: str
    kind: str  # "change" | "reminder" | "recovery"
    channel: str  # "desktop" | "webhook" | "command"
    state: str = "pending"  # "pending" | "sent" | "failed" | "skipped" | "muted"
    attempts: int = 0
    next_try: datetime = Field(sa_type=UTCDateTime)
    last_error: str | None = None
    created: datetime = Field(sa_type=UTCDateTime)
    sent_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class Schedule(SQLModel, table=True):
    """When each canary last ran and is next due, so a restart neither stampedes nor forgets."""

    __tablename__ = "schedules"
    key: str = Field(primary_key=True)  # "guard/canary"
    last_run: datetime | None = Field(default=None, sa_type=UTCDateTime)
    next_due: datetime | None = Field(default=None, sa_type=UTCDateTime)


class Heartbeat(SQLModel, table=True):
    """The daemon's own liveness, one row per store."""

    __tablename__ = "heartbeat"
    id: int = Field(default=1, primary_key=True)
    pid: int
    started: datetime = Field(sa_type=UTCDateTime)
    beat: datetime = Field(sa_type=UTCDateTime)
    files: int = 0
    proxy: str | None = None
    fixtures: str | None = None
    control: str | None = None
    stopped: datetime | None = Field(default=None, sa_type=UTCDateTime)
