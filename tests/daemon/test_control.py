"""The control API: token, browser and Host rules, routes, the client, and the token file."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from canary.daemon.control import (
    METRICS_CONTENT_TYPE,
    ControlClient,
    connect,
    create_control_app,
    token_path,
)
from canary.demo.live import free_port
from canary.errors import UnavailableError, UsageError
from canary.proxy.serving import BackgroundServer

TOKEN = "s3cret-token"
METRICS = b"# TYPE canary_demo gauge\ncanary_demo 1.0\n"


@dataclass
class StubHandlers:
    """Handlers that record their calls; ``block`` makes status() take that long."""

    block: float = 0.0
    calls: list[tuple[list[str], bool]] = field(default_factory=list)

    def health(self) -> dict[str, object]:
        return {"ok": True, "pid": 42, "since": "2026-11-29T10:00:00Z", "heartbeat": None,
                "files": 3, "proxy": "127.0.0.1:11435", "fixtures": "127.0.0.1:11436"}

    def status(self) -> dict[str, object]:
        if self.block:
            time.sleep(self.block)
        return {"daemon": {"running": True, "since": "2026-11-29T10:00:00Z", "files": 3},
                "guards": [{"guard": "citation", "status": "alive"}]}

    def run_now(self, selection: list[str], wait: bool) -> dict[str, object]:
        self.calls.append((selection, wait))
        if "nope" in selection:
            raise UsageError("no guard named 'nope' (did you mean 'quote'?)")
        if not wait:
            return {"queued": selection}
        return {"runs": [{"guard": s, "verdict": "caught"} for s in selection]}


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[BackgroundServer, StubHandlers]]:
    """One server for the module: starting uvicorn per test costs more than the tests."""
    stub = StubHandlers()
    app = create_control_app(TOKEN, stub, metrics=lambda: METRICS)
    with BackgroundServer(app, name="control") as running:
        yield running, stub


@pytest.fixture
def handlers(shared: tuple[BackgroundServer, StubHandlers]) -> StubHandlers:
    shared[1].calls.clear()
    return shared[1]


@pytest.fixture
def server(shared: tuple[BackgroundServer, StubHandlers], handlers: StubHandlers) -> BackgroundServer:
    return shared[0]


def get(server: BackgroundServer, path: str, **headers: str) -> httpx.Response:
    return httpx.get(server.url + path, headers=headers, trust_env=False)


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- the rules ------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/health", "/status"])
def test_no_token_and_wrong_token_are_401(server: BackgroundServer, path: str) -> None:
    missing = get(server, path)
    assert missing.status_code == 401
    assert "bearer token" in missing.json()["error"]
    assert missing.headers["www-authenticate"] == "Bearer"
    assert get(server, path, **auth("wrong")).status_code == 401
    assert get(server, path, Authorization=f"Basic {TOKEN}").status_code == 401
    assert get(server, path, Authorization="Bearer").status_code == 401


def test_the_right_token_reads_health_and_status(server: BackgroundServer, handlers: StubHandlers) -> None:
    health = get(server, "/health", **auth())
    assert health.status_code == 200
    assert health.json() == handlers.health()
    status = get(server, "/status", **auth())
    assert status.status_code == 200
    assert status.json()["guards"] == [{"guard": "citation", "status": "alive"}]
    assert status.headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},  # any page in the user's browser
        {"Origin": "null"},  # sandboxed iframes and file:// pages
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Host": "evil.example:11437"},  # DNS rebinding: evil.example now resolves to 127.0.0.1
        {"Host": "127.0.0.1.evil.example"},
        {"Host": ""},
    ],
)
@pytest.mark.parametrize("path", ["/health", "/status", "/metrics"])
def test_browser_and_foreign_host_requests_are_403_even_with_the_token(
    server: BackgroundServer, headers: dict[str, str], path: str
) -> None:
    response = get(server, path, **auth(), **headers)
    assert response.status_code == 403, response.text
    assert "error" in response.json()


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:11437", "127.0.0.1:11437", "127.5.6.7", "[::1]:11437", "LOCALHOST."]
)
def test_loopback_hosts_and_sec_fetch_site_none_are_accepted(server: BackgroundServer, host: str) -> None:
    response = get(server, "/health", Host=host, **{"Sec-Fetch-Site": "none"}, **auth())
    assert response.status_code == 200, response.text


def test_allowed_hosts_extend_the_loopback_names(handlers: StubHandlers) -> None:
    app = create_control_app(TOKEN, handlers, allowed_hosts=["box.lan"])
    with BackgroundServer(app, name="control") as running:
        assert get(running, "/health", Host="box.lan:11437", **auth()).status_code == 200
        assert get(running, "/health", Host="other.lan:11437", **auth()).status_code == 403


def test_metrics_needs_no_token(server: BackgroundServer) -> None:
    response = get(server, "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == METRICS_CONTENT_TYPE
    assert response.content == METRICS


def test_without_a_metrics_callable_metrics_is_404(handlers: StubHandlers) -> None:
    with BackgroundServer(create_control_app(TOKEN, handlers), name="control") as running:
        assert get(running, "/metrics").status_code == 404


def test_unknown_paths_need_the_token_too(server: BackgroundServer) -> None:
    assert get(server, "/admin").status_code == 401
    response = get(server, "/admin", **auth())
    assert response.status_code == 404
    assert response.json() == {"error": "no such endpoint: GET /admin"}


def test_an_empty_token_is_refused(handlers: StubHandlers) -> None:
    with pytest.raises(ValueError, match="token"):
        create_control_app("", handlers)


# -- POST /run ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not JSON"),
        (b'["citation"]', "JSON object"),
        (b'{"select": "citation"}', "list of guard"),
        (b'{"select": [1]}', "list of guard"),
        (b'{"select": [""]}', "list of guard"),
        (b'{"wait": "yes"}', "'wait' must be"),
        (b'{"selct": ["citation"]}', "unknown key(s) 'selct'"),
    ],
)
def test_run_with_a_bad_body_is_400(
    server: BackgroundServer, handlers: StubHandlers, body: bytes, message: str
) -> None:
    response = httpx.post(server.url + "/run", content=body, headers=auth(), trust_env=False)
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert handlers.calls == []


def test_run_with_a_huge_body_is_413(server: BackgroundServer, handlers: StubHandlers) -> None:
    body = b'{"select": ["' + b"a" * 100_000 + b'"]}'
    response = httpx.post(server.url + "/run", content=body, headers=auth(), trust_env=False)
    assert response.status_code == 413
    assert handlers.calls == []


def test_run_with_an_unknown_guard_is_400_with_the_message(server: BackgroundServer) -> None:
    response = httpx.post(server.url + "/run", json={"select": ["nope"]}, headers=auth(), trust_env=False)
    assert response.status_code == 400
    assert response.json() == {"error": "no guard named 'nope' (did you mean 'quote'?)"}


def test_run_calls_the_handler_with_the_selection(server: BackgroundServer, handlers: StubHandlers) -> None:
    body = {"select": ["citation", "quote/fake-quote"], "wait": True}
    response = httpx.post(server.url + "/run", json=body, headers=auth(), trust_env=False)
    assert response.status_code == 200
    assert handlers.calls == [(["citation", "quote/fake-quote"], True)]
    assert response.json() == {
        "runs": [
            {"guard": "citation", "verdict": "caught"},
            {"guard": "quote/fake-quote", "verdict": "caught"},
        ]
    }


def test_run_with_an_empty_body_runs_everything_and_waits(
    server: BackgroundServer, handlers: StubHandlers
) -> None:
    response = httpx.post(server.url + "/run", headers=auth(), trust_env=False)
    assert response.status_code == 200
    assert handlers.calls == [([], True)]


def test_run_needs_the_token_and_refuses_browsers(server: BackgroundServer, handlers: StubHandlers) -> None:
    # A cross-site form post is exactly what a page in the user's browser would try.
    plain = httpx.post(server.url + "/run", json={"select": ["citation"]}, trust_env=False)
    browser = httpx.post(
        server.url + "/run", json={"select": ["citation"]},
        headers={**auth(), "Origin": "http://evil.example"}, trust_env=False,
    )
    assert (plain.status_code, browser.status_code) == (401, 403)
    assert handlers.calls == []


def test_a_blocking_handler_does_not_block_health() -> None:
    slow = StubHandlers(block=1.0)
    with BackgroundServer(create_control_app(TOKEN, slow), name="control") as running:
        done: dict[str, float] = {}

        def call_status() -> None:
            get(running, "/status", **auth())
            done["status"] = time.monotonic()

        started = time.monotonic()
        thread = threading.Thread(target=call_status)
        thread.start()
        time.sleep(0.1)  # the status call is now inside its 1 s handler
        assert get(running, "/health", **auth()).status_code == 200
        health_at = time.monotonic()
        thread.join(5)
        assert health_at - started < 0.9
        assert done["status"] - started >= 1.0
        assert health_at < done["status"]


# -- the client -------------------------------------------------------------------------


def test_the_client_talks_to_the_server(server: BackgroundServer, handlers: StubHandlers) -> None:
    with ControlClient(f"127.0.0.1:{server.port}", TOKEN) as client:
        health = client.health()
        assert health is not None
        assert health["pid"] == 42
        assert client.status()["guards"][0]["status"] == "alive"
        assert client.run(["citation"]) == {"runs": [{"guard": "citation", "verdict": "caught"}]}
        assert client.run(["citation"], wait=False) == {"queued": ["citation"]}
        with pytest.raises(UsageError, match="no guard named 'nope'"):
            client.run(["nope"])
    assert handlers.calls[:2] == [(["citation"], True), (["citation"], False)]


def test_the_client_reports_a_refused_token(server: BackgroundServer) -> None:

    with ControlClient(f"127.0.0.1:{server.port}", "stale") as client, pytest.raises(
        UnavailableError, match="refused the control token"
    ):
        client.status()


def test_connect_returns_a_client_when_the_daemon_answers(server: BackgroundServer) -> None:
    path = token_path()
    path.write_text(TOKEN + "\n")
    client = connect(f"127.0.0.1:{server.port}")
    assert client is not None
    with client:
        assert client.status()["daemon"]["running"] is True


def test_connect_reaches_an_any_address_daemon_on_loopback(server: BackgroundServer) -> None:
    token_path().write_text(TOKEN)
    client = connect(f"0.0.0.0:{server.port}")
    assert client is not None
    assert client.address == f"127.0.0.1:{server.port}"
    client.close()


def test_connect_is_none_without_a_token_file_or_without_a_daemon() -> None:
    port = free_port()
    assert connect(f"127.0.0.1:{port}") is None  # no token file
    token_path().write_text(TOKEN)
    assert connect(f"127.0.0.1:{port}") is None  # nothing listens
    assert ControlClient(f"127.0.0.1:{port}", TOKEN).health() is None
