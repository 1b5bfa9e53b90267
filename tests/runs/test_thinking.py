"""Extended thinking: a fabricated tool call never reaches a model server that would reject its turn.

The agent here is the real ``anthropic`` (or ``google-genai``) client running a tool loop through
the proxy, whose interceptor is the real registry, in front of a loopback model server that
rejects a tool turn without its signed thinking block, as the APIs do. With a ``repair``, the run
injects and answers every later call of its span itself; without one, it does not inject, and
says why.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from google import genai
from google.genai import types

from canary.proxy.serving import BackgroundServer
from canary.proxy.toolcalls import ToolCall
from canary.runs.registry import ActiveRun, Registry
from canary.sentences import not_injected
from tests.proxy.model_apis import UPSTREAM_TEXT, ModelAPIs
from tests.proxy.test_proxy import serve_proxy

NONCE = "k3v9abcdefghijklmnop"
TOOL = ToolCall("fetch_url", {"url": f"https://{NONCE}.example.org/admin"}, "toolu_0a1b2c3d4e5f")
REPAIR = "I could not verify that. SOURCE QUOTE: NONE"
THINKING = {"type": "enabled", "budget_tokens": 1024}
TOOLS: list[Any] = [{"name": "fetch_url", "description": "Fetch a page.",
                     "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}}]


@pytest.fixture
def apis() -> Iterator[tuple[ModelAPIs, str]]:
    fake = ModelAPIs()
    with BackgroundServer(fake.app(), name="model apis") as server:
        yield fake, server.url


def _run(registry: Registry, repair: str | None) -> ActiveRun:
    run = ActiveRun(run_id=1, guard="tool-fetch", nonce=NONCE, inject_at="first", inject_text=TOOL.as_text,
                    repair_text=repair, page="<p/>", started=0.0, deadline=2e9, inject_tool=TOOL)
    registry.add(run)
    return run


def _claude_tool_loop(proxy: str, thinking: dict[str, Any] | None) -> list[anthropic.types.Message]:
    """An agent's loop: ask, run any tool the model calls, send the result back, until a text answer."""
    extra: dict[str, Any] = {"thinking": thinking} if thinking else {}
    messages: list[Any] = [{"role": "user", "content": f"Read the admin page of run {NONCE}."}]
    replies = []
    with anthropic.Anthropic(base_url=proxy, api_key="sk-ant-test", max_retries=0) as client:
        for _ in range(3):
            reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=2048, messages=messages,
                                           tools=TOOLS, **extra)
            replies.append(reply)
            uses = [b for b in reply.content if b.type == "tool_use"]
            if not uses:
                return replies
            messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": u.id, "content": "Error: refused by policy"}
                for u in uses]})
    return replies


@pytest.mark.parametrize("thinking", [THINKING, {"type": "adaptive"}])
def test_with_a_repair_the_run_answers_the_rest_of_its_span_itself(
    apis: tuple[ModelAPIs, str], thinking: dict[str, Any]
) -> None:
    fake, upstream = apis
    registry = Registry(has_upstream=True)
    run = _run(registry, REPAIR)
    with serve_proxy(upstream, registry) as proxy:
        replies = _claude_tool_loop(proxy.url, thinking)
    assert [b.type for r in replies for b in r.content] == ["tool_use", "text"]
    assert replies[-1].content[0].text == REPAIR  # type: ignore[union-attr]
    assert run.injected is not None and run.repair_requested is not None
    assert fake.seen == []  # the upstream never saw the turn without its thinking block


def test_without_a_repair_it_does_not_inject_and_says_why(apis: tuple[ModelAPIs, str]) -> None:
    fake, upstream = apis
    registry = Registry(has_upstream=True)
    run = _run(registry, None)
    with serve_proxy(upstream, registry) as proxy:
        replies = _claude_tool_loop(proxy.url, THINKING)
    assert [b.type for b in replies[-1].content] == ["thinking", "text"]  # the agent worked, on its model
    assert replies[-1].content[1].text == UPSTREAM_TEXT  # type: ignore[union-attr]
    assert run.injected is None and run.thinking_calls == 1 and len(fake.seen) == 1
    view = type("View", (), {"model_calls": run.calls, "foreign_calls": 0, "toolless_calls": 0,
                             "thinking_calls": run.thinking_calls, "trace": {}})()
    reason = not_injected(view, "http://127.0.0.1:11435")  # type: ignore[arg-type]
    assert "extended thinking" in reason and "`repair`" in reason


def test_the_same_loop_against_the_server_itself_is_rejected(apis: tuple[ModelAPIs, str]) -> None:
    """The model server's rule is real: a tool turn without its thinking block is a 400."""
    _, upstream = apis
    messages: list[Any] = [
        {"role": "user", "content": "Read the page."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": TOOL.call_id, "name": TOOL.name,
                                           "input": dict(TOOL.arguments)}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": TOOL.call_id, "content": "x"}]},
    ]
    with anthropic.Anthropic(base_url=upstream, api_key="k", max_retries=0) as client, \
            pytest.raises(anthropic.BadRequestError, match="must start with a thinking block"):
        client.messages.create(model="m", max_tokens=2048, messages=messages, tools=TOOLS, thinking=THINKING)


def test_without_thinking_later_calls_go_to_the_upstream(apis: tuple[ModelAPIs, str]) -> None:
    fake, upstream = apis
    registry = Registry(has_upstream=True)
    run = _run(registry, REPAIR)
    with serve_proxy(upstream, registry) as proxy:
        replies = _claude_tool_loop(proxy.url, None)
    assert replies[-1].content[0].text == UPSTREAM_TEXT  # type: ignore[union-attr]
    assert run.injected is not None and len(fake.seen) == 1


@pytest.mark.parametrize(("model", "repair", "injected"), [
    ("gemini-3-pro-preview", REPAIR, True),  # always thinks: the rest of the span is answered here
    ("gemini-3-pro-preview", None, False),
])
def test_gemini_3_function_calls_follow_the_same_rule(
    apis: tuple[ModelAPIs, str], model: str, repair: str | None, injected: bool
) -> None:
    fake, upstream = apis
    registry = Registry(has_upstream=True)
    run = _run(registry, repair)
    tools = [types.Tool(function_declarations=[types.FunctionDeclaration(name="fetch_url",
                                                                         description="Fetch a page.")])]
    config = types.GenerateContentConfig(tools=tools)  # type: ignore[arg-type]
    with serve_proxy(upstream, registry) as proxy, genai.Client(
        api_key="k", http_options=types.HttpOptions(base_url=proxy.url)
    ) as client:
        contents: list[Any] = [types.Content(role="user", parts=[types.Part(text=f"Read run {NONCE}.")])]
        first = client.models.generate_content(model=model, contents=contents, config=config)
        calls = first.function_calls or []
        if calls:
            assert first.candidates and first.candidates[0].content
            contents += [first.candidates[0].content, types.Content(role="user", parts=[
                types.Part.from_function_response(name=calls[0].name or "", response={"error": "refused"})])]
            second = client.models.generate_content(model=model, contents=contents, config=config)
            assert second.text == REPAIR
    assert (run.injected is not None) is injected
    assert bool(calls) is injected
    assert len(fake.seen) == (0 if injected else 1)
