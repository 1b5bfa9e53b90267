"""Daemon restarts under organic load: refused and failed agent requests, and the latency they add.

    uv run python tests/bench/bench_restart.py                 # 20 restarts, SIGTERM
    uv run python tests/bench/bench_restart.py --restarts 5    # quicker
    uv run python tests/bench/bench_restart.py --signal kill   # crashes instead of clean stops
    uv run python tests/bench/bench_restart.py --manager none  # started by hand: no sockets held
    uv run python tests/bench/bench_restart.py --manager none --proxy in-daemon   # the proxy inside the daemon

With ``--manager sockets`` (the default) this process plays systemd: it holds the proxy's and
fixture server's listening sockets and starts each ``canary daemon`` with them (``LISTEN_FDS``, as
``tests/daemon/activation.py`` does). With ``--manager none`` each daemon is started by hand, as
a user without a service manager would: the daemon serves the proxy from a process of its own
that outlives it (``canary.runs.proxylink``), or, with ``--proxy in-daemon``, inside itself
(as every daemon did before), so its restarts are the reference. An agent process (``tests/daemon/organic_agent.py``) sends chat completions through the
proxy at ``--rate`` per second (open loop, keep-alive, no retry) to a fake model server on
loopback, and a second agent sends the same load straight to the model server in the same
moment: the reference. The daemon is stopped and started ``--restarts`` times under that load.
Latency is measured from the moment a request was due to its full answer, so time spent queued
in the kernel counts. A restart lasts from the stop signal to the next daemon's proxy serving
(its first accept), which comes before the rest of the daemon is up.

Printed: requests, refused (connection refused), failed (anything else), p50 and p99 of each
phase, p99 of the requests due while a restart was under way, and the added p99 against the
direct connection.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from canary.demo.live import free_port  # noqa: E402
from canary.demo.model import create_model_server  # noqa: E402
from canary.proxy.serving import BackgroundServer  # noqa: E402
from tests.daemon import activation  # noqa: E402

AGENT = ROOT / "tests" / "daemon" / "organic_agent.py"
#: A daemon that serves the proxy inside itself, as every daemon started by hand did before.
IN_DAEMON = """
import sys
from datetime import timedelta
from canary import locations
from canary.config.settings import load_config
from canary.daemon.loop import Daemon
from canary.daemon.steps import setup_logging
config = load_config(path=__import__("pathlib").Path(sys.argv[1]))
setup_logging(locations.project_log(config.path, config.project), project=config.project)
sys.exit(Daemon(config, tick=1.0, spread=timedelta(seconds=60)).run())
"""


def config_text(root: Path, proxy: str, fixtures: str, upstream: str) -> str:
    return f"""defs = []
[model]
listen = "{proxy}"
upstream = "{upstream}"
[fixtures]
listen = "{fixtures}"
[daemon]
control = "127.0.0.1:{free_port()}"
[store]
url = "sqlite:///{root / 'canary.db'}"
[alerts]
desktop = false
"""


class Harness:
    """The sockets, the model server, and one daemon at a time."""

    def __init__(self, root: Path, *, manager: str = "sockets", proxy: str = "process") -> None:
        self.root = root
        self.manager = manager
        self.proxy = proxy
        self.model = BackgroundServer(create_model_server(), name="model").start()
        self.sockets = {"proxy": activation.listener(), "fixtures": activation.listener()}
        addresses = {name: activation.address(sock) for name, sock in self.sockets.items()}
        if manager == "none":
            for sock in self.sockets.values():
                sock.close()
            self.sockets = {}
        self.config = root / "canary.toml"
        self.config.write_text(config_text(root, addresses["proxy"], addresses["fixtures"], self.model.url))
        self.url = f"http://{addresses['proxy']}/v1/chat/completions"
        self.proxy_pids: set[int] = set()
        self.direct = f"{self.model.url}/v1/chat/completions"
        self.n = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start the next daemon; return when its proxy served (wall clock), once it is all up."""
        err = self.root / f"daemon{self.n}.err"
        self.n += 1
        argv = [sys.executable, "-m", "canary.cli.main", "--config", str(self.config), "daemon", "--tick", "1"]
        if self.proxy == "in-daemon":
            argv = [sys.executable, "-c", IN_DAEMON, str(self.config)]
        if self.sockets:
            self.proc = activation.spawn(argv, self.sockets, stderr=err)
        else:
            with open(err, "ab") as stream:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=stream)
        deadline = time.monotonic() + 120
        serving = None
        while True:
            text = err.read_text(errors="replace")
            if serving is None and ("model proxy serves on" in text or "is already running; linking" in text):
                serving = time.time()
            if "daemon up" in text:
                found = re.search(r"model proxy serves on \S+ \(pid (\d+)\)", text)
                if found:
                    self.proxy_pids.add(int(found.group(1)))
                return serving if serving is not None else time.time()
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the daemon did not come up:\n{err.read_text(errors='replace')}")
            time.sleep(0.01)

    def stop(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(120)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop(signal.SIGTERM)
        for pid in self.proxy_pids:  # the proxy process a daemon started, which outlives it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        self.model.stop()
        for sock in self.sockets.values():
            sock.close()


def load(harness: Harness, rate: float, tag: str, url: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    stop, out = harness.root / f"{tag}.stop", harness.root / f"{tag}.json"
    proc = subprocess.Popen([sys.executable, str(AGENT), url, str(rate), str(stop), str(out)])
    return proc, stop, out


def finish(agent: tuple[subprocess.Popen[bytes], Path, Path]) -> list[list[Any]]:
    proc, stop, out = agent
    stop.touch()
    try:
        proc.wait(300)
    except subprocess.TimeoutExpired:
        proc.kill()  # an agent starved of CPU falls behind its schedule; never leave it running
        proc.wait()
        raise SystemExit("the agent did not finish within 300 s of its stop; try a lower --rate") from None
    results: list[list[Any]] = json.loads(out.read_text())
    return results


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(results: list[list[Any]]) -> dict[str, Any]:
    ok = [r[1] for r in results if r[2] == "ok"]
    return {
        "requests": len(results),
        "refused": sum(r[2] == "refused" for r in results),
        "failed": sum(r[2] == "failed" for r in results),
        "p50_ms": round(pct(ok, 0.50) * 1000, 1),
        "p99_ms": round(pct(ok, 0.99) * 1000, 1),
        "max_ms": round(max(ok, default=float("nan")) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--restarts", type=int, default=20)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--serve", type=float, default=1.0, help="seconds each daemon serves before its stop")
    parser.add_argument("--signal", choices=["term", "kill"], default="term")
    parser.add_argument("--manager", choices=["sockets", "none"], default="sockets",
                        help="a service manager holds the sockets (sockets), or the daemon is started by hand")
    parser.add_argument("--proxy", choices=["process", "in-daemon"], default="process",
                        help="with --manager none: the proxy in a process of its own, or inside the daemon")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sig = signal.SIGTERM if args.signal == "term" else signal.SIGKILL
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        os.environ["CANARY_STATE_DIR"] = str(Path(tmp) / "state")
        harness = Harness(Path(tmp), manager=args.manager, proxy=args.proxy)
        try:
            harness.start()
            windows: list[tuple[float, float]] = []
            agent = load(harness, args.rate, "restarts", harness.url)
            direct = load(harness, args.rate, "reference", harness.direct)  # the same load, in the same moment
            for _ in range(args.restarts):
                time.sleep(args.serve)
                down = time.time()
                harness.stop(sig)
                windows.append((down, harness.start()))
            time.sleep(args.serve)
            restarts = finish(agent)
            reference = finish(direct)
        finally:
            harness.close()
    during = [r for r in restarts if any(a <= r[0] <= b for a, b in windows)]
    figures = {
        "reference": summary(reference),
        "restarts": summary(restarts),
        "during_restarts": summary(during),
        "restart_s": round(statistics.median(b - a for a, b in windows), 2) if windows else None,
    }
    ref_p99 = figures["reference"]["p99_ms"]
    print(f"manager {args.manager}, proxy {args.proxy if args.manager == 'none' else 'in-daemon, on held sockets'}")
    print(f"{args.restarts} restarts ({args.signal}), {args.rate:g} req/s, median restart "
          f"{figures['restart_s']} s (stop signal to the next daemon's proxy serving)")
    print(f"{'phase':<18}{'requests':>9}{'refused':>9}{'failed':>8}{'p50 ms':>9}{'p99 ms':>10}{'max ms':>10}")
    for name in ("reference", "restarts", "during_restarts"):
        f = figures[name]
        print(f"{name:<18}{f['requests']:>9}{f['refused']:>9}{f['failed']:>8}{f['p50_ms']:>9}{f['p99_ms']:>10}"
              f"{f['max_ms']:>10}")
    print("reference: the same load straight to the model server, no proxy, at the same time")
    print(f"added p99: {figures['restarts']['p99_ms'] - ref_p99:.1f} ms over all requests, "
          f"{figures['during_restarts']['p99_ms'] - ref_p99:.1f} ms over those due during a restart")
    kinds = collections.Counter(str(r[3])[:120] for r in restarts + reference if r[2] != "ok")
    for kind, n in kinds.most_common(5):
        print(f"failed x{n}: {kind}")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
