"""Which stored run a log line belongs to: by the nonce it carries, or as a line stored with a run.

A nonce is 36 characters of ``a-z0-9`` (``canary.runs.values.new_nonce``: a 16-character
prefix shared by one process, then 20 random ones). A line is searched once for runs of
that alphabet at least 36 long; every 36-character window of such a run is a candidate,
looked up among the nonces of the store's runs. Only guard lines are searched (a few per
thousand), never every line, and a string merely shaped like a nonce ties nothing: it must
be the nonce of a run the store holds.

A line that belongs to a run is the run's for every guard it matches (``canary.store.runlines``):
``read_only_marks`` reads, beside the nonces, the lines (offset and kept text) stored with a run.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Collection, Iterator
from contextlib import closing
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

#: The ``path`` of a firing seen in a span, an event or a log record received on [traces].
SIGNAL_PATH = "otlp"
#: Longest line text kept with a firing (bytes of UTF-8).
LINE_KEEP = 2048

#: Length of a run's nonce: ``canary.proxy.needles.PREFIX`` + ``canary.runs.values.NONCE_LENGTH``.
NONCE_SIZE = 36

_RUN = re.compile(f"[a-z0-9]{{{NONCE_SIZE},}}")

__all__ = ["LINE_KEEP", "NONCE_SIZE", "RUN_LINES_SQL", "RUN_TRACES_SQL", "SIGNAL_PATH", "RunMarks", "carried",
           "cut_line", "nonce_candidates", "read_only_marks"]


class RunMarks(NamedTuple):
    """What ties a log line to a stored run: its nonce, or the line itself stored with the run; and
    a span (or log record) to one: its nonce, or a trace id of the run's model calls."""

    nonces: frozenset[str] = frozenset()
    lines: frozenset[tuple[int, str]] = frozenset()  # (offset, kept text)
    traces: frozenset[str] = frozenset()

    def canary(self, offset: int, text: str) -> bool:
        """Whether the line at ``offset`` belongs to a stored run."""
        if self.lines and (offset, cut_line(text)) in self.lines:
            return True
        return carried(text, self.nonces) is not None


def cut_line(text: str) -> str:
    """The text kept with a firing: its first ``LINE_KEEP`` bytes of UTF-8, a NUL (which no text
    of PostgreSQL holds) kept as U+FFFD, as bytes that are not UTF-8 are."""
    text = text.replace("\0", "\ufffd")
    raw = text.encode("utf-8")
    if len(raw) <= LINE_KEEP:
        return text
    return raw[:LINE_KEEP].decode("utf-8", "ignore")


def _windows(text: str) -> Iterator[str]:
    for match in _RUN.finditer(text):
        run = match.group()
        for at in range(len(run) - NONCE_SIZE + 1):
            yield run[at:at + NONCE_SIZE]


def nonce_candidates(text: str) -> set[str]:
    """Every substring of ``text`` shaped like a nonce."""
    return set(_windows(text))


def carried(text: str, nonces: Collection[str]) -> str | None:
    """The first of ``nonces`` that ``text`` carries, or None."""
    if not nonces:
        return None
    return next((c for c in _windows(text) if c in nonces), None)


#: The log lines stored with a run (not the spans: their path is ``SIGNAL_PATH``).
RUN_LINES_SQL = 'SELECT DISTINCT "offset", line FROM firings WHERE run_id IS NOT NULL AND path != :signal'
#: The trace ids of the runs' model calls.
RUN_TRACES_SQL = "SELECT trace_id FROM run_traces"



def read_only_marks(path: Path) -> RunMarks:
    """The nonces of every run in the SQLite store at ``path`` and the lines stored with one, read
    without writing to it.

    An absent file is a store with no runs. Raises ``sqlite3.Error`` when the file cannot be
    read as a store.
    """
    if not path.is_file():
        return RunMarks()
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
        conn.execute("PRAGMA busy_timeout=30000")
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "runs" not in tables:
            return RunMarks()
        nonces = frozenset(str(n) for (n,) in conn.execute("SELECT nonce FROM runs"))
        rows = conn.execute(RUN_LINES_SQL, {"signal": SIGNAL_PATH}) if "firings" in tables else []
        lines = frozenset((int(o), str(t)) for o, t in rows)
        traces = conn.execute(RUN_TRACES_SQL) if "run_traces" in tables else []
        return RunMarks(nonces, lines, frozenset(str(t) for (t,) in traces))
