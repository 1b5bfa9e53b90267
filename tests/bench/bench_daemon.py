"""The daemon at rest, and `canary status` over a large store.

1. An idle `canary daemon` (10 guards, 5 followed files, no writes) for --seconds
   (default 60): CPU as % of one core and peak RSS, read from /proc, against a
   bare sleeping Python process measured the same way in the same run.
   Targets: CPU under 1% of a core, peak RSS under 120 MB.
2. The `canary status` query (facts, statuses, the JSON document) against a store
   holding --firings (default 1,000,000) firings, against a bare
   `SELECT count(*) FROM firings` on the same store. Target: under 50 ms.

    uv run python tests/bench/bench_daemon.py [--seconds 60] [--firings 1000000]
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

GUARDS = [f"g{i}" for i in range(10)]
TICKS = os.sysconf("SC_CLK_TCK")


def write_config(root: Path, store: Path) -> Path:
    from canary.demo.live import free_port

    defs = root / "defs"
    defs.mkdir(parents=True, exist_ok=True)
    for name in GUARDS:
        (defs / f"{name}.toml").write_text(f"[guard]\nname = '{name}'\nmatch = 'Guard{name}: rejected'\n")
    logs = root / "logs"
    logs.mkdir(exist_ok=True)
    for i in range(5):
        (logs / f"agent{i}.log").write_text("".join(f"2026-11-29T10:00:00Z INFO noise {n}\n" for n in range(1000)))
    config = root / "canary.toml"
    config.write_text(
        f"""defs = ["defs/*.toml"]
[logs]
paths = ["{logs}/*.log"]
activity = 'task finished'
[store]
url = "sqlite:///{store}"
[model]
listen = "127.0.0.1:{free_port()}"
[fixtures]
listen = "127.0.0.1:{free_port()}"
[daemon]
control = "127.0.0.1:{free_port()}"
[alerts]
desktop = false
"""
    )
    return config


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(proc: subprocess.Popen[bytes], seconds: float, warmup: float) -> tuple[float, float]:
    time.sleep(warmup)
    start_cpu, start = cpu_seconds(proc.pid), time.monotonic()
    time.sleep(seconds)
    used = cpu_seconds(proc.pid) - start_cpu
    span = time.monotonic() - start
    return 100 * used / span, peak_rss_mb(proc.pid)


def idle_daemon(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = write_config(root, root / "canary.db")
        env = {**os.environ, "CANARY_STATE_DIR": str(root / "state")}
        daemon = subprocess.Popen(
            [sys.executable, "-m", "canary.cli.main", "--config", str(config), "daemon"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )
        sleeper = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds + 30})"])
        try:
            # The first seconds read the 5 files from their start; idle begins after.
            cpu, rss = measure(daemon, seconds, warmup=8.0)
            if daemon.poll() is not None:
                raise SystemExit(f"the daemon exited with {daemon.returncode}")
            ref_cpu, ref_rss = cpu_seconds(sleeper.pid), peak_rss_mb(sleeper.pid)
        finally:
            daemon.terminate()
            daemon.wait(30)
            sleeper.kill()
            sleeper.wait()
        print(f"idle daemon, 10 guards, 5 files, {seconds:.0f} s (tick 10 s, rescan 1 s):")
        print(f"  CPU       {cpu:.3f}% of one core      (target < 1%: {'met' if cpu < 1 else 'MISSED'})")
        print(f"  peak RSS  {rss:.1f} MB                (target < 120 MB: {'met' if rss < 120 else 'MISSED'})")
        print(f"  reference: a sleeping python process: CPU {ref_cpu:.2f} s in total, peak RSS {ref_rss:.1f} MB")


def seed(db: Path, firings: int) -> None:
    from canary.store.engine import Store

    Store(f"sqlite:///{db}").close()
    now = datetime.now(UTC)
    rng = random.Random(1)
    hourly: dict[tuple[str, str], int] = {}
    conn = sqlite3.connect(db)
    batch = []
    for i in range(firings):
        guard = GUARDS[i % len(GUARDS)]
        ts = now - timedelta(seconds=rng.randint(0, 30 * 86400))
        stamp = ts.strftime("%Y-%m-%d %H:%M:%S.%f")
        hour = ts.strftime("%Y-%m-%d %H:00:00.000000")
        hourly[(guard, hour)] = hourly.get((guard, hour), 0) + 1
        batch.append((guard, stamp, 1, stamp, "/logs/agent.log", "1:2", i * 100, f"Guard{guard}: rejected {i}"))
        if len(batch) == 50_000:
            conn.executemany(
                "INSERT INTO firings (guard, ts, ts_from_line, read_at, path, file_key, offset, line) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", batch)
            batch.clear()
    if batch:
        conn.executemany(
            "INSERT INTO firings (guard, ts, ts_from_line, read_at, path, file_key, offset, line) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", batch)
    conn.executemany(
        "INSERT INTO hourly_counts (guard, hour, source, count) VALUES (?, ?, 'organic', ?)",
        [(g, h, n) for (g, h), n in hourly.items()])
    conn.commit()
    conn.close()


def status_query(firings: int, runs: int) -> None:
    from canary.config.settings import load_config
    from canary.status.overview import status_document
    from canary.store.engine import Store

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db = root / "canary.db"
        config = load_config(str(write_config(root, db)))
        started = time.monotonic()
        seed(db, firings)
        print(f"\nseeded {firings:,} firings over 30 days in {time.monotonic() - started:.1f} s")
        store = Store(f"sqlite:///{db}")
        now = datetime.now(UTC)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            doc = status_document(store, config, now=now)
            times.append(time.perf_counter() - t0)
        ref = []
        with sqlite3.connect(db) as conn:
            for _ in range(runs):
                t0 = time.perf_counter()
                conn.execute("SELECT count(*) FROM firings").fetchone()
                ref.append(time.perf_counter() - t0)
        store.close()
        med, ref_med = statistics.median(times) * 1000, statistics.median(ref) * 1000
        print(f"canary status over {firings:,} firings, {len(doc['guards'])} guards, median of {runs}:")
        print(f"  status    {med:.1f} ms  (p max {max(times) * 1000:.1f} ms)   target < 50 ms: "
              f"{'met' if med < 50 else 'MISSED'}")
        print(f"  reference SELECT count(*) FROM firings: {ref_med:.1f} ms  (ratio {med / ref_med:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--firings", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    idle_daemon(args.seconds)
    status_query(args.firings, args.runs)


if __name__ == "__main__":
    main()
