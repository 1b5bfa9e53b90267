"""The import-linter contracts agree with each other: what sits under the dashboard is all of canary but its CLI."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _contracts() -> dict[str, dict[str, object]]:
    doc = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    return {c["name"]: c for c in doc["tool"]["importlinter"]["contracts"]}


def _modules(layer: str) -> set[str]:
    return {m.strip() for m in re.split(r"[|:]", layer)}


def test_every_layer_inside_canary_but_the_cli_sits_under_the_dashboard() -> None:
    contracts = _contracts()
    outer = contracts["cli -> dashboard -> canary -> collectors"]["layers"]
    inner = contracts["the layers inside canary"]
    assert isinstance(outer, list) and isinstance(inner["layers"], list)
    assert inner.get("exhaustive") is True  # a new module of canary must be given a layer
    assert outer[0] == "canary.cli" and outer[1] == "dashboard" and outer[3] == "collectors"
    below = {f"canary.{m}" for layer in inner["layers"] for m in _modules(layer)} - {"canary.cli"}
    assert _modules(outer[2]) == below


def test_no_import_is_let_through() -> None:
    assert all("ignore_imports" not in c for c in _contracts().values())
