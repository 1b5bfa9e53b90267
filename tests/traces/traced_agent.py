"""An agent process whose only guard reports as an OpenInference GUARDRAIL span.

``python traced_agent.py PORT PROXY_URL MODE``: serves ``POST /ask {"prompt"}`` -> ``{"answer"}``.
Each request is one trace (a root span); the model is asked through the real ``openai`` client,
instrumented by ``openinference-instrumentation-openai`` (an LLM span) and by the OpenTelemetry
httpx instrumentation for ``httpx2``, the client's HTTP library (the W3C ``traceparent`` header
on the model call); the guard then checks
the answer's sources and writes a GUARDRAIL span, ``output.value`` BLOCKED or PASSED, carrying
neither the answer nor the prompt. Spans go out through the real OTLP/HTTP exporter the
environment names (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_PROTOCOL`` =
``http/protobuf`` or ``http/json``). Prompts starting ``Q:`` take the organic path, where the
guard is live; the others take the canary's path, where it runs only when MODE is ``alive``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry import trace
from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

if os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") == "http/json":
    from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
else:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]

URL = re.compile(r"https?://[^\s\"'<>]+")

provider = TracerProvider(resource=Resource.create({"service.name": "traced-agent"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
OpenAIInstrumentor().instrument(tracer_provider=provider)
HTTPX2ClientInstrumentor().instrument(tracer_provider=provider)  # the openai client's own HTTP library

from openai import OpenAI  # noqa: E402  (after the instrumentation: its httpx client is instrumented)

tracer = trace.get_tracer("traced-agent")


def think(client: OpenAI, prompt: str, mode: str) -> str:
    organic = prompt.startswith("Q:")
    with tracer.start_as_current_span("agent.request"):
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
        answer = reply.choices[0].message.content or ""
        if not organic and mode != "alive":
            return answer  # the guard sits in a code path the canary's request never enters
        fabricated = [u for u in URL.findall(answer) if ".example.org" in u]
        with tracer.start_as_current_span("grounding-guard") as span:
            span.set_attribute("openinference.span.kind", "GUARDRAIL")
            span.set_attribute("output.value", "BLOCKED: unverified source" if fabricated else "PASSED")
        return "I could not verify that source." if fabricated else answer


def main() -> None:
    port, proxy, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    client = OpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            prompt = json.loads(self.rfile.read(int(self.headers["content-length"])))["prompt"]
            try:
                body = json.dumps({"answer": think(client, prompt, mode)}).encode()
                self.send_response(200)
            except Exception as exc:
                body = json.dumps({"error": repr(exc)}).encode()
                self.send_response(500)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("ready", flush=True)
    try:
        server.serve_forever()
    finally:
        provider.shutdown()


if __name__ == "__main__":
    main()
