"""``canary init`` on a log holding one huge line: time and peak memory, against ``wc -l``.

A log of 51 normal lines (10 of them a citation guard's rejections) with one line of
``--mib`` MiB (a tool's output) in the middle. ``canary init --yes`` runs in a subprocess
with its config and state in a temp dir; its wall time and peak RSS are printed with
``wc -l`` over the same file, in the same run, as the reference.

    uv run python tests/bench/bench_init.py                 # 20 MiB and 150 MiB lines
    uv run python tests/bench/bench_init.py --mib 20
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

FILLER = "tool output 12 https://a.example.com/q 'quoted' abc123def "


def write_log(path: Path, mib: float) -> None:
    with path.open("w", encoding="utf-8") as f:
        for i in range(40):
            f.write(f"2026-12-03T10:00:{i:02d}.000Z INFO  agent task finished id={i}\n")
            if i % 4 == 0:
                f.write(f"2026-12-03T10:00:{i:02d}.500Z WARN  guards CitationGuard: rejected "
                        f"url=https://x{i}.example.com/p not in fetched urls\n")
            if i == 20:  # written a MiB at a time: this process stays small, so do the children it forks
                f.write("2026-12-03T10:00:20.700Z INFO  tool result=")
                block = FILLER * (1048576 // len(FILLER))
                for _ in range(int(mib)):
                    f.write(block)
                f.write("\n")


def timed(argv: list[str], env: dict[str, str], limit: float, out: Path) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MB and exit code of one child (killed after ``limit`` s);
    its stdout goes to ``out``."""
    start = time.monotonic()
    with out.open("w") as sink:
        p = subprocess.Popen(argv, stdout=sink, stderr=subprocess.DEVNULL, env=env)
    timer = threading.Timer(limit, p.kill)
    timer.start()
    try:
        _pid, status, usage = os.wait4(p.pid, 0)
    finally:
        timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    return time.monotonic() - start, usage.ru_maxrss / 1024, p.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", nargs="*", type=float, default=[20.0, 150.0])
    parser.add_argument("--limit", type=float, default=300.0, help="seconds before init is killed")
    args = parser.parse_args()
    print("| line | wc -l | canary init | ratio | init peak RSS | proposed |")
    print("|---|---|---|---|---|---|")
    for mib in args.mib:
        root = Path(tempfile.mkdtemp(prefix="bench-init-"))
        try:
            log = root / "agent.log"
            write_log(log, mib)
            env = dict(os.environ, CANARY_STATE_DIR=str(root / "state"), CANARY_CONFIG_DIR=str(root / "cfg"))
            ref, _rss, _code = timed(["wc", "-l", str(log)], env, args.limit, root / "wc.out")
            took, rss, code = timed(
                [sys.executable, "-m", "canary.cli.main", "init", "--logs", str(log), "--dir",
                 str(root / "project"), "--yes", "--agent-url", "http://127.0.0.1:9/ask"], env, args.limit,
                root / "init.out")
            said = (root / "init.out").read_text(errors="replace")
            proposed = "citation" if "match 'CitationGuard: rejected'" in said else f"none (exit {code})"
            print(f"| {mib:g} MiB | {ref:.3f} s | {took:.1f} s | {took / ref:.0f}x | {rss:.0f} MB | {proposed} |",
                  flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
