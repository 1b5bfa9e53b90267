"""``canary audit --otlp FILE ...``: several export files after one ``--otlp`` (a shell's glob
expanded), a quoted glob, and ``--otlp`` repeated, each file read once."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from canary.cli.entry import audit_args
from canary.cli.main import main
from tests.traces.conftest import EVALUATION, GUARDRAIL, write_project
from tests.traces.test_audit_otlp import evaluation_line, span_lines


def exports(root: Path) -> list[Path]:
    """Three export files of a Collector's folder: 1, 2 and 3 blocking spans, and an evaluation."""
    folder = root / "exports"
    folder.mkdir()
    paths = []
    for n in (1, 2, 3):
        path = folder / f"traces-{n}.json"
        path.write_text("\n".join(span_lines(blocked=n, passed=1)) + "\n")
        paths.append(path)
    (folder / "logs.json").write_text(evaluation_line() + "\n")
    return [*paths, folder / "logs.json"]


def audit(root: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    config = write_project(root, {"grounding": GUARDRAIL, "evaluation": EVALUATION})
    result = CliRunner().invoke(main, ["audit", "--config", str(config), "--json", *args])
    doc = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.exit_code, doc, result.stderr


def firings(doc: dict[str, Any]) -> dict[str, int]:
    return {g["guard"]: g["firings"] for g in doc["guards"]}


def read(doc: dict[str, Any]) -> list[str]:
    return [Path(f["path"]).name for f in doc["files"]]


def test_several_files_after_one_otlp_are_each_read(tmp_path: Path) -> None:
    paths = exports(tmp_path)
    code, doc, stderr = audit(tmp_path, "--otlp", *map(str, paths))
    assert code == 0, stderr
    assert firings(doc) == {"grounding": 6, "evaluation": 1}
    assert read(doc) == [p.name for p in paths]


def test_repeated_otlp_and_lists_mix(tmp_path: Path) -> None:
    one, two, three, logs = map(str, exports(tmp_path))
    code, doc, stderr = audit(tmp_path, "--otlp", one, two, "--otlp", three, "--otlp", logs)
    assert code == 0, stderr
    assert firings(doc) == {"grounding": 6, "evaluation": 1}
    code, doc, _ = audit(tmp_path, "--otlp", one)  # one file per flag, as before
    assert firings(doc) == {"grounding": 1, "evaluation": 0}


def test_a_quoted_glob_is_expanded_and_one_that_matches_nothing_is_an_error(tmp_path: Path) -> None:
    exports(tmp_path)
    code, doc, stderr = audit(tmp_path, "--otlp", str(tmp_path / "exports" / "traces-*.json"))
    assert code == 1, stderr  # the evaluation guard: unread, no log record was read
    assert {g["guard"]: g["flag"] for g in doc["guards"]}["evaluation"] == "unread"
    assert firings(doc)["grounding"] == 6
    assert read(doc) == ["traces-1.json", "traces-2.json", "traces-3.json"]
    code, _, stderr = audit(tmp_path, "--otlp", str(tmp_path / "exports" / "*.jsonl"))
    assert code == 2
    assert f"--otlp {tmp_path / 'exports' / '*.jsonl'}: no file matches" in stderr, stderr


def test_a_file_named_twice_is_read_once(tmp_path: Path) -> None:
    one = exports(tmp_path)[0]
    _, doc, _ = audit(tmp_path, "--otlp", str(one), str(tmp_path / "exports" / "traces-1*"),
                         "--otlp", f"{tmp_path}/exports/../exports/traces-1.json")
    assert read(doc) == ["traces-1.json"] and doc["files"][0]["lines"] == 2


def test_a_folder_is_an_error_that_says_how_to_name_its_files(tmp_path: Path) -> None:
    exports(tmp_path)
    code, _, stderr = audit(tmp_path, "--otlp", str(tmp_path / "exports"))
    assert code == 2
    assert f"{tmp_path / 'exports'}: a folder: name its export files, e.g. --otlp '" in stderr, stderr


def test_a_file_after_another_option_is_still_refused(tmp_path: Path) -> None:
    one, two, *_ = exports(tmp_path)
    config = write_project(tmp_path, {"grounding": GUARDRAIL})
    result = CliRunner().invoke(main, ["audit", "--config", str(config), "--otlp", str(one), "--json", str(two)])
    assert result.exit_code == 2 and "unexpected extra argument" in result.stderr, result.stderr


@pytest.mark.parametrize(("argv", "otlp"), [
    (["audit", "--otlp", "a.json", "b.json", "c.json"], ["a.json", "b.json", "c.json"]),
    (["audit", "--otlp=a.json", "b.json", "--json", "--otlp", "c.json"], ["a.json", "b.json", "c.json"]),
    (["audit", "--json", "b.json"], None),  # a file with no --otlp before it: click says so
    (["audit", "b.json", "--otlp", "a.json"], None),
])
def test_the_quick_way_takes_a_list_after_otlp(argv: list[str], otlp: list[str] | None) -> None:
    found = audit_args(argv)
    assert (found["otlp"] if found is not None else None) == otlp


@pytest.mark.slow
def test_a_shell_glob_after_otlp_is_read_through_the_console_script(tmp_path: Path) -> None:
    """As a user types it: the shell expands the glob into a list, the installed ``canary`` reads it."""
    exports(tmp_path)
    config = write_project(tmp_path, {"grounding": GUARDRAIL, "evaluation": EVALUATION})
    canary = Path(sys.executable).parent / "canary"
    line = f"{shlex.quote(str(canary))} --config {shlex.quote(str(config))} audit --json --otlp exports/*.json"
    env = {k: v for k, v in os.environ.items() if k != "CANARY_CONFIG"}
    done = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert firings(doc) == {"grounding": 6, "evaluation": 1}
    assert sorted(read(doc)) == ["logs.json", "traces-1.json", "traces-2.json", "traces-3.json"]
    slow = CliRunner().invoke(main, ["--config", str(config), "audit", "--json", "--otlp",
                                     *sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "exports").iterdir())])
    assert firings(json.loads(slow.stdout)) == firings(doc)
