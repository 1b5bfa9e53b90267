"""What the dashboard shows, read from the store in one call per screen.

Statuses come from ``canary.status.overview.evaluate_all`` (and so from
``canary.status.evaluate.evaluate``); this module only adds the window the user chose:
firing counts and sparkline buckets, from the hourly counts for windows of a
day or more, and from the firing rows (an indexed range on their time, grouped
by sparkline cell) for the last hour.

When the daemon is not running, statuses are evaluated as of its last
heartbeat: that is what the daemon last knew, and nothing has been checked
since. The widgets mark every healthy status of that kind as stale.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from canary.config.fingerprints import fingerprint
from canary.config.settings import Config
from canary.status.evaluate import GuardStatus
from canary.status.facts import variant_counts
from canary.status.families import Family, families
from canary.status.mutes import is_muted
from canary.status.overview import DaemonInfo, daemon_info, evaluate_all
from canary.store.engine import Store
from canary.store.sites import Site
from canary.terminal import safe
from canary.vocabulary import Status, as_utc, hour_floor
from dashboard.queries import (
    AlertRow,
    FiringRow,
    RunRow,
    TransitionRow,
    alert_history,
    block_cells,
    firing_cells,
    guard_transitions,
    hourly_cells,
    latest_runs,
    recent_firings,
    recent_runs,
    run_firings,
)

__all__ = [
    "WINDOWS",
    "AlertHistory",
    "Detail",
    "GuardRow",
    "Overview",
    "WindowSpec",
    "load_alerts",
    "load_detail",
    "load_overview",
    "window_named",
]


@dataclass(frozen=True)
class WindowSpec:
    """A window the dashboard can show, and the span of one sparkline cell in it."""

    label: str
    span: timedelta
    cell: timedelta

    @property
    def cells(self) -> int:
        """How many sparkline cells cover the window."""
        return int(self.span / self.cell)

    @property
    def per_minute(self) -> bool:
        """Whether counts come from the firing rows (minutes) rather than the hourly counts."""
        return self.span < timedelta(hours=24)

    @property
    def per_block(self) -> bool:
        """Whether a cell is a UTC block of a rollup (the windows of two days or more: 7d, 30d)."""
        return self.span >= timedelta(days=2)


WINDOWS: tuple[WindowSpec, ...] = (
    WindowSpec("1h", timedelta(hours=1), timedelta(minutes=2)),
    WindowSpec("24h", timedelta(hours=24), timedelta(hours=1)),
    WindowSpec("7d", timedelta(days=7), timedelta(hours=6)),
    WindowSpec("30d", timedelta(days=30), timedelta(days=1)),
)

#: Display order, the unhealthy first. Only the order of rows: statuses come from canary.status.evaluate.
ORDER: tuple[Status, ...] = (
    Status.ASLEEP, Status.DEGRADED, Status.INCONCLUSIVE, Status.NEW, Status.PAUSED,
    Status.QUIET, Status.ALIVE,
)


def window_named(label: str) -> WindowSpec:
    """The window with this label (``1h``, ``24h``, ``7d``, ``30d``)."""
    for spec in WINDOWS:
        if spec.label == label:
            return spec
    raise ValueError(f"no window {label!r}; choose one of {', '.join(w.label for w in WINDOWS)}")


@dataclass(frozen=True)
class GuardRow:
    """One guard on the overview: its status and what happened in the chosen window."""

    guard: str
    description: str
    status: GuardStatus
    organic: int
    canary: int
    buckets: tuple[int, ...]
    last_firing: datetime | None
    muted_until: datetime | None
    canaries: int
    #: Kill rate per variant family (one per canary), over the guard's own window.
    families: tuple[Family, ...] = ()

    @property
    def holes(self) -> tuple[Family, ...]:
        """The families whose kill rate is below 1: known holes, whatever the status says."""
        return tuple(f for f in self.families if f.hole)


@dataclass(frozen=True)
class Overview:
    """Everything the overview screen shows, read at ``now``."""

    now: datetime
    window: WindowSpec
    daemon: DaemonInfo
    as_of: datetime  # the instant the statuses were evaluated at
    rows: tuple[GuardRow, ...]
    runs: tuple[RunRow, ...] = ()  # the latest canary runs of every guard, newest first
    model: str | None = None  # "model server unreachable since 10:02: 37 agent requests failed", while so
    warning: str | None = None  # the running daemon's latest collector warning, and how many more
    #: The project and machine whose rows the shared store does not hold yet (no daemon of theirs wrote).
    missing_site: Site | None = None

    @property
    def read_only(self) -> bool:
        """True when no daemon is running: nothing is checked and nothing can be run."""
        return not self.daemon.running

    def row(self, guard: str) -> GuardRow | None:
        """The row of one guard."""
        return next((r for r in self.rows if r.guard == guard), None)


def window_series(
    store: Store, guards: list[str], *, now: datetime, spec: WindowSpec, retention: timedelta | None = None
) -> dict[str, tuple[int, int, list[int]]]:
    """Per guard: organic firings, canary firings and sparkline cells over the window ending at ``now``.

    The hour-based windows count from the window's start to the instant, as ``canary status``
    and ``canary audit --window`` do: the first, partial hour from the firing rows, the whole
    hours after it from the hourly counts. A window as long as the firing rows' ``retention``
    counts its first hour whole instead (its rows may be pruned), drawn in the first cell. The
    windows of two days or more draw UTC blocks (days for 30d, six hours from midnight for 7d),
    the current one last, from the rollups where the store keeps them; the first block's
    partial hours go in the first cell.
    """
    start = now - spec.span
    first = hour_floor(start)
    partial = first < start and (retention is None or spec.span < retention)
    after = first + timedelta(hours=1) if partial else start
    blocks = block_cells(store.engine, after, now, spec.cells, spec.cell) if spec.per_block else None
    if blocks is not None:
        rows = [*firing_cells(store.engine, start, after, spec.cell), *blocks] if partial else blocks
    elif spec.per_minute:
        rows = firing_cells(store.engine, start, now, spec.cell)
    elif partial:
        # cells are whole hours, so an hour's cell counted from ``after`` is its cell from ``start``
        rows = [*firing_cells(store.engine, start, after, spec.cell),
                *hourly_cells(store.engine, after, spec.cell)]
    else:
        rows = hourly_cells(store.engine, start, spec.cell)
    series = {g: (0, 0, [0] * spec.cells) for g in guards}
    for guard, index, source, n in rows:
        if guard not in series:
            continue
        organic, canary, cells = series[guard]
        cells[min(max(index, 0), spec.cells - 1)] += n
        series[guard] = (organic + n, canary, cells) if source == "organic" else (organic, canary + n, cells)
    return series


def load_overview(
    store: Store, config: Config, *, now: datetime, window: WindowSpec, readable: bool | None = None
) -> Overview:
    """Every guard's status and window figures, the unhealthy first."""
    now = as_utc(now)
    info = daemon_info(store, now=now)
    as_of = now if info.running or info.beat is None else min(now, info.beat)
    evaluated = evaluate_all(store, config, now=as_of, readable=readable)
    broken = _broken_rows(store, config, now=as_of)
    series = window_series(store, [*(g.name for g in config.guards), *(r.guard for r in broken)], now=now,
                           spec=window, retention=config.store.retention)
    defs = {g.name: g for g in config.guards}
    rows = []
    for facts, status in evaluated:
        organic, canary, cells = series[facts.guard]
        muted = facts.muted_until if is_muted(facts.muted_until, now) else None
        rows.append(
            GuardRow(
                guard=facts.guard, description=defs[facts.guard].description, status=status,
                organic=organic, canary=canary, buckets=tuple(cells),
                last_firing=facts.last_firing, muted_until=muted, canaries=len(defs[facts.guard].canaries),
                families=tuple(families(facts, variant_counts(defs[facts.guard]), now=as_of)),
            )
        )
    for row in broken:
        organic, canary, cells = series[row.guard]
        rows.append(replace(row, organic=organic, canary=canary, buckets=tuple(cells)))
    order = {s: i for i, s in enumerate(ORDER)}
    rows.sort(key=lambda r: order.get(r.status.status, len(order)))
    runs = marked_history(latest_runs(store.engine), config)
    from canary.status import upstream

    health = upstream.load(store) if info.running and config.model.upstream else None
    model = upstream.summary(health) if health is not None else None
    return Overview(
        now=now, window=window, daemon=info, as_of=as_of, rows=tuple(rows), runs=runs, model=model,
        warning=latest_warning(store, info),
    )


def _broken_rows(store: Store, config: Config, *, now: datetime) -> list[GuardRow]:
    """A row per guard of a broken definition file, by the status the store last recorded of it, its reason
    saying so; the window's figures are the caller's to fill."""
    if not config.broken:
        return []
    from canary.status.problems import BROKEN, broken_guards, last_recorded
    from canary.store.reads import Reader, last_firing

    rows = []
    with store.engine.connect() as conn:
        reader = Reader.over(conn)
        for name in broken_guards(config):
            recorded, _at, said = last_recorded(reader, name, now=now)
            status = Status(recorded) if recorded in {s.value for s in Status} else Status.NEW
            reason = f"{BROKEN}; last recorded: {said}"
            rows.append(GuardRow(
                guard=name, description="", status=GuardStatus(name, status, reason),
                organic=0, canary=0, buckets=(), last_firing=last_firing(reader, name), muted_until=None,
                canaries=0))
    return rows


def marked_history(runs: Iterable[RunRow], config: Config) -> tuple[RunRow, ...]:
    """The runs, each stamped with a definition other than its canary's current one marked history."""
    current = {(g.name, c.name): fingerprint(g, c) for g in config.guards for c in g.canaries}
    return tuple(
        replace(r, history=True)
        if r.definition is not None and current.get((r.guard, r.canary)) not in (None, r.definition)
        else r
        for r in runs
    )


def latest_warning(store: Store, info: DaemonInfo) -> str | None:
    """The running daemon's latest collector warning (its text made inert), and how many more."""
    from canary.status import warnings
    from canary.store.reads import Reader

    if not info.running or info.since is None:
        return None
    with store.engine.connect() as conn:
        noted = [w for w in warnings.load(Reader.over(conn)) if w.last >= info.since]
    if not noted:
        return None
    more = f" (+{len(noted) - 1} more: canary status)" if len(noted) > 1 else ""
    return safe(noted[0].message) + more


@dataclass(frozen=True)
class Detail:
    """Everything the detail screen shows about one guard."""

    guard: str
    description: str
    now: datetime
    firings: tuple[FiringRow, ...] = ()
    runs: tuple[RunRow, ...] = ()
    transitions: tuple[TransitionRow, ...] = ()
    #: Per run id, the agent's log lines stored as that run's firings.
    run_lines: Mapping[int, tuple[FiringRow, ...]] = field(default_factory=dict)


def load_detail(store: Store, config: Config, guard: str, *, now: datetime) -> Detail:
    """A guard's recent firings, canary runs and status transitions."""
    definition = next((g for g in config.guards if g.name == guard), None)
    runs = marked_history(recent_runs(store.engine, guard), config)
    return Detail(
        guard=guard,
        description=definition.description if definition else "",
        now=as_utc(now),
        firings=tuple(recent_firings(store.engine, guard)),
        runs=runs,
        transitions=tuple(guard_transitions(store.engine, guard)),
        run_lines=run_firings(store.engine, [r.id for r in runs]),
    )


@dataclass(frozen=True)
class AlertHistory:
    """Every guard's latest status changes and the alerts planned from them, read at ``now``."""

    now: datetime
    rows: tuple[AlertRow, ...]


def load_alerts(store: Store, *, now: datetime) -> AlertHistory:
    """Every guard's latest status changes and the alerts sent for them."""
    return AlertHistory(as_utc(now), tuple(alert_history(store.engine)))
