"""``canary audit`` on a generated agent log, against GNU grep and ripgrep in the same run.

    uv run python tests/bench/bench_audit.py                  # look-alike log, ~1 GB, best of 3
    uv run python tests/bench/bench_audit.py --size-mb 100    # quick run
    uv run python tests/bench/bench_audit.py --shape plain    # the earlier log shape
    uv run python tests/bench/bench_audit.py --shape utf8     # look-alike, 1 line in 100 non-ASCII
    uv run python tests/bench/bench_audit.py --keep           # keep (and reuse) the log
    uv run python tests/bench/bench_audit.py --profile        # cProfile one audit pass

The default log is look-alike heavy: besides 0.1 % guard rejections over 128
guards, 30 % of lines are accept, debug, router and tool lines that share the
guards' words, the activity pattern matches 10 % of lines and 3 % more look like
it. ``--shape plain`` keeps the earlier log (8 guards, 0.1 % rejections, 1 %
activity, few near misses). At each guard count (``--guards``, default
1,8,32,128) the audit runs in this process on a config of the first N guards and
the activity pattern; the references are ``grep -c -E`` with the same patterns
(alternation and ``-e`` per pattern, C and inherited locale: the fastest) and
ripgrep when installed, passes alternating, on a hot page cache. Every count is
checked against what was generated and against grep and ripgrep. Target: audit
time at most grep's, aim for half.
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
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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


# -- the look-alike profile (the default) ----------------------------------------
# Real agent logs also log every guard's accepts and name guards in router and tool
# lines: lines that share a guard pattern's literal without firing it.

BASES = ("Citation", "Quote", "Version", "Date", "Span", "Evidence", "Provenance", "Arithmetic")
LOOKALIKE_ACTIVITY = "task (finished|done) status=ok"
LOOKALIKE_GUARDS = 128
FIRING_EVERY = 1000  # 0.1 % of lines fire a guard
ACTIVITY_SHARE = 0.10  # the activity pattern matches 10 % of lines
LOOKALIKE_SHARE = 0.30  # guard look-alikes
ACTIVITY_LOOKALIKE_SHARE = 0.03


def lookalike_guards(count: int = LOOKALIKE_GUARDS) -> dict[str, tuple[str, str]]:
    """name -> (class name in the log, match regex valid for Python re, POSIX ERE and ripgrep)."""
    out = {}
    for i in range(count):
        base = BASES[i % len(BASES)]
        suffix = "" if i < len(BASES) else str(i // len(BASES))
        cls = f"{base}{suffix}Guard"
        out[f"{base.lower()}{suffix}"] = (cls, f"{cls}: (rejected|blocked) [a-z]+=[^ ]+")
    return out


def _lookalike(rng: random.Random, name: str, cls: str) -> str:
    n = rng.randint(0, 40)
    kind = rng.randrange(6)
    body = [
        f"DEBUG guards         {_ids(rng)} {cls}: accepted checked={n} elapsed_us={n * 7}",
        f"DEBUG guards         {_ids(rng)} {cls}: rejected 0 of {n} claims",
        f"INFO  guards         {_ids(rng)} guard={name} action=accept urls={n}",
        f"DEBUG router         {_ids(rng)} routing step={n} to {cls}: rejected-list={n} entries",
        f"DEBUG tools.fetch    {_ids(rng)} {cls}: blocked 0 urls of {n}",
        f"INFO  planner        {_ids(rng)} {cls} checked {n} dates: rejected none",
    ][kind]
    return _pad(rng, body)


def generate_lookalike(
    path: Path, size: int, seed: int = SEED, *, utf8: bool = False
) -> dict[str, object]:
    """Write ``size`` bytes of a look-alike-heavy log to ``path``; return its truth.

    With ``utf8``, one line in 100 ends with a non-ASCII word (matching nothing).
    """
    import re

    rng = random.Random(seed)
    guards = lookalike_guards()
    names = list(guards)
    every_pattern = re.compile("|".join([*(p for _, p in guards.values()), LOOKALIKE_ACTIVITY]))
    pool: list[str] = []
    lookalikes: list[str] = []
    while len(pool) < 20000:
        body = _filler(rng)
        if every_pattern.search(body) is None:
            pool.append(body)
    while len(lookalikes) < 40000:
        # half of them name one of the first 8 guards, so even one guard has many look-alikes
        name = rng.choice(names[: len(BASES)] if rng.random() < 0.5 else names)
        body = _lookalike(rng, name, guards[name][0])
        if every_pattern.search(body) is None:
            lookalikes.append(body)
    counts = dict.fromkeys(names, 0)
    activity = lines = written = 0
    start = int(datetime(2026, 11, 28, tzinfo=UTC).timestamp())
    sec = -1
    prefix = ""
    block = 20000
    with open(path, "wb") as out:
        while written < size:
            parts = []
            for k in range(block):
                i = lines + k
                ms = i * STEP_MS
                if ms // 1000 != sec:
                    sec = ms // 1000
                    prefix = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(start + sec))
                roll = rng.random()
                if i % FIRING_EVERY == FIRING_EVERY // 2:
                    name = rng.choice(names[: len(BASES)] if rng.random() < 0.5 else names)
                    counts[name] += 1
                    word = rng.choice(["rejected", "blocked"])
                    body = _pad(rng, f"WARNING guards       {_ids(rng)} {guards[name][0]}: {word} "
                                f"url=https://{rng.getrandbits(40):010x}.example.org/p reason=x")
                elif roll < ACTIVITY_SHARE:
                    activity += 1
                    body = _pad(rng, f"INFO  orchestrator   {_ids(rng)} task "
                                f"{rng.choice(['finished', 'done'])} status=ok steps={i % 60}")
                elif roll < ACTIVITY_SHARE + ACTIVITY_LOOKALIKE_SHARE:
                    body = _pad(rng, f"INFO  orchestrator   {_ids(rng)} task finished "
                                f"status={rng.choice(['error', 'retry', 'cancelled'])}")
                elif roll < ACTIVITY_SHARE + ACTIVITY_LOOKALIKE_SHARE + LOOKALIKE_SHARE:
                    body = lookalikes[rng.randrange(len(lookalikes))]
                else:
                    body = pool[rng.randrange(len(pool))]
                tail = " note=Grüße" if utf8 and i % 100 == 0 else ""
                parts.append(f"{prefix}{ms % 1000:03d}Z {body}{tail}\n")
            data = "".join(parts).encode()
            out.write(data)
            written += len(data)
            lines += block
    return {"size": written, "lines": lines, "guards": counts, "activity": activity,
            "seed": seed, "requested": size, "profile": "utf8" if utf8 else "lookalike"}


# -- setup --------------------------------------------------------------------


def write_config(
    root: Path, paths: list[str], store_url: str | None = None, *,
    guards: dict[str, str] | None = None, activity: str = ACTIVITY,
) -> Path:
    """A canary.toml naming one definition file per guard, the log globs and a scratch store."""
    defs = root / "defs"
    shutil.rmtree(defs, ignore_errors=True)
    defs.mkdir()
    for name, match in (GUARDS if guards is None else guards).items():
        (defs / f"{name}.toml").write_text(
            f"[guard]\nname = \"{name}\"\nmatch = '{match}'\n", encoding="utf-8"
        )
    config = root / "canary.toml"
    listed = ", ".join(json.dumps(p) for p in paths)
    config.write_text(
        'defs = ["defs/*.toml"]\n\n'
        f"[logs]\npaths = [{listed}]\nformat = \"text\"\nactivity = '{activity}'\n\n"
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
    parser.add_argument("--shape", choices=["lookalike", "plain", "utf8"], default="lookalike",
                        help="lookalike (default): accept and router lines share the guards' "
                             "literals; plain: the earlier log with few near misses; utf8: the "
                             "look-alike log with one line in 100 non-ASCII")
    parser.add_argument("--guards", default="1,8,32,128",
                        help="guard counts to measure, comma-separated (plain has 8 at most)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes of each (best kept)")
    parser.add_argument("--keep", action="store_true",
                        help=f"keep the log under {OUT} and reuse it next time")
    parser.add_argument("--profile", action="store_true", help="cProfile one extra audit pass")
    parser.add_argument("--generate", nargs=3, metavar=("SHAPE", "PATH", "BYTES"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.generate:  # the child process that writes the log
        shape, path, nbytes = args.generate
        if shape == "plain":
            print(json.dumps(generate(Path(path), int(nbytes))))
        else:
            print(json.dumps(generate_lookalike(Path(path), int(nbytes), utf8=shape == "utf8")))
        return 0

    size = int(args.size_mb * 1024 * 1024)
    if args.keep:
        root = OUT / f"audit-{args.shape}-{size}"
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


def ensure_log(root: Path, size: int, shape: str) -> tuple[Path, dict[str, Any]]:
    """The log of ``shape`` under ``root`` (generated in a child process unless kept) and its truth."""
    log = root / LOG_NAME
    meta = root / META_NAME
    truth = json.loads(meta.read_text()) if meta.exists() and log.exists() else None
    if truth is not None and (truth.get("requested") != size or truth.get("seed") != SEED
                              or truth.get("profile", "plain") != shape
                              or log.stat().st_size != truth["size"]):
        truth = None
    if truth is None:
        started = time.perf_counter()
        child = subprocess.run(
            [sys.executable, __file__, "--generate", shape, str(log), str(size)],
            capture_output=True, text=True, check=True,
        )
        truth = json.loads(child.stdout)
        meta.write_text(json.dumps(truth))
        print(f"generated {log} in {time.perf_counter() - started:.1f} s")
    else:
        print(f"reusing   {log}")
    return log, truth


def run(root: Path, size: int, args: argparse.Namespace) -> int:
    from canary.config.settings import load_config
    from canary.logs.audit import audit

    log, truth = ensure_log(root, size, args.shape)
    if args.shape != "plain":
        every_guard = {name: pattern for name, (_, pattern) in lookalike_guards().items()}
        activity = LOOKALIKE_ACTIVITY
    else:
        every_guard, activity = dict(GUARDS), ACTIVITY
    counts = sorted({min(int(n), len(every_guard)) for n in args.guards.split(",")})

    file_size = log.stat().st_size
    mb = file_size / 1e6
    _, newline_count = read_once(log, 1 << 20)  # warms the page cache
    guard_total = sum(truth["guards"].values())
    print(f"machine   {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start")
    print(f"file      {args.shape} profile, {mb:,.1f} MB ({file_size:,} B), {newline_count:,} "
          f"lines, {file_size / newline_count:.0f} B/line")
    print(f"truth     {guard_total:,} guard lines ({guard_total / newline_count:.3%}) over "
          f"{len(truth['guards'])} guards, {truth['activity']:,} activity lines "
          f"({truth['activity'] / newline_count:.1%})")
    grep = shutil.which("grep") or "grep"
    rg = shutil.which("rg")
    c_locale = {**os.environ, "LC_ALL": "C"}
    inherited = dict(os.environ)
    locale_name = inherited.get("LC_ALL") or inherited.get("LANG") or "unset"
    print(f"tools     {grep} ({locale_name} and LC_ALL=C, alternation and -e per pattern; the "
          f"fastest is the reference), ripgrep {rg or 'not installed: skipped'}; best of "
          f"{args.repeat}")
    print(f"\n{'guards':>6} {'grep s':>8} {'rg s':>8} {'audit s':>8} {'audit MB/s':>10} "
          f"{'audit/grep':>10} {'engine':>9}  counts")
    failures: list[str] = []
    config = None
    for n in counts:
        subset = dict(list(every_guard.items())[:n])
        config = load_config(path=write_config(root, [str(log)], guards=subset, activity=activity))
        patterns = [*subset.values(), activity]
        alternation = "|".join(patterns)
        per_pattern = [a for p in patterns for a in ("-e", p)]
        variants = [
            ([grep, "-c", "-E", alternation, str(log)], c_locale),
            ([grep, "-c", "-E", *per_pattern, str(log)], c_locale),
            ([grep, "-c", "-E", alternation, str(log)], inherited),
        ]
        grep_s: list[float] = []
        grep_counts: set[int] = set()
        rg_s: list[float] = []
        rg_counts: set[int] = set()
        audit_s: list[float] = []
        report = None
        for _ in range(args.repeat):
            for cmd, env in variants:
                elapsed, count = run_grep(cmd, env)
                grep_s.append(elapsed)
                grep_counts.add(count)
            if rg:
                elapsed, count = run_grep([rg, "--no-config", "-c", *per_pattern, str(log)],
                                          c_locale)
                rg_s.append(elapsed)
                rg_counts.add(count)
            started = time.perf_counter()
            report = audit(config)
            audit_s.append(time.perf_counter() - started)
        assert report is not None
        firings = {g.guard: g.firings for g in report.guards}
        expected = {name: truth["guards"][name] for name in subset}
        (grep_count, *others) = sorted(grep_counts)
        checks = {
            "lines": report.lines == newline_count,
            "firings": firings == expected,
            "activity": report.activity == truth["activity"],
            "grep": not others and sum(firings.values()) + report.activity == grep_count,
            "rg": not rg or rg_counts == {grep_count},
            "files": all(f.error is None and not getattr(f, "warnings", []) for f in report.files),
        }
        failures += [f"{n} guards: {k}" for k, ok in checks.items() if not ok]
        from canary.logs.matching import build_matcher

        engine = getattr(build_matcher(config), "engine", "python")  # older matchers: python
        ratio = min(audit_s) / min(grep_s)
        rg_text = f"{min(rg_s):8.3f}" if rg_s else f"{'-':>8}"
        state = "ok" if all(checks.values()) else "FAIL " + ",".join(
            k for k, ok in checks.items() if not ok)
        print(f"{n:>6} {min(grep_s):8.3f} {rg_text} {min(audit_s):8.3f} {mb / min(audit_s):10,.0f} "
              f"{ratio:9.2f}x {engine:>9}  {state}: {sum(firings.values()):,} firings + "
              f"{report.activity:,} activity = grep {grep_count:,}")
    read_s = min(read_once(log, 8 << 20)[0] for _ in range(2))
    print(f"\nfloor     python os.read 8 MiB + count(b'\\n'), no matching: {read_s:.3f} s "
          f"({mb / read_s:,.0f} MB/s)")
    print(f"peak RSS  {peak_rss_mb():.0f} MB")
    print(f"load      average {os.getloadavg()[0]:.2f} at the end")
    print("target    audit <= grep at every guard count, aim for half")
    for failure in failures:
        print(f"  FAIL {failure}")

    if args.profile and config is not None:
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        audit(config)
        profiler.disable()
        print(f"\nprofile   one audit pass under cProfile: {time.perf_counter() - started:.2f} s")
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
        print(text.getvalue())
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
