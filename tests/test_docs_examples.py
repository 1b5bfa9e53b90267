"""The whole-file examples of docs/configuration.md and docs/definitions.md load without a problem."""

from __future__ import annotations

import re
from pathlib import Path

from canary.config.settings import load_config

ROOT = Path(__file__).resolve().parents[1]


def first_toml(page: str) -> str:
    """The first ``toml`` code block of a docs page."""
    found = re.search(r"```toml\n(.*?)```", (ROOT / "docs" / page).read_text(encoding="utf-8"), re.S)
    assert found is not None, page
    return found.group(1)


def test_the_whole_file_examples_load_as_one_project(tmp_path: Path) -> None:
    (tmp_path / "canaries_defs").mkdir()
    (tmp_path / "canaries_defs" / "citation.toml").write_text(first_toml("definitions.md"), encoding="utf-8")
    config_path = tmp_path / "canary.toml"
    config_path.write_text(first_toml("configuration.md"), encoding="utf-8")
    config = load_config(path=config_path)
    assert [g.name for g in config.guards] == ["citation"]
    assert [c.name for c in config.guards[0].canaries] == ["fake-url"]
    assert config.agent is not None and config.model.upstream == "http://127.0.0.1:11434"
    assert config.warnings == ()
