"""``canary audit`` as a whole command, against GNU grep and ripgrep given the guards' patterns.

    uv run python tests/bench/bench_audit.py                        # look-alike log, ~1 GB
    uv run python tests/bench/bench_audit.py --size-mb 256 --keep   # quicker; keep (and reuse) the log
    uv run python tests/bench/bench_audit.py --guards 1,L --rounds 3
    uv run python tests/bench/bench_audit.py --shape utf8           # look-alike, 1 line in 100 non-ASCII
    uv run python tests/bench/bench_audit.py --profile              # cProfile one audit pass

The look-alike log holds 128 guards firing on 0.1 % of lines, one of them a plain
literal (``QuoteGuard: rejected url=``), 30 % of lines that share the guards'
prefixes without firing them (the lines guards write when they accept), and 10 %
activity lines. Each row (``N``: the first N guards; ``L``: the literal guard
alone) times ``canary audit --config ... --json`` as its own process against
``grep -c -E`` (``-F`` for the literal) and ``rg -c`` given exactly the guards'
patterns, in turn each round, and prints wall and CPU ratios. Every count is
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
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "_out"
SEED = 20261129
LOG_NAME = "agent.log"
META_NAME = "meta.json"
LOG_VERSION = 2  # the look-alike log has a plain-literal guard
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


#: The guard whose pattern is a plain literal (grep -F, ripgrep -F): its look-alikes share
#: ``QuoteGuard: rejected `` (``rejected 0 of 4 claims``) and ``QuoteGuard: `` (``accepted``).
LITERAL_GUARD = "quote"
LITERAL = "QuoteGuard: rejected url="


def lookalike_guards(count: int = LOOKALIKE_GUARDS) -> dict[str, tuple[str, str]]:
    """name -> (class name in the log, match regex valid for Python re, POSIX ERE and ripgrep).

    One of them, ``LITERAL_GUARD``, matches a plain literal."""
    out = {}
    for i in range(count):
        base = BASES[i % len(BASES)]
        suffix = "" if i < len(BASES) else str(i // len(BASES))
        cls = f"{base}{suffix}Guard"
        name = f"{base.lower()}{suffix}"
        out[name] = (cls, LITERAL if name == LITERAL_GUARD else f"{cls}: (rejected|blocked) [a-z]+=[^ ]+")
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
                    word = "rejected" if name == LITERAL_GUARD else rng.choice(["rejected", "blocked"])
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


@dataclass
class Tool:
    """One whole command timed in every round: its argv, environment and how it reports."""

    name: str
    argv: list[str]
    env: dict[str, str]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    outputs: set[str] = field(default_factory=set)

    def run(self) -> str:
        """Run once as its own process; note wall and CPU (user + sys) seconds; return stdout."""
        with tempfile.TemporaryFile() as err:
            started = time.perf_counter()
            child = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=err, env=self.env)
            assert child.stdout is not None
            out = child.stdout.read()
            _, status, usage = os.wait4(child.pid, 0)  # this child's own CPU time
            elapsed = time.perf_counter() - started
            child.returncode = code = os.waitstatus_to_exitcode(status)
            child.stdout.close()
            if code not in (0, 1):
                err.seek(0)
                raise SystemExit(f"{self.name} failed ({code}): {err.read().decode(errors='replace')}")
        self.wall.append(elapsed)
        self.cpu.append(usage.ru_utime + usage.ru_stime)
        text = out.decode()
        self.outputs.add(text if self.name == "audit" else text.strip())
        return text

    def command(self) -> str:
        """The command as a user types it (for timing it again with another tool)."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items()
                       if os.environ.get(k) != v)
        return (env + " " if env else "") + shlex.join(self.argv)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=float, default=1024, help="log size in MB (default 1024)")
    parser.add_argument("--shape", choices=["lookalike", "plain", "utf8"], default="lookalike",
                        help="lookalike (default): accept and router lines share the guards' "
                             "literals; plain: the earlier log with few near misses; utf8: the "
                             "look-alike log with one line in 100 non-ASCII")
    parser.add_argument("--guards", default="1,L,8,32,128",
                        help="rows, comma-separated: a guard count (the first N guards), or L "
                             "for the plain-literal guard alone (plain has 8 guards, no L)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds per row; each round runs every command once, in turn")
    parser.add_argument("--canary", default=None,
                        help="the audit command to time, as a shell splits it (default: the "
                             "canary next to this Python), e.g. another checkout: 'env "
                             "PYTHONSAFEPATH=1 PYTHONPATH=DIR .venv/bin/python -m canary.cli.main' "
                             "(PYTHONSAFEPATH: not the current folder's canary); the bytecode line "
                             "names the packages it runs")
    parser.add_argument("--no-compile", action="store_true",
                        help="do not compile bytecode first (as uv tool install without "
                             "--compile-bytecode leaves it)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the log under --dir and reuse it next time")
    parser.add_argument("--dir", type=Path, default=OUT,
                        help=f"where the log is written (default {OUT}), e.g. /tmp")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile one audit pass of the last row, in this process")
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
        root = args.dir / f"audit-{args.shape}-{size}"
        root.mkdir(parents=True, exist_ok=True)
    else:
        args.dir.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="audit-", dir=args.dir))
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
                              or truth.get("version") != LOG_VERSION
                              or log.stat().st_size != truth["size"]):
        truth = None
    if truth is None:
        started = time.perf_counter()
        child = subprocess.run(
            [sys.executable, __file__, "--generate", shape, str(log), str(size)],
            capture_output=True, text=True, check=True,
        )
        truth = {**json.loads(child.stdout), "version": LOG_VERSION}
        meta.write_text(json.dumps(truth))
        print(f"generated {log} in {time.perf_counter() - started:.1f} s")
    else:
        print(f"reusing   {log}")
    return log, truth


def compile_bytecode(canary: list[str]) -> None:
    """Write the bytecode of the audit's install, as ``uv tool install --compile-bytecode`` does."""
    probe = ("import canary, collectors, sysconfig; print(canary.__path__[0]); "
             "print(collectors.__path__[0]); print(sysconfig.get_paths()['purelib'])")
    python = sys.executable  # the audit's Python (a --canary command's PYTHONPATH is kept)
    env = _audit_env(canary)
    paths = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True,
                           env=env).stdout.split()
    started = time.perf_counter()
    subprocess.run([python, "-m", "compileall", "-q", "-j", "0", *paths], check=False,
                   stdout=subprocess.DEVNULL, env=env)
    print(f"bytecode  compiled in {time.perf_counter() - started:.1f} s: {', '.join(paths)}")


def _audit_env(canary: list[str]) -> dict[str, str]:
    """The environment a ``--canary`` command of the form ``env K=V ... cmd`` sets."""
    env = dict(os.environ)
    if canary[0] == "env":
        for word in canary[1:]:
            if "=" not in word:
                break
            key, value = word.split("=", 1)
            env[key] = value
    return env


def row_guards(label: str, every_guard: dict[str, str]) -> dict[str, str]:
    """The guards of one row: the first N, or (``L``) the plain-literal guard alone."""
    if label == "L":
        return {LITERAL_GUARD: every_guard[LITERAL_GUARD]}
    return dict(list(every_guard.items())[: min(int(label), len(every_guard))])


def tools_for(label: str, guards: dict[str, str], log: Path, config: Path, canary: list[str],
              state: Path) -> list[Tool]:
    """The audit and its references for one row: grep and ripgrep given exactly the guards'
    patterns, as one alternation (faster in grep than one ``-e`` per pattern: 10.8 s against
    12.9 s for 128 guards over 256 MB) or the plain literal as a fixed string, read from a
    pattern file beside the row's config, in the C locale."""
    c_locale = {**os.environ, "LC_ALL": "C"}
    fixed = label == "L"
    patterns = config.with_name("guards.pattern")
    patterns.write_text("|".join(guards.values()) + "\n", encoding="utf-8")
    grep = [shutil.which("grep") or "grep", "-c", "-F" if fixed else "-E", "-f", str(patterns),
            str(log)]
    audit_env = {**_audit_env(canary), "CANARY_STATE_DIR": str(state)}
    audit_argv = [w for w in canary if w not in _env_words(canary)]
    tools = [Tool("audit", [*audit_argv, "--config", str(config), "audit", "--json"], audit_env),
             Tool("grep", grep, c_locale)]
    rg = shutil.which("rg")
    if rg:
        tools.append(Tool("rg", [rg, "--no-config", "-c", *(["-F"] if fixed else []), "-f",
                                 str(patterns), str(log)], c_locale))
    return tools


def _env_words(canary: list[str]) -> set[str]:
    if canary[0] != "env":
        return set()
    words = {"env"}
    for word in canary[1:]:
        if "=" not in word:
            break
        words.add(word)
    return words


def run(root: Path, size: int, args: argparse.Namespace) -> int:
    log, truth = ensure_log(root, size, args.shape)
    if args.shape != "plain":
        every_guard = {name: pattern for name, (_, pattern) in lookalike_guards().items()}
        activity = LOOKALIKE_ACTIVITY
    else:
        every_guard, activity = dict(GUARDS), ACTIVITY
    labels = [w.strip() for w in args.guards.split(",") if w.strip()]
    if args.shape == "plain":
        labels = [w for w in labels if w != "L"]
    canary = shlex.split(args.canary) if args.canary else [str(Path(sys.executable).with_name("canary"))]
    if not args.no_compile:
        compile_bytecode(canary)
    state = root / "state"  # as for a user whose daemon made the state folder
    state.mkdir(exist_ok=True)

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
    print(f"audit     {shlex.join(canary)} --config <row>/canary.toml audit --json (a whole "
          f"process; bytecode {'not ' if args.no_compile else ''}compiled first)")
    print(f"rounds    {args.rounds} after a warm-up round; each round runs audit, grep and rg in "
          "turn; medians of wall and CPU (user + sys) seconds; ratios are medians of each "
          "round's audit/reference pair")
    print(f"\n{'row':>4} {'grep s':>7} {'rg s':>7} {'audit s':>8} {'audit/grep':>10} "
          f"{'audit/rg':>8} {'cpu s':>6} {'cpu a/g':>8} {'cpu a/rg':>8}  counts")
    failures: list[str] = []
    commands: list[str] = []
    config = None
    for label in labels:
        guards = row_guards(label, every_guard)
        (root / "rows" / label).mkdir(parents=True, exist_ok=True)
        config = write_config(root / "rows" / label, [str(log)], guards=guards, activity=activity)
        tools = tools_for(label, guards, log, config, canary, state)
        for tool in tools:  # warm-up round: caches, the compiled patterns
            tool.run()
            tool.wall.clear()
            tool.cpu.clear()
            tool.outputs.clear()
        for _ in range(args.rounds):
            for tool in tools:
                tool.run()
        audit, grep, *rg = tools
        failures += [f"row {label}: {problem}" for problem in
                     check_row(audit, grep, rg, guards, truth, newline_count)]
        ratio = median([a / g for a, g in zip(audit.wall, grep.wall, strict=True)])
        cpu_ratio = median([a / g for a, g in zip(audit.cpu, grep.cpu, strict=True)])
        rg_s = f"{median(rg[0].wall):7.3f}" if rg else f"{'-':>7}"
        rg_ratio = (f"{median([a / r for a, r in zip(audit.wall, rg[0].wall, strict=True)]):7.2f}x"
                    if rg else f"{'-':>8}")
        rg_cpu = (f"{median([a / r for a, r in zip(audit.cpu, rg[0].cpu, strict=True)]):7.2f}x"
                  if rg else f"{'-':>8}")
        doc = json.loads(next(iter(audit.outputs)))
        firings = sum(g["firings"] for g in doc["guards"])
        state_text = "ok" if not any(f.startswith(f"row {label}:") for f in failures) else "FAIL"
        print(f"{label:>4} {median(grep.wall):7.3f} {rg_s} {median(audit.wall):8.3f} "
              f"{ratio:9.2f}x {rg_ratio} {median(audit.cpu):6.3f} {cpu_ratio:7.2f}x {rg_cpu}  {state_text}: {firings:,} firings "
              f"= grep {grep.outputs.pop() if len(grep.outputs) == 1 else '?'}, "
              f"{doc['activity']:,} activity, {doc['lines']:,} lines")
        commands += [f"{label:>4} {t.name:<5} {t.command()}" for t in tools]
    print(f"\nload      average {os.getloadavg()[0]:.2f} at the end")
    print("target    audit <= grep at every row, aim for half")
    print("\ncommands (each row's, to time them again):")
    for line in commands:
        print(f"  {line}")
    for failure in failures:
        print(f"  FAIL {failure}")
    if args.profile and config is not None:
        profile(config)
    return 0 if not failures else 1


def check_row(audit: Tool, grep: Tool, rg: list[Tool], guards: dict[str, str],
              truth: dict[str, Any], newline_count: int) -> list[str]:
    """What is wrong with one row's counts: the audit against what was generated, grep and
    ripgrep against the audit, and every round's output against the others."""
    problems = []
    docs = [json.loads(text) for text in audit.outputs]
    if len({json.dumps({**d, "until": None}, sort_keys=True) for d in docs}) != 1:
        problems.append("the audit printed different counts in different rounds")
    doc = docs[0]
    firings = {g["guard"]: g["firings"] for g in doc["guards"]}
    if firings != {name: truth["guards"][name] for name in guards}:
        problems.append(f"firings {firings}")
    if doc["activity"] != truth["activity"]:
        problems.append(f"activity {doc['activity']} != {truth['activity']}")
    if doc["lines"] != newline_count:
        problems.append(f"lines {doc['lines']} != {newline_count}")
    if any(f["error"] or f["warnings"] for f in doc["files"]):
        problems.append("a file error or warning")
    for ref in (grep, *rg):
        if ref.outputs != {str(sum(firings.values()))}:
            problems.append(f"{ref.name} counted {sorted(ref.outputs)}")
    return problems


def profile(config: Path) -> None:
    """One audit pass of ``config`` under cProfile, in this process and in one part (cProfile
    sees no forked child): where its time goes."""
    from canary.config.settings import load_config
    from canary.logs import parts
    from canary.logs.audit import audit

    parts.PARTS_MAX = 1

    loaded = load_config(path=config)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    audit(loaded)
    profiler.disable()
    print(f"\nprofile   one audit pass under cProfile: {time.perf_counter() - started:.2f} s")
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
    print(text.getvalue())


if __name__ == "__main__":
    sys.exit(main())
