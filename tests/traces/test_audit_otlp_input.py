"""``canary audit --otlp FILE`` with a file that is not (or not all) an OTLP JSON export: a clear
error naming the file, the line or record and what was expected, exit 2, never a traceback."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from canary.cli.main import main
from tests.cli.test_status_entry import console
from tests.traces.conftest import EVALUATION, GUARDRAIL, write_project
from tests.traces.test_audit_otlp import span_lines

#: What names a Python exception rather than the problem.
PYTHON = re.compile(r"Error\b|Exception|Traceback|errno|<class")


@dataclass
class Audit:
    code: int
    stdout: str
    stderr: str


def audit(root: Path, *args: str) -> Audit:
    config = write_project(root, {"grounding": GUARDRAIL, "evaluation": EVALUATION})
    result = CliRunner().invoke(main, ["audit", "--config", str(config), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return Audit(result.exit_code, result.stdout, result.stderr)


def request(line: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(line)
    return doc


def with_span(change: dict[str, Any]) -> str:
    """A real export line (the SDK's JSON encoder) whose guard span has ``change`` applied."""
    doc = request(span_lines(blocked=1, passed=0)[0])
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    guard = next(i for i, s in enumerate(spans) if s["name"] == "guard")
    spans[guard].update(change)
    return json.dumps(doc)


def guard_index() -> int:
    doc = request(span_lines(blocked=1, passed=0)[0])
    return next(i for i, s in enumerate(doc["resourceSpans"][0]["scopeSpans"][0]["spans"]) if s["name"] == "guard")


def corrupted(data: bytes) -> bytes:
    """Compressed data with bytes flipped past its header."""
    return data[:20] + bytes(b ^ 0xFF for b in data[20:60]) + data[60:]


SPAN = "resourceSpans[0].scopeSpans[0].spans[{i}]"

BAD_FILES: list[tuple[str, bytes, list[str]]] = [
    # (what the file is, its bytes, what the error must say beside the file's name)
    ("not json", b"this is not JSON at all\n", ["line 1", "not JSON"]),
    ("a json array", b"[1, 2, 3]\n", ["line 1", "array", "resourceSpans or resourceLogs"]),
    ("an object of another kind", b'{"hello": "world"}\n', ["line 1", "resourceSpans or resourceLogs"]),
    ("resourceSpans not a list", b'{"resourceSpans": {"scopeSpans": []}}\n',
     ["line 1", "resourceSpans: expected an array, got an object"]),
    ("a span that is not an object", b'{"resourceSpans": [{"scopeSpans": [{"spans": ["guard"]}]}]}\n',
     ["line 1", "resourceSpans[0].scopeSpans[0].spans[0]: expected an object, got a string"]),
    ("a span name that is a number", with_span({"name": 7}).encode() + b"\n",
     ["line 1", SPAN + ".name: expected a string, got a number"]),
    ("a trace id that is not hex", with_span({"traceId": "not hex at all, not at all!"}).encode() + b"\n",
     ["line 1", SPAN + ".traceId: expected hex digits"]),
    ("a time that is not a number", with_span({"startTimeUnixNano": "soon \x1b]52;c;secret\x07"}).encode() + b"\n",
     ["line 1", SPAN + ".startTimeUnixNano: expected an integer"]),
    ("attributes that are not a list", with_span({"attributes": {"output.value": "BLOCKED"}}).encode() + b"\n",
     ["line 1", SPAN + ".attributes: expected an array, got an object"]),
    ("invalid utf-8", with_span({"name": "guard"}).replace('"guard"', '"gu\udcffard"').encode(
        "utf-8", "surrogateescape") + b"\n", ["line 1", "not UTF-8"]),
    ("a cut-off line", span_lines(1, 0)[0][:120].encode() + b"\n", ["line 1: not JSON (", " at column "]),
]


@pytest.mark.parametrize(("content", "expected"), [(c, e) for _, c, e in BAD_FILES],
                         ids=[name for name, _, _ in BAD_FILES])
def test_a_file_that_is_no_otlp_export_is_told_by_file_line_and_problem(
    tmp_path: Path, content: bytes, expected: list[str],
) -> None:
    path = tmp_path / "export.json"
    path.write_bytes(content)
    done = audit(tmp_path, "--otlp", str(path))
    assert done.code == 2, (done.stdout, done.stderr)
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert str(path) in error and "not an OTLP JSON export" in error, error
    for words in expected:
        assert words.format(i=guard_index()) in error, error
    assert not PYTHON.search(done.stderr), done.stderr
    assert "secret" not in done.stderr  # a value is never quoted
    # nothing of it was read: the span guards stay unread, never asleep
    assert "ASLEEP" not in done.stdout


def test_the_line_and_record_of_a_bad_line_among_good_ones_are_told_and_the_rest_counted(tmp_path: Path) -> None:
    good = span_lines(blocked=2, passed=0)
    bad_name = with_span({"name": ["a", "list"]})
    path = tmp_path / "export.json"
    path.write_text("\n".join([good[0], bad_name, "", "\x1b]52;c;aGk=\x07 not json", good[1]]) + "\n")
    done = audit(tmp_path, "--otlp", str(path), "--json")
    assert done.code == 1, done.stderr  # the evaluation guard: unread, no log record was read
    doc = json.loads(done.stdout)
    assert {g["guard"]: g["flag"] for g in doc["guards"]}["evaluation"] == "unread"
    assert {g["guard"]: g["firings"] for g in doc["guards"]}["grounding"] == 2
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert any(f"{path}: line 2: {SPAN.format(i=guard_index())}.name: expected a string, got an array" in w
               for w in warnings), warnings
    assert any(f"{path}: line 4: not JSON" in w for w in warnings), warnings
    assert not PYTHON.search(done.stderr) and "\x1b" not in done.stderr, done.stderr


def test_an_empty_file_is_said_to_hold_nothing(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_bytes(b"")
    done = audit(tmp_path, "--otlp", str(path))
    assert f"warning: {path} is empty: no span or log record was read" in done.stderr, done.stderr
    assert "ASLEEP" not in done.stdout and not PYTHON.search(done.stderr)


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("export.json.gz", b"not gzip at all", "not gzip data"),
    ("export.json.gz", corrupted(gzip.compress(b'{"resourceSpans": []}\n' * 2000)), "gzip data is corrupt"),
    ("export.json.xz", b"not xz at all", "not xz data"),
    ("export.json.zst", b"zstd", ".zst files cannot be read"),
    ("missing.json", None, "no such file"),
    ("folder", "dir", "a folder: name its export files"),
], ids=["not-gzip", "corrupt-gzip", "not-xz", "zstd", "missing", "directory"])
def test_a_file_that_cannot_be_read_is_told_without_a_traceback(
    tmp_path: Path, name: str, content: bytes | str | None, expected: str,
) -> None:
    path = tmp_path / name
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    done = audit(tmp_path, "--otlp", str(path))
    assert done.code == 2, (done.stdout, done.stderr)
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert str(path) in error and expected in error, error
    assert not PYTHON.search(done.stderr), done.stderr


def test_a_compressed_file_cut_short_keeps_what_came_before_and_says_where_it_ends(tmp_path: Path) -> None:
    lines = span_lines(blocked=3, passed=0)
    whole = gzip.compress(("\n".join(lines) + "\n").encode() * 50)
    path = tmp_path / "export.json.gz"
    path.write_bytes(whole[: len(whole) * 2 // 3])
    done = audit(tmp_path, "--otlp", str(path), "--json")
    assert done.code == 2
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert str(path) in error and "ends early" in error, error
    doc = json.loads(done.stdout)
    assert {g["guard"]: g["firings"] for g in doc["guards"]}["grounding"] == 3  # read before the cut


@pytest.mark.parametrize(("suffix", "compress"), [(".xz", lzma.compress), (".bz2", bz2.compress)])
def test_an_xz_or_bzip2_export_is_read(tmp_path: Path, suffix: str, compress: Callable[[bytes], bytes]) -> None:
    path = tmp_path / f"export.json{suffix}"
    path.write_bytes(compress(("\n".join(span_lines(blocked=1, passed=1)) + "\n").encode()))
    done = audit(tmp_path, "--otlp", str(path), "--json")
    assert {g["guard"]: g["firings"] for g in json.loads(done.stdout)["guards"]}["grounding"] == 1


def test_a_hostile_file_name_reaches_the_terminal_inert(tmp_path: Path) -> None:
    path = tmp_path / "export\x1b[2J\u202e.json"
    path.write_bytes(b"not json\n")
    done = audit(tmp_path, "--otlp", str(path))
    assert done.code == 2 and "\x1b" not in done.stderr and "\u202e" not in done.stderr, done.stderr


def test_a_pretty_printed_export_request_is_read_and_its_errors_name_the_record(tmp_path: Path) -> None:
    """One export request written as an indented JSON document (what a person saves by hand)."""
    doc = request(span_lines(blocked=1, passed=0)[0])
    pretty = tmp_path / "request.json"
    pretty.write_text(json.dumps(doc, indent=2) + "\n")
    done = audit(tmp_path, "--otlp", str(pretty), "--json")
    assert {g["guard"]: g["firings"] for g in json.loads(done.stdout)["guards"]}["grounding"] == 1
    assert not done.stderr.strip() or "error" not in done.stderr, done.stderr
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][guard_index()]["endTimeUnixNano"] = [1]
    pretty.write_text(json.dumps(doc, indent=2) + "\n")
    done = audit(tmp_path, "--otlp", str(pretty))
    assert done.code == 2
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert SPAN.format(i=guard_index()) + ".endTimeUnixNano: expected an integer" in error, error
    assert "line 1" not in error
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(request(span_lines(1, 0)[0]), indent=2).replace('"name"', '"name" "x"', 1))
    done = audit(tmp_path, "--otlp", str(broken))
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.code == 2 and re.search(r"not JSON \(.*at line \d+, column \d+\)", error), error


@pytest.mark.slow
def test_the_console_script_tells_a_bad_export_as_the_click_command_does(tmp_path: Path) -> None:
    config = write_project(tmp_path, {"grounding": GUARDRAIL, "evaluation": EVALUATION})
    path = tmp_path / "export.json"
    path.write_bytes(with_span({"name": 7}).encode() + b"\n")
    args = ["--config", str(config), "audit", "--otlp", str(path)]
    quick = console(args)
    slow = CliRunner().invoke(main, args)
    assert quick.returncode == slow.exit_code == 2, quick.stderr
    assert quick.stderr == slow.stderr and "Traceback" not in quick.stderr
    assert f"error: {path}: not an OTLP JSON export" in quick.stderr
