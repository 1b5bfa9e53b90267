"""Reaching the agent over HTTP and as a command, against real loopback servers."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from canary.config.settings import AgentConfig
from canary.proxy.fixtures import create_fixture_server
from canary.proxy.serving import BackgroundServer
from canary.runs.agent import AgentDriver, extract
from canary.runs.inflight import ActiveRun
from canary.runs.registry import Registry

SEEN: list[dict[str, object]] = []


async def ask(request: Request) -> Response:
    body = await request.json()
    SEEN.append({"body": body, "auth": request.headers.get("authorization")})
    prompt = body["q"]["text"]
    if prompt == "fail":
        return PlainTextResponse("boom", status_code=500)
    if prompt == "slow":
        await asyncio.sleep(3)
    return JSONResponse({"result": {"choices": [{"text": f"echo: {prompt} {body.get('hook', '')}"}]}})


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    app = Starlette(routes=[Route("/ask", ask, methods=["POST"]), Route("/raw", ask, methods=["POST"])])
    with BackgroundServer(app) as running:
        yield running


def driver(url: str, **kw: object) -> AgentDriver:
    return AgentDriver(AgentConfig(url=url, **kw))  # type: ignore[arg-type]


def test_placeholders_fill_body_headers_and_the_answer_path(server: BackgroundServer) -> None:
    d = driver(
        f"{server.url}/ask", body={"q": {"text": "{prompt}"}, "hook": "{inject}", "n": 3},
        headers={"Authorization": "Bearer {nonce}"}, answer="result.choices.0.text",
    )
    reply = d.ask("hello", nonce="abc", inject="FAKE")
    assert reply.ok and reply.answer == "echo: hello FAKE"
    assert SEEN[-1] == {"body": {"q": {"text": "hello"}, "hook": "FAKE", "n": 3}, "auth": "Bearer abc"}


def test_errors_are_replies_not_exceptions(server: BackgroundServer) -> None:
    d = driver(f"{server.url}/ask", body={"q": {"text": "{prompt}"}}, answer="result.choices.0.text")
    assert "HTTP 500" in (d.ask("fail", nonce="n").error or "")
    assert "within 1s" in (d.ask("slow", nonce="n", timeout=1).error or "")
    missing = driver(f"{server.url}/ask", body={"q": {"text": "{prompt}"}}, answer="result.nope")
    assert "nope" in (missing.ask("x", nonce="n").error or "")
    down = driver("http://127.0.0.1:9/ask")
    assert "unreachable" in (down.ask("x", nonce="n").error or "")
    whole = driver(f"{server.url}/raw", body={"q": {"text": "{prompt}"}}, answer="")
    assert '"result"' in (whole.ask("x", nonce="n").answer or "")


def test_command_mode() -> None:
    script = "import sys; print('said', sys.argv[1])"
    ok = AgentDriver(AgentConfig(command=(sys.executable, "-c", script, "{prompt}")))
    assert ok.ask("hi there", nonce="n").answer == "said hi there"
    bad = AgentDriver(AgentConfig(command=(sys.executable, "-c", "import sys; sys.exit('nope')")))
    assert "exited 1" in (bad.ask("x", nonce="n").error or "")
    slow = AgentDriver(AgentConfig(command=(sys.executable, "-c", "import time; time.sleep(5)"),
                                   timeout=timedelta(seconds=1)))
    assert "1s" in (slow.ask("x", nonce="n").error or "")
    gone = AgentDriver(AgentConfig(command=("/nonexistent/agent", "{prompt}")))
    assert "not found" in (gone.ask("x", nonce="n").error or "")


def test_extract_paths() -> None:
    assert extract({"a": [{"b": "c"}]}, "a.0.b") == "c"
    assert extract({"a": {"n": 1}}, "a") == '{"n": 1}'
    with pytest.raises(KeyError):
        extract({"a": []}, "a.0")


def test_fixture_server_serves_the_page_once_registered_and_records_the_fetch() -> None:
    registry = Registry(has_upstream=True)
    run = ActiveRun(run_id=1, guard="g", nonce="abcdefghijklmnopqrst", inject_at="first",
                    inject_text="x", repair_text=None, page="<p>the page</p>", started=0.0,
                    deadline=1e12)
    with BackgroundServer(create_fixture_server(registry)) as fixtures:
        assert httpx.get(f"{fixtures.url}/r/{run.nonce}").status_code == 404
        registry.add(run)
        page = httpx.get(f"{fixtures.url}/r/{run.nonce}")
        assert page.status_code == 200 and page.text == "<p>the page</p>"
        assert run.fetched is not None
        assert httpx.get(f"{fixtures.url}/r/zzzzzzzzzzzzzzzzzzzz").status_code == 404
        assert httpx.get(f"{fixtures.url}/elsewhere").status_code == 404
        registry.remove(run.nonce)
        assert httpx.get(f"{fixtures.url}/r/{run.nonce}").status_code == 404


def test_a_loopback_agent_never_goes_through_http_proxy(
    server: BackgroundServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stray HTTP_PROXY must not see the prompt and the nonce: a real proxy server receives nothing."""
    relayed: list[str] = []

    async def anything(request: Request) -> Response:
        relayed.append(f"{request.method} {request.url}")
        return JSONResponse({"result": {"choices": [{"text": "from the proxy"}]}})

    proxy_app = Starlette(routes=[Route("/{rest:path}", anything, methods=["GET", "POST"])])
    with BackgroundServer(proxy_app) as proxy:
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        for host in ("127.0.0.1", "localhost"):
            url = f"{server.url}/ask".replace("127.0.0.1", host)
            d = driver(url, body={"q": {"text": "{prompt}"}}, answer="result.choices.0.text")
            reply = d.ask("secret nonce k3v9", nonce="k3v9")
            assert reply.answer == "echo: secret nonce k3v9 ", reply
    assert relayed == []


def test_a_wrong_answer_path_names_the_keys_the_reply_has(server: BackgroundServer) -> None:
    d = driver(f"{server.url}/ask", body={"q": {"text": "{prompt}"}}, answer="result.choice.0.text")
    error = d.ask("x", nonce="n").error or ""
    assert error == (
        "the agent's reply has no 'result.choice.0.text' (missing 'choice'; "
        "'result' has the keys: choices)"
    )
    d = driver(f"{server.url}/ask", body={"q": {"text": "{prompt}"}}, answer="result.choices.3")
    error = d.ask("x", nonce="n").error or ""
    assert "missing '3'" in error and "'result.choices' is a list of 1 item" in error


def test_an_agent_that_breaks_off_its_answer_is_not_called_unreachable() -> None:
    """It took the prompt and began to answer: the reason says it broke off, not that it was never reached."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def half_answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"ans")

    thread = threading.Thread(target=half_answer, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        reply = driver(f"http://127.0.0.1:{port}/ask").ask("x", nonce="n", timeout=5)
    finally:
        thread.join(5)
        listener.close()
    assert reply.error is not None and reply.error.startswith(
        f"the agent at http://127.0.0.1:{port}/ask was reached, but its answer broke off: "), reply.error
    assert "unreachable" not in reply.error
