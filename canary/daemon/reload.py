"""Definitions reload while the daemon runs: on SIGHUP, and when a definition file changes.

The new files are checked as ``canary check`` checks them; a broken change keeps the old
definitions running and is reported. A new guard, or one whose match or window changed, is
counted again over its window from the logs already read, the way the first start
backfills; the collectors then go on from their stored positions with the new rules.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from canary.config.definitions import expand_glob
from canary.config.settings import Config, load_config
from canary.errors import ConfigError

if TYPE_CHECKING:  # loaded when a reload needs them: the daemon's start-up imports this module
    from canary.daemon.loop import Daemon
    from canary.store.engine import Store
    from collectors.positions import FileState
    from collectors.scan import Hit

log = logging.getLogger("canary.daemon.reload")

READ = 8 << 20

Fingerprint = tuple[tuple[str, int, int], ...]


def definition_files(config: Config) -> list[Path]:
    """canary.toml and every definition file its ``defs`` globs match now."""
    if config.path is None:
        return []
    files = [config.path]
    for pattern in config.defs:
        files.extend(expand_glob(pattern, config.path.parent))
    return files


def fingerprint(config: Config) -> Fingerprint:
    """What the definition files look like now: name, size and change time of each."""
    out: list[tuple[str, int, int]] = []
    for path in definition_files(config):
        try:
            st = os.stat(path)
        except OSError:
            continue
        out.append((str(path), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def load_checked(config: Config) -> Config | str:
    """The definitions as they are on disk now, or every problem ``canary check`` would list."""
    try:
        return load_config(path=config.path)
    except ConfigError as exc:
        return str(exc)


def changed_guards(old: Config, new: Config) -> list[str]:
    """Guards of ``new`` that ``old`` lacked, or whose match or window differ (a span matcher
    counts only what arrives from now on, so it needs no recount)."""
    before = {g.name: g for g in old.guards}
    out: list[str] = []
    for guard in new.guards:
        was = before.get(guard.name)
        if was is None or was.match != guard.match or was.window != guard.window:
            out.append(guard.name)
    return out


def _hits_before(config: Config, positions: list[FileState]) -> Iterator[tuple[str, str, Hit]]:
    """Every hit of the new rules in what the collectors had read of each file still there."""
    from canary.logs.matching import build_matcher
    from collectors.files import open_log, read_errors
    from collectors.positions import file_key
    from collectors.scan import LineScanner

    matcher = build_matcher(config)
    for state in positions:
        try:
            st = os.stat(state.path)
        except OSError:
            continue
        if file_key(st.st_dev, st.st_ino) != state.key or not state.offset:
            continue
        scanner = LineScanner(matcher)
        left = state.offset
        try:
            with open_log(Path(state.path)) as stream:
                while left > 0:
                    data = stream.read(min(READ, left))
                    if not data:
                        break
                    left -= len(data)
                    for hit in scanner.feed(data, joined=True).hits:  # read in turn
                        yield state.path, state.key, hit
        except read_errors() as exc:
            log.warning("cannot re-read %s for the reloaded guards: %s", state.path, exc)


def backfill(store: Store, config: Config, guards: list[str], *, now: datetime) -> int:
    """Count ``guards`` again over their windows in what was read already; return the firings."""
    if not guards:
        return 0
    windows = {g.name: g.window for g in config.guards if g.name in guards}
    since = now - max(windows.values())
    return store.recount(guards, since, _hits_before(config, store.positions()))


def reschedule(daemon: Daemon) -> None:
    """Schedule the canaries of the daemon's config as it is now, if they differ from those scheduled.

    The old scheduler stops without waiting (a run in flight finishes and stores its time);
    the new one plans each canary from its stored last run, with its new ``every`` or ``cron``.
    """
    from canary.runs.schedule import slots_of

    config = daemon.config
    wanted = {s.key: s for s in slots_of(config)} if config.agent is not None else {}
    old = daemon.scheduler
    if (old.times() if old is not None else {}) == {k: s.times for k, s in wanted.items()}:
        if old is not None:
            old.renew(list(wanted.values()))  # the same times: the next runs take the new definitions
        return
    if old is not None:
        old.stop(wait=False)
        daemon.scheduler = None
    if wanted and not daemon.stop_event.is_set():
        daemon.schedule()
    log.info("canaries rescheduled: %d slot(s)", len(wanted))
