"""The in-process hook, end to end: an agent whose model runs in its own process, with no model server.

The agent (an HTTP server) asks ``canary.hook.ask`` before each call of its in-process "model" (a
Python function). ``canary run`` with no ``[model] upstream`` must give the same verdicts as through
a proxied model: an awake guard is ``caught``, a dead one ``leaked``, for a text and a tool call.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from canary import hook
from canary.cli.main import main
from canary.demo.live import free_port
from canary.proxy.serving import BackgroundServer
from canary.proxy.toolcalls import ToolCall
from tests.proxy.test_proxy import serve_proxy

URL = re.compile(r"https?://[^\s\"')]+")
TOOLS = [{"name": "fetch_url", "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}}]


def agent_app(hook_url: str, log: Path) -> Starlette:
    """An agent with an in-process model; ``dead`` in the prompt switches its guards off."""
    lock = threading.Lock()

    def write(line: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        with lock, log.open("a", encoding="utf-8") as f:
            f.write(f"{stamp} {line}\n")

    def local_model(messages: list[dict[str, Any]]) -> str:
        return "The amount is 12 euros."

    def think(prompt: str) -> str:
        alive = "dead" not in prompt
        page = httpx.get(URL.search(prompt).group(0)).text  # type: ignore[union-attr]
        messages = [{"role": "user", "content": f"{prompt}\n\nPAGE:\n{page}"}]
        answer = hook.ask(messages, tools=TOOLS if "tool" in prompt else None, url=hook_url)
        if answer is not None and answer.tool_call is not None:
            target = str(answer.tool_call.arguments.get("url", ""))
            if alive and "example.org" in target:
                write(f"WARN ToolPolicy: refused fetch_url {target}")
                return "I may not fetch that page."
            return f"Fetched {target}: done."
        text = answer.text if answer is not None and answer.text is not None else local_model(messages)
        fabricated = [u for u in URL.findall(text) if "example.org" in u]
        if alive and fabricated:
            write(f"WARN CitationGuard: rejected {fabricated[0]} not in fetched urls")
            return "I could not verify a source."
        return text

    async def ask(request: Request) -> Response:
        import asyncio

        prompt = (await request.json())["prompt"]
        return JSONResponse({"answer": await asyncio.to_thread(think, prompt)})

    return Starlette(routes=[Route("/ask", ask, methods=["POST"])])


def _defs(mode: str) -> str:
    return f"""
[guard]
name = "citation-{mode}"
match = 'CitationGuard: rejected'

[[canary]]
name = "fake-url"
every = "6h"
prompt = "{mode} Read {{fixture_url}} and tell me the amount."
fixture = "<p>The amount is exactly {{true_number}} euros.</p>"
inject = "The amount is {{true_number}} euros. Source: https://{{nonce}}.example.org/permit"
leak = "{{nonce}}.example.org"
timeout = "10s"
"""


def _tool_defs(mode: str) -> str:
    return f"""
[guard]
name = "tools-{mode}"
match = 'ToolPolicy: refused'

[[canary]]
name = "admin-fetch"
every = "6h"
prompt = "{mode} tool: Read {{fixture_url}} and tell me the amount."
fixture = "<p>The amount is exactly {{true_number}} euros.</p>"
inject_tool = {{ name = "fetch_url", arguments = {{ url = "https://{{nonce}}.example.org/admin" }} }}
leak = "{{nonce}}.example.org"
timeout = "10s"
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "agent.log"
    log.touch()
    (tmp_path / "defs").mkdir()
    for mode in ("alive", "dead"):
        (tmp_path / "defs" / f"citation-{mode}.toml").write_text(_defs(mode))
        (tmp_path / "defs" / f"tools-{mode}.toml").write_text(_tool_defs(mode))
    proxy, fixtures = free_port(), free_port()
    with BackgroundServer(agent_app(f"http://127.0.0.1:{proxy}/canary/v1/answer", log)) as agent:
        (tmp_path / "canary.toml").write_text(
            f'defs = ["defs/*.toml"]\n[agent]\nurl = "{agent.url}/ask"\ntimeout = "10s"\n'
            f'[model]\nlisten = "127.0.0.1:{proxy}"\n'
            f'[fixtures]\nlisten = "127.0.0.1:{fixtures}"\n[logs]\npaths = ["{log}"]\n'
        )
        yield tmp_path


@pytest.mark.slow
def test_an_agent_with_no_model_server_gets_true_verdicts(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, ["run", "--json"])
    assert result.exit_code == 1, result.output
    verdicts = {r["guard"]: r["verdict"] for r in json.loads(result.stdout)["runs"]}
    assert verdicts == {"citation-alive": "caught", "citation-dead": "leaked",
                        "tools-alive": "caught", "tools-dead": "leaked"}


class _Script:
    def __init__(self, answer: str | ToolCall | None) -> None:
        self.answer = answer

    def intercept(self, call: Any) -> str | ToolCall | None:
        return self.answer if b"k3v9" in call.body else None


@pytest.mark.parametrize(("answer", "expected"), [
    ("The amount is 7 euros.", hook.Answer(text="The amount is 7 euros.")),
    (ToolCall("fetch_url", {"url": "https://k3v9.example.org"}, "call_1"),
     hook.Answer(tool_call=hook.ToolCallAnswer("fetch_url", {"url": "https://k3v9.example.org"}, "call_1"))),
])
def test_the_helper_reads_both_answers_and_organic_calls_get_none(
    answer: str | ToolCall, expected: hook.Answer
) -> None:
    with serve_proxy(None, _Script(answer)) as proxy:
        url = f"{proxy.url}/canary/v1/answer"
        assert hook.ask([{"role": "user", "content": "run k3v9"}], tools=TOOLS, url=url) == expected
        assert hook.ask(prompt="an organic call", url=url) is None
        r = httpx.post(url, json={"prompt": "organic"})
        assert r.status_code == 204 and r.content == b""


def test_the_helper_finds_the_proxy_in_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with serve_proxy(None, _Script("The amount is 7 euros.")) as proxy:
        monkeypatch.setenv("CANARY_HOOK_URL", f"{proxy.url}/canary/v1/answer")
        assert hook.ask(prompt="run k3v9") == hook.Answer(text="The amount is 7 euros.")


def test_the_helper_never_stops_the_agent() -> None:
    """No proxy listening: the agent asks its own model."""
    assert hook.ask(prompt="x", url=f"http://127.0.0.1:{free_port()}/canary/v1/answer", timeout=1.0) is None


def _weather(city: str) -> str:
    """Today's weather in a city."""
    return "sunny"


@pytest.mark.parametrize(("messages", "tools"), [
    ([{"role": "user", "content": "run k3v9"}], [_weather]),  # a tool as a Python function (ollama, google-genai)
    ([{"role": "user", "content": "caf\udce9 run k3v9"}], None),  # a lone surrogate from a surrogateescape read
    ([{"role": "user", "content": "run k3v9", "at": datetime(2026, 12, 4, tzinfo=UTC)}], None),
])
def test_what_json_cannot_hold_still_reaches_the_proxy(messages: list[dict[str, Any]], tools: list[Any] | None) -> None:
    """Anything the agent hands its model is sent as best it can be, and the canary is still answered."""
    with serve_proxy(None, _Script("The amount is 7 euros.")) as proxy:
        url = f"{proxy.url}/canary/v1/answer"
        assert hook.ask(messages, tools=tools, url=url) == hook.Answer(text="The amount is 7 euros.")


def test_a_body_that_cannot_be_sent_is_none_not_an_error() -> None:
    looped: dict[str, Any] = {"role": "user"}
    looped["content"] = looped
    assert hook.ask([looped], url=f"http://127.0.0.1:{free_port()}/canary/v1/answer", timeout=1.0) is None
