"""The real OpenTelemetry SDK's OTLP/HTTP exporters (protobuf and JSON) against the receiver."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as JsonSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import format_trace_id
from sqlalchemy import select

from canary.store.tables import Firing, HourlyCount
from tests.traces.conftest import Served


def rows(served: Served) -> list[Any]:
    assert served.app.flush()  # the firings of every request answered so far are stored
    with served.store.engine.connect() as conn:
        return list(conn.execute(select(Firing).order_by(Firing.id)))  # type: ignore[arg-type]


@contextmanager
def tracer(exporter: Any) -> Iterator[Any]:
    provider = TracerProvider(resource=Resource.create({"service.name": "agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider.get_tracer("agent")
    finally:
        provider.shutdown()


def guard_spans(t: Any) -> str:
    """A request's spans: an LLM span, a guard that passes and one that blocks; the trace id."""
    with t.start_as_current_span("agent.request") as root:
        with t.start_as_current_span("llm", attributes={"openinference.span.kind": "LLM"}):
            pass
        with t.start_as_current_span("grounding-check", attributes={
                "openinference.span.kind": "GUARDRAIL", "output.value": "PASSED"}):
            pass
        with t.start_as_current_span("grounding-check", attributes={
                "openinference.span.kind": "GUARDRAIL", "output.value": "BLOCKED: no source",
                "input.value": "a long answer the guard read " * 20}):
            pass
        return format_trace_id(root.get_span_context().trace_id)


@pytest.mark.parametrize("exporter", ["protobuf", "protobuf-gzip", "json"])
def test_a_guardrail_span_sent_by_the_real_exporter_is_one_firing_with_its_evidence(
        served: Served, exporter: str) -> None:
    endpoint = f"{served.endpoint}/v1/traces"
    sent = (JsonSpanExporter(endpoint=endpoint) if exporter == "json" else
            OTLPSpanExporter(endpoint=endpoint, compression=Compression.Gzip if exporter.endswith("gzip")
                             else Compression.NoCompression))
    with tracer(sent) as t:
        trace = guard_spans(t)
    (row,) = rows(served)
    assert (row.guard, row.path, row.run_id, row.offset) == ("grounding", "otlp", None, -1)
    # the trace id as the SDK formats it: hex, not the base64 a generic protobuf JSON parser reads
    assert row.file_key.startswith(trace + ":")
    assert row.line == ("span 'grounding-check' openinference.span.kind='GUARDRAIL' "
                        f"output.value='BLOCKED: no source' trace {trace}")
    assert "long answer" not in row.line  # the span is never stored whole
    assert served.app.counts.spans == 4 and served.app.counts.firings == 1
    with served.store.engine.connect() as conn:
        assert [(c.guard, c.source, c.count) for c in conn.execute(select(HourlyCount))] == [
            ("grounding", "organic", 1)]


def test_a_span_sent_again_is_counted_once(served: Served) -> None:
    exporter = OTLPSpanExporter(endpoint=f"{served.endpoint}/v1/traces")
    spans: list[Any] = []

    class Keep(SimpleSpanProcessor):
        def on_end(self, span: Any) -> None:
            spans.append(span)

    provider = TracerProvider()
    provider.add_span_processor(Keep(exporter))
    guard_spans(provider.get_tracer("agent"))
    # an exporter that did not hear the answer sends the batch again
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()
    assert [r.guard for r in rows(served)] == ["grounding"]
    assert served.app.counts.spans == 8
