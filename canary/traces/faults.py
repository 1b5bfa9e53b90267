"""What is wrong with a body that is not an OTLP JSON export request, said by where and what was expected.

The OpenTelemetry project's JSON messages (``opentelemetry-proto-json``) refuse a request by the
name of one field; this module finds the record it is in (``resourceSpans[0].scopeSpans[0].spans[2]``)
and says, in JSON's words, what the field should hold: ``...spans[2].name: expected a string, got a
number``. A value is never quoted (it is the producer's text, and may be anything).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["DECODE_ERRORS", "OtlpError", "Signals", "json_type", "load_json", "misfit"]

Signals = Literal["traces", "logs"]


class OtlpError(ValueError):
    """A body that is not an OTLP export request of its kind and encoding.

    ``problem`` is what is wrong (``not JSON``); ``fault``, for JSON that is no request, the part of
    it at fault and how (``resourceSpans[0]...name: expected a string, got a number``); ``detail``
    what the JSON parser said, and ``line`` and ``column`` where, when the body is not JSON. The
    message holds them all.
    """

    def __init__(self, problem: str, *, fault: str | None = None, detail: str | None = None,
                 line: int | None = None, column: int | None = None) -> None:
        self.problem, self.fault, self.detail, self.line, self.column = problem, fault, detail, line, column
        where = f" at line {line}, column {column}" if line is not None else ""
        message = f"{problem}: {fault}" if fault else problem
        super().__init__(f"{message} ({detail}{where})" if detail else message)


def json_type(value: object) -> str:
    """What a JSON value is, with its article: ``a string``, ``an object``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def load_json(body: bytes) -> Any:
    """The JSON value of ``body``; an ``OtlpError`` saying why (and where) when it is not JSON."""
    try:
        return json.loads(body)
    except UnicodeDecodeError as exc:
        raise OtlpError(f"not UTF-8 text (byte {exc.start + 1} is not part of a UTF-8 character)") from None
    except json.JSONDecodeError as exc:
        said = exc.msg.removesuffix(" at")  # "Unterminated string starting at": the place follows
        raise OtlpError("not JSON", detail=said[:1].lower() + said[1:], line=exc.lineno,
                        column=exc.colno) from None
    except RecursionError:
        raise OtlpError("JSON nested too deeply to read") from None


def _request_type(kind: Signals) -> Any:
    if kind == "traces":
        from opentelemetry.proto_json.collector.trace.v1 import trace_service

        return trace_service.ExportTraceServiceRequest
    from opentelemetry.proto_json.collector.logs.v1 import logs_service

    return logs_service.ExportLogsServiceRequest


#: The errors a JSON message's ``from_dict`` raises for a value of the wrong type or form.
DECODE_ERRORS = (TypeError, ValueError, KeyError, AttributeError, RecursionError)
#: How many levels down a fault is looked for (a list or table attribute may nest deeper).
_DEPTH = 32

Decoder = Callable[[Any], object]


def misfit(data: dict[str, Any], kind: Signals) -> str:
    """Where ``data`` (a JSON object that does not decode as a request of ``kind``) is wrong, and how:
    the smallest part of it that does not decode alone, by its path."""
    decode: Decoder = _request_type(kind).from_dict
    return _narrow(decode, data, "", "", 0) or "a field holds a value of the wrong type or form"


def _error(decode: Decoder, value: Any) -> Exception | None:
    try:
        decode(value)
    except DECODE_ERRORS as exc:
        return exc
    return None


def _narrow(decode: Decoder, value: Any, path: str, key: str, depth: int) -> str | None:
    """``decode`` refuses ``value`` (found at ``path``, under ``key``): the part of it at fault, said."""
    error = _error(decode, value)
    if error is None:
        return None
    field, words = _said(error)
    if depth < _DEPTH and field != key:  # the fault is inside the value, not the value itself
        parts: list[tuple[str, str, Any, Decoder]] = []
        if isinstance(value, dict):
            parts = [(f"{path}.{k}" if path else k, k, v, _wrap_key(decode, k)) for k, v in value.items()]
        elif isinstance(value, list):
            parts = [(f"{path}[{i}]", key, v, _wrap_item(decode)) for i, v in enumerate(value)]
        for where, name, part, inner in parts:
            found = _narrow(inner, part, where, name, depth + 1)
            if found is not None:
                return found
    # the field the decoder names, below the path; or the value at the path is itself wrong
    named = f"{path}.{field}" if path and field not in (None, "data", key) else path or field
    return f"{named}: {words}" if named else words


def _wrap_key(decode: Decoder, key: str) -> Decoder:
    return lambda part: decode({key: part})


def _wrap_item(decode: Decoder) -> Decoder:
    return lambda part: decode([part])


_FIELD = re.compile(r"^Field '(\w+)' expected (.+), got (\w+)$")
_INVALID = re.compile(r"^Invalid (hex string|base64 string|int64 value|float value) for field '(\w+)'")
_ENUM = re.compile(r" is not a valid (\w+(?:\.\w+)*)$")
#: A Python type the decoder names, as what a field should be, and as what it was.
_EXPECTED = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean",
             "list": "an array", "dict": "an object", "bytes": "a string"}
_GOT = {**_EXPECTED, "int": "a number", "NoneType": "null"}
_INVALID_WORDS = {"hex string": "hex digits", "base64 string": "base64 text",
                  "int64 value": "an integer (a number, or its digits in a string)",
                  "float value": "a number"}


def _camel(field: str) -> str:
    """A protobuf field name as OTLP JSON writes it: ``start_time_unix_nano`` -> ``startTimeUnixNano``."""
    head, *rest = field.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _said(error: Exception) -> tuple[str | None, str]:
    """The decoder's complaint, in JSON's words: the field it names (as OTLP JSON spells it; ``data``
    for a value that should be an object) and what is wrong with it."""
    text = str(error)
    if found := _FIELD.match(text):
        field, expected, got = found.groups()
        wanted = " or ".join(_EXPECTED.get(name, "another type")
                             for name in re.findall(r"<class '(\w+)'>", expected)) or "another type"
        return _camel(field), f"expected {wanted}, got {_GOT.get(got, 'another type')}"
    if found := _INVALID.match(text):
        what, field = found.groups()
        return _camel(field), f"expected {_INVALID_WORDS[what]}"
    if found := _ENUM.search(text):
        return None, f"not one of the {found.group(1)} values"
    if isinstance(error, RecursionError):
        return None, "nested too deeply to read"
    return None, "a value of the wrong type or form"
