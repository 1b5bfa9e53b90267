"""OTLP JSON export files (the OpenTelemetry Collector's file exporter) read back, line by line.

The file exporter writes one export request per line, as OTLP JSON: ``{"resourceSpans": ...}``
or ``{"resourceLogs": ...}`` (metric lines are skipped). A file may be gzip, bzip2 or xz
compressed. A line that is not OTLP JSON is told by its number, never by its text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from canary.traces.otlp import OtlpError, Signal, Signals, decode, signals
from collectors.files import open_log

__all__ = ["OtlpFile", "read_export_file"]

#: The longest line read; a longer one is told and skipped (the Collector writes one batch per line).
LINE_LIMIT = 64 << 20
_KINDS: dict[bytes, Signals] = {b'"resourceSpans"': "traces", b'"resourceLogs"': "logs"}


@dataclass
class OtlpFile:
    """What was read of one export file."""

    path: str
    lines: int = 0
    bytes: int = 0
    spans: int = 0
    log_records: int = 0
    warnings: list[str] = field(default_factory=list)


_SKIPPED = (b'"resourceMetrics"', b'"resourceProfiles"')


def _kind(line: bytes) -> Signals | bool | None:
    """The line's signal; False for metrics or profiles (skipped); None when it is none of them."""
    head = line[:200]
    if any(key in head for key in _SKIPPED):
        return False
    return next((kind for key, kind in _KINDS.items() if key in head), None)


def read_export_file(path: Path, report: OtlpFile) -> Iterator[Signal]:
    """Every signal of the file, in order; what was read is counted in ``report``. OSError when unreadable."""
    with open_log(path) as stream:
        for number, line in enumerate(_lines(stream, report), start=1):
            if not line.strip():
                continue
            report.lines += 1
            kind = _kind(line)
            if kind is False:
                continue  # metrics or profiles: no guard fires through them
            try:
                if not isinstance(kind, str):
                    raise OtlpError("no resourceSpans or resourceLogs")
                batch = signals(decode(line, kind, "json"), kind)
            except OtlpError as exc:
                if len(report.warnings) < 20:
                    report.warnings.append(f"{path}: line {number} is not OTLP JSON ({exc})")
                continue
            if kind == "traces":
                report.spans += batch.items - batch.rejected
            else:
                report.log_records += batch.items - batch.rejected
            yield from batch.signals


def _lines(stream: BinaryIO, report: OtlpFile) -> Iterator[bytes]:
    parts: list[bytes] = []  # the line being read, in pieces (a batch line may span many reads)
    size = 0
    while True:
        data = stream.read(1 << 20)
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
