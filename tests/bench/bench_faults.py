"""The collectors' fault matrix: real logrotate, a real ``canary daemon``, SIGKILL.

For every rotation mode, both globs (``agent.log`` and ``agent.log*``) and each rate, a
writer appends numbered lines (every 10th a guard line) for ``--seconds`` while the file
is rotated every ``--period`` seconds; live rows SIGKILL the daemon once mid-way and
start it again, "while stopped" rows rotate twice while it is down. The "no O_APPEND" rows'
writer opens the log truncated and writes at its own offset (``./agent > agent.log``), so
after each copytruncate the live file is a hole of NUL bytes, then new lines. At the end every
stored firing is checked against the writer's truth and against every file left on disk:

* lost on disk: a guard line still in some file (plain or .gz) but never counted;
* copytruncate's own: a line in no file at all (written between copy and truncate);
* doubled: a line counted more than once.

    uv run python tests/bench/bench_faults.py                      # the whole matrix
    uv run python tests/bench/bench_faults.py --modes copytruncate --rates 20000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.helpers_logs import GUARD_MATCH, WRITER, guard_seqs, seqs_in_file

EVERY = 10
LOGROTATE = shutil.which("logrotate") or "/usr/sbin/logrotate"

MODES: dict[str, tuple[str, str, bool]] = {
    # name: (logrotate directives or "" for a handler, writer reopen mode, rotate while stopped)
    "create+hup": ("create", "hup", False),
    "create (watched)": ("create", "watched", False),
    "copytruncate": ("copytruncate", "never", False),
    "copytruncate, no O_APPEND": ("copytruncate", "never", False),
    "compress": ("create\n    compress", "hup", False),
    "delaycompress": ("create\n    compress\n    delaycompress", "hup", False),
    "RotatingFileHandler": ("", "rotating", False),
    "TimedRotatingFileHandler": ("", "timed", False),
    "stopped: create": ("create", "hup", True),
    "stopped: RotatingFileHandler": ("", "rotating", True),
    "stopped: copytruncate": ("copytruncate", "never", True),
    "stopped: copytruncate, no O_APPEND": ("copytruncate", "never", True),
    "stopped: compress": ("create\n    compress", "hup", True),
    "stopped: delaycompress": ("create\n    compress\n    delaycompress", "hup", True),
}

HANDLER_WRITER = textwrap.dedent(
    """
    import json, logging, logging.handlers, sys, time
    sys.path.insert(0, sys.argv[5])
    from tests.helpers_logs import line
    path, count, rate, kind = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    if kind == "rotating":
        h = logging.handlers.RotatingFileHandler(path, maxBytes=int(rate * 90), backupCount=20)
    else:
        h = logging.handlers.TimedRotatingFileHandler(path, when="S", interval=1, backupCount=20)
    h.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("w"); log.addHandler(h); log.setLevel(logging.INFO); log.propagate = False
    start = time.monotonic()
    for i in range(count):
        log.info(line(i + 1, EVERY).decode().rstrip("\\n"))
        delay = start + (i + 1) / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    print(json.dumps({"first": 1, "last": count}))
    """
).replace("EVERY", str(EVERY))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(root: Path, glob: str) -> Path:
    (root / "defs").mkdir()
    (root / "defs" / "citation.toml").write_text(f"[guard]\nname = 'citation'\nmatch = '{GUARD_MATCH}'\n")
    paths = str(root / "logs" / ("agent.log*" if glob == "agent.log*" else "agent.log"))
    config = root / "canary.toml"
    config.write_text(
        f'defs = ["defs/*.toml"]\n[model]\nlisten = "127.0.0.1:{free_port()}"\n'
        f'[fixtures]\nlisten = "127.0.0.1:{free_port()}"\n[daemon]\ncontrol = "127.0.0.1:{free_port()}"\n'
        f'[logs]\npaths = ["{paths}"]\n[store]\nurl = "sqlite:///{root / "canary.db"}"\n'
        "[alerts]\ndesktop = false\n"
    )
    return config


#: Seconds the count must stand still before a cell is read: longer than the daemon's
#: rotate_wait (5 s), for which a copy that may be its live file's twin is held unread.
SETTLE = 7.0


class Cell:
    """One run of the matrix."""

    def __init__(
        self, root: Path, mode: str, glob: str, rate: int, seconds: float, period: float,
        *, settle: float = SETTLE,
    ) -> None:
        self.root, self.mode, self.glob, self.rate, self.settle = root, mode, glob, rate, settle
        self.seconds, self.period = seconds, period
        self.directives, self.reopen, self.stopped = MODES[mode]
        self.log = root / "logs" / "agent.log"
        self.log.parent.mkdir(parents=True)  # root may be new
        self.config = write_config(root, glob)
        self.env = dict(os.environ, CANARY_STATE_DIR=str(root / "state"), CANARY_CONFIG_DIR=str(root / "cfg"))
        self.daemon: subprocess.Popen[bytes] | None = None

    def start_daemon(self) -> None:
        with open(self.root / "daemon.err", "ab") as err:
            self.daemon = subprocess.Popen(
                [sys.executable, "-m", "canary.cli.main", "--config", str(self.config), "daemon",
                 "--tick", "0.5"], stdout=subprocess.DEVNULL, stderr=err, env=self.env,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self._beat():
            time.sleep(0.1)

    def _beat(self) -> bool:
        """Whether the daemon just started has beaten (its pid in the heartbeat row)."""
        assert self.daemon is not None
        try:
            with sqlite3.connect(self.root / "canary.db", timeout=30) as conn:
                row = conn.execute("SELECT pid FROM heartbeat").fetchone()
        except sqlite3.Error:
            return False
        return row is not None and row[0] == self.daemon.pid

    def kill_daemon(self) -> None:
        assert self.daemon is not None
        self.daemon.send_signal(signal.SIGKILL)
        self.daemon.wait()

    def writer(self) -> subprocess.Popen[str]:
        count = int(self.rate * self.seconds)
        if self.reopen in ("rotating", "timed"):
            argv = [sys.executable, "-c", HANDLER_WRITER, str(self.log), str(count), str(self.rate),
                    self.reopen, str(Path(__file__).resolve().parents[2])]
        else:
            argv = [sys.executable, str(WRITER), str(self.log), "--count", str(count), "--rate",
                    str(self.rate), "--every", str(EVERY), "--reopen", self.reopen,
                    *(["--no-append"] if self.mode.endswith("no O_APPEND") else [])]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def rotate(self, writer: subprocess.Popen[str]) -> None:
        if not self.directives:
            return
        post = f"\n    postrotate\n        kill -HUP {writer.pid}\n    endscript" if self.reopen == "hup" else ""
        conf = self.root / "logrotate.conf"
        conf.write_text(f"{self.log} {{\n    rotate 50\n    missingok\n    nodateext\n    {self.directives}{post}\n}}\n")
        subprocess.run([LOGROTATE, "-f", "-s", str(self.root / "lr.state"), str(conf)],
                       capture_output=True, check=False, timeout=30)

    def run(self) -> dict[str, object]:
        self.start_daemon()
        w = self.writer()
        began = time.monotonic()
        killed = False
        while w.poll() is None:
            time.sleep(self.period)
            half = time.monotonic() - began > self.seconds / 2
            if half and not killed:
                killed = True
                self.kill_daemon()
                if self.stopped:
                    self.rotate(w)
                    time.sleep(self.period)
                    self.rotate(w)
                self.start_daemon()
            elif w.poll() is None:
                self.rotate(w)
        out, _err = w.communicate()
        summary = json.loads(out)
        expected = guard_seqs(int(summary["first"]), int(summary["last"]), EVERY)
        self._settle()
        assert self.daemon is not None
        self.daemon.send_signal(signal.SIGTERM)
        self.daemon.wait(60)
        counted = self._counted()
        on_disk: set[int] = set()
        for path in self.log.parent.iterdir():
            on_disk.update(seqs_in_file(path))
        lost = expected - set(counted)
        return {
            "mode": self.mode, "glob": self.glob, "rate": self.rate, "written": len(expected),
            "counted": len(counted), "lost on disk": len(lost & on_disk),
            "copytruncate's own": len(lost - on_disk), "doubled": sum(n - 1 for n in counted.values() if n > 1),
            "tracebacks": (self.root / "daemon.err").read_text(errors="replace").count("Traceback"),
        }

    def _counted(self) -> Counter[int]:
        from tests.helpers_logs import firing_seqs

        return firing_seqs(self.root / "canary.db")

    def _settle(self) -> None:
        """Wait until the count stops moving for ``settle`` s (the daemon caught up)."""
        last, still = -1, time.monotonic()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            n = sum(self._counted().values())
            if n != last:
                last, still = n, time.monotonic()
            elif time.monotonic() - still > self.settle:
                return
            time.sleep(0.3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", nargs="*", default=list(MODES))
    parser.add_argument("--globs", nargs="*", default=["agent.log", "agent.log*"])
    parser.add_argument("--rates", nargs="*", type=int, default=[5000, 20000])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--period", type=float, default=0.7, help="seconds between rotations")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    header = ["mode", "glob", "rate", "written", "counted", "lost on disk", "copytruncate's own",
              "doubled", "tracebacks"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    failed = 0
    for mode in args.modes:
        for glob in args.globs:
            for rate in args.rates:
                root = Path(tempfile.mkdtemp(prefix="faults-"))
                try:
                    row = Cell(root, mode, glob, rate, args.seconds, args.period).run()
                finally:
                    shutil.rmtree(root, ignore_errors=True)
                failed += bool(row["lost on disk"] or row["doubled"] or row["tracebacks"])
                print("| " + " | ".join(str(row[h]) for h in header) + " |", flush=True)
    print(f"load average at end: {os.getloadavg()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
