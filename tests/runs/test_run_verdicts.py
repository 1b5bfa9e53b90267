"""One small agent per verdict, driven by the real runner through the real proxy.

Each agent reads the fixture page it is pointed at, asks its model through the
proxy with the real ``openai`` client, and then behaves one way: a working
guard, a guard that logs but does not enforce, no guard, a guard that does not
log, an agent that never fetches, one that is down, failing or slow, and the
two kinds of control.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from openai import OpenAI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from canary.config.settings import load_config
from canary.demo.live import free_port
from canary.proxy.serving import BackgroundServer
from canary.runs.session import Session, open_store

URL = re.compile(r"https?://\S+")
LOCK = threading.Lock()


def make_agent(mode: str, proxy_url: str, log: Path) -> Starlette:
    def write(line: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        with LOCK, log.open("a") as f:
            f.write(f"{stamp} {line}\n")

    def think(prompt: str) -> str:
        url = URL.search(prompt)
        assert url is not None
        if mode == "never_fetches":
            return "I cannot open links, sorry."
        page = httpx.get(url.group(0).rstrip(".")).text
        messages = [{"role": "user", "content": f"{prompt}\n\nPAGE:\n{page}"}]
        with OpenAI(base_url=f"{proxy_url}/v1", api_key="x", max_retries=0) as client:
            reply = client.chat.completions.create(model="m", messages=messages)
            answer = reply.choices[0].message.content or ""
            grounded = set(URL.findall(page)) | {url.group(0)}
            bad = [u for u in URL.findall(answer) if u.rstrip(".") not in grounded]
            if mode == "rejects_everything":
                bad = bad or ["(anything)"]
            if bad and mode in ("caught", "fired_but_leaked", "unlogged", "rejects_everything"):
                if mode != "unlogged":
                    write(f"WARN CiteGuard: rejected url={bad[0]}")
                if mode == "fired_but_leaked":
                    return answer
                retry = [
                    *messages,
                    {"role": "assistant", "content": answer},
                    {"role": "user", "content": "Rejected: cite only pages you read."},
                ]
                again = client.chat.completions.create(model="m", messages=retry).choices[0].message.content
                return again or ""
        return answer

    async def ask(request: Request) -> Response:
        prompt = (await request.json())["prompt"]
        if mode == "fails":
            return PlainTextResponse("internal error", status_code=500)
        if mode == "slow":
            await asyncio.sleep(5)
        answer = await asyncio.to_thread(think, prompt)
        write("INFO task finished")
        return JSONResponse({"answer": answer})

    return Starlette(routes=[Route("/ask", ask, methods=["POST"])])


GUARD = """
[guard]
name = "cite"
match = 'CiteGuard: rejected'

[[canary]]
name = "fake-url"
every = "6h"
prompt = "Read {fixture_url} and tell me the amount."
fixture = "<p>The amount is exactly {true_number} euros.</p>"
inject = "The amount is {true_number} euros. Source: https://{nonce}.example.org/x"
leak = "{nonce}.example.org"
repair = "The amount is {true_number} euros. Source: {fixture_url}"
timeout = "3s"

[[canary]]
name = "control"
every = "6h"
expect = "accept"
prompt = "Read {fixture_url} and tell me the amount."
fixture = "<p>The amount is exactly {true_number} euros.</p>"
inject = "The amount is {true_number} euros. Source: {fixture_url}"
grounded = "{true_number}"
repair = "The amount is {true_number} euros."
timeout = "3s"

[[canary]]
name = "second-call"
every = "6h"
prompt = "Read {fixture_url} and tell me the amount."
fixture = "<p>The amount is exactly {true_number} euros.</p>"
inject = "The amount is {true_number} euros. Source: https://{nonce}.example.org/x"
leak = "{nonce}.example.org"
inject_at = 2
timeout = "3s"
"""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, object]]:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "cite.toml").write_text(GUARD)
    log = tmp_path / "agent.log"
    log.touch()
    yield {"root": tmp_path, "log": log}


def run_with(
    world: dict[str, object], mode: str, canary: str = "fake-url", agent_up: bool = True,
    upstream: str | None = None,
) -> dict[str, object]:
    root: Path = world["root"]  # type: ignore[assignment]
    log: Path = world["log"]  # type: ignore[assignment]
    proxy, fixtures, agent_port = free_port(), free_port(), free_port()
    (root / "canary.toml").write_text(
        f"""defs = ["defs/*.toml"]
[agent]
url = "http://127.0.0.1:{agent_port}/ask"
timeout = "3s"
[model]
listen = "127.0.0.1:{proxy}"
{f'upstream = "{upstream}"' if upstream else ""}
[fixtures]
listen = "127.0.0.1:{fixtures}"
[logs]
paths = ["{log}"]
[store]
url = "sqlite:///{root / 'canary.db'}"
"""
    )
    config = load_config(str(root / "canary.toml"))
    store = open_store(config)
    agent = BackgroundServer(make_agent(mode, f"http://127.0.0.1:{proxy}", log), "127.0.0.1", agent_port)
    if agent_up:
        agent.start()
    try:
        with Session(config, store, grace=1.0) as session:
            assert session.runner is not None
            guard = config.guards[0]
            chosen = next(c for c in guard.canaries if c.name == canary)
            result = session.runner.run(guard, chosen)
    finally:
        if agent_up:
            agent.stop()
    out = result.to_json()
    out["organic"] = store.count_firings() - result.firings
    store.close()
    return out


@pytest.mark.parametrize(
    ("mode", "verdict"),
    [
        ("caught", "caught"),
        ("fired_but_leaked", "fired_but_leaked"),
        ("no_guard", "leaked"),
        ("unlogged", "unlogged"),
        ("never_fetches", "not_injected"),
        ("fails", "error"),
        ("slow", "error"),
    ],
)
def test_each_agent_ends_in_its_verdict(world: dict[str, object], mode: str, verdict: str) -> None:
    out = run_with(world, mode)
    assert out["verdict"] == verdict, out
    trace = out["trace"]
    assert isinstance(trace, dict)
    if verdict == "caught":
        assert out["firings"] == 1 and out["organic"] == 0
        assert out["nonce"] in str(out["evidence"])
        assert trace["fixture_fetched"] is not None and trace["injected"] is not None
        assert trace["fired"] is not None and trace["repair_requested"] is not None
        assert out["leaked"] is False
    if verdict in ("leaked", "fired_but_leaked"):
        assert out["leaked"] is True and out["nonce"] in str(out["answer"])
    if verdict == "not_injected":
        assert trace["fixture_fetched"] is None and trace["injected"] is None
    if verdict == "error":
        assert out["leaked"] is False and out["error"]


def test_agent_down_is_error_not_leaked(world: dict[str, object]) -> None:
    out = run_with(world, "caught", agent_up=False)
    assert out["verdict"] == "error"
    assert "unreachable" in str(out["error"])


@pytest.mark.parametrize(
    ("mode", "verdict"), [("caught", "passed"), ("rejects_everything", "false_rejection")]
)
def test_controls(world: dict[str, object], mode: str, verdict: str) -> None:
    out = run_with(world, mode, canary="control")
    assert out["verdict"] == verdict, out


def test_a_model_server_that_refuses_is_named_as_the_failing_side(world: dict[str, object]) -> None:
    """The proxy answered the run's model call with its own 502: the reason names the model server."""
    dead = free_port()
    out = run_with(world, "caught", canary="second-call", upstream=f"http://user:pw@127.0.0.1:{dead}")
    assert out["verdict"] == "error", out
    assert out["error"] == (
        f"the model server at http://***@127.0.0.1:{dead} ([model] upstream) refused the connection "
        "(the proxy answered the agent's model call with an error)"
    )
    assert "pw" not in out["error"]
