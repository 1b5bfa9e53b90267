"""``canary status`` without click: the command a prompt or a script runs every few seconds pays only
for the status document.

The console script (``canary.cli.entry``) hands ``status``, with ``--json`` and ``--config PATH``
anywhere on the line, to ``run`` here; any other line goes to the click group in ``canary.cli.main``,
whose ``status`` command prints through the same ``status_command``. What this module prints is
what ``click.echo`` would: styles only on a terminal (and never with ``NO_COLOR`` or ``TERM=dumb``),
every error as the CLI's one boundary reports it (``guarded``, which ``canary audit``'s short way,
``canary.cli.audit_cmd``, runs its body under too).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

from canary.errors import CanaryError, ConfigError, StoreError
from canary.status.families import holes_line, last_verdict
from canary.terminal import safe, safe_lines
from canary.vocabulary import EXIT_OK, EXIT_UNAVAILABLE

if TYPE_CHECKING:
    from canary.config.settings import Config

__all__ = ["echo", "guarded", "paint", "report_lines", "run", "status_command", "status_table",
           "unreadable_document", "unreadable_team"]

_COLORS = {"red": 31, "yellow": 33}
_STYLE = r"\x1b\[[0-9;]*m"  # compiled by ``re`` when styled text meets a stream that shows none


def paint(text: str, *, fg: str | None = None, bold: bool = False) -> str:
    """``text`` in a color and weight, with the escape codes ``click.style`` writes."""
    codes = ([f"\x1b[{_COLORS[fg]}m"] if fg else []) + (["\x1b[1m"] if bold else [])
    return "".join(codes) + text + "\x1b[0m" if codes else text


def _colored(stream: IO[str]) -> bool:
    """Styles reach a terminal only, and not one that asked for none."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def echo(text: str, *, err: bool = False) -> None:
    """One line to stdout (or stderr), its styles removed where they would not be shown."""
    click = sys.modules.get("click")
    if click is not None and click.get_current_context(silent=True) is not None:
        click.echo(text, err=err)  # under the click command, whose context says whether colours are wanted
        return
    stream = sys.stderr if err else sys.stdout
    plain = "\x1b" not in text or _colored(stream)
    stream.write((text if plain else re.sub(_STYLE, "", text)) + "\n")
    stream.flush()


def warn(message: str) -> None:
    """A warning on stderr, control characters shown."""
    echo(f"warning: {safe_lines(message)}", err=True)


def status_table(doc: Mapping[str, Any]) -> str:
    """The ``canary status`` table, from the ``canary status --json`` document."""
    rows = [("guard", "status", "organic", "canary", "kill rate", "last verdict", "reason")]
    for g in doc["guards"]:
        rate = "-" if g["kill_rate"] is None else f"{g['kill_rate']:.0%}"
        status = str(g["status"]).upper()
        if g.get("muted_until"):
            status += " (muted)"
        organic, canary = ("-" if g[k] is None else str(g[k]) for k in ("organic_firings", "canary_firings"))
        rows.append((safe(str(g["guard"])), status, organic, canary,
                     rate, safe(last_verdict(g["status"], g["last_verdict"], g.get("families") or ()).words),
                     safe(str(g["reason"]))))
    holes = [None, *(holes_line(g.get("families") or ()) for g in doc["guards"])]
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    lines = []
    for i, row in enumerate(rows):
        text = "  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row[:6])) + "  " + row[6]
        text = text.rstrip()
        if i == 0:
            text = paint(text, bold=True)
        elif row[1].split()[0] in ("ASLEEP", "DEGRADED", "INCONCLUSIVE"):
            text = paint(text, fg="red" if row[1].startswith("ASLEEP") else "yellow", bold=True)
        lines.append(text)
        hole = holes[i]
        if hole:  # a family's kill rate below 1: a known hole, even when the guard reads alive
            lines.append(paint("  " + safe(hole), fg="yellow"))
    return "\n".join(lines)


def status_document(config: Config, *, now: datetime) -> dict[str, Any]:
    """The ``canary status --json`` document: the project, its guards, and what stands in the way."""
    from canary.config.urls import redact_url
    from canary.status.delivery import status_warnings
    from canary.status.overview import status_for
    from canary.status.problems import problems

    doc = {"project": config.project, **status_for(config, now=now)}  # the contract's first key
    doc["config"], doc["store"] = str(config.path), redact_url(config.store.url)
    warned = status_warnings(config.alerts, config_path=config.path)
    doc["problems"] = [*problems(doc, config, now=now),
                       *({"kind": "alerts", "message": line} for line in warned)]
    return doc


def unreadable_document(config: Config, exc: StoreError) -> dict[str, Any]:
    """The ``canary status --json`` document when the store cannot be opened: the project, config
    and store as ever, the reason on one line (password hidden, control characters shown) as
    ``error`` and as a ``store_unavailable`` problem, and null for what only the store knows."""
    from canary.config.urls import redact_url
    from canary.status.problems import DEFINITIONS

    reason = safe(redact_url(" ".join(line.strip() for line in str(exc).splitlines() if line.strip())))
    return {"project": config.project, "daemon": None, "guards": None, "model": None,
            "config": str(config.path), "store": redact_url(config.store.url), "error": reason,
            "problems": [{"kind": "store_unavailable", "message": reason},
                         *({"kind": DEFINITIONS, "message": p.render()} for p in config.broken)]}


def unreadable_team(config: Config, exc: StoreError) -> dict[str, Any]:
    """The ``canary status --all-projects --json`` document when the store cannot be opened: the
    store, the reason as ``error`` and a ``store_unavailable`` problem, and null projects."""
    doc = unreadable_document(config, exc)
    return {"projects": None, "store": doc["store"], "error": doc["error"], "problems": doc["problems"][:1]}


def status_command(config: Config, *, as_json: bool) -> int:
    """Print the status of ``config``'s project (its JSON document, or the text); return the exit code.

    A store that cannot be opened raises ``StoreError`` (exit 3, its reason on stderr), after
    ``--json`` printed ``unreadable_document``."""
    import json

    from canary.status.problems import exit_code

    try:
        doc = status_document(config, now=datetime.now(UTC))
    except StoreError as exc:
        if as_json:
            echo(json.dumps(unreadable_document(config, exc), indent=2))
        raise
    if as_json:
        echo(json.dumps(doc, indent=2))
    else:
        _print_text(doc)
    return exit_code(doc)


def _print_text(doc: Mapping[str, Any]) -> None:
    """Each fault first (the first on the first line), then the table."""
    for p in doc["problems"]:
        if p["kind"] == "store_error":
            continue  # told below, as the daemon's error
        if p["kind"] == "definitions":
            echo(safe_lines(p["message"]), err=True)
        else:
            echo(paint(safe(p["message"]), fg="yellow" if p["kind"] == "alerts" else "red", bold=True))
    broken = sum(p["kind"] == "definitions" for p in doc["problems"])
    if broken:
        echo(f"{broken} problem{'s' if broken != 1 else ''} in the definitions: their guards show the "
             "status the store last recorded and its firings now; a running daemon keeps the definitions "
             "it loaded until they are fixed.", err=True)
    echo(safe(f"config {doc['config']} · store {doc['store']}"), err=True)
    if doc["daemon"].get("error"):
        echo(safe(f"daemon error: {doc['daemon']['error']}"), err=True)
    for w in doc["daemon"].get("warnings", [])[:3]:
        times = f" ({w['count']} times, last {w['last']})" if w["count"] > 1 else f" ({w['last']})"
        echo(paint(safe(f"collector warning: {w['message']}{times}"), fg="yellow"), err=True)
    echo(status_table(doc))


def report_lines(exc: CanaryError) -> list[str]:
    """What the CLI prints for an error: every problem of a ConfigError, else one ``error:`` line."""
    if isinstance(exc, ConfigError):
        n = len(exc.problems)
        return [*(safe_lines(p.render()) for p in [*exc.problems, *exc.warnings]),
                f"{n} problem{'s' if n != 1 else ''} found; nothing was run."]
    return [f"error: {safe_lines(str(exc))}"]


def run(explicit: str | None, *, as_json: bool) -> int:
    """``canary status`` from start to exit code, with the CLI's error boundary."""

    def body() -> int:
        from canary.config.settings import load_config

        config = load_config(explicit, keep_going=True)
        for warning in config.warnings:
            echo(safe_lines(warning.render()), err=True)
        return status_command(config, as_json=as_json)

    return guarded(body)


def guarded(body: Callable[[], int]) -> int:
    """``body``'s exit code, every error it raises printed as the CLI's one boundary prints it."""
    try:
        return body()
    except CanaryError as exc:
        for line in report_lines(exc):
            echo(line, err=True)
        return exc.exit_code
    except BrokenPipeError:
        # The reader went away (``canary status | head``): point stdout at /dev/null so the
        # interpreter's own flush at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:
        where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
        what = exc.strerror or str(exc)
        echo(f"error: {safe_lines(f'{where}: {what}' if where else what)}", err=True)
        return EXIT_UNAVAILABLE
