"""What the line scanner warns of reaches the tailer's error callback, naming file and offset."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from canary.store.engine import Store
from collectors.rules import Rule
from collectors.scan import MAX_LINE, Matcher
from collectors.tailer import Tailer


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'canary.db'}")
    yield s
    s.close()


def test_a_line_cut_at_max_line_is_told_with_its_file_and_offset(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "agent.log"
    first = b"a HIT here\n"
    log.write_bytes(first + b"x" * (MAX_LINE + 10) + b" HIT\n" + b"b HIT again\n")
    told: list[tuple[str, str]] = []
    t = Tailer([str(log)], Matcher([Rule.regex("g", "HIT")]), store,
               on_error=lambda path, message: told.append((path, message)))
    try:
        t.poll()
    finally:
        t.close()
    assert store.count_firings() == 2  # the marker past MAX_LINE is cut off, the rest counted
    assert len(told) == 1, told
    path, message = told[0]
    assert path == str(log)
    assert str(log) in message and f"offset {len(first)}" in message
    assert f"longer than {MAX_LINE} bytes" in message
