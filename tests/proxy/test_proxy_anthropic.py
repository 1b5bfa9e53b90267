"""The real ``anthropic`` SDK and pydantic-ai's Anthropic model through the proxy on loopback.

A fabricated text and a fabricated ``tool_use`` block must parse in ``messages.create`` (whole
and streamed), the ``messages.stream`` helper and pydantic-ai; calls without the marker, and
``count_tokens``, pass through byte for byte with their headers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider

from canary.proxy.app import ModelCall
from canary.proxy.serving import BackgroundServer
from canary.proxy.toolcalls import ToolCall
from tests.proxy.model_apis import UPSTREAM_TEXT, ModelAPIs
from tests.proxy.test_proxy import MARKER, SCRIPTED, serve_proxy

TOOL_MARK = "WANTS-A-TOOL"
PROMPT = f"Tell me the minimum amount. ref {MARKER.decode()}"
CALL = ToolCall("fetch_url", {"url": "https://k3v9q2x.example.org/admin", "depth": 2, "tags": ["ü"]},
                "call_k3v9q2x")
TOOLS: list[Any] = [{"name": "fetch_url", "description": "Fetch a web page.",
                     "input_schema": {"type": "object", "properties": {"url": {"type": "string"}},
                                      "required": ["url"]}}]


class Scripts:
    """Answers a call that carries MARKER: a tool call when it also carries TOOL_MARK, else text."""

    def __init__(self) -> None:
        self.calls: list[ModelCall] = []
        self.tool = CALL
        self.lock = threading.Lock()

    def intercept(self, call: ModelCall) -> str | ToolCall | None:
        with self.lock:
            self.calls.append(call)
        if MARKER not in call.body:
            return None
        return self.tool if TOOL_MARK.encode() in call.body else SCRIPTED


@pytest.fixture(scope="module")
def apis() -> Iterator[tuple[ModelAPIs, str]]:
    fake = ModelAPIs()
    with BackgroundServer(fake.app(), name="model apis") as server:
        yield fake, server.url


@pytest.fixture(scope="module")
def scripts() -> Scripts:
    return Scripts()


@pytest.fixture(scope="module")
def proxy(apis: tuple[ModelAPIs, str], scripts: Scripts) -> Iterator[str]:
    with serve_proxy(apis[1], scripts) as server:
        yield server.url


@pytest.fixture
def client(proxy: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=proxy, api_key="sk-ant-test", max_retries=0) as c:
        yield c


def _ask(prompt: str = PROMPT) -> list[Any]:
    return [{"role": "user", "content": prompt}]


def test_a_fabricated_text_parses_whole_and_streamed(client: anthropic.Anthropic, scripts: Scripts) -> None:
    message = client.messages.create(model="claude-sonnet-4-5", max_tokens=256, messages=_ask())
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == SCRIPTED  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.usage.output_tokens > 0
    assert scripts.calls[-1].dialect == "anthropic"

    events = list(client.messages.create(model="claude-sonnet-4-5", max_tokens=256, messages=_ask(),
                                         stream=True))
    assert [e.type for e in events] == ["message_start", "content_block_start", "content_block_delta",
                                        "content_block_stop", "message_delta", "message_stop"]
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=256, messages=_ask()) as stream:
        assert "".join(stream.text_stream) == SCRIPTED
        final = stream.get_final_message()
    assert final.content[0].text == SCRIPTED and final.stop_reason == "end_turn"  # type: ignore[union-attr]


def test_a_fabricated_tool_use_block_parses_whole_and_streamed(client: anthropic.Anthropic) -> None:
    prompt = f"{PROMPT} {TOOL_MARK}"
    message = client.messages.create(model="claude-sonnet-4-5", max_tokens=256, messages=_ask(prompt),
                                     tools=TOOLS)
    [block] = message.content
    assert block.type == "tool_use" and message.stop_reason == "tool_use"
    assert (block.id, block.name, block.input) == (CALL.call_id, CALL.name, dict(CALL.arguments))

    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=256, messages=_ask(prompt),
                                tools=TOOLS) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert "input_json" in kinds  # the helper's accumulated input_json_delta
    [streamed] = final.content
    assert streamed.type == "tool_use" and streamed.input == dict(CALL.arguments)
    assert final.stop_reason == "tool_use"


@pytest.mark.anyio
async def test_the_async_client_reads_both(proxy: str) -> None:
    async with anthropic.AsyncAnthropic(base_url=proxy, api_key="k", max_retries=0) as c:
        message = await c.messages.create(model="m", max_tokens=64, messages=_ask())
        async with c.messages.stream(model="m", max_tokens=64, messages=_ask(f"{PROMPT} {TOOL_MARK}"),
                                     tools=TOOLS) as stream:
            final = await stream.get_final_message()
    assert message.content[0].text == SCRIPTED  # type: ignore[union-attr]
    assert final.content[0].input == dict(CALL.arguments)  # type: ignore[union-attr]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("stream", [False, True])
def test_other_calls_pass_through_byte_for_byte_with_their_headers(
    apis: tuple[ModelAPIs, str], proxy: str, stream: bool
) -> None:
    fake, upstream = apis
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": stream,
                       "messages": _ask("organic question")}).encode()
    headers = {"x-api-key": "sk-ant-secret", "anthropic-version": "2023-06-01",
               "anthropic-beta": "interleaved-thinking-2025-05-14", "content-type": "application/json"}
    with httpx.Client() as http:
        direct = http.post(f"{upstream}/v1/messages", content=body, headers=headers)
        proxied = http.post(f"{proxy}/v1/messages", content=body, headers=headers)
    assert proxied.status_code == direct.status_code == 200
    assert proxied.content == direct.content and UPSTREAM_TEXT.split()[0].encode() in proxied.content
    assert proxied.headers["content-type"] == direct.headers["content-type"]
    seen = fake.seen[-1]
    assert seen.body == body
    for name, value in headers.items():
        assert seen.headers[name] == value


def test_count_tokens_and_bearer_auth_pass_through(apis: tuple[ModelAPIs, str], proxy: str) -> None:
    fake, _ = apis
    with anthropic.Anthropic(base_url=proxy, auth_token="oauth-token", max_retries=0) as c:
        counted = c.messages.count_tokens(model="m", messages=_ask())  # carries the marker: still relayed
        organic = c.messages.create(model="m", max_tokens=64, messages=_ask("hello"))
    assert counted.input_tokens > 0 and fake.seen[-2].path == "/v1/messages/count_tokens"
    assert organic.content[0].text == UPSTREAM_TEXT  # type: ignore[union-attr]
    assert fake.seen[-1].headers["authorization"] == "Bearer oauth-token"


def test_errors_the_proxy_answers_are_anthropic_errors() -> None:
    with serve_proxy(None) as server, anthropic.Anthropic(
        base_url=server.url, api_key="k", max_retries=0
    ) as c, pytest.raises(anthropic.APIStatusError) as raised:
        c.messages.create(model="m", max_tokens=64, messages=_ask("hello"))
    assert raised.value.status_code == 503
    assert "[model] upstream" in raised.value.message
    assert raised.value.body["type"] == "error"  # type: ignore[index]


class Permit(BaseModel):
    amount: int
    source: str


@asynccontextmanager
async def _model(proxy: str) -> AsyncIterator[AnthropicModel]:
    """pydantic-ai's Anthropic model on its own client, closed on exit."""
    async with anthropic.AsyncAnthropic(base_url=proxy, api_key="k", max_retries=0) as client:
        yield AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(anthropic_client=client))


@pytest.mark.anyio
async def test_pydantic_ai_reads_the_text_and_its_output_tool(proxy: str, scripts: Scripts) -> None:
    async with _model(proxy) as model:
        text = await Agent(model).run(PROMPT)
        scripts.tool = ToolCall("final_result", {"amount": 640, "source": "https://x.example.org"}, "toolu_01")
        try:
            permit = await Agent(model, output_type=Permit).run(f"{PROMPT} {TOOL_MARK}")
        finally:
            scripts.tool = CALL
        async with Agent(model).run_stream(PROMPT) as streamed:
            streamed_text = await streamed.get_output()
        organic = await Agent(model).run("an organic question")
    assert text.output == SCRIPTED and streamed_text == SCRIPTED
    assert permit.output == Permit(amount=640, source="https://x.example.org")
    assert organic.output == UPSTREAM_TEXT
