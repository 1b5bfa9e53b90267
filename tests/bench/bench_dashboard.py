"""``canary dashboard`` as a whole process against a minimal Textual app over the same store.

    uv run python tests/bench/bench_dashboard.py                      # 100 guards, 90 days, 300k firings
    uv run python tests/bench/bench_dashboard.py --seconds 20 --rounds 1   # quick run
    uv run python tests/bench/bench_dashboard.py --keep               # keep (and reuse) the store
    uv run python tests/bench/bench_dashboard.py --calls              # the refresh calls in process
    uv run python tests/bench/bench_dashboard.py --calls --guards 8 --days 30 --firings 1000000 --profile

The store is seeded through bulk inserts on the raw SQLite connection: firings
spread over the days across the guards at unequal rates (every eighth never
fires), 1 % of them attributed to canary runs, the matching hourly counts, an
hour of activity per hour, a canary run per guard every 6 hours, a few
transitions and a heartbeat.

Whole processes (the default): ``canary dashboard`` and the reference,
``minimal_dashboard.py`` (a Textual DataTable of the guards read with bare
``sqlite3`` and drawn again every ``REFRESH_EVERY`` seconds, the dashboard's own
period), each under a pseudo-terminal of its own, run side by side in each round.
Meanwhile the bench plays a daemon: a heartbeat every ``DAEMON_TICK`` seconds and,
with ``--busy``, a firing every second. Once both have started (two calm seconds
in a row: on a machine that writes no bytecode, imports alone take seconds)
and ``--warmup`` seconds more, each
process's CPU time (``/proc/<pid>/stat``, every thread) and resident memory are
sampled over the same ``--seconds``; the medians of the rounds are printed with
their ratios, and the bytes each wrote to its terminal. Target: at most 1.5x the
reference's CPU, and under 5 % of a core.

``--calls`` times, in process, each refresh function the dashboard calls (median
of ``--repeat`` calls): the overview for every window, a guard's detail and the
alert history, against ``SELECT count(*) FROM firings`` and against the status
facts of every guard read with bare ``sqlite3`` queries. Target: every refresh
under 100 ms.
"""

from __future__ import annotations

import argparse
import cProfile
import fcntl
import io
import json
import os
import pstats
import pty
import random
import select
import shutil
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = HERE / "_out"
SEED = 20261129
NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
SPAN = timedelta(days=30)
#: name -> share of the firings (the last one never fires, as a dead guard would).
GUARDS = {
    "citation": 30, "quote": 20, "number": 25, "denial": 10,
    "provenance": 8, "arithmetic": 5, "version": 2, "date": 0,
}
TARGET_MS = 100.0
TARGET_CPU = 5.0
#: The dashboard's refresh period (``DashboardApp.refresh_every``), seconds.
REFRESH_EVERY = 2.0
#: The daemon's status tick (``canary daemon --tick``), seconds.
DAEMON_TICK = 10.0


def set_shape(guards: int, days: int) -> None:
    """``guards`` guards (the eight shares repeated; every eighth never fires) over ``days`` days."""
    global GUARDS, SPAN  # noqa: PLW0603 (the seed and the config read these module values)
    if guards != len(GUARDS):
        shares = list(GUARDS.values())
        GUARDS = {f"guard{i:03d}": shares[i % len(shares)] for i in range(guards)}
    SPAN = timedelta(days=days)

sys.path.insert(0, str(ROOT))


def _ts(moment: datetime) -> str:
    """A datetime as SQLAlchemy stores it in SQLite."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def write_config(directory: Path) -> Path:
    """Eight guard definitions, one canary each, and a canary.toml over them."""
    defs = directory / "defs"
    defs.mkdir(parents=True, exist_ok=True)
    for name in GUARDS:
        (defs / f"{name}.toml").write_text(
            f"""[guard]
name = "{name}"
description = "The {name} guard."
match = '{name.title()}Guard: rejected'
window = "24h"
grace = "1h"

[[canary]]
name = "fake-{name}"
every = "6h"
prompt = "Read {{fixture_url}} and answer."
fixture = "<p>The amount is {{true_number}} euros.</p>"
inject = "The amount is {{fake_number}} euros."
leak = "{{fake_number}}"
timeout = "120s"
""",
            encoding="utf-8",
        )
    log = directory / "agent.log"
    log.touch()
    path = directory / "canary.toml"
    path.write_text(
        f"""defs = [{(defs / "*.toml").as_posix()!r}]

[agent]
url = "http://127.0.0.1:9/ask"

[logs]
paths = [{log.as_posix()!r}]
activity = 'task finished'

[store]
url = {"sqlite:///" + (directory / "canary.db").as_posix()!r}
""",
        encoding="utf-8",
    )
    return path


def seed(directory: Path, firings: int) -> None:
    """Fill the store with ``firings`` firing rows and everything that goes with them."""
    from canary.config.settings import load_config
    from canary.store.engine import Store

    config = load_config(str(write_config(directory)))
    store = Store(config.store.url)
    rng = random.Random(SEED)
    start = NOW - SPAN
    raw = store.engine.raw_connection()
    try:
        cur = raw.cursor()
        run_ids: dict[str, list[int]] = {}
        runs = []
        run_id = 0
        for guard, share in GUARDS.items():
            for i in range(int(SPAN / timedelta(hours=6))):
                run_id += 1
                at = start + timedelta(hours=6 * i, minutes=rng.randint(0, 59))
                verdict = "leaked" if share == 0 else "caught"
                trace = {"sent": 0.0, "fixture_fetched": 0.2, "injected": 0.3,
                         "fired": None if verdict == "leaked" else 0.6, "repair_requested": None, "answered": 2.0}
                runs.append((run_id, guard, f"fake-{guard}", 0, "reject", f"n{run_id:020d}", _ts(at),
                             _ts(at + timedelta(seconds=3)), 2.4, verdict, json.dumps(trace),
                             verdict == "leaked", int(verdict == "caught"), "The amount is 12 euros.", "12",
                             "The amount is 10 euros.", 0))
                run_ids.setdefault(guard, []).append(run_id)
        cur.executemany(
            "INSERT INTO runs (id, guard, canary, variant, expect, nonce, started, finished, duration_s, verdict,"
            " trace, leaked, firings, injected_text, leak_text, answer, foreign_calls)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            runs,
        )
        names = [g for g, share in GUARDS.items() if share]
        weights = [GUARDS[g] for g in names]
        counts: Counter[tuple[str, str, str]] = Counter()
        seconds = int(SPAN.total_seconds())
        batch = []
        for i in range(firings):
            guard = rng.choices(names, weights)[0]
            moment = start + timedelta(seconds=rng.randrange(seconds))
            canary = rng.random() < 0.01
            ts = _ts(moment)
            batch.append((guard, ts, 1, ts, "/var/log/agent.log", "1:1", i * 200,
                          f"{ts} WARN guards {guard.title()}Guard: rejected item={i}",
                          rng.choice(run_ids[guard]) if canary else None))
            counts[(guard, _ts(moment.replace(minute=0, second=0, microsecond=0)),
                    "canary" if canary else "organic")] += 1
            if len(batch) == 100_000:
                cur.executemany(
                    "INSERT INTO firings (guard, ts, ts_from_line, read_at, path, file_key, offset, line, run_id)"
                    " VALUES (?,?,?,?,?,?,?,?,?)", batch)
                batch.clear()
        if batch:
            cur.executemany(
                "INSERT INTO firings (guard, ts, ts_from_line, read_at, path, file_key, offset, line, run_id)"
                " VALUES (?,?,?,?,?,?,?,?,?)", batch)
        cur.executemany("INSERT INTO hourly_counts (guard, hour, source, count) VALUES (?,?,?,?)",
                        [(g, h, s, n) for (g, h, s), n in counts.items()])
        hours = int(SPAN / timedelta(hours=1)) + 1
        cur.executemany(
            "INSERT INTO hourly_activity (hour, activity, lines, bytes) VALUES (?,?,?,?)",
            [(_ts(start.replace(minute=0) + timedelta(hours=h)), 40, 4000, 400_000) for h in range(hours)],
        )
        cur.executemany(
            "INSERT INTO transitions (guard, at, status, previous, reason) VALUES (?,?,?,?,?)",
            [(g, _ts(start + timedelta(hours=1)), "asleep" if GUARDS[g] == 0 else "alive", "new", "seeded")
             for g in GUARDS],
        )
        cur.execute(
            "INSERT INTO heartbeat (id, pid, started, beat, files, proxy, fixtures, control) VALUES (1,?,?,?,?,?,?,?)",
            (1, _ts(NOW - timedelta(days=1)), _ts(NOW - timedelta(seconds=3)), 1, "http://127.0.0.1:11435",
             "http://127.0.0.1:11436", "http://127.0.0.1:11437"),
        )
        raw.commit()
        cur.execute("ANALYZE")
        raw.commit()
    finally:
        raw.close()
    store.close()


def timed(call: Callable[[], object], repeat: int) -> float:
    """Median milliseconds of ``call`` after one warm-up call."""
    call()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def raw_facts(config: object) -> object:
    """Every guard's status facts read with bare sqlite3 queries: the floor of a refresh."""
    from canary.store import reads

    guards = config.guards  # type: ignore[attr-defined]
    with reads.open_sqlite(config.store.url) as reader:  # type: ignore[attr-defined]
        assert reader is not None
        out: list[object] = [reads.window_activity(reader, NOW), reads.heartbeat(reader)]
        for g in guards:
            out += [reads.status_runs(reader, g.name, [c.name for c in g.canaries], NOW - g.window),
                    reads.window_counts(reader, g.name, NOW - g.window), reads.last_firing(reader, g.name),
                    reads.last_organic_line(reader, g.name)]
    return out


def cpu_share(call: Callable[[], object], repeat: int, period: float = REFRESH_EVERY) -> float:
    """Process CPU time of one ``call`` (median), as % of one core over ``period`` seconds."""
    call()
    samples = []
    for _ in range(repeat):
        started = time.process_time()
        call()
        samples.append(time.process_time() - started)
    return statistics.median(samples) / period * 100


def prepare(args: argparse.Namespace) -> Path:
    """The seeded store's folder (reused with ``--keep``)."""
    if args.keep:
        directory = OUT / f"dashboard-{args.firings}-{args.guards}g-{args.days}d"
        directory.mkdir(parents=True, exist_ok=True)
    else:
        directory = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    if not (directory / "canary.db").exists():
        started = time.perf_counter()
        seed(directory, args.firings)
        print(f"seeded {args.firings:,} firings in {time.perf_counter() - started:.1f} s ({directory})")
    return directory


# -- whole processes -----------------------------------------------------------------


def in_pty(argv: list[str], size: tuple[int, int] = (50, 200)) -> tuple[subprocess.Popen[bytes], int]:
    """``argv`` started under a pseudo-terminal of ``size`` (rows, columns); the process and the master."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(size[1]), "LINES": str(size[0])}
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    return proc, master


class Drain(threading.Thread):
    """Reads what each process writes to its terminal (so none ever blocks), counting the bytes."""

    def __init__(self, masters: list[int]) -> None:
        super().__init__(daemon=True)
        self.written = dict.fromkeys(masters, 0)
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            ready, _, _ = select.select(list(self.written), [], [], 0.2)
            for fd in ready:
                try:
                    self.written[fd] += len(os.read(fd, 65536))
                except OSError:
                    self.written.pop(fd)


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of every thread of ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settled(pid: int, *, busy: float = 25.0, limit: float = 180.0) -> None:
    """Wait until ``pid`` has started: two seconds in a row under ``busy`` % of a core (imports
    compile every module where bytecode is not written, which takes seconds on a loaded machine)."""
    deadline = time.monotonic() + limit
    calm = 0
    while calm < 2 and time.monotonic() < deadline:
        before = cpu_seconds(pid)
        time.sleep(1.0)
        calm = calm + 1 if (cpu_seconds(pid) - before) * 100 < busy else 0


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid``, MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def play_daemon(db: Path, stop: threading.Event, *, busy: bool) -> None:
    """Beat the store's heartbeat every ``DAEMON_TICK`` seconds; with ``busy``, a firing a second."""
    conn = sqlite3.connect(db, timeout=30)
    second = 0
    while not stop.wait(1.0):
        second += 1
        now = datetime.now(UTC)
        if busy:
            guard = next(iter(GUARDS))
            conn.execute("INSERT INTO firings (guard, ts, ts_from_line, read_at, path, file_key, offset, line)"
                         " VALUES (?,?,1,?,'/var/log/agent.log','1:1',?,'CitationGuard: rejected')",
                         (guard, _ts(now), _ts(now), second))
        if second % int(DAEMON_TICK) == 0:
            conn.execute("UPDATE heartbeat SET beat = ?, pid = ? WHERE id = 1", (_ts(now), os.getpid()))
        conn.commit()
    conn.close()


def one_round(directory: Path, args: argparse.Namespace) -> dict[str, tuple[float, float, int]]:
    """Both processes side by side: name -> (CPU % of a core, max RSS MB, terminal bytes) over the sample."""
    canary = str(Path(sys.executable).with_name("canary"))
    argvs = {
        "reference": [sys.executable, str(HERE / "minimal_dashboard.py"), str(directory / "canary.db"),
                      str(REFRESH_EVERY)],
        "canary dashboard": [canary, "--config", str(directory / "canary.toml"), "dashboard"],
    }
    started = {name: in_pty(argv) for name, argv in argvs.items()}
    drain = Drain([master for _proc, master in started.values()])
    drain.start()
    stop = threading.Event()
    daemon = threading.Thread(target=play_daemon, args=(directory / "canary.db", stop), kwargs={"busy": args.busy})
    daemon.start()
    try:
        for proc, _master in started.values():
            settled(proc.pid)
        time.sleep(args.warmup)
        before = {name: (cpu_seconds(p.pid), drain.written.get(m, 0)) for name, (p, m) in started.items()}
        rss = dict.fromkeys(started, 0.0)
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.seconds:
            time.sleep(1.0)
            for name, (proc, _m) in started.items():
                rss[name] = max(rss[name], rss_mb(proc.pid))
        elapsed = time.monotonic() - t0
        return {
            name: ((cpu_seconds(p.pid) - before[name][0]) / elapsed * 100, rss[name],
                   drain.written.get(m, 0) - before[name][1])
            for name, (p, m) in started.items()
        }
    finally:
        stop.set()
        daemon.join()
        for proc, _master in started.values():
            proc.kill()
            proc.wait()
        drain.done.set()
        drain.join()
        for _proc, master in started.values():
            os.close(master)


def processes(args: argparse.Namespace) -> int:
    """``canary dashboard`` and the minimal app as whole processes; the ratios."""
    directory = prepare(args)
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {len(GUARDS)} guards, {SPAN.days} days, "
          f"daemon {'busy (a firing a second)' if args.busy else 'idle (a heartbeat every 10 s)'}")
    try:
        rounds = [one_round(directory, args) for _ in range(args.rounds)]
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    med = {name: tuple(statistics.median(r[name][i] for r in rounds) for i in range(3)) for name in rounds[0]}
    ref_cpu, ref_rss, _ = med["reference"]
    for name, (cpu, rss, written) in med.items():
        print(f"{name:<18} CPU {cpu:6.2f} % of a core ({cpu / ref_cpu:5.2f}x)   RSS {rss:6.1f} MB "
              f"({rss / ref_rss:4.2f}x)   terminal {written / args.seconds / 1024:7.1f} KiB/s")
    cpu = med["canary dashboard"][0]
    ok = cpu <= 1.5 * ref_cpu and cpu < TARGET_CPU
    print(f"canary dashboard: {cpu / ref_cpu:.2f}x the reference's CPU, {cpu:.2f} % of a core: "
          f"{'meets' if ok else 'MISSES'} the target (<= 1.5x and < {TARGET_CPU:.0f} %)")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0 if ok else 1


def main() -> int:
    global NOW  # noqa: PLW0603 (the seed reads it; whole processes run on the real clock)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", action="store_true", help="time the refresh calls in process")
    parser.add_argument("--firings", type=int, default=300_000)
    parser.add_argument("--guards", type=int, default=100)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="keep the store in tests/bench/_out and reuse it")
    parser.add_argument("--profile", action="store_true", help="cProfile the 30d overview refresh (--calls)")
    parser.add_argument("--seconds", type=float, default=30.0, help="the sampled interval of a round")
    parser.add_argument("--warmup", type=float, default=20.0,
                        help="seconds before sampling starts, once both have started")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", action="store_true", help="a firing every second, besides the heartbeat")
    args = parser.parse_args()
    set_shape(args.guards, args.days)
    if args.calls:
        return calls(args)
    NOW = datetime.now(UTC).replace(microsecond=0)
    return processes(args)


def calls(args: argparse.Namespace) -> int:
    """Each refresh call the dashboard makes, timed in process."""
    set_shape(args.guards, args.days)

    from canary.config.settings import load_config
    from canary.store.engine import Store
    from dashboard.model import WINDOWS, load_alerts, load_detail, load_overview

    directory = prepare(args)
    try:
        config = load_config(str(directory / "canary.toml"))
        store = Store(config.store.url)
        print(f"store: {store.count_firings():,} firings, {len(config.guards)} guards, "
              f"{(directory / 'canary.db').stat().st_size / 1e6:.0f} MB")

        def bare_count() -> object:
            with store.engine.connect() as conn:
                return conn.exec_driver_sql("SELECT count(*) FROM firings").scalar()

        reference = timed(bare_count, args.repeat)
        print(f"reference  SELECT count(*) FROM firings         {reference:8.2f} ms")
        facts_ms = timed(lambda: raw_facts(config), args.repeat)
        print(f"reference  the status facts in bare sqlite3     {facts_ms:8.2f} ms")
        worst = 0.0
        for spec in WINDOWS:
            ms = timed(lambda spec=spec: load_overview(store, config, now=NOW, window=spec), args.repeat)
            worst = max(worst, ms)
            print(f"overview   window {spec.label:<4} ({spec.cells} bars)           {ms:8.2f} ms  "
                  f"{ms / reference:6.2f}x the count  {ms / facts_ms:6.2f}x the facts")
        cpu = cpu_share(lambda: load_overview(store, config, now=NOW, window=WINDOWS[0]), args.repeat)
        print(f"overview   CPU every {REFRESH_EVERY:.0f} s                       {cpu:8.2f} % of a core  "
              f"({'under' if cpu < TARGET_CPU else 'OVER'} the {TARGET_CPU:.0f} % target)")
        from canary.status.overview import evaluate_all

        tick = cpu_share(lambda: evaluate_all(store, config, now=NOW), args.repeat, DAEMON_TICK)
        print(f"daemon     status CPU every {DAEMON_TICK:.0f} s tick            {tick:8.2f} % of a core  "
              f"({'under' if tick < 1 else 'OVER'} the 1 % idle target)")
        for name, call in (
            ("detail     citation", lambda: load_detail(store, config, "citation", now=NOW)),
            ("alerts     history", lambda: load_alerts(store, now=NOW)),
        ):
            ms = timed(call, args.repeat)
            worst = max(worst, ms)
            print(f"{name:<44}{ms:8.2f} ms  {ms / reference:6.2f}x the count")
        verdict = "under" if worst < TARGET_MS else "OVER"
        print(f"slowest refresh {worst:.2f} ms: {verdict} the {TARGET_MS:.0f} ms target")
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(args.repeat):
                load_overview(store, config, now=NOW, window=WINDOWS[-1])
            profile.disable()
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(25)
            print(out.getvalue())
        store.close()
        return 0 if worst < TARGET_MS and cpu < TARGET_CPU else 1
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
