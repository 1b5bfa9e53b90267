"""What stands between ``canary status`` and a clean bill, beside the guards themselves: no guard
defined, no daemon collecting, a model server that does not answer, definition files with errors.

``problems`` lists them for the ``problems`` field of ``canary status --json`` (the text output
prints each first, the first on its first line), and ``exit_code`` turns them and the guards into
the command's exit code. A guard whose definition file is broken is shown by the status the store
last recorded of it (``broken_rows``): the running daemon goes on with the definition it loaded.
Its firing counts are the store's now, over the window its file names (or the default one, when
it names none), never the figures of that record; none when the window cannot be told.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from canary.store import reads
from canary.vocabulary import EXIT_OK, EXIT_UNAVAILABLE, EXIT_UNHEALTHY, EXIT_USAGE, Status, as_utc, iso

if TYPE_CHECKING:
    from canary.config.settings import Config
    from canary.store.reads import Reader

__all__ = ["BROKEN", "FAULTS", "WARNINGS", "broken_guards", "broken_rows", "broken_windows", "exit_code",
           "last_recorded", "problems"]

#: Kinds that make ``canary status`` exit 1 even when every guard reads healthy.
FAULTS = ("no_guards", "no_daemon", "model_unreachable")
#: The kind of the problem of a running daemon that cannot write its store (``daemon.error``; exit 3).
STORE_ERROR = "store_error"
#: Kinds shown and listed that change no exit code.
WARNINGS = ("alerts",)
#: The kind of an error in a definition file: exit 2, the daemon's status shown beside it.
DEFINITIONS = "definitions"


def _ago(moment: datetime, now: datetime) -> str:
    """``10:02, 7 min ago``, with the date when it is not today."""
    local = as_utc(moment).astimezone()
    shown = local.strftime("%H:%M" if local.date() == as_utc(now).astimezone().date() else "%Y-%m-%d %H:%M")
    minutes = max(0, int((now - moment).total_seconds() // 60))
    span = (f"{minutes} min" if minutes < 120 else f"{minutes // 60} h" if minutes < 2880
            else f"{minutes // 1440} days")
    return f"{shown}, {span} ago"


def no_daemon(project: str, heartbeat: str | None, *, now: datetime, config: Path | None = None,
              gone: str | None = None) -> str:
    """The sentence that says no daemon collects, why when its heartbeat is recent (``gone``), and
    since when; its commands read ``config``."""
    from canary.config.commandline import command_line

    if heartbeat:
        beat = datetime.fromisoformat(heartbeat.replace("Z", "+00:00"))
        when = f"{gone + '; ' if gone else ''}its last heartbeat was at {_ago(beat, now)}"
    else:
        when = "none ever ran on this store"
    daemon, install = (command_line(words, config) for words in ("canary daemon", "canary service install"))
    return (f"no daemon is collecting for project {project} ({when}): the statuses below are the store's "
            f"last facts; start one with `{daemon}`, or `{install}`")


def problems(doc: Mapping[str, Any], config: Config, *, now: datetime) -> list[dict[str, str]]:
    """The faults and definition errors of a status document, most urgent first."""
    out: list[dict[str, str]] = []
    daemon = doc["daemon"]
    if daemon.get("error"):  # the daemon runs, and cannot write its store: every fact below is stale
        out.append({"kind": STORE_ERROR, "message": str(daemon["error"])})
    if not doc["guards"] and not config.broken:
        from canary.config.commandline import no_guards

        out.append({"kind": "no_guards", "message": no_guards(config.path)})
    if not daemon["running"]:
        said = no_daemon(config.project, daemon.get("heartbeat"), now=now, config=config.path,
                         gone=daemon.get("gone"))
        out.append({"kind": "no_daemon", "message": said})
    if doc.get("model"):
        from canary.status.upstream import UpstreamHealth, summary

        line = summary(UpstreamHealth.from_json(doc["model"]))
        if line:
            out.append({"kind": "model_unreachable", "message": line})
    out += [{"kind": DEFINITIONS, "message": p.render()} for p in config.broken]
    return out


def exit_code(doc: Mapping[str, Any]) -> int:
    """3 when the daemon cannot write its store, 2 for a broken definition, 1 for a fault or an
    alerting guard, else 0."""
    kinds = {p["kind"] for p in doc.get("problems", ())}
    if doc["daemon"].get("error"):
        return EXIT_UNAVAILABLE
    if DEFINITIONS in kinds:
        return EXIT_USAGE
    if kinds & set(FAULTS) or any(Status(g["status"]).alerting for g in doc["guards"]):
        return EXIT_UNHEALTHY
    return EXIT_OK


def broken_guards(config: Config) -> list[str]:
    """The names of guards whose definition file has an error, as far as the file can be read."""
    return [name for name, _window in broken_windows(config)]


def broken_windows(config: Config) -> list[tuple[str, timedelta | None]]:
    """The name of each guard whose definition file has an error, as far as the file can be read,
    and the window its firings are counted over (None when the file does not tell it)."""
    import tomllib

    known = {g.name for g in config.guards}
    found: dict[str, timedelta | None] = {}
    for path in dict.fromkeys(p.path for p in config.broken if p.path is not None):
        try:
            guard = tomllib.loads(path.read_text(encoding="utf-8")).get("guard")
        except (OSError, ValueError):
            continue
        name = guard.get("name") if isinstance(guard, dict) else None
        if isinstance(name, str) and name not in known and name not in found:
            assert isinstance(guard, dict)
            found[name] = _window(guard, [p.key for p in config.broken if p.path == path])
    return list(found.items())


def _window(guard: Mapping[str, Any], keys: Sequence[str]) -> timedelta | None:
    """``[guard] window`` as a duration; the default when the table has none and no unknown key of
    it may be the window meant (``windw``); else None."""
    from canary.config.durations import DurationError, parse_duration
    from canary.config.sections import GUARD

    if "window" not in guard:
        default: timedelta = GUARD.key("window").value
        unknown = [k for k in keys if k.startswith("guard.") and k.split(".")[1] not in GUARD.names]
        return None if unknown else default
    try:
        return parse_duration(guard["window"])
    except DurationError:
        return None


#: How the reason of a broken definition file's guard begins.
BROKEN = "its definition file has an error (above)"


def last_recorded(reader: Reader, guard: str, *, now: datetime) -> tuple[str, datetime | None, str]:
    """The status the store last recorded of ``guard`` (``new`` when none), when, and both in words."""
    from canary.status.reasons import clock_time

    latest = reads.latest_transition(reader, guard)
    status, at = (latest[0], latest[2]) if latest is not None else (Status.NEW.value, None)
    return status, at, f"{status} at {clock_time(at, now)}" if at is not None else "nothing yet"


def broken_rows(reader: Reader, guards: Sequence[tuple[str, timedelta | None]], *,
                now: datetime) -> list[dict[str, Any]]:
    """A status row per broken guard: its latest stored status, said to be the daemon's last word,
    and its firings in the store now over its window (none when the window is not known)."""
    from canary.config.durations import format_duration

    rows: list[dict[str, Any]] = []
    for name, window in guards:
        status, at, said = last_recorded(reader, name, now=now)
        organic = canary = None
        if window is None:
            counted = "no firing count, as its window cannot be read from the file"
        else:
            organic, canary = reads.window_firings(reader, name, now - window)
            counted = f"firings counted over the last {format_duration(window)}"
        rows.append({
            "guard": name, "status": status, "reason": f"{BROKEN}; last recorded: {said}; {counted}",
            "organic_firings": organic, "canary_firings": canary, "kill_rate": None, "last_verdict": None,
            "last_run": None, "muted_until": None, "families": [], "since": iso(at),
        })
    return rows
