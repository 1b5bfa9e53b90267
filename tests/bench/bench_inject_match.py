"""``inject_at = { match = ... }`` on model request bodies: the registry's decision per call.

For each body size, the time ``Registry.intercept`` takes for a call that carries a run's nonce
and does not match, with a plain match and with ``(.*a){6}$``, against one ``bytes.find`` pass
over the same body (the reference); then Python's ``re`` on that pattern, the way
the body was searched before, on small bodies only, each in a subprocess killed at ``--cap``.

    uv run python tests/bench/bench_inject_match.py
    uv run python tests/bench/bench_inject_match.py --sizes 1000,100000 --repeat 20
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

from canary.config.definitions import MatchAt
from canary.proxy.app import ModelCall
from canary.runs.inflight import ActiveRun
from canary.runs.registry import Registry

NONCE = "k3v9abcdefghijklmnop"
EVIL = r"(.*a){6}$"


def body(size: int) -> bytes:
    """A chat request of ``size`` bytes with an `a` in every ten characters, not ending in one."""
    head = '{"messages": [{"role": "user", "content": "' + NONCE + " "
    return (head + ("bbbbbbbbba" * (size // 10))[: max(0, size - len(head) - 5)] + 'b"}]}').encode()


def one_pass(payload: bytes, repeat: int) -> float:
    """The reference: one ``bytes.find`` over the whole body (a memchr-speed pass)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        payload.find(b"\x00absent")
        best = min(best, time.perf_counter() - started)
    return best


def per_call(inject_at: object, payload: bytes, repeat: int) -> float:
    registry = Registry(has_upstream=True)
    now = time.time()
    registry.add(ActiveRun(run_id=1, guard="g", nonce=NONCE, inject_at=inject_at,  # type: ignore[arg-type]
                           inject_text="x", repair_text=None, page="", started=now, deadline=now + 3600))
    call = ModelCall("/v1/chat/completions", "chat", payload, False)
    registry.intercept(call)  # compile once
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        assert registry.intercept(call) is None
        best = min(best, time.perf_counter() - started)
    return best


def python_re(size: int, cap: float) -> float | None:
    code = ("import re, sys, time; b = sys.stdin.buffer.read().decode(); t = time.perf_counter(); "
            f"re.search({EVIL!r}, b); print(time.perf_counter() - t)")
    try:
        done = subprocess.run([sys.executable, "-c", code], input=body(size), capture_output=True,
                              timeout=cap, check=True)
    except subprocess.TimeoutExpired:
        return None
    return float(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000,1000000,8000000")
    parser.add_argument("--re-sizes", default="100,200,400,800,1600")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--cap", type=float, default=20.0, help="seconds before re's subprocess is killed")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    plain = MatchAt(re.compile(r'"role":\s*"tool"'))
    evil = MatchAt(re.compile(EVIL))
    print(f"{'body':>10}  {'one pass':>10}  {'plain match':>16}  {EVIL + ' match':>22}")
    for size in (int(s) for s in args.sizes.split(",")):
        payload = body(size)
        ref = max(one_pass(payload, args.repeat), 1e-7)
        a, b = per_call(plain, payload, args.repeat), per_call(evil, payload, args.repeat)
        print(f"{size:>10}  {ref * 1e3:>8.3f}ms  {a * 1e3:>8.3f}ms {a / ref:>5.1f}x  "
              f"{b * 1e3:>12.3f}ms {b / ref:>6.1f}x")
    print(f"\nPython re.search({EVIL!r}) on the same bodies (before), against the native search:")
    for size in (int(s) for s in args.re_sizes.split(",")):
        took = python_re(size, args.cap)
        native = per_call(evil, body(size), args.repeat)
        shown = f"> {args.cap:.0f} s (killed)" if took is None else f"{took * 1e3:.1f} ms"
        ratio = "" if took is None else f"  {took / native:,.0f}x the native search"
        print(f"{size:>10}  re: {shown}{ratio}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
