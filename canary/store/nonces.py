"""Which stored run a log line belongs to by the nonce it carries.

A nonce is 36 characters of ``a-z0-9`` (``canary.runs.values.new_nonce``: a 16-character
prefix shared by one process, then 20 random ones). A line is searched once for runs of
that alphabet at least 36 long; every 36-character window of such a run is a candidate,
looked up among the nonces of the store's runs. Only guard lines are searched (a few per
thousand), never every line, and a string merely shaped like a nonce ties nothing: it must
be the nonce of a run the store holds.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Collection, Iterator
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

#: Length of a run's nonce: ``canary.proxy.needles.PREFIX`` + ``canary.runs.values.NONCE_LENGTH``.
NONCE_SIZE = 36

_RUN = re.compile(f"[a-z0-9]{{{NONCE_SIZE},}}")

__all__ = ["NONCE_SIZE", "carried", "nonce_candidates", "read_only_nonces"]


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


def read_only_nonces(path: Path) -> frozenset[str]:
    """The nonces of every run in the SQLite store at ``path``, read without writing to it.

    An absent file is a store with no runs. Raises ``sqlite3.Error`` when the file cannot be
    read as a store.
    """
    if not path.is_file():
        return frozenset()
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
        conn.execute("PRAGMA busy_timeout=30000")
        tables = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'").fetchall()
        if not tables:
            return frozenset()
        return frozenset(str(n) for (n,) in conn.execute("SELECT nonce FROM runs"))
