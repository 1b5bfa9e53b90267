"""Lines that carry a task id are hits for live collection, never firings, never in the audit."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary.config.settings import load_config
from canary.logs.matching import build_matcher
from canary.vocabulary import CORRELATE_RULE
from tests.config.test_config import write_config

TEXT = (b"2026-11-29T10:00:00Z task=ab12 fetched http://127.0.0.1/r/k3v9\n"
        b"2026-11-29T10:00:01Z nothing here\n"
        b"2026-11-29T10:00:02Z task=ab12 CitationGuard: rejected\n")
JSONL = (b'{"ts": "2026-11-29T10:00:00Z", "ctx": {"task_id": "ab12"}, "msg": "fetched"}\n'
         b'{"ts": "2026-11-29T10:00:01Z", "msg": "nothing here"}\n'
         b'{"ts": "2026-11-29T10:00:02Z", "task_id": "ab12", "event": "guard_reject", '
         b'"guard": "citation"}\n')


@pytest.mark.parametrize(
    ("logs", "defs", "data"),
    [("correlate = 'task=(?P<id>[0-9a-f]+)'\n", "valid/citation.toml", TEXT),
     ("format = 'jsonl'\ncorrelate = 'ctx.task_id'\n", "valid_jsonl/citation.toml", JSONL)],
    ids=["text", "jsonl"],
)
def test_task_id_lines_are_hits_only_when_following(tmp_path: Path, logs: str, defs: str,
                                                    data: bytes) -> None:
    config = load_config(path=write_config(tmp_path, "[logs]\n" + logs, defs=defs))
    live = build_matcher(config, correlate=True).scan(data, 0)
    # the fetch line (its id) and the guard's line (both); the line with no id is no hit
    assert [(CORRELATE_RULE in h.guards, "citation" in h.guards) for h in live] == [
        (True, False), (True, True)]
    audit = build_matcher(config).scan(data, 0)
    assert all(CORRELATE_RULE not in h.guards for h in audit)
    assert [("citation" in h.guards) for h in audit] == [True]


def test_the_compiled_patterns_are_kept_for_the_next_start_where_no_state_folder_was_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from collectors import engine

    if not engine.available():
        pytest.skip("hyperscan is not installed")
    state = tmp_path / "fresh" / "state"  # no daemon ever ran: nothing made it
    monkeypatch.setenv("CANARY_STATE_DIR", str(state))
    config = load_config(path=write_config(tmp_path, "[logs]\nactivity = 'task done'\n"))
    build_matcher(config)
    (kept,) = (state / "scan-cache").glob("*.hsdb")
    assert state.stat().st_mode & 0o777 == 0o700
    assert engine._load(kept) is not None
    assert build_matcher(config).scan(TEXT, 0)[0].guards == ("citation",)


def test_a_state_folder_that_cannot_be_made_only_costs_a_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("CANARY_STATE_DIR", str(blocker / "state"))
    config = load_config(path=write_config(tmp_path, "[logs]\n"))
    assert build_matcher(config).scan(TEXT, 0)[0].guards == ("citation",)
