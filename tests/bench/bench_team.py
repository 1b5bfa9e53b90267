"""A team on one PostgreSQL: 20 daemons of 20 projects writing at their real pace, then a 10x burst.

Each daemon is a process of its own, a site of the store (its own project), that writes what a
``canary daemon`` writes, through the same code: the collectors' commit of what each poll read
(``Store.commit``: the firing rows, the hourly counts and the read position in one transaction,
once a second per followed file), and every tick (10 s) the heartbeat and the statuses decided
(``canary.daemon.steps.beat`` and ``decide_statuses``). Its agent writes --lines lines a second
(a task line, guard firings, accept look-alikes and noise, as a real agent log), --burst times
as many for the middle third of the run. Every firing line carries a sequence number: at the
end each project must hold each of its numbers exactly once.

Printed: per daemon, commits, firings and heartbeats a second (the write load to size a server
by); p50 and p99 commit latency over every commit, against a direct connection's (raw psycopg,
one INSERT and COMMIT per commit, the fastest simple thing a daemon could do instead) in the
same run; and the server's CPU (every postgres process, from /proc) as a share of one core.

    uv run python tests/bench/bench_team.py                      # a server of its own (.ci/postgres)
    uv run python tests/bench/bench_team.py --url postgresql+psycopg://... --seconds 90 --daemons 20
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TICKS = os.sysconf("SC_CLK_TCK")
GUARDS = ("citation", "quote", "version", "date")
LINE = re.compile(r"seq=(\d+)")


def start_server() -> tuple[str, str]:
    folder = tempfile.mkdtemp(prefix="canary-bench-team-")
    out = subprocess.run(["bash", str(ROOT / ".ci" / "postgres"), "start", folder], capture_output=True,
                         text=True, check=True, timeout=120)
    values = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    return values["CANARY_TEST_PG_URL"], folder


def _times(pid: str) -> tuple[int, list[str]]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[1]), fields  # the parent's pid, and the fields from the state on


def server_cpu_seconds(folder: str) -> float:
    """CPU seconds the server has used: the postmaster's own and its reaped backends' (cutime,
    cstime), plus its live backends', from /proc, so a backend that exits keeps counting."""
    postmaster = (Path(folder) / "data" / "postmaster.pid").read_text().split()[0]
    _ppid, fields = _times(postmaster)
    total = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    for pid in os.listdir("/proc"):
        if pid.isdigit() and pid != postmaster:
            try:
                ppid, child = _times(pid)
            except (OSError, ValueError, IndexError):
                continue
            if str(ppid) == postmaster:
                total += int(child[11]) + int(child[12])
    return total / TICKS


def agent_lines(second: int, rate: int, seq: int) -> tuple[list[tuple[str, tuple[str, ...], bool]], int]:
    """One second of an agent's log: (text, guards fired, activity) a line; firings carry seq=N."""
    lines = []
    for i in range(rate):
        kind = (second * rate + i) % 25
        if kind == 0:
            guard = GUARDS[(second + i) % len(GUARDS)]
            lines.append((f"2026-12-01T10:00:00Z WARN {guard.title()}Guard: rejected claim seq={seq}",
                          (guard,), False))
            seq += 1
        elif kind == 1:
            lines.append(("2026-12-01T10:00:00Z INFO task finished status=ok", (), True))
        elif kind in (2, 3):
            lines.append(("2026-12-01T10:00:00Z DEBUG CitationGuard: accepted checked=3", (), False))
        else:
            lines.append((f"2026-12-01T10:00:00Z INFO step {i} tool=fetch url=https://example.org/{i}", (), False))
    return lines, seq


def daemon(url: str, project: str, seconds: int, rate: int, burst: int, results: Any) -> None:
    """One daemon's writes, at its pace; puts (commit latencies, firings, heartbeats, commits)."""
    from canary.config.definitions import load_definitions
    from canary.config.settings import Config
    from canary.daemon.steps import beat, decide_statuses
    from canary.store.engine import Store
    from canary.store.sites import Site
    from collectors.positions import Batch, FileState
    from collectors.scan import Hit

    defs = Path(tempfile.mkdtemp(prefix="bench-defs-"))
    for guard in GUARDS:
        (defs / f"{guard}.toml").write_text(f"[guard]\nname = '{guard}'\nmatch = '{guard.title()}Guard: rejected'\n")
    guards, _ = load_definitions(["*.toml"], defs)
    config = Config(guards=tuple(guards))
    store = Store(url, site=Site(project, "bench"))
    started = datetime.now(UTC)
    latencies: list[float] = []
    seq = offset = firings = beats = 0
    begin = time.monotonic()
    for second in range(seconds):
        pace = rate * burst if seconds // 3 <= second < 2 * seconds // 3 else rate
        lines, seq_after = agent_lines(second, pace, seq)
        hits, base = [], offset
        for text, fired, activity in lines:
            if fired or activity:
                hits.append(Hit(offset, text, fired, activity, None))
            offset += len(text) + 1
        firings += seq_after - seq
        seq = seq_after
        state = FileState("1:1", 1, 1, "/var/log/agent.log", offset, 64, b"h" * 16, offset)
        t0 = time.perf_counter()
        store.commit(Batch(state, hits, len(lines), offset - base, since=base))
        latencies.append(time.perf_counter() - t0)
        if second % 10 == 0:
            now = datetime.now(UTC)
            beat(store, pid=os.getpid(), started=started, now=now, files=1, addresses={})
            decide_statuses(store, config, now=now, readable=True)
            beats += 1
        time.sleep(max(0.0, begin + second + 1 - time.monotonic()))
    store.close()
    results.put((project, latencies, firings, beats, seconds))


def direct(url: str, seconds: int, rate: int, results: Any) -> None:
    """The reference: a direct connection, one INSERT and COMMIT a second, as many rows as a commit's firings."""
    import psycopg

    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    table = f"bench_direct_{uuid.uuid4().hex[:8]}"
    latencies = []
    with psycopg.connect(dsn) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, line text, n int)")
        conn.commit()
        for second in range(seconds):
            lines, _ = agent_lines(second, rate, 0)
            rows = [(text, 1) for text, fired, _a in lines if fired]
            t0 = time.perf_counter()
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {table} (line, n) VALUES (%s, %s)", rows or [("none", 0)])
            conn.commit()
            latencies.append(time.perf_counter() - t0)
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - t0)))
        conn.execute(f"DROP TABLE {table}")
        conn.commit()
    results.put(("direct", latencies, 0, 0, seconds))


def check(url: str, projects: list[str], expected: dict[str, int]) -> list[str]:
    """Each project's stored firing sequence numbers, each once: the problems found."""
    from sqlalchemy import create_engine, text

    from canary.store.sites import Site, quoted

    engine = create_engine(url)
    problems = []
    with engine.connect() as conn:
        for project in projects:
            schema = quoted(Site(project, "bench").schema)
            seqs = sorted(int(m.group(1)) for (line,) in conn.execute(text(f"SELECT line FROM {schema}.firings"))
                          if (m := LINE.search(line)))
            if seqs != list(range(expected[project])):
                problems.append(f"{project}: {len(seqs)} firings stored, {expected[project]} written")
    with engine.begin() as conn:
        for project in projects:
            conn.execute(text(f"DROP SCHEMA {quoted(Site(project, 'bench').schema)} CASCADE"))
            conn.execute(text("DELETE FROM guard_canary.sites WHERE schema_name = :s"),
                         {"s": Site(project, "bench").schema})
    engine.dispose()
    return problems


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a PostgreSQL URL (default: a server of its own, .ci/postgres)")
    parser.add_argument("--pg-dir", default=os.environ.get("CANARY_TEST_PG_DIR"),
                        help="the .ci/postgres folder of the server at --url, to read its CPU")
    parser.add_argument("--daemons", type=int, default=20)
    parser.add_argument("--seconds", type=int, default=90)
    parser.add_argument("--lines", type=int, default=50, help="lines a second each agent writes")
    parser.add_argument("--burst", type=int, default=10, help="the burst's multiple of --lines")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    url, folder = (args.url, None) if args.url else start_server()
    cpu_dir = folder or args.pg_dir
    try:
        spawn = multiprocessing.get_context("spawn")
        results = spawn.Queue()
        tag = uuid.uuid4().hex[:6]
        projects = [f"bench{tag}-{i:02d}" for i in range(args.daemons)]
        from canary.store.engine import Store
        from canary.store.sites import Site

        for project in projects:  # the sites exist before the clock starts, as running daemons' do
            Store(url, site=Site(project, "bench")).close()
        cpu0, wall0 = server_cpu_seconds(cpu_dir) if cpu_dir else 0.0, time.monotonic()
        procs = [spawn.Process(target=daemon, args=(url, p, args.seconds, args.lines, args.burst, results))
                 for p in projects]
        procs.append(spawn.Process(target=direct, args=(url, args.seconds, args.lines, results)))
        for proc in procs:
            proc.start()
        gathered = [results.get(timeout=args.seconds * 4 + 120) for _ in procs]
        for proc in procs:
            proc.join(60)
        cpu = server_cpu_seconds(cpu_dir) - cpu0 if cpu_dir else float("nan")
        wall = time.monotonic() - wall0
        by = {name: (lat, fired, beats, secs) for name, lat, fired, beats, secs in gathered}
        ref = by.pop("direct")[0]
        latencies = [x for lat, _f, _b, _s in by.values() for x in lat]
        fired = {name: f for name, (_l, f, _b, _s) in by.items()}
        problems = check(url, projects, fired)
        seconds = args.seconds
        print(f"{args.daemons} daemons x {seconds} s, {args.lines} lines/s each, x{args.burst} for the middle third")
        per = statistics.mean(fired.values()) / seconds
        print(f"per daemon: {len(latencies) / args.daemons / seconds:.2f} commits/s, {per:.2f} firings/s "
              f"(steady {args.lines / 25:.1f}/s, burst {args.lines * args.burst / 25:.1f}/s), "
              f"{statistics.mean(b for _l, _f, b, _s in by.values()) / seconds:.2f} heartbeats/s")
        p50, p99 = percentile(latencies, 0.50) * 1000, percentile(latencies, 0.99) * 1000
        r50, r99 = percentile(ref, 0.50) * 1000, percentile(ref, 0.99) * 1000
        print(f"commit latency: p50 {p50:.1f} ms, p99 {p99:.1f} ms; direct connection p50 {r50:.1f} ms, "
              f"p99 {r99:.1f} ms; ratio p99 {p99 / r99:.1f}x")
        print(f"server CPU: {cpu:.1f} s over {wall:.0f} s = {100 * cpu / wall:.0f}% of one core")
        print("nothing lost or doubled: every sequence number stored once" if not problems
              else "LOST OR DOUBLED:\n  " + "\n  ".join(problems))
        print(f"load average at end: {os.getloadavg()}")
        if problems:
            sys.exit(1)
    finally:
        if folder is not None:
            subprocess.run(["bash", str(ROOT / ".ci" / "postgres"), "stop", folder], capture_output=True, check=False)


if __name__ == "__main__":
    main()
