"""Sample logs of a research agent whose date and version guards never fire.

The counts mirror a real audit of such an agent over two days of heavy use:
quote grounding 38, number grounding 148, citation 3, evidence denial 12,
date 0, version 0. They are spread over a live log, its rotated copy and an
older gzipped one, so the audit's handling of rotated files is on show too.
"""

from __future__ import annotations

import gzip
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from canary.locations import bundled_defs_dir

FIRINGS = {"quote": 38, "number": 148, "citation": 3, "denial": 12, "date": 0, "version": 0}

_GUARD_LINES = {
    "quote": 'WARN  guards QuoteGuard: rejected quote="{q}" not found verbatim in observations',
    "number": "WARN  guards SpanGrounding: rejected entity={n} not in observations",
    "citation": "WARN  guards CitationGuard: rejected url=https://{h}.example.org/page not in fetched urls",
    "denial": "WARN  guards EvidenceDenial: rejected claim=page-empty while page had {n} chars",
}
_NOISE = [
    "INFO  planner turn={t} state=planning",
    "INFO  tools web_fetch url=https://docs.example.org/item/{n} status=200 chars={c}",
    "INFO  tools web_search query=\"residence permit {n}\" results=8",
    "DEBUG model request tokens={c} temperature=0.2",
    "INFO  planner turn={t} state=reviewing",
    "DEBUG observations cleared turn={t}",
]
_ACTIVITY = "INFO  agent task finished id=t{n} turns={t}"


def sample_lines(now: datetime, *, seed: int = 7) -> list[str]:
    """Two days of log lines ending at ``now``, oldest first."""
    rng = random.Random(seed)
    start = now - timedelta(hours=47)
    events: list[str] = []
    for guard, count in FIRINGS.items():
        events.extend([guard] * count)
    events.extend(["activity"] * 410)
    events.extend(["noise"] * 6000)
    rng.shuffle(events)
    step = (now - start) / len(events)
    lines = []
    for i, kind in enumerate(events):
        moment = start + step * i
        stamp = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        n, t, c = rng.randint(100, 9999), rng.randint(1, 6), rng.randint(200, 15000)
        if kind == "noise":
            text = rng.choice(_NOISE).format(n=n, t=t, c=c)
        elif kind == "activity":
            text = _ACTIVITY.format(n=n, t=t)
        else:
            text = _GUARD_LINES[kind].format(q=f"The fee is {n} euros.", n=n, h=f"x{n}")
        lines.append(f"{stamp} {text}\n")
    return lines


def write_demo(directory: Path, *, now: datetime | None = None) -> Path:
    """Write the sample logs and a canary.toml for them into ``directory``; return the config path."""
    moment = now or datetime.now(UTC)
    logs = directory / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    lines = sample_lines(moment)
    third = len(lines) // 3
    with gzip.open(logs / "agent.log.2.gz", "wt", encoding="utf-8") as old:
        old.writelines(lines[:third])
    (logs / "agent.log.1").write_text("".join(lines[third : 2 * third]), encoding="utf-8")
    (logs / "agent.log").write_text("".join(lines[2 * third :]), encoding="utf-8")
    config = directory / "canary.toml"
    defs = ", ".join(repr((bundled_defs_dir() / f"{name}.toml").as_posix()) for name in FIRINGS)
    config.write_text(
        f"""defs = [{defs}]

[logs]
paths = [{(logs / "agent.log").as_posix()!r}]
activity = 'task finished'

[store]
url = {"sqlite:///" + (directory / "canary.db").as_posix()!r}
""",
        encoding="utf-8",
    )
    return config
