"""The OTLP/HTTP receiver: ``POST /v1/traces`` and ``/v1/logs``, protobuf or JSON, plain, gzip or deflate.

A raw ASGI app, answering as the OTLP spec says exporters expect: ``200`` with an export
response in the request's encoding (``partial_success`` counts the spans or records left out),
``400`` for a body it cannot read, ``413`` past ``max_body`` (compressed, or once inflated),
``415`` for another content type or encoding, ``404``/``405`` elsewhere, and ``503`` with
``Retry-After`` while it is busy, so the exporter sends the batch again instead of dropping it.
Errors carry a ``google.rpc.Status``; none quotes the body.

At most ``MAX_INFLIGHT`` requests are read at once: a flood costs at most that many bodies of
memory, and what it sends meanwhile waits in the exporters' retries. A body that falls behind
``BODY_MIN`` bytes each ``BODY_PERIOD`` seconds is answered ``408``, so a stalled exporter frees
its slot. A request's firings are
handed to the committer (``canary.traces.committer``), which stores them in order from a thread
of its own and holds them while the store cannot be written; the exporter does not wait for the
store. When too many firings wait, requests that carry one get 503. Only Host names that are
loopback (or the listener's own) are served.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import zlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from starlette.types import Receive, Scope, Send

from canary.proxy.serving import BodyTooLarge, host_allowed, read_body
from canary.store.signals import SignalHit
from canary.traces.committer import Committer
from canary.traces.matching import SignalRules
from canary.traces.otlp import Encoding, OtlpError, Signals, decode, signals
from canary.traces.shapes import ShapeBook

__all__ = ["MAX_INFLIGHT", "ReceiverCounts", "create_receiver"]

log = logging.getLogger("canary.traces.receiver")

PATHS: dict[str, Signals] = {"/v1/traces": "traces", "/v1/logs": "logs"}
CONTENT_TYPES: dict[str, Encoding] = {"application/x-protobuf": "protobuf", "application/json": "json"}
#: Requests read and decoded at once; more get 503 and are retried by their exporter.
MAX_INFLIGHT = 4
#: A body must bring at least ``BODY_MIN`` bytes each ``BODY_PERIOD`` seconds (as the model proxy's),
#: else it is answered 408 and its slot freed: a stalled exporter holds no slot for long.
BODY_PERIOD = 10.0
BODY_MIN = 16 * 1024
#: What a 503 asks the exporter to wait, in seconds.
RETRY_AFTER = 1
_INVALID_ARGUMENT, _UNAVAILABLE, _INTERNAL = 3, 14, 13


@dataclass
class ReceiverCounts:
    """What the receiver took in since it started, and the latest thing it refused."""

    listen: str = ""
    spans: int = 0
    log_records: int = 0
    rejected: int = 0  # spans or records left out of a request it accepted
    firings: int = 0  # new firings stored
    refused: int = 0  # requests answered 4xx or 5xx
    last_error: str | None = None
    last_error_at: float | None = None
    #: When it last took in a span, a log record (``time.time()``); kept across restarts in the store.
    span_seen_at: float | None = None
    record_seen_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def took(self, kind: Signals, items: int, rejected: int) -> None:
        """One request accepted."""
        with self._lock:
            taken = items - rejected
            if kind == "traces":
                self.spans += taken
                self.span_seen_at = time.time() if taken else self.span_seen_at
            else:
                self.log_records += taken
                self.record_seen_at = time.time() if taken else self.record_seen_at
            self.rejected += rejected

    def stored(self, firings: int) -> None:
        """Firings the committer stored."""
        with self._lock:
            self.firings += firings

    def error(self, message: str) -> None:
        """Something went wrong that refused no request (the store could not be written)."""
        with self._lock:
            self.last_error = message
            self.last_error_at = time.time()

    def refuse(self, status: int, message: str) -> None:
        """One request refused, and why (never the body's own text)."""
        with self._lock:
            self.refused += 1
            self.last_error = f"{status}: {message}"
            self.last_error_at = time.time()

    def to_json(self) -> dict[str, Any]:
        """What ``canary status --json`` shows under ``daemon.traces``."""
        with self._lock:
            return {"listen": self.listen, "spans": self.spans, "log_records": self.log_records,
                    "rejected": self.rejected, "firings": self.firings, "refused": self.refused,
                    "last_error": self.last_error, "span_seen_at": self.span_seen_at,
                    "record_seen_at": self.record_seen_at}


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


Commit = Callable[[Sequence[SignalHit]], int]


def create_receiver(rules: SignalRules, commit: Commit, *, max_body: int,
                    allowed_hosts: Collection[str] = (), counts: ReceiverCounts | None = None) -> Receiver:
    """The receiver as an ASGI app: firings of ``rules`` go to ``commit`` (the store's)."""
    return Receiver(rules, commit, max_body=max_body, allowed_hosts=tuple(allowed_hosts),
                    counts=counts or ReceiverCounts())


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def _encoding(scope: Scope) -> Encoding:
    media = _header(scope, b"content-type").split(";", 1)[0].strip().lower()
    encoding = CONTENT_TYPES.get(media)
    if encoding is None:
        raise _Refused(415, f"content type {media[:60]!r} is not OTLP: send application/x-protobuf "
                       "or application/json")
    return encoding


def _inflate(body: bytes, coding: str, limit: int) -> bytes:
    """The body decompressed (gzip or deflate), never past ``limit`` bytes."""
    if coding in ("", "identity"):
        return body
    if coding not in ("gzip", "deflate"):
        raise _Refused(415, f"content encoding {coding[:40]!r} is not supported: send gzip, deflate or none")
    for wbits in ((16 + zlib.MAX_WBITS,) if coding == "gzip" else (zlib.MAX_WBITS, -zlib.MAX_WBITS)):
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(body, limit + 1)
        except zlib.error:
            continue
        if len(out) > limit:
            raise _Refused(413, f"the request inflates past the receiver's limit of {limit} bytes "
                           "([traces] max_body)")
        if not inflater.eof:
            raise _Refused(400, f"the {coding} body is cut short")
        return out
    raise _Refused(400, f"the body is not valid {coding}")


def _success(kind: Signals, encoding: Encoding, rejected: int) -> bytes:
    message = ("some ids were not of 16 (trace) or 8 (span) bytes; those items were left out"
               if rejected else "")
    if encoding == "json":
        if not rejected:
            return b"{}"
        field_name = "rejectedSpans" if kind == "traces" else "rejectedLogRecords"
        return json.dumps({"partialSuccess": {field_name: str(rejected), "errorMessage": message}}).encode()
    response: Any = (trace_service_pb2.ExportTraceServiceResponse() if kind == "traces"
                     else logs_service_pb2.ExportLogsServiceResponse())
    if rejected:
        if kind == "traces":
            response.partial_success.rejected_spans = rejected
        else:
            response.partial_success.rejected_log_records = rejected
        response.partial_success.error_message = message
    return bytes(response.SerializeToString())


def _status_body(encoding: Encoding, code: int, message: str) -> bytes:
    if encoding == "json":
        return json.dumps({"code": code, "message": message}).encode()
    return bytes(status_pb2.Status(code=code, message=message).SerializeToString())


def _paced(receive: Receive, period: float) -> Receive:
    """``receive``, raising TimeoutError once the body falls behind ``BODY_MIN`` bytes a ``period``."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    got = 0

    async def paced() -> Any:
        nonlocal got
        deadline = start + period * (1 + got // BODY_MIN)
        message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
        got += len(message.get("body", b""))
        return message

    return paced


class Receiver:
    """The ASGI app of the OTLP/HTTP receiver."""

    def __init__(self, rules: SignalRules, commit: Commit, *, max_body: int, allowed_hosts: tuple[str, ...],
                 counts: ReceiverCounts) -> None:
        self.rules = rules
        self.committer = Committer(commit, stored=counts.stored, failed=counts.error)
        self.max_body = max_body
        self.allowed_hosts = allowed_hosts
        self.counts = counts
        self.shapes = ShapeBook()  # the guard-shaped spans seen, for ``canary init --traces``
        self.body_period = BODY_PERIOD
        self._inflight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        encoding: Encoding = "protobuf"
        try:
            kind = self._route(scope)
            encoding = _encoding(scope)
            if self._inflight >= MAX_INFLIGHT:
                raise _Refused(503, "the receiver is busy; send again later")
            self._inflight += 1
            try:
                await self._export(scope, receive, send, kind, encoding)
            finally:
                self._inflight -= 1
        except _Refused as refused:
            await self._refuse(send, encoding, refused)
        except Exception:
            # A fault of the receiver's own must cost the agent nothing but this batch.
            log.exception("the trace receiver failed on a request")
            await self._refuse(send, encoding, _Refused(500, "the receiver failed on this request"))

    def _route(self, scope: Scope) -> Signals:
        if not host_allowed(_header(scope, b"host"), self.allowed_hosts):
            raise _Refused(403, "the receiver answers only requests addressed to a loopback host or to "
                           "its own name")
        kind = PATHS.get(scope["path"])
        if kind is None:
            raise _Refused(404, "the receiver serves POST /v1/traces and POST /v1/logs")
        if scope["method"] != "POST":
            raise _Refused(405, "only POST exports are received")
        return kind

    async def _export(self, scope: Scope, receive: Receive, send: Send, kind: Signals,
                      encoding: Encoding) -> None:
        declared = _header(scope, b"content-length")
        if declared.isdigit() and int(declared) > self.max_body:
            raise _Refused(413, f"the request body is larger than the receiver's limit of {self.max_body} "
                           "bytes ([traces] max_body)")
        try:
            body = await read_body(_paced(receive, self.body_period), self.max_body)
        except TimeoutError:
            raise _Refused(408, f"the request body came slower than {BODY_MIN} bytes each "
                           f"{self.body_period:g} s") from None
        except BodyTooLarge:
            raise _Refused(413, f"the request body is larger than the receiver's limit of {self.max_body} "
                           "bytes ([traces] max_body)") from None
        if body is None:
            return
        coding = _header(scope, b"content-encoding").strip().lower()
        rejected = await asyncio.to_thread(self._take, body, coding, kind, encoding)
        payload = _success(kind, encoding, rejected)
        content_type = b"application/json" if encoding == "json" else b"application/x-protobuf"
        headers = [(b"content-type", content_type), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload, "more_body": False})

    def _take(self, body: bytes, coding: str, kind: Signals, encoding: Encoding) -> int:
        """Decode, match and store one request (in a worker thread); the items left out."""
        raw = _inflate(body, coding, self.max_body)
        del body
        try:
            batch = signals(decode(raw, kind, encoding), kind)
        except OtlpError as exc:
            raise _Refused(400, str(exc)) from None
        del raw
        self.shapes.note(batch.signals)
        firings = self.rules.firings(batch.signals) if self.rules else []
        hits = [SignalHit(f.guard, f.key, f.trace_id, f.ts, f.evidence, f.context) for f in firings]
        if not self.committer.offer(hits):
            raise _Refused(503, "too many firings wait for the store; send again later")
        self.counts.took(kind, batch.items, batch.rejected)
        return batch.rejected

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until the firings of every request answered so far are stored."""
        return self.committer.flush(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Store the firings that wait, then stop storing (once the server stopped)."""
        self.committer.close(timeout)

    async def _refuse(self, send: Send, encoding: Encoding, refused: _Refused) -> None:
        self.counts.refuse(refused.status, refused.message)
        code = {503: _UNAVAILABLE, 500: _INTERNAL}.get(refused.status, _INVALID_ARGUMENT)
        body = _status_body(encoding, code, refused.message)
        content_type = b"application/json" if encoding == "json" else b"application/x-protobuf"
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
        if refused.status == 503:
            headers.append((b"retry-after", str(RETRY_AFTER).encode()))
        if refused.status == 405:
            headers.append((b"allow", b"POST"))
        if refused.status == 413:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": refused.status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
