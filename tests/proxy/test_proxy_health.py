"""What the proxy tells its recorder: each outcome, the upstream latency, and credentials never shown."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from canary.demo.live import free_port
from canary.proxy.app import create_proxy
from canary.proxy.health import BUCKETS, ProxyCounts, redact

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi k3v9nonce"}]}'


def send(upstream: str | None, counts: ProxyCounts, transport: httpx.AsyncBaseTransport | None = None,
         path: str = "/v1/chat/completions") -> httpx.Response:
    async def go() -> httpx.Response:
        client = httpx.AsyncClient(transport=transport) if transport is not None else None
        app = create_proxy(upstream, client=client, recorder=counts, connect_timeout=2.0)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as front:
            response = await front.post(path, content=BODY, headers={"content-type": "application/json"})
        if client is not None:
            await client.aclose()
        return response

    return asyncio.run(go())


def test_a_refused_connection_is_a_failure_told_with_the_request_body() -> None:
    heard: list[tuple[str, str, bytes]] = []
    counts = ProxyCounts(on_failure=lambda o, m, b: heard.append((o, m, b)), clock=lambda: 1000.0)

    response = send(f"http://127.0.0.1:{free_port()}", counts)

    assert response.status_code == 502
    snap = counts.snapshot()
    assert snap.requests["refused"] == 1 and snap.requests["ok"] == 0
    assert heard == [("refused", "refused the connection", BODY)]
    assert snap.failing_since == 1000.0 and snap.failed_since == 1
    assert sum(snap.buckets) == 0  # no upstream answer, no latency


def test_answers_count_ok_or_5xx_with_their_latency() -> None:
    statuses = iter([200, 503, 200])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(next(statuses), json={"choices": []})

    counts = ProxyCounts()
    transport = httpx.MockTransport(handler)
    codes = [send("http://model.test", counts, transport).status_code for _ in range(2)]
    snap = counts.snapshot()
    assert codes == [200, 503]
    assert snap.requests["ok"] == 1 and snap.requests["upstream_5xx"] == 1
    assert snap.failed_since == 1 and snap.last_failure == "answered HTTP 503"
    assert sum(snap.buckets) == 2 and len(snap.buckets) == len(BUCKETS)

    send("http://model.test", counts, transport)
    after = counts.snapshot()
    assert after.failing_since is None and after.failed_since == 0  # a success ends the failing spell


def test_a_timeout_is_a_failure() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    counts = ProxyCounts()
    assert send("http://model.test", counts, httpx.MockTransport(handler)).status_code == 504
    assert counts.snapshot().requests["timeout"] == 1
    assert counts.snapshot().last_failure == "did not answer in time (read timeout)"


def test_without_upstream_nothing_is_a_model_server_failure() -> None:
    counts = ProxyCounts()
    assert send(None, counts).status_code == 503
    snap = counts.snapshot()
    assert snap.requests["no_upstream"] == 1 and snap.failing_since is None


def test_a_failing_recorder_never_breaks_the_agent() -> None:
    def boom(outcome: str, message: str, body: bytes) -> None:
        raise RuntimeError("bookkeeping broke")

    response = send(f"http://127.0.0.1:{free_port()}", ProxyCounts(on_failure=boom))
    assert response.status_code == 502


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:pw@127.0.0.1:11434", "http://***@127.0.0.1:11434"),
        ("http://token@model.example/v1", "http://***@model.example/v1"),
        ("http://127.0.0.1:11434", "http://127.0.0.1:11434"),
        (None, ""),
    ],
)
def test_redact_removes_credentials(url: str | None, shown: str) -> None:
    assert redact(url) == shown
