"""Pure text renderings: badges, ages, sparklines, run timelines, highlighted leaks.

Every function takes the times it compares (``now`` included), so a screenshot
taken with a fixed clock is the same on every run. Text from outside (log lines,
answers, error bodies, reasons) is drawn through ``canary.terminal.safe``: its
control characters are shown, never sent to the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from rich.text import Text

from canary.sentences import meaning
from canary.status.families import Family, holes_line, last_verdict
from canary.terminal import safe
from canary.vocabulary import CONCLUSIVE, HEALTHY, HEALTHY_VERDICTS, Stage, Status, Verdict
from dashboard.queries import RunRow

_LABELS = {Stage.FIXTURE_FETCHED: "fixture fetched", Stage.REPAIR_REQUESTED: "repair"}
#: (trace key, label) of every stage, in order.
STAGES: tuple[tuple[str, str], ...] = tuple((s.value, _LABELS.get(s, s.value)) for s in Stage)

_BADGE_STYLE = {
    Status.ASLEEP: "bold white on red3",
    Status.DEGRADED: "bold black on yellow",
    Status.INCONCLUSIVE: "bold white on dark_magenta",
    Status.NEW: "bold white on blue",
    Status.PAUSED: "bold black on grey62",
    Status.QUIET: "bold black on dark_sea_green",
    Status.ALIVE: "bold black on green3",
}
_STALE_STYLE = "bold grey70 on grey23"
BADGE_WIDTH = 14
_BARS = "▁▂▃▄▅▆▇█"
GOOD_VERDICTS = HEALTHY_VERDICTS
BAD_VERDICTS = frozenset(v.value for v in Verdict if v.failing)


def badge(status: Status, *, stale: bool = False) -> Text:
    """The status as a coloured word; a healthy status the daemon can no longer vouch for ends in '?'."""
    word = status.value.upper()
    if stale and status in HEALTHY:
        return Text(f" {word}? ".ljust(BADGE_WIDTH), style=_STALE_STYLE)
    return Text(f" {word} ".ljust(BADGE_WIDTH), style=_BADGE_STYLE[status])


def ago(moment: datetime | None, now: datetime, *, never: str = "never") -> str:
    """``45s``, ``12m``, ``3h``, ``5d`` before ``now``; ``never`` for None."""
    if moment is None:
        return never
    seconds = max(0, int((now - moment).total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 48 * 3600:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def clock(moment: datetime, now: datetime) -> str:
    """``10:02:07`` for a time on ``now``'s day (local time), ``11-28 10:02`` otherwise."""
    local, today = moment.astimezone(), now.astimezone()
    return local.strftime("%H:%M:%S" if local.date() == today.date() else "%m-%d %H:%M")


def span(delta: timedelta) -> str:
    """A duration as ``2m``, ``1h``, ``6h``, ``1d``."""
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def sparkline(values: Sequence[int], *, style: str = "bright_cyan") -> Text:
    """One character per cell: ``·`` for none, ``▁``..``█`` scaled to the busiest cell."""
    top = max(values, default=0)
    text = Text()
    for value in values:
        if value <= 0:
            text.append("·", style="grey42")
        else:
            level = max(0, min(len(_BARS) - 1, round(value / top * (len(_BARS) - 1)))) if top else 0
            text.append(_BARS[level], style=style)
    return text


def count(value: int, *, alarm: bool) -> Text:
    """A firing count; a zero that should worry the reader is drawn bold red."""
    return Text(str(value), style="bold red" if alarm and value == 0 else "")


def kill_rate(rate: float | None) -> str:
    """``75%``, or ``-`` when no conclusive run happened in the window."""
    return "-" if rate is None else f"{rate:.0%}"


#: Drawn after the kill rate of a guard that has a family with a hole.
HOLE_MARK = "!"


def guard_kill(rate: float | None, families: Sequence[Family]) -> Text:
    """The guard's kill rate, marked ``!`` in yellow when a variant family's kill rate is below 1."""
    text = Text(kill_rate(rate))
    if any(f.hole for f in families):
        text.append(HOLE_MARK, style="bold yellow")
    return text


def holes(families: Sequence[Family]) -> Text | None:
    """The holes line ``canary status`` prints, in yellow; None when no family has one."""
    line = holes_line([f.to_json() for f in families])
    return Text(safe(line), style="yellow") if line else None


def family_line(family: Family) -> Text:
    """One family: its caught/conclusive runs in the window, then each variant's latest conclusive verdict."""
    text = Text.assemble((safe(family.canary), "bold"), "  ")
    if family.expect == "accept":
        text.append(f"control, {family.conclusive} conclusive run(s)")
    elif family.conclusive == 0:
        text.append("no conclusive run in the window", style="italic")
    else:
        text.append(f"{family.caught}/{family.conclusive} caught ({kill_rate(family.kill_rate)})",
                    style="bold yellow" if family.hole else "green")
    for v in family.variants:
        text.append("  ")
        word = (v.last_verdict or "no conclusive run").replace("_", " ")
        text.append(f"v{v.variant} {word}", style=verdict_style(v.last_verdict) if v.last_verdict else "dim")
    return text


def verdict_text(run: RunRow) -> Text:
    """A run's verdict in its colour; a run under an earlier definition of its canary says so, dimmed."""
    text = Text((run.verdict or "in flight").replace("_", " "), style=verdict_style(run.verdict))
    if run.history:
        text.append(" (earlier definition)", style="dim")
    return text


def verdict_style(verdict: str | None) -> str:
    """Green for a proof, red for a failure, yellow for a run that could not tell, cyan in flight."""
    if verdict is None:
        return "cyan"
    if verdict in GOOD_VERDICTS:
        return "green"
    if verdict in BAD_VERDICTS:
        return "bold red"
    return "yellow"


def verdict(verdict: str | None, at: datetime | None, now: datetime) -> Text:
    """``caught 12m ago``; ``-`` when nothing ran."""
    if at is None:
        return Text("-")
    word = verdict.replace("_", " ") if verdict else "in flight"
    return Text.assemble((word, verdict_style(verdict)), f" {ago(at, now)} ago")


def guard_verdict(status: Status, latest: str | None, at: datetime | None, families: Sequence[Family],
                  now: datetime) -> Text:
    """The guards table's "last verdict", chosen as ``canary status`` chooses it: ``fake-url leaked`` for
    a guard asleep or degraded by that canary, else the latest run's ``caught 12m ago``."""
    shown = last_verdict(status, latest, [f.to_json() for f in families])
    if shown.canary is None or shown.verdict is None:
        return verdict(latest, at, now)
    word = shown.verdict.replace("_", " ")
    return Text.assemble(f"{safe(shown.canary)} ", (word, verdict_style(shown.verdict)))


def _missing_is_failure(run: RunRow, stage: str) -> bool:
    """Whether a stage that never happened is where this run went wrong."""
    if stage in (Stage.FIXTURE_FETCHED, Stage.INJECTED):
        return run.verdict == Verdict.NOT_INJECTED
    if stage == Stage.FIRED:
        return run.expect == "reject" and run.verdict in (Verdict.LEAKED, Verdict.UNLOGGED)
    if stage == Stage.ANSWERED:
        return run.verdict == Verdict.ERROR
    return False


def stage_glyphs(run: RunRow) -> Text:
    """The run's six stages in a row: ``●`` happened, ``✗`` missing where it died, ``○`` did not happen."""
    text = Text()
    for i, (key, _label) in enumerate(STAGES):
        if i:
            text.append("─", style="grey42")
        if run.trace.get(key) is not None:
            bad = key == "fired" and run.expect == "accept"
            text.append("●", style="bold red" if bad else "green")
        elif run.verdict is not None and _missing_is_failure(run, key):
            text.append("✗", style="bold red")
        else:
            text.append("○", style="grey50")
    return text


_WHY_MISSING = {
    "fixture_fetched": "the agent never fetched the fixture page",
    "injected": "the chosen model call never came through the proxy",
    "fired": "no firing: the guard wrote no line",
    "answered": "no answer: the agent failed or timed out",
}


def timeline(run: RunRow, *, width: int = 36) -> Text:
    """The run drawn stage by stage on one time axis, so one sees where it died."""
    times = [t for key, _label in STAGES if (t := run.trace.get(key)) is not None]
    total = max([run.duration_s or 0.0, *times, 0.001])
    text = Text()
    for key, label in STAGES:
        at = run.trace.get(key)
        text.append(f"{label:<16}", style="bold")
        if at is None:
            text.append("     -  ")
            if run.verdict is not None and _missing_is_failure(run, key):
                text.append(f"✗ {_WHY_MISSING[key]}", style="bold red")
            elif key == "fired" and run.expect == "accept":
                text.append("○ no firing, as a control expects", style="green")
            else:
                text.append("○", style="grey50")
        else:
            bad = key == "fired" and run.expect == "accept"
            text.append(f"{at:6.2f}s ")
            text.append("━" * round(at / total * width), style="grey50")
            text.append("●", style="bold red" if bad else "bold green")
        text.append("\n")
    text.rstrip()
    return text


def outcome(run: RunRow) -> str:
    """What a run's verdict means, in a few words."""
    if run.verdict is None:
        return "in flight"
    if run.verdict == "error" and run.error:
        return f"error: {run.error}"
    return meaning(run.verdict)


def highlight(text: str, needle: str | None, style: str) -> Text:
    """``text`` (control characters shown) with every occurrence of ``needle`` drawn in ``style``."""
    out = Text(safe(text))
    if needle:
        out.highlight_words([safe(needle)], style=style)
    return out


def conclusive(verdict_name: str | None) -> bool:
    """Whether a verdict proves something about the guard."""
    return verdict_name in CONCLUSIVE


def one_line(text: str, width: int) -> str:
    """``text`` on one line, control characters shown, cut to ``width`` characters with an ellipsis."""
    flat = safe(" ".join(text.split()))
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"
