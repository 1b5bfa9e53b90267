"""OTLP JSON export files (the OpenTelemetry Collector's file exporter) read back, line by line.

The file exporter writes one export request per line, as OTLP JSON: ``{"resourceSpans": ...}``
or ``{"resourceLogs": ...}`` (metric and profile lines are skipped). A file may be gzip, bzip2 or
xz compressed. A file holding one request written over several lines (an indented JSON document)
is read as that one request.

A line that is not an export request is told by its number and what is wrong with it, never by its
text, and the rest of the file is read. A file none of whose lines is one, or that cannot be read
(missing, not the compressed data its name says, cut short), is an error of the file
(``OtlpFile.error``); what was read before a cut still counts.
"""

from __future__ import annotations

import lzma
import os
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from canary.errors import UsageError
from canary.traces.faults import json_type, load_json
from canary.traces.otlp import Batch, OtlpError, Signal, Signals, decode, decode_json, signals
from collectors.files import expand, open_log

__all__ = ["OtlpFile", "export_paths", "read_export_file"]

#: The longest line read; a longer one is told and skipped (the Collector writes one batch per line).
LINE_LIMIT = 64 << 20
#: Bad lines told one by one; past these, one more warning counts the rest.
LINE_WARNINGS = 20
_KINDS: dict[bytes, Signals] = {b'"resourceSpans"': "traces", b'"resourceLogs"': "logs"}
_SKIPPED = (b'"resourceMetrics"', b'"resourceProfiles"')
_COMPRESSION = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".lzma": "lzma"}


@dataclass
class OtlpFile:
    """What was read of one export file."""

    path: str
    lines: int = 0
    bytes: int = 0
    spans: int = 0
    log_records: int = 0
    warnings: list[str] = field(default_factory=list)
    error: str | None = None  # why the file is no export, or what stopped its read
    requests: int = 0  # lines (or the one document) read as export requests, metrics included
    bad_lines: int = 0


_GLOB = re.compile(r"[*?\[]")


def export_paths(values: Sequence[str]) -> list[Path]:
    """The files ``--otlp`` names, in the order given, each once: a value that is no file but a glob
    (``'exports/*.json'``, quoted from the shell) is every file it matches, sorted.

    A ``UsageError`` for a glob that matches nothing, and for a folder (its files are to be named)."""
    out: list[Path] = []
    seen: set[str] = set()
    for value in values:
        path = Path(value)
        if path.is_dir():
            raise UsageError(f"--otlp {value}: a folder: name its export files, e.g. --otlp "
                             f"'{path / '*.json'}'", option="--otlp")
        found = [path]
        if not path.exists() and _GLOB.search(value):
            found = expand([value])
            if not found:
                raise UsageError(f"--otlp {value}: no file matches", option="--otlp")
        for one in found:
            key = os.path.realpath(one)
            if key not in seen:
                seen.add(key)
                out.append(one)
    return out


def _kind(line: bytes) -> Signals | bool | None:
    """The line's signal; False for metrics or profiles (skipped); None when its head tells none."""
    head = line[:200]
    if any(key in head for key in _SKIPPED):
        return False
    return next((kind for key, kind in _KINDS.items() if key in head), None)


def _kind_of(data: object) -> Signals | bool:
    """The signal of a JSON value that should be an export request; False for metrics or profiles."""
    if not isinstance(data, dict):
        raise OtlpError(f"{json_type(data)}, not an export request (an object with resourceSpans or "
                        "resourceLogs)")
    if "resourceSpans" in data:
        return "traces"
    if "resourceLogs" in data:
        return "logs"
    if "resourceMetrics" in data or "resourceProfiles" in data:
        return False
    raise OtlpError("an object with no resourceSpans or resourceLogs, not an export request")


def _request(text: bytes, report: OtlpFile) -> Iterator[Signal]:
    """The signals of one export request (none for metrics or profiles), counted in ``report``; an
    ``OtlpError`` when the text is no export request."""
    kind = _kind(text)
    batch: Batch | None = None
    if isinstance(kind, str):
        batch = signals(decode(text, kind, "json"), kind)
    elif kind is None:
        data = load_json(text)
        kind = _kind_of(data)
        batch = signals(decode_json(data, kind), kind) if isinstance(kind, str) else None
    report.requests += 1
    if batch is None:
        return iter(())
    if kind == "traces":
        report.spans += batch.items - batch.rejected
    else:
        report.log_records += batch.items - batch.rejected
    return iter(batch.signals)


def _line_problem(number: int, exc: OtlpError) -> str:
    if exc.detail is not None:  # not JSON: where in the line
        return f"line {number}: {exc.problem} ({exc.detail} at column {exc.column})"
    return f"line {number}: {exc.fault or exc}"


def read_export_file(path: Path, report: OtlpFile) -> Iterator[Signal]:
    """Every signal of the file, in order; what was read, and what is wrong, in ``report``.

    Never raises for the file: ``report.error`` says why it could not be read (whole)."""
    try:
        yield from _read(path, report)
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
        report.error = _unreadable(path, exc)


def _read(path: Path, report: OtlpFile) -> Iterator[Signal]:
    first: OtlpError | None = None  # what is wrong with the first bad line
    told: list[str] = []  # the bad lines, told once the file is known to hold good ones
    opening = b""
    with open_log(path) as stream:
        for number, line in enumerate(_lines(stream, report), start=1):
            if not line.strip():
                continue
            report.lines += 1
            opening = opening or line.lstrip()[:1]
            try:
                found = _request(line, report)
            except OtlpError as exc:
                report.bad_lines += 1
                first = first or exc
                if report.bad_lines <= LINE_WARNINGS:
                    told.append(f"{path}: {_line_problem(number, exc)}")
                continue
            yield from found
    if not report.lines:
        report.warnings.append(f"{path} is empty: no span or log record was read")
    elif report.requests:
        report.warnings += told
        if report.bad_lines > LINE_WARNINGS:
            report.warnings.append(f"{path}: {report.bad_lines - LINE_WARNINGS} more lines that are not "
                                   "export requests")
        if not report.spans + report.log_records:
            report.warnings.append(f"{path} holds no span or log record: nothing in it shows a guard firing")
    elif first is not None and first.detail is not None and opening == b"{" and report.lines > 1:
        yield from _document(path, report)  # its first line is no JSON alone: one request, indented
    elif told:
        others = report.lines - 1
        report.error = f"not an OTLP JSON export: {told[0].removeprefix(f'{path}: ')}" + (
            f" (and none of its other {others} lines is an export request either)" if others else "")


def _document(path: Path, report: OtlpFile) -> Iterator[Signal]:
    """The file read whole as one export request."""
    with open_log(path) as stream:
        text = stream.read(LINE_LIMIT + 1)
    try:
        found = _request(text, report)
    except OtlpError as exc:
        report.error = f"not an OTLP JSON export: {exc.fault or exc}"
        return
    report.bad_lines = 0
    yield from found


def _unreadable(path: Path, exc: BaseException) -> str:
    """Why the file could not be read, in words (never the exception's text: it may quote the file)."""
    packed = _COMPRESSION.get(path.suffix.lower())
    if isinstance(exc, EOFError):
        return (f"the {packed or 'compressed'} data ends early (cut short, or still being written); "
                "what came before was read")
    if isinstance(exc, OSError) and exc.errno is not None and exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    if isinstance(exc, zlib.error):
        return "the gzip data is corrupt"
    if isinstance(exc, lzma.LZMAError):
        return f"not {packed} data" if "format" in str(exc) else f"the {packed} data is corrupt"
    if isinstance(exc, OSError) and packed:
        return f"not {packed} data" if packed == "gzip" else f"not {packed} data, or it is corrupt"
    if isinstance(exc, ValueError) and path.suffix and not packed:
        return f"{path.suffix} files cannot be read without an extra library: decompress it first"
    return "it cannot be read"


def _lines(stream: BinaryIO, report: OtlpFile) -> Iterator[bytes]:
    parts: list[bytes] = []  # the line being read, in pieces (a batch line may span many reads)
    size = 0
    # A decompressing stream hands over what it has (read1): a cut in its data loses no line before it.
    read = getattr(stream, "read1", None) or stream.read
    while True:
        data = read(1 << 20)
        if not data:
            break
        report.bytes += len(data)
        if b"\n" not in data:
            parts.append(data)
            size += len(data)
            if size > LINE_LIMIT:
                report.warnings.append(f"{report.path}: a line longer than {LINE_LIMIT} bytes was skipped")
                parts, size = [], -(1 << 62)  # skip to the end of this line
            continue
        first, *whole, last = data.split(b"\n")
        if size >= 0:
            yield b"".join([*parts, first])
        yield from whole
        parts, size = [last], len(last)
    if parts and size >= 0:
        yield b"".join(parts)
