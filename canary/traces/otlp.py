"""OTLP export requests read into flat signals: spans, span events and log records.

A request body is decoded with the OpenTelemetry project's own messages: the protobuf ones of
``opentelemetry-proto`` for ``application/x-protobuf``, the JSON ones of ``opentelemetry-proto-json``
for ``application/json`` (they read trace and span ids as hex, as the OTLP spec says, where
protobuf's generic JSON parser reads them as base64). Both have the same fields, so one walk
reads them. Trace and span ids come out as lowercase hex, the form a W3C ``traceparent`` carries.
Anything a body cannot be read as is an ``OtlpError`` that says what is wrong and where
(``canary.traces.faults``), never what the body held; nothing of it is kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto_json.collector.logs.v1 import logs_service as logs_json
from opentelemetry.proto_json.collector.trace.v1 import trace_service as trace_json

from canary.traces.faults import DECODE_ERRORS, OtlpError, Signals, json_type, load_json, misfit

__all__ = ["Batch", "OtlpError", "Signal", "Signals", "decode", "decode_json", "signals"]

Encoding = Literal["protobuf", "json"]
#: How deep a list or table attribute is read; deeper levels read as "..." (a hostile payload may nest).
_DEPTH = 8
#: Characters kept of one attribute's value.
VALUE_KEEP = 65536
_ZERO_IDS = {"0" * 32, "0" * 16}


class Signal:
    """One span, span event or log record, with what a guard is matched on and what ties it to a run.

    Its attributes are read as text only when asked for: ``get`` reads one of them, ``attributes``
    all of them (once). Most spans a receiver gets are no guard's, and a guard whose name regex
    does not match never asks.
    """

    __slots__ = ("_attributes", "_pairs", "ident", "kind", "name", "span_id", "span_name", "trace_id", "ts")

    def __init__(self, kind: Literal["span", "event", "log"], name: str, pairs: Any, *, trace_id: str | None,
                 span_id: str | None, ts: float | None, span_name: str = "", ident: str = "") -> None:
        self.kind = kind
        self.name = name  # the span's name, the event's name, or the log record's event name
        self.trace_id = trace_id  # 32 lowercase hex digits; None when absent (or all zero)
        self.span_id = span_id  # 16 lowercase hex digits: of the span, or of the span the event is in
        self.ts = ts  # seconds since the epoch; None when the producer gave no time
        self.span_name = span_name  # an event's span
        #: What tells apart two log records with no trace context beside their name and attributes:
        #: their times to the nanosecond and their body.
        self.ident = ident
        self._pairs = pairs  # the message's KeyValue list, or a dict already read
        self._attributes: dict[str, str] | None = pairs if isinstance(pairs, dict) else None

    @property
    def attributes(self) -> dict[str, str]:
        """Every attribute's value as text (the first of a repeated key wins)."""
        if self._attributes is None:
            self._attributes = attributes_of(self._pairs)
        return self._attributes

    def get(self, key: str) -> str | None:
        """One attribute's value as text, or None when it is absent."""
        if self._attributes is not None:
            return self._attributes.get(key)
        for kv in self._pairs:
            if kv.key == key:
                return text_of(kv.value)
        return None


@dataclass(frozen=True)
class Batch:
    """What one export request carried."""

    signals: list[Signal]
    items: int  # spans or log records it carried
    rejected: int  # of them, those left out: an id of the wrong length


def decode(body: bytes, kind: Signals, encoding: Encoding) -> Any:
    """The export request message of ``kind`` in ``body``; an ``OtlpError`` saying what is wrong (and
    where) when it is not one."""
    if encoding == "json":
        return decode_json(load_json(body), kind)
    try:
        message: Any = (trace_service_pb2.ExportTraceServiceRequest if kind == "traces"
                        else logs_service_pb2.ExportLogsServiceRequest)()
        message.ParseFromString(body)
        return message
    except (DecodeError, ValueError, TypeError, RecursionError) as exc:
        # protobuf's own words name one fault worth telling apart: the rest is "it does not parse"
        why = ("a string field in it is not UTF-8 text, as protobuf strings must be" if "UTF-8" in str(exc)
               else "its bytes do not parse as one")
        raise OtlpError(f"not a protobuf export request of {kind}: {why}") from None


def decode_json(data: Any, kind: Signals) -> Any:
    """The export request message of ``kind`` in a JSON value; an ``OtlpError`` naming the part of
    it that is wrong (``resourceSpans[0].scopeSpans[0].spans[2].name: expected a string, got a number``)."""
    if not isinstance(data, dict):
        raise OtlpError(f"expected a JSON object, got {json_type(data)}")
    try:
        if kind == "traces":
            return trace_json.ExportTraceServiceRequest.from_dict(data)
        return logs_json.ExportLogsServiceRequest.from_dict(data)
    except DECODE_ERRORS:
        raise OtlpError(f"not an OTLP JSON export request of {kind}", fault=misfit(data, kind)) from None


def _hex(raw: bytes | None, size: int) -> str | bool | None:
    """Lowercase hex of an id; None when absent or all zero; False when of the wrong length."""
    if not raw:
        return None
    if len(raw) != size:
        return False
    text = raw.hex()
    return None if text in _ZERO_IDS else text


#: Nanoseconds since the epoch of the last moment a datetime can hold (9999-12-31T23:59:59Z).
_LAST_NANOS = 253_402_300_799 * 10**9


def _time(*nanos: int | str | None) -> float | None:
    """The first time given in range, in seconds since the epoch; None when none is (0, before 1970,
    or after year 9999: no clock's time, received as no time at all)."""
    for n in nanos:
        try:
            value = int(n or 0)
        except ValueError:
            continue
        if 0 < value <= _LAST_NANOS:
            return value / 1e9
    return None


def text_of(value: Any, depth: int = 0) -> str | None:
    """An ``AnyValue`` (protobuf or JSON message) as text; None when it holds nothing."""
    if value is None:
        return None
    which = value.WhichOneof("value") if hasattr(value, "WhichOneof") else _json_which(value)
    if which is None:
        return None
    got = getattr(value, which)
    if which == "string_value":
        return str(got)[:VALUE_KEEP]
    if which == "bool_value":
        return "true" if got else "false"
    if which in ("int_value", "double_value"):
        return str(got)
    if which == "bytes_value":
        return bytes(got).hex()[:VALUE_KEEP]
    if depth >= _DEPTH:
        return "..."
    if which == "array_value":
        items = [text_of(v, depth + 1) for v in got.values]
        return json.dumps(items, ensure_ascii=False)[:VALUE_KEEP]
    if which == "kvlist_value":
        table = {kv.key: text_of(kv.value, depth + 1) for kv in got.values}
        return json.dumps(table, ensure_ascii=False)[:VALUE_KEEP]
    return None


_JSON_FIELDS = ("string_value", "bool_value", "int_value", "double_value", "array_value",
                "kvlist_value", "bytes_value")


def _json_which(value: Any) -> str | None:
    return next((f for f in _JSON_FIELDS if getattr(value, f, None) is not None), None)


def attributes_of(pairs: Iterable[Any]) -> dict[str, str]:
    """Every attribute's key and value as text (the first of a repeated key wins)."""
    out: dict[str, str] = {}
    for kv in pairs:
        key = kv.key
        if key and key not in out:
            text = text_of(kv.value)
            if text is not None:
                out[str(key)] = text
    return out


def _spans(request: Any) -> Iterator[Any]:
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            yield from scope.spans


def _span_signals(span: Any, out: list[Signal]) -> bool:
    """The span and its events as signals; False when its ids are of the wrong length."""
    trace, span_id = _hex(span.trace_id, 16), _hex(span.span_id, 8)
    if trace is False or span_id is False:
        return False
    trace_s = trace if isinstance(trace, str) else None
    span_s = span_id if isinstance(span_id, str) else None
    name = str(span.name or "")
    out.append(Signal("span", name, span.attributes, trace_id=trace_s, span_id=span_s,
                      ts=_time(span.end_time_unix_nano, span.start_time_unix_nano)))
    for event in span.events:
        out.append(Signal("event", str(event.name or ""), event.attributes, trace_id=trace_s, span_id=span_s,
                          ts=_time(event.time_unix_nano), span_name=name))
    return True


def _log_signal(record: Any) -> Signal | None:
    trace, span_id = _hex(record.trace_id, 16), _hex(record.span_id, 8)
    if trace is False or span_id is False:
        return None
    attributes = attributes_of(record.attributes)
    name = str(record.event_name or "") or attributes.get("event.name", "")
    ident = repr((str(record.time_unix_nano or 0), str(record.observed_time_unix_nano or 0),
                  text_of(record.body) or ""))
    return Signal("log", name, attributes, trace_id=trace if isinstance(trace, str) else None,
                  span_id=span_id if isinstance(span_id, str) else None,
                  ts=_time(record.time_unix_nano, record.observed_time_unix_nano), ident=ident)


def signals(request: Any, kind: Signals) -> Batch:
    """Every signal of a decoded export request, and how many of its items were left out."""
    out: list[Signal] = []
    items = rejected = 0
    if kind == "traces":
        for span in _spans(request):
            items += 1
            if not _span_signals(span, out):
                rejected += 1
        return Batch(out, items, rejected)
    for resource in request.resource_logs:
        for scope in resource.scope_logs:
            for record in scope.log_records:
                items += 1
                signal = _log_signal(record)
                if signal is None:
                    rejected += 1
                else:
                    out.append(signal)
    return Batch(out, items, rejected)
