"""The registry with a tool-call fabrication: it hands the proxy the call, once, and knows the follow-up."""

from __future__ import annotations

import json

import pytest

from canary.proxy.app import ModelCall
from canary.proxy.fixtures import create_fixture_server
from canary.proxy.toolcalls import ToolCall
from canary.runs.inflight import ActiveRun
from canary.runs.registry import Registry

NONCE = "k3v9abcdefghijklmnop"
TOOL = ToolCall("fetch_url", {"url": f"http://localhost:1/r/{NONCE}/admin", "depth": 2}, "call_0a1b2c3d4e5f")


def make(*, upstream: bool) -> tuple[Registry, ActiveRun]:
    registry = Registry(has_upstream=upstream, clock=lambda: 1000.0)
    run = ActiveRun(
        run_id=1, guard="tool-fetch", nonce=NONCE, inject_at="first", inject_text=TOOL.as_text,
        repair_text="REPAIR", page="<p>page</p>", started=1000.0, deadline=1060.0, inject_tool=TOOL,
    )
    registry.add(run)
    return registry, run


FETCH_TOOL = {"type": "function", "function": {"name": "fetch_url", "parameters": {"type": "object"}}}


def chat(messages: list[object], *, dialect: str = "chat", tools: bool = True) -> ModelCall:
    """A chat request offering its model the fetch tool (or no tools)."""
    path = "/api/chat" if dialect == "ollama-chat" else "/v1/chat/completions"
    body = {"model": "m", "messages": messages, **({"tools": [FETCH_TOOL]} if tools else {})}
    return ModelCall(path, dialect, json.dumps(body).encode(), False)  # type: ignore[arg-type]


FIRST = [{"role": "user", "content": f"Read http://127.0.0.1:1/r/{NONCE}"}]
OPENAI_FOLLOW_UP = [*FIRST, {"role": "assistant", "tool_calls": [{"id": TOOL.call_id, "type": "function",
                    "function": {"name": "fetch_url", "arguments": TOOL.arguments_json}}]},
                    {"role": "tool", "tool_call_id": TOOL.call_id, "content": "Error: refused"}]
# Ollama carries no call id: the follow-up quotes the arguments back as an object, spaced its own way.
OLLAMA_FOLLOW_UP = [*FIRST, {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "fetch_url", "arguments": dict(TOOL.arguments)}}]},
                    {"role": "tool", "content": "Error: refused", "tool_name": "fetch_url"}]
UNRELATED = [*FIRST, {"role": "user", "content": "and one more thing"}]


@pytest.mark.parametrize(("follow_up", "dialect"), [(OPENAI_FOLLOW_UP, "chat"), (OLLAMA_FOLLOW_UP, "ollama-chat")],
                         ids=["openai", "ollama"])
def test_the_call_goes_in_once_and_its_follow_up_gets_the_repair(follow_up: list[object], dialect: str) -> None:
    registry, run = make(upstream=False)
    assert registry.intercept(chat(FIRST, dialect=dialect)) == TOOL
    assert registry.intercept(chat(UNRELATED, dialect=dialect)) == "REPAIR"
    assert run.repair_requested is None  # a later call that does not carry the call back is no follow-up
    assert registry.intercept(chat(follow_up, dialect=dialect)) == "REPAIR"
    assert run.repair_requested == 1000.0


@pytest.mark.parametrize("dialect", ["chat", "ollama-chat"])
def test_a_call_offering_no_tools_is_passed_through_and_counted(dialect: str) -> None:
    registry, run = make(upstream=True)
    assert registry.intercept(chat(FIRST, dialect=dialect, tools=False)) is None
    assert run.injected is None and run.toolless_calls == 1
    assert registry.intercept(chat(FIRST, dialect=dialect)) == TOOL  # the next one offers tools
    assert run.toolless_calls == 1


def test_with_an_upstream_the_follow_up_passes_through() -> None:
    registry, run = make(upstream=True)
    assert registry.intercept(chat(FIRST)) == TOOL
    assert registry.intercept(chat(OPENAI_FOLLOW_UP)) is None
    assert run.repair_requested is not None


@pytest.mark.anyio
async def test_the_fixture_server_records_every_path_of_the_run() -> None:
    import httpx

    registry, run = make(upstream=False)
    transport = httpx.ASGITransport(app=create_fixture_server(registry))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        assert (await client.get(f"/r/{NONCE}")).status_code == 200
        assert (await client.get(f"/r/{NONCE}/admin")).status_code == 200
        assert (await client.get("/r/someotherrun00000000/admin")).status_code == 404
    assert run.paths == [f"/r/{NONCE}", f"/r/{NONCE}/admin"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
