"""``canary audit`` throughput on a generated agent log, against GNU grep in the same run.

    uv run python tests/bench/bench_audit.py                  # ~1 GB, best of 3
    uv run python tests/bench/bench_audit.py --size-mb 100    # quick run
    uv run python tests/bench/bench_audit.py --keep           # keep (and reuse) the log
    uv run python tests/bench/bench_audit.py --profile        # cProfile one audit pass

The log (~250 B lines: ISO timestamp, level, component, message) holds about
0.1 % guard rejections spread over 8 guards and one ``task finished`` activity
line per 100 lines. The audit runs in this process; the reference is
``grep -c -E`` with the same patterns (guards and activity), run as one
alternation and as ``-e`` per pattern, under the C and the inherited locale:
the fastest of the four is the reference. The file is read once first so both
see a hot page cache. Counts are checked against what was generated and
against grep. Peak RSS is the audit's (the log is generated in a child
process). Target: audit time within 2x of grep.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "_out"
SEED = 20261129
LOG_NAME = "agent.log"
META_NAME = "meta.json"
GUARD_EVERY = 1000  # one guard line per 1000 lines: 0.1 %
ACTIVITY_EVERY = 100  # one activity line per 100 lines
STEP_MS = 20  # time between consecutive lines
ACTIVITY = "task finished"

#: name -> (match regex, valid for Python ``re`` and POSIX ERE alike; line maker)
GUARDS: dict[str, str] = {
    "citation": r"CitationGuard: rejected url=https?://[a-z0-9.-]+",
    "quote": r'QuoteGuard: rejected quote="[^"]+"',
    "version": r"VersionGuard: rejected version=v?[0-9]+\.[0-9]+",
    "date": r"DateGuard: rejected date=[0-9]{4}-[0-9]{2}-[0-9]{2}",
    "span": r"SpanGrounding: rejected entity=",
    "denial": r"EvidenceDenial: rejected (claim|reason)=",
    "provenance": r"ProvenanceGuard: rejected source=[a-z]+",
    "arithmetic": r'ArithmeticGuard: rejected expr="[0-9]+ [-+*/] [0-9]+',
}

_VOCABULARY = (
    "the agent fetched page parsed observation tool call result planner step memory "
    "retrieval context window tokens budget answer draft citation source quote span entity "
    "version release changelog date published minimum amount euros monthly permit policy "
    "document section table figure evidence summary check passed cache hit miss retry "
    "backoff latency upstream model request response stream chunk finish reason length"
)
WORDS = _VOCABULARY.split()
COMPONENTS = (
    "orchestrator", "planner", "llm.client", "tools.browser", "tools.fetch", "memory",
    "retriever", "guards", "scheduler", "answer.writer", "cache", "telemetry",
)
HOSTS = ("docs.python.org", "example.org", "en.wikipedia.org", "github.com", "pypi.org",
         "data.europa.eu", "www.bundesregierung.de", "arxiv.org")


# -- generation ---------------------------------------------------------------


def _words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _ids(rng: random.Random) -> str:
    return f"[run={rng.getrandbits(32):08x} step={rng.randint(1, 60)}]"


def _pad(rng: random.Random, body: str) -> str:
    """Bring a message to a realistic length (~250 B lines, 180-330 B)."""
    target = rng.randint(150, 300)
    if len(body) < target:
        body += " ctx=" + _words(rng, 30, 40).replace(" ", "_")[: target - len(body)]
    return body


def _filler(rng: random.Random) -> str:
    """One ordinary line body (level, component, message), matching no guard and no activity."""
    kind = rng.random()
    comp = rng.choice(COMPONENTS)
    if kind < 0.25:
        body = (f"INFO  {comp:<14} {_ids(rng)} llm call model=qwen2.5-14b prompt_tokens="
                f"{rng.randint(200, 9000)} completion_tokens={rng.randint(10, 900)} "
                f"latency_ms={rng.randint(80, 9000)} finish={rng.choice(['stop', 'length'])}")
    elif kind < 0.45:
        host = rng.choice(HOSTS)
        body = (f"DEBUG {comp:<14} {_ids(rng)} fetch GET https://{host}/"
                f"{_words(rng, 2, 4).replace(' ', '/')} status={rng.choice([200, 200, 301, 404])}"
                f" bytes={rng.randint(300, 400000)}")
    elif kind < 0.60:
        body = (f"INFO  {comp:<14} {_ids(rng)} tool result name={rng.choice(['search', 'read', 'calc'])}"
                f" chars={rng.randint(10, 50000)} summary=\"{_words(rng, 5, 14)}\"")
    elif kind < 0.70:
        guard = rng.choice(["CitationGuard", "QuoteGuard", "VersionGuard", "DateGuard",
                            "SpanGrounding", "EvidenceDenial", "ProvenanceGuard",
                            "ArithmeticGuard"])
        body = (f"DEBUG guards         {_ids(rng)} {guard}: accepted checked={rng.randint(1, 40)}"
                f" elapsed_us={rng.randint(5, 900)}")
    elif kind < 0.85:
        body = f"DEBUG {comp:<14} {_ids(rng)} {_words(rng, 8, 22)}"
    elif kind < 0.97:
        body = (f"INFO  {comp:<14} {_ids(rng)} memory store key={rng.getrandbits(64):016x} "
                f"items={rng.randint(1, 500)} note=\"{_words(rng, 4, 10)}\"")
    elif kind < 0.995:
        body = (f"WARNING {comp:<12} {_ids(rng)} retry attempt={rng.randint(1, 5)} "
                f"reason=\"upstream timeout after {rng.randint(5, 60)}s\" backoff_ms="
                f"{rng.randint(100, 8000)}")
    else:
        body = (f"ERROR {comp:<14} {_ids(rng)} Traceback (most recent call last): "
                f"File \"agent/{rng.choice(COMPONENTS)}.py\", line {rng.randint(1, 900)}")
    return _pad(rng, body)


def _guard_body(rng: random.Random, name: str) -> str:
    n = rng.getrandbits(40)
    detail = {
        "citation": f"CitationGuard: rejected url=https://{n:010x}.example.org/permit "
                    "reason=not-fetched",
        "quote": f'QuoteGuard: rejected quote="{_words(rng, 4, 9)}" reason=not-in-observations',
        "version": f"VersionGuard: rejected version=v{rng.randint(1, 30)}.{rng.randint(0, 99)}"
                   f".{rng.randint(0, 20)} known=v3.12.7",
        "date": f"DateGuard: rejected date=20{rng.randint(10, 30)}-{rng.randint(1, 12):02d}-"
                f"{rng.randint(1, 28):02d} reason=not-in-observations",
        "span": f"SpanGrounding: rejected entity=\"{_words(rng, 1, 3)}\" span={rng.randint(0, 900)}",
        "denial": f"EvidenceDenial: rejected {rng.choice(['claim', 'reason'])}=\"the page was "
                  f"empty\" page_chars={rng.randint(100, 90000)}",
        "provenance": f"ProvenanceGuard: rejected source={rng.choice(['memory', 'prior', 'guess'])}"
                      f" fact=\"{_words(rng, 3, 6)}\"",
        "arithmetic": f'ArithmeticGuard: rejected expr="{rng.randint(1, 999)} '
                      f'{rng.choice("+-*/")} {rng.randint(1, 999)}" claimed={rng.randint(1, 99999)}',
    }[name]
    return _pad(rng, f"WARNING guards       {_ids(rng)} {detail}")


def generate(path: Path, size: int, seed: int = SEED) -> dict[str, object]:
    """Write ``size`` bytes (rounded up to a whole line) of log to ``path``; return its truth."""
    import re

    rng = random.Random(seed)
    every_pattern = re.compile("|".join([*GUARDS.values(), ACTIVITY]))
    pool = []
    while len(pool) < 20000:
        body = _filler(rng)
        if every_pattern.search(body) is None:
            pool.append(body)
    names = list(GUARDS)
    counts = dict.fromkeys(names, 0)
    activity = 0
    lines = 0
    written = 0
    start = int(datetime(2026, 11, 28, tzinfo=UTC).timestamp())
    sec = -1
    prefix = ""
    block = 20000
    with open(path, "wb") as out:
        while written < size:
            parts = []
            picks = rng.choices(range(len(pool)), k=block)
            for k in range(block):
                i = lines + k
                ms = i * STEP_MS
                if ms // 1000 != sec:
                    sec = ms // 1000
                    stamp = time.gmtime(start + sec)
                    prefix = time.strftime("%Y-%m-%dT%H:%M:%S.", stamp)
                if i % GUARD_EVERY == GUARD_EVERY // 2:
                    name = rng.choice(names)
                    counts[name] += 1
                    body = _guard_body(rng, name)
                elif i % ACTIVITY_EVERY == ACTIVITY_EVERY - 1:
                    activity += 1
                    body = _pad(rng, f"INFO  orchestrator   {_ids(rng)} {ACTIVITY} "
                                f"status=ok steps={rng.randint(1, 60)}")
                else:
                    body = pool[picks[k]]
                parts.append(f"{prefix}{ms % 1000:03d}Z {body}\n")
            data = "".join(parts).encode()
            out.write(data)
            written += len(data)
            lines += block
    return {"size": written, "lines": lines, "guards": counts, "activity": activity,
            "seed": seed, "requested": size}


# -- setup --------------------------------------------------------------------


def write_config(root: Path, paths: list[str], store_url: str | None = None) -> Path:
    """A canary.toml naming one definition file per guard, the log globs and a scratch store."""
    defs = root / "defs"
    defs.mkdir(exist_ok=True)
    for name, match in GUARDS.items():
        (defs / f"{name}.toml").write_text(
            f"[guard]\nname = \"{name}\"\nmatch = '{match}'\n", encoding="utf-8"
        )
    config = root / "canary.toml"
    listed = ", ".join(json.dumps(p) for p in paths)
    config.write_text(
        'defs = ["defs/*.toml"]\n\n'
        f"[logs]\npaths = [{listed}]\nformat = \"text\"\nactivity = '{ACTIVITY}'\n\n"
        f"[store]\nurl = \"{store_url or 'sqlite:///' + str(root / 'canary.db')}\"\n\n"
        "[alerts]\ndesktop = false\n",
        encoding="utf-8",
    )
    return config


def read_once(path: Path, chunk: int) -> tuple[float, int]:
    """Read the whole file (warms the page cache); seconds and newline count."""
    fd = os.open(path, os.O_RDONLY)
    lines = 0
    started = time.perf_counter()
    try:
        while data := os.read(fd, chunk):
            lines += data.count(b"\n")
    finally:
        os.close(fd)
    return time.perf_counter() - started, lines


def run_grep(args: list[str], env: dict[str, str]) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"grep failed ({done.returncode}): {done.stderr.strip()}")
    return elapsed, int(done.stdout.strip() or 0)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=float, default=1024, help="log size in MB (default 1024)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes of each (best kept)")
    parser.add_argument("--keep", action="store_true",
                        help=f"keep the log under {OUT} and reuse it next time")
    parser.add_argument("--profile", action="store_true", help="cProfile one extra audit pass")
    parser.add_argument("--generate", nargs=2, metavar=("PATH", "BYTES"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.generate:  # the child process that writes the log
        truth = generate(Path(args.generate[0]), int(args.generate[1]))
        print(json.dumps(truth))
        return 0

    size = int(args.size_mb * 1024 * 1024)
    if args.keep:
        root = OUT / f"audit-{size}"
        root.mkdir(parents=True, exist_ok=True)
    else:
        OUT.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="audit-", dir=OUT))
    try:
        return run(root, size, args)
    finally:
        if args.keep:
            print(f"kept      {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
            print(f"removed   {root}")


def run(root: Path, size: int, args: argparse.Namespace) -> int:
    from canary.config.settings import load_config
    from canary.logs.audit import audit

    log = root / LOG_NAME
    meta = root / META_NAME
    truth = json.loads(meta.read_text()) if meta.exists() and log.exists() else None
    if truth is not None and (truth.get("requested") != size or truth.get("seed") != SEED
                              or log.stat().st_size != truth["size"]):
        truth = None
    if truth is None:
        started = time.perf_counter()
        child = subprocess.run(
            [sys.executable, __file__, "--generate", str(log), str(size)],
            capture_output=True, text=True, check=True,
        )
        truth = json.loads(child.stdout)
        meta.write_text(json.dumps(truth))
        print(f"generated {log} in {time.perf_counter() - started:.1f} s")
    else:
        print(f"reusing   {log}")
    config = load_config(path=write_config(root, [str(log)]))

    file_size = log.stat().st_size
    mb = file_size / 1e6
    _, newline_count = read_once(log, 1 << 20)  # small reads: the audit's peak RSS stays its own
    guard_total = sum(truth["guards"].values())
    print(f"machine   {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start")
    print(f"file      {mb:,.1f} MB ({file_size:,} B), {newline_count:,} lines, "
          f"{file_size / newline_count:.0f} B/line")
    print(f"truth     {guard_total:,} guard lines ({guard_total / newline_count:.3%}) over "
          f"{len(truth['guards'])} guards, {truth['activity']:,} activity lines")

    patterns = [*GUARDS.values(), ACTIVITY]
    grep = shutil.which("grep") or "grep"
    inherited = dict(os.environ)
    c_locale = {**os.environ, "LC_ALL": "C"}
    locale_name = inherited.get("LC_ALL") or inherited.get("LANG") or "unset"
    variants = {
        "alternation, LC_ALL=C": ([grep, "-c", "-E", "|".join(patterns), str(log)], c_locale),
        "-e per pattern, LC_ALL=C": (
            [grep, "-c", "-E", *[a for p in patterns for a in ("-e", p)], str(log)], c_locale),
        f"alternation, {locale_name}": ([grep, "-c", "-E", "|".join(patterns), str(log)],
                                        inherited),
        f"-e per pattern, {locale_name}": (
            [grep, "-c", "-E", *[a for p in patterns for a in ("-e", p)], str(log)], inherited),
    }
    grep_times: dict[str, list[float]] = {k: [] for k in variants}
    grep_counts: dict[str, int] = {}
    audit_times: list[float] = []
    rss_before = peak_rss_mb()
    report = None
    for _ in range(args.repeat):
        for name, (cmd, env) in variants.items():
            elapsed, count = run_grep(cmd, env)
            grep_times[name].append(elapsed)
            grep_counts[name] = count
        started = time.perf_counter()
        report = audit(config)
        audit_times.append(time.perf_counter() - started)
    rss_after = peak_rss_mb()
    assert report is not None

    guards_only, guards_only_count = run_grep(
        [grep, "-c", "-E", "|".join(GUARDS.values()), str(log)], c_locale)

    print(f"\ngrep {shutil.which('grep')} -c -E, {len(patterns)} patterns (8 guards + activity),"
          f" best of {args.repeat}:")
    for name, times in grep_times.items():
        print(f"  {name:<30} {min(times):7.3f} s  {mb / min(times):8,.0f} MB/s  "
              f"count {grep_counts[name]:,}")
    ref_name = min(grep_times, key=lambda k: min(grep_times[k]))
    grep_s = min(grep_times[ref_name])
    audit_s = min(audit_times)
    print(f"  reference: {ref_name}")
    print(f"\naudit     best {audit_s:.3f} s (median {statistics.median(audit_times):.3f} s over "
          f"{args.repeat}), {mb / audit_s:,.0f} MB/s, {report.lines / audit_s / 1e6:.2f} M lines/s")
    print(f"grep      {grep_s:.3f} s, {mb / grep_s:,.0f} MB/s")
    ratio = audit_s / grep_s
    verdict = "met" if ratio <= 2 else "MISSED"
    print(f"ratio     audit / grep = {ratio:.2f}x  (target <= 2x: {verdict})")
    print(f"peak RSS  {rss_after:.0f} MB after the audits ({rss_before:.0f} MB before; "
          f"grows {rss_after - rss_before:.0f} MB for a {mb:,.0f} MB file)")
    read_s = min(read_once(log, 8 << 20)[0] for _ in range(2))
    print(f"floor     python os.read 8 MiB + count(b'\\n'), no matching: {read_s:.3f} s "
          f"({mb / read_s:,.0f} MB/s, {read_s / grep_s:.2f}x grep)")
    print(f"load      average {os.getloadavg()[0]:.2f} at the end (other work on the machine "
          "shows up here; figures are best of N)")

    firings = {g.guard: g.firings for g in report.guards}
    audit_sum = sum(firings.values())
    grep_count = grep_counts[ref_name]
    checks = {
        "audit lines == newlines in the file": report.lines == newline_count,
        "per-guard firings == generated": firings == truth["guards"],
        "audit activity == generated": report.activity == truth["activity"],
        "sum(guard firings) + activity == grep -c (all patterns)":
            audit_sum + report.activity == grep_count,
        "sum(guard firings) == grep -c (guard patterns only)": audit_sum == guards_only_count,
        "every grep variant agrees": len(set(grep_counts.values())) == 1,
        "no file errors": all(f.error is None for f in report.files),
    }
    print(f"\ncounts    audit guards {audit_sum:,} + activity {report.activity:,} = "
          f"{audit_sum + report.activity:,}; grep {grep_count:,} (guards only: "
          f"{guards_only_count:,}, {guards_only:.3f} s)")
    print("          " + ", ".join(f"{k} {v}" for k, v in firings.items()))
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")

    if args.profile:
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        audit(config)
        profiler.disable()
        print(f"\nprofile   one audit pass under cProfile: {time.perf_counter() - started:.2f} s")
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
        print(text.getvalue())
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
