"""What the receiver answers: the OTLP/HTTP status codes, partial success, limits, hostile bodies."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence

import httpx
import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from canary.config.settings import load_config
from canary.errors import StoreError
from canary.proxy.serving import BackgroundServer
from canary.store.signals import SignalHit
from canary.traces.matching import SignalRules
from canary.traces.receiver import MAX_INFLIGHT, create_receiver
from tests.traces.conftest import GUARDRAIL, Served, write_project

PROTOBUF = {"content-type": "application/x-protobuf"}
JSON = {"content-type": "application/json"}
TRACE = "5b8efff798038103d269b633813fc60c"


def span_json(trace: str = TRACE, span: str = "eee19b7ec3c1b174", **attributes: str) -> dict[str, object]:
    attrs = [{"key": k.replace("_", "."), "value": {"stringValue": v}} for k, v in attributes.items()]
    return {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": trace, "spanId": span, "name": "guard", "attributes": attrs}]}]}]}


def post(served: Served, body: bytes, headers: dict[str, str], path: str = "/v1/traces") -> httpx.Response:
    return httpx.post(f"{served.endpoint}{path}", content=body, headers=headers, timeout=10)


def test_an_empty_protobuf_export_gets_the_empty_response(served: Served) -> None:
    reply = post(served, trace_service_pb2.ExportTraceServiceRequest().SerializeToString(), PROTOBUF)
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/x-protobuf"
    parsed = trace_service_pb2.ExportTraceServiceResponse.FromString(reply.content)
    assert not parsed.HasField("partial_success")


def test_json_ids_are_hex_and_uppercase_reads_as_lowercase(served: Served) -> None:
    body = span_json(TRACE.upper(), openinference_span_kind="GUARDRAIL", output_value="BLOCKED")
    reply = post(served, json.dumps(body).encode(), JSON)
    assert (reply.status_code, reply.json()) == (200, {})
    assert served.app.flush() and served.store.count_firings() == 1
    with served.store.engine.connect() as conn:
        (key,) = conn.exec_driver_sql("SELECT file_key FROM firings").one()
    assert key == f"{TRACE}:eee19b7ec3c1b174"


def test_a_span_whose_id_has_the_wrong_length_is_left_out_as_a_partial_success(served: Served) -> None:
    body = span_json("abcd", openinference_span_kind="GUARDRAIL", output_value="BLOCKED")
    reply = post(served, json.dumps(body).encode(), JSON)
    assert reply.status_code == 200
    assert reply.json()["partialSuccess"]["rejectedSpans"] == "1"
    assert served.app.flush() and served.store.count_firings() == 0 and served.app.counts.rejected == 1


HOSTILE = [
    # (body, headers, status): none of the body's text is kept or echoed
    (b"\xff\xfe<script>\x1b]52;c;aGk=\x07", PROTOBUF, 400),
    (b"[1, 2, 3]", JSON, 400),
    (b'{"resourceSpans": "\x1b[2J"}', JSON, 400),
    (b'{"resourceSpans": [' * 50000, JSON, 400),  # nested past any parser's depth
    (json.dumps(span_json("not hex at all!!" * 2)).encode(), JSON, 400),
    (b"not gzip at all", {**PROTOBUF, "content-encoding": "gzip"}, 400),
    (gzip.compress(b"\0" * (21 << 20), mtime=0), {**PROTOBUF, "content-encoding": "gzip"}, 413),  # inflates past the limit
    (gzip.compress(b"x" * 100, mtime=0)[:-8], {**PROTOBUF, "content-encoding": "gzip"}, 400),  # cut short
    (b"{}", {"content-type": "text/plain"}, 415),
    (b"{}", {**JSON, "content-encoding": "br"}, 415),
]


@pytest.mark.parametrize(("body", "headers", "status"), HOSTILE, ids=[f"{i}-{row[2]}" for i, row in enumerate(HOSTILE)])
def test_a_body_the_receiver_cannot_read_is_refused_and_never_kept(
        served: Served, body: bytes, headers: dict[str, str], status: int) -> None:
    reply = post(served, body, headers)
    assert reply.status_code == status
    if reply.headers["content-type"] == "application/x-protobuf":
        message = status_pb2.Status.FromString(reply.content).message
    else:
        message = json.loads(reply.content)["message"]
    assert message and "\x1b" not in message and "script" not in message
    assert served.app.flush() and served.store.count_firings() == 0
    assert served.app.counts.last_error is not None and "\x1b" not in served.app.counts.last_error


@pytest.mark.parametrize(("method", "path", "host", "status"), [
    ("GET", "/v1/traces", None, 405),
    ("POST", "/v1/metrics", None, 404),
    ("POST", "/v1/traces", "attacker.example", 403),  # a DNS-rebinding page's Host
])
def test_other_requests_are_refused(served: Served, method: str, path: str, host: str | None, status: int) -> None:
    headers = {**JSON, **({"host": host} if host else {})}
    reply = httpx.request(method, f"{served.endpoint}{path}", content=b"{}", headers=headers)
    assert reply.status_code == status


def test_a_body_past_the_limit_gets_413_before_it_is_read(tmp_path: object) -> None:
    app = create_receiver(SignalRules([]), lambda hits: 0, max_body=1000)
    with BackgroundServer(app, "127.0.0.1", 0, name="trace receiver") as server:
        reply = httpx.post(f"{server.url}/v1/traces", content=b"\0" * 5000, headers=PROTOBUF)
    app.close()
    assert reply.status_code == 413


def test_a_store_that_cannot_be_written_loses_no_firing(tmp_path: object) -> None:
    from pathlib import Path

    config = load_config(path=write_project(Path(str(tmp_path)), {"grounding": GUARDRAIL}))
    kept: list[SignalHit] = []
    failures = [3]  # the store is locked for three tries, then written

    def commit(hits: Sequence[SignalHit]) -> int:
        if failures[0]:
            failures[0] -= 1
            raise StoreError("the store at sqlite:///x could not be used: database is locked")
        kept.extend(hits)
        return len(hits)

    app = create_receiver(SignalRules(config.guards), commit, max_body=1 << 20)
    body = json.dumps(span_json(openinference_span_kind="GUARDRAIL", output_value="BLOCKED")).encode()
    with BackgroundServer(app, "127.0.0.1", 0, name="trace receiver") as server:
        reply = httpx.post(f"{server.url}/v1/traces", content=body, headers=JSON)
        assert app.flush(timeout=20)
    app.close()
    assert reply.status_code == 200  # the exporter does not wait for the store
    assert [h.guard for h in kept] == ["grounding"] and app.counts.firings == 1
    assert app.counts.last_error is not None and "database is locked" in app.counts.last_error


def test_too_many_firings_waiting_for_the_store_get_503_and_are_sent_again(tmp_path: object) -> None:
    from pathlib import Path

    config = load_config(path=write_project(Path(str(tmp_path)), {"grounding": GUARDRAIL}))
    app = create_receiver(SignalRules(config.guards), len, max_body=1 << 20)
    app.committer.limit = 0  # nothing may wait: as if the store had been locked for long
    body = json.dumps(span_json(openinference_span_kind="GUARDRAIL", output_value="BLOCKED")).encode()
    quiet = json.dumps(span_json(openinference_span_kind="LLM")).encode()
    with BackgroundServer(app, "127.0.0.1", 0, name="trace receiver") as server:
        refused = httpx.post(f"{server.url}/v1/traces", content=body, headers=JSON)
        other = httpx.post(f"{server.url}/v1/traces", content=quiet, headers=JSON)
    app.close()
    assert (refused.status_code, refused.headers["retry-after"]) == (503, "1")
    assert other.status_code == 200  # a request with no firing never waits for the store


def test_bodies_that_stall_lose_their_slot_and_real_exports_get_through() -> None:
    """A suspended exporter holds a request open with part of its body: after a period without the
    least rate, it is answered 408 and its slot goes to exporters that send."""
    import socket
    import time

    app = create_receiver(SignalRules([]), lambda hits: 0, max_body=100_000)
    app.body_period = 2.0  # long enough to see every slot held on a busy machine
    stalled = []
    with BackgroundServer(app, "127.0.0.1", 0, name="trace receiver") as server:
        host, port = server.url.removeprefix("http://").split(":")
        for _ in range(MAX_INFLIGHT):
            sock = socket.create_connection((host, int(port)))
            sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\n" + b"\0" * 10)
            stalled.append(sock)
        held = time.monotonic() + 1.5  # the server takes in every stalled request first
        while httpx.post(f"{server.url}/v1/traces", content=b"", headers=PROTOBUF).status_code != 503:
            assert time.monotonic() < held, "the stalled bodies never held every slot"
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while (status := httpx.post(f"{server.url}/v1/traces", content=b"", headers=PROTOBUF).status_code) == 503:
            assert time.monotonic() < deadline, "the stalled bodies kept every slot"
            time.sleep(0.1)
        assert status == 200
        for sock in stalled:
            sock.settimeout(5)
            assert sock.recv(100).startswith(b"HTTP/1.1 408")
            sock.close()
    app.close()


def test_a_protobuf_span_named_with_bytes_that_are_not_utf8_is_refused_saying_so(served: Served) -> None:
    """As the JSON path names what is wrong, so does the protobuf one: the exporter's log says why."""
    request = trace_service_pb2.ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.name = "abc"
    body = request.SerializeToString().replace(b"abc", b"a\xffc")
    reply = post(served, body, PROTOBUF)
    assert reply.status_code == 400
    message = status_pb2.Status.FromString(reply.content).message
    assert message == ("not a protobuf export request of traces: a string field in it is not UTF-8 text, "
                       "as protobuf strings must be"), message
