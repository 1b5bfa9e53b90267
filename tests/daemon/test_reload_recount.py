"""A guard added or changed by a reload is counted again over what the collectors had read."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

from canary.config.settings import load_config
from canary.daemon.reload import READ, backfill
from canary.logs.matching import build_matcher
from canary.store.engine import Store
from collectors.tailer import Tailer

CITATION = "CitationGuard: rejected"
VERSION = "VersionGuard: rejected"


def write(root: Path, log: Path, guards: dict[str, str]) -> Path:
    defs = root / "defs"
    defs.mkdir(exist_ok=True)
    for path in defs.iterdir():
        path.unlink()
    for name, match in guards.items():
        (defs / f"{name}.toml").write_text(f"[guard]\nname = '{name}'\nmatch = '{match}'\n")
    config = root / "canary.toml"
    config.write_text(f"defs = ['defs/*.toml']\n[logs]\npaths = ['{log}']\n"
                      f"[store]\nurl = 'sqlite:///{root / 'c.db'}'\n")
    return config


def test_a_nul_inside_a_line_on_a_read_boundary_keeps_the_line_for_a_new_guard(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    line = f"{VERSION} v=1.2.3 \0 written with its line\n".encode()
    head = line.index(b"\0")
    filler = READ - head
    pad = b"".join(b"noise %08d\n" % i for i in range(filler // 15)) + b"x" * (filler % 15 - 1) + b"\n"
    log.write_bytes(pad + line + f"{CITATION} url=x\n".encode())
    assert len(pad) + head == READ  # the NUL is the first byte of the second read
    config = load_config(path=write(tmp_path, log, {"citation": CITATION}))
    store = Store.of(config)
    tailer = Tailer([str(log)], build_matcher(config), store)
    try:
        tailer.poll()
    finally:
        tailer.close()
    new = load_config(path=write(tmp_path, log, {"citation": CITATION, "version": VERSION}))
    assert backfill(store, new, ["version"], now=datetime.now(UTC)) == 1
    with store.engine.connect() as conn:
        lines = [r[0] for r in conn.execute(text("SELECT line FROM firings WHERE guard = 'version'"))]
    store.close()
    assert lines == [f"{VERSION} v=1.2.3 \ufffd written with its line"]
