"""The daemon's Prometheus metrics: a snapshot of the store rendered in the text format.

Each render builds a fresh ``CollectorRegistry`` (never the process-wide one) whose collector
yields metric families set from the snapshot, so a value is always what the store says, never a
count kept in memory that a restart would reset (``test_collector_lines_survive_a_daemon_restart``
scrapes a real daemon before and after a restart).

Series:

Every series carries ``project`` (``canary.toml``'s ``project``) as its first label.

- ``canary_guard_firings_total{guard,source}``: firings since the store began; ``organic`` and
  ``canary`` are both present, from zero, for every declared guard.
- ``canary_guard_status{guard,status}``: one-hot over every status of ``canary.status.evaluate.Status``.
- ``canary_runs_total{guard,canary,verdict}``: finished runs; every verdict a declared canary can
  end in is present, from zero.
- ``canary_last_caught_timestamp_seconds{guard}``: when the latest caught run started; only for
  guards with a caught run (a 0 would read as "caught in 1970" and fire age alerts for guards
  that have no canaries at all).
- ``canary_collector_lines_total{path}`` and ``canary_collector_lag_bytes{path}``: lines read from
  each followed path (as committed with the read positions, so a restart keeps the count) and
  bytes not read yet; rotated files under one path are summed.
- ``canary_daemon_heartbeat_timestamp_seconds``: the daemon's last heartbeat; absent until the
  first one.
- ``canary_store_up``: 1 while the daemon can write its store, 0 while it cannot (a database
  server down). The scrape then shows the last values read, with the daemon's own time as its
  heartbeat: the daemon runs, and says its store is what failed. With none read yet (the store
  down since the daemon started), the guard, run and line series are absent, never zeros.
- ``canary_proxy_requests_total{outcome}``: the agent's requests through the proxy by outcome
  (every one of ``canary.proxy.health.OUTCOMES``, from zero), and ``canary_proxy_upstream_seconds``,
  a histogram of the model server's time to its response headers. These two are the exception
  to the rule above: the proxy counts in memory, so they restart from zero with the daemon, as
  Prometheus counters may.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, func, select
from sqlmodel import col

from canary.locations import DEFAULT_PROJECT
from canary.proxy.health import BUCKETS, OUTCOMES, ProxySnapshot
from canary.store.engine import Store
from canary.store.tables import FilePosition, Heartbeat, HourlyCount, Run
from canary.vocabulary import Status, Verdict

__all__ = ["SOURCES", "MetricsSnapshot", "render", "snapshot_from_store"]

SOURCES = ("organic", "canary")


#: The verdicts a canary can end in, by what it expects: its ``canary_runs_total`` series, from zero.
VERDICTS = {
    "reject": (Verdict.CAUGHT, Verdict.FIRED_BUT_LEAKED, Verdict.LEAKED, Verdict.UNLOGGED,
               Verdict.NOT_INJECTED, Verdict.ERROR, Verdict.AMBIGUOUS),
    "accept": (Verdict.PASSED, Verdict.FALSE_REJECTION, Verdict.NOT_INJECTED, Verdict.ERROR,
               Verdict.AMBIGUOUS),
}


@dataclass(frozen=True)
class MetricsSnapshot:
    """Everything one scrape shows, read from the store at one moment."""

    guards: list[str]  # every declared guard
    firings: dict[tuple[str, str], int] = field(default_factory=dict)  # (guard, source) -> total
    statuses: dict[str, str] = field(default_factory=dict)  # guard -> Status value
    runs: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (guard, canary, verdict) -> n
    last_caught: dict[str, float] = field(default_factory=dict)  # guard -> unix time
    collector_lines: dict[str, int] = field(default_factory=dict)  # path -> lines read in total
    collector_lag: dict[str, int] = field(default_factory=dict)  # path -> bytes not read yet
    heartbeat: float | None = None  # unix time of the daemon's last beat
    project: str = DEFAULT_PROJECT  # the value of every series' project label
    #: guard -> its declared (canary, expect) pairs: their runs are shown from zero, per verdict
    canaries: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    store_up: bool = True  # the daemon's latest write of its store worked


class SnapshotCollector(Collector):
    """Yields every guard-canary metric family with values taken from one snapshot.

    Every series carries the ``project`` label first, so one Prometheus scraping several
    projects' daemons (on one machine or many) tells them apart without relabelling.
    """

    def __init__(self, snapshot: MetricsSnapshot, proxy: ProxySnapshot | None = None) -> None:
        self.snapshot = snapshot
        self.proxy = proxy
        self._project = [snapshot.project]

    def collect(self) -> Iterable[Metric]:
        """The families, in the order of the module docstring."""
        yield from self._guards()
        yield from self._runs()
        yield from self._collectors()
        yield from self._daemon()
        if self.proxy is not None:
            yield from self._proxy(self.proxy)

    def _labels(self, *names: str) -> list[str]:
        return ["project", *names]

    def _proxy(self, proxy: ProxySnapshot) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "canary_proxy_requests", "The agent's requests through the proxy, by outcome.",
            labels=self._labels("outcome"),
        )
        for outcome in OUTCOMES:
            requests.add_metric([*self._project, outcome], proxy.requests.get(outcome, 0))
        yield requests
        cumulative, buckets = 0, []
        for bound, count in zip(BUCKETS, proxy.buckets, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        histogram = HistogramMetricFamily(
            "canary_proxy_upstream_seconds", "Seconds the model server took to its response headers.",
            labels=self._labels(),
        )
        histogram.add_metric(self._project, buckets=buckets, sum_value=proxy.seconds_sum)
        yield histogram

    def _guards(self) -> Iterator[Metric]:
        snap, project = self.snapshot, self._project
        firings = CounterMetricFamily(
            "canary_guard_firings", "Guard firings counted from the logs, organic and canary apart.",
            labels=self._labels("guard", "source"),
        )
        status = GaugeMetricFamily(
            "canary_guard_status", "1 for the guard's current status, 0 for every other status.",
            labels=self._labels("guard", "status"),
        )
        caught = GaugeMetricFamily(
            "canary_last_caught_timestamp_seconds",
            "Unix time the guard's latest caught canary run started; absent until one is caught.",
            labels=self._labels("guard"),
        )
        for guard in snap.guards:
            for source in SOURCES:
                firings.add_metric([*project, guard, source], snap.firings.get((guard, source), 0))
            current = Status(snap.statuses.get(guard, Status.NEW))
            for value in Status:
                status.add_metric([*project, guard, value.value], 1.0 if value is current else 0.0)
            if guard in snap.last_caught:
                caught.add_metric([*project, guard], snap.last_caught[guard])
        yield firings
        yield status
        yield caught

    def _runs(self) -> Iterator[Metric]:
        runs = CounterMetricFamily(
            "canary_runs", "Finished canary runs by verdict.",
            labels=self._labels("guard", "canary", "verdict"),
        )
        declared = set(self.snapshot.guards)
        counts = {key: n for key, n in self.snapshot.runs.items() if key[0] in declared}
        for guard, pairs in self.snapshot.canaries.items():
            for canary, expect in pairs if guard in declared else ():
                for known in VERDICTS.get(expect, ()):
                    counts.setdefault((guard, canary, known.value), 0)
        for (guard, canary, verdict), count in sorted(counts.items()):
            runs.add_metric([*self._project, guard, canary, verdict], count)
        yield runs

    def _collectors(self) -> Iterator[Metric]:
        lines = CounterMetricFamily(
            "canary_collector_lines", "Log lines read from each followed path.", labels=self._labels("path")
        )
        for path, count in sorted(self.snapshot.collector_lines.items()):
            lines.add_metric([*self._project, path], count)
        lag = GaugeMetricFamily(
            "canary_collector_lag_bytes", "Bytes of each followed path not read yet.",
            labels=self._labels("path"),
        )
        for path, count in sorted(self.snapshot.collector_lag.items()):
            lag.add_metric([*self._project, path], count)
        yield lines
        yield lag

    def _daemon(self) -> Iterator[Metric]:
        beat = GaugeMetricFamily(
            "canary_daemon_heartbeat_timestamp_seconds", "Unix time of the daemon's last heartbeat.",
            labels=self._labels(),
        )
        if self.snapshot.heartbeat is not None:
            beat.add_metric(self._project, self.snapshot.heartbeat)
        yield beat
        store = GaugeMetricFamily(
            "canary_store_up", "1 while the daemon can write its store, 0 while it cannot.",
            labels=self._labels(),
        )
        store.add_metric(self._project, 1.0 if self.snapshot.store_up else 0.0)
        yield store


def render(snapshot: MetricsSnapshot, proxy: ProxySnapshot | None = None) -> bytes:
    """The snapshot (and the proxy's counts, when given) in the Prometheus text format (version 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot, proxy))
    return generate_latest(registry)


# -- reading the store -----------------------------------------------------------


def _unix(moment: datetime) -> float:
    """A stored datetime (aware, in UTC) as unix seconds."""
    return moment.timestamp()


def firing_totals(engine: Engine) -> dict[tuple[str, str], int]:
    """(guard, source) -> firings over every hour the store holds."""
    stmt = select(
        col(HourlyCount.guard), col(HourlyCount.source), func.sum(col(HourlyCount.count))
    ).group_by(col(HourlyCount.guard), col(HourlyCount.source))
    with engine.connect() as conn:
        return {(guard, source): int(total or 0) for guard, source, total in conn.execute(stmt)}


def run_totals(engine: Engine) -> dict[tuple[str, str, str], int]:
    """(guard, canary, verdict) -> finished runs."""
    stmt = (
        select(col(Run.guard), col(Run.canary), col(Run.verdict), func.count())
        .where(col(Run.verdict).is_not(None))
        .group_by(col(Run.guard), col(Run.canary), col(Run.verdict))
    )
    with engine.connect() as conn:
        return {(g, c, str(v)): int(n) for g, c, v, n in conn.execute(stmt)}


def last_caught(engine: Engine) -> dict[str, float]:
    """guard -> unix time the latest caught run started."""
    stmt = (
        select(col(Run.guard), func.max(col(Run.started)))
        .where(col(Run.verdict) == Verdict.CAUGHT)
        .group_by(col(Run.guard))
    )
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    return {guard: _unix(started) for guard, started in rows if started is not None}


def file_totals(engine: Engine) -> list[tuple[str, int, int]]:
    """(path, lines read, bytes not read as of the last commit) of every followed file."""
    stmt = select(
        col(FilePosition.path), col(FilePosition.lines), col(FilePosition.offset), col(FilePosition.size)
    )
    with engine.connect() as conn:
        return [(p, int(n), max(int(s) - int(o), 0)) for p, n, o, s in conn.execute(stmt)]


def heartbeat(engine: Engine) -> float | None:
    """Unix time of the daemon's last heartbeat, or None before the first."""
    with engine.connect() as conn:
        beat = conn.execute(select(col(Heartbeat.beat)).where(col(Heartbeat.id) == 1)).scalar()
    return _unix(beat) if beat is not None else None


def snapshot_from_store(
    store: Store,
    guards: list[str],
    statuses: Mapping[str, str],
    lag: list[tuple[str, int]] | None = None,
    *,
    project: str = DEFAULT_PROJECT,
    canaries: Mapping[str, tuple[tuple[str, str], ...]] | None = None,
) -> MetricsSnapshot:
    """A snapshot of the store; ``lag`` (path, bytes not read yet) overrides the stored lag.

    Lines read always come from the stored read positions, so the count survives a restart of
    the daemon. The daemon passes ``lag`` from its live tailers, which see bytes written since
    the last commit; the stored positions only know the size seen at that commit.
    """
    engine = store.engine
    lines: dict[str, int] = {}
    stored_lag: dict[str, int] = {}
    for path, count, behind in file_totals(engine):
        lines[path] = lines.get(path, 0) + count
        stored_lag[path] = stored_lag.get(path, 0) + behind
    live_lag: dict[str, int] = {}
    for path, behind in lag or []:
        live_lag[path] = live_lag.get(path, 0) + behind
    return MetricsSnapshot(
        guards=list(guards),
        firings=firing_totals(engine),
        statuses={guard: str(value) for guard, value in statuses.items()},
        runs=run_totals(engine),
        last_caught=last_caught(engine),
        collector_lines=lines,
        collector_lag=live_lag if lag is not None else stored_lag,
        heartbeat=heartbeat(engine),
        project=project,
        canaries=dict(canaries or {}),
    )
