"""The real clients against the proxy on loopback: openai (sync and async), ollama, pydantic-ai.

Every scripted answer must parse in every client, in both stream modes and with ``tools`` in
the request; calls without the marker pass through to the fake model server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import ollama
import openai
import pytest

from canary.proxy.serving import BackgroundServer
from tests.proxy.test_proxy import (
    MARKER,
    SCRIPTED,
    FakeUpstream,
    MarkerInterceptor,
    closed_port_url,
    serve_proxy,
)

PROMPT = f"Tell me the minimum amount. ref {MARKER.decode()}"
TOOLS: list[Any] = [{
    "type": "function",
    "function": {"name": "final_answer", "description": "Give the final answer.",
                 "parameters": {"type": "object", "properties": {"answer": {"type": "string"}},
                                "required": ["answer"]}},
}]
RESPONSES_TOOLS: list[Any] = [{
    "type": "function", "name": "final_answer", "description": "Give the final answer.",
    "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    "strict": False,
}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, BackgroundServer]]:
    fake = FakeUpstream()
    with BackgroundServer(fake, name="fake upstream") as server:
        yield fake, server


@pytest.fixture(scope="module")
def interceptor() -> MarkerInterceptor:
    return MarkerInterceptor()


@pytest.fixture(scope="module")
def proxy(upstream: tuple[FakeUpstream, BackgroundServer], interceptor: MarkerInterceptor) -> Iterator[str]:
    with serve_proxy(upstream[1].url, interceptor) as server:
        yield server.url


@pytest.fixture
def oai(proxy: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0) as client:
        yield client


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _messages(content: str = PROMPT) -> list[Any]:
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": content}]


# -- openai: chat completions -------------------------------------------------------------------


@pytest.mark.parametrize("tools", [False, True])
def test_openai_chat(oai: openai.OpenAI, tools: bool) -> None:
    extra: dict[str, Any] = {"tools": TOOLS} if tools else {}
    completion = oai.chat.completions.create(model="llama3.2", messages=_messages(), **extra)
    assert completion.choices[0].message.content == SCRIPTED
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "llama3.2"
    assert completion.usage is not None and completion.usage.prompt_tokens >= 0


@pytest.mark.parametrize("include_usage", [False, True])
def test_openai_chat_stream(oai: openai.OpenAI, include_usage: bool) -> None:
    stream = oai.chat.completions.create(
        model="m", messages=_messages(), tools=TOOLS, stream=True,
        stream_options={"include_usage": include_usage},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == SCRIPTED
    assert any(c.usage is not None for c in chunks) is include_usage


def test_openai_chat_stream_helper(oai: openai.OpenAI) -> None:
    with oai.chat.completions.stream(model="m", messages=_messages(), tools=TOOLS) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == SCRIPTED
    assert final.choices[0].finish_reason == "stop"


@pytest.mark.anyio
async def test_openai_async_chat(proxy: str) -> None:
    async with openai.AsyncOpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0) as client:
        completion = await client.chat.completions.create(model="m", messages=_messages(), tools=TOOLS)
        stream = await client.chat.completions.create(
            model="m", messages=_messages(), tools=TOOLS, stream=True, stream_options={"include_usage": True}
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert completion.choices[0].message.content == SCRIPTED
    assert text == SCRIPTED


def test_openai_chat_without_v1_prefix(proxy: str) -> None:
    with openai.OpenAI(base_url=proxy, api_key="x", max_retries=0) as client:  # mlx_lm style base URL
        completion = client.chat.completions.create(model="m", messages=_messages())
    assert completion.choices[0].message.content == SCRIPTED


# -- openai: completions and responses ---------------------------------------------------------


def test_openai_completions(oai: openai.OpenAI) -> None:
    completion = oai.completions.create(model="m", prompt=PROMPT)
    assert completion.choices[0].text == SCRIPTED
    stream = oai.completions.create(model="m", prompt=PROMPT, stream=True,
                                    stream_options={"include_usage": True})
    assert "".join(c.choices[0].text for c in stream if c.choices) == SCRIPTED


def test_openai_responses(oai: openai.OpenAI) -> None:
    response = oai.responses.create(model="m", input=PROMPT, tools=RESPONSES_TOOLS)
    assert response.output_text == SCRIPTED
    events = list(oai.responses.create(model="m", input=PROMPT, tools=RESPONSES_TOOLS, stream=True))
    assert events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == SCRIPTED
    with oai.responses.stream(model="m", input=PROMPT, tools=RESPONSES_TOOLS) as stream:
        final = stream.get_final_response()
    assert final.output_text == SCRIPTED


@pytest.mark.anyio
async def test_openai_async_responses(proxy: str) -> None:
    async with openai.AsyncOpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0) as client:
        response = await client.responses.create(model="m", input=PROMPT)
        async with client.responses.stream(model="m", input=PROMPT) as stream:
            final = await stream.get_final_response()
    assert response.output_text == SCRIPTED
    assert final.output_text == SCRIPTED


# -- openai: passthrough and failures -----------------------------------------------------------


def test_openai_passthrough(oai: openai.OpenAI, interceptor: MarkerInterceptor) -> None:
    before = len(interceptor.calls)
    assert [m.id for m in oai.models.list()] == ["m"]
    completion = oai.chat.completions.create(model="m", messages=_messages("no marker here"))
    stream = oai.chat.completions.create(model="m", messages=_messages("no marker"), stream=True)
    assert completion.choices[0].message.content == "UPSTREAM ANSWER"
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "UPSTREAM ANSWER"
    assert len(interceptor.calls) == before + 2  # model calls only, not /v1/models


@pytest.mark.parametrize("retries", [0, 2])
def test_openai_upstream_down_fails_fast(retries: int) -> None:
    with serve_proxy(closed_port_url(), MarkerInterceptor()) as down, openai.OpenAI(
        base_url=f"{down.url}/v1", api_key="x", max_retries=retries
    ) as client:
        start = time.monotonic()
        with pytest.raises(openai.APIError) as raised:
            client.chat.completions.create(model="m", messages=_messages("no marker"))
        elapsed = time.monotonic() - start
    assert elapsed < 1.0  # x-should-retry: false stops the SDK's retries and their backoff
    assert isinstance(raised.value, openai.APIStatusError) and raised.value.status_code == 502
    assert "not reachable" in raised.value.message


def test_openai_no_upstream() -> None:
    with serve_proxy(None, MarkerInterceptor()) as alone, openai.OpenAI(
        base_url=f"{alone.url}/v1", api_key="x", max_retries=0
    ) as client:
        scripted = client.chat.completions.create(model="m", messages=_messages())
        with pytest.raises(openai.APIStatusError) as raised:
            client.chat.completions.create(model="m", messages=_messages("no marker"))
    assert scripted.choices[0].message.content == SCRIPTED
    assert raised.value.status_code == 503 and "no upstream" in raised.value.message


# -- ollama -------------------------------------------------------------------------------------

OLLAMA_TOOLS: list[Any] = [{
    "type": "function",
    "function": {"name": "final_answer", "description": "Give the final answer.",
                 "parameters": {"type": "object", "properties": {"answer": {"type": "string"}},
                                "required": ["answer"]}},
}]


def test_ollama_chat_and_generate(proxy: str) -> None:
    with ollama.Client(host=proxy) as client:
        _ollama_calls(client)


def _ollama_calls(client: ollama.Client) -> None:
    chat = client.chat(model="llama3.2", messages=_messages(), tools=OLLAMA_TOOLS)
    assert chat.message.content == SCRIPTED and chat.done and chat.done_reason == "stop"
    parts = list(client.chat(model="llama3.2", messages=_messages(), tools=OLLAMA_TOOLS, stream=True))
    assert "".join(p.message.content or "" for p in parts) == SCRIPTED and parts[-1].done
    generated = client.generate(model="llama3.2", prompt=PROMPT)
    assert generated.response == SCRIPTED and generated.done
    pieces = list(client.generate(model="llama3.2", prompt=PROMPT, stream=True))
    assert "".join(p.response or "" for p in pieces) == SCRIPTED and pieces[-1].eval_count is not None


@pytest.mark.anyio
async def test_ollama_async(proxy: str) -> None:
    async with ollama.AsyncClient(host=proxy) as client:
        chat = await client.chat(model="m", messages=_messages())
        parts = [p async for p in await client.chat(model="m", messages=_messages(), stream=True)]
        pieces = [p async for p in await client.generate(model="m", prompt=PROMPT, stream=True)]
    assert chat.message.content == SCRIPTED
    assert "".join(p.message.content or "" for p in parts) == SCRIPTED
    assert "".join(p.response or "" for p in pieces) == SCRIPTED


def test_ollama_passthrough(proxy: str) -> None:
    with ollama.Client(host=proxy) as client:
        assert [m.model for m in client.list().models] == ["m:latest"]
        assert client.chat(model="m", messages=_messages("plain")).message.content == "UPSTREAM ANSWER"
        streamed = client.chat(model="m", messages=_messages("plain"), stream=True)
        assert "".join(p.message.content or "" for p in streamed) == "UPSTREAM ANSWER"


def test_ollama_upstream_down() -> None:
    with (
        serve_proxy(closed_port_url(), MarkerInterceptor()) as down,
        ollama.Client(host=down.url) as client,
        pytest.raises(ollama.ResponseError) as raised,
    ):
        client.chat(model="m", messages=_messages("plain"))
    assert raised.value.status_code == 502 and "not reachable" in raised.value.error


# -- pydantic-ai --------------------------------------------------------------------------------


@asynccontextmanager
async def _agent(proxy: str) -> AsyncIterator[Any]:
    """A pydantic-ai Agent with one tool, on its own openai client (closed on exit)."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async with openai.AsyncOpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0) as client:
        provider = OpenAIProvider(openai_client=client)
        agent = Agent(OpenAIChatModel("llama3.2", provider=provider), output_type=str,
                      system_prompt="Answer from the page you read.")

        @agent.tool_plain
        def fetch(url: str) -> str:
            """Fetch a web page."""
            return "The minimum amount is 420 euros."

        yield agent


@pytest.mark.anyio
async def test_pydantic_ai_accepts_the_scripted_answer(proxy: str, interceptor: MarkerInterceptor) -> None:
    async with _agent(proxy) as agent:
        result = await agent.run(PROMPT)
    assert result.output == SCRIPTED
    assert b'"tools"' in interceptor.calls[-1].body  # the request offered tools; the text answer stands


@pytest.mark.anyio
async def test_pydantic_ai_streaming(proxy: str) -> None:
    async with _agent(proxy) as agent, agent.run_stream(PROMPT) as run:
        output = await run.get_output()
    assert output == SCRIPTED


@pytest.mark.anyio
async def test_pydantic_ai_passthrough(proxy: str) -> None:
    async with _agent(proxy) as agent:
        result = await agent.run("plain question")
    assert result.output == "UPSTREAM ANSWER"


# -- concurrency with real clients --------------------------------------------------------------


@pytest.mark.anyio
async def test_many_concurrent_calls_mixed(proxy: str) -> None:
    async with openai.AsyncOpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0) as client:

        async def one(index: int) -> str | None:
            marked = index % 2 == 0
            stream = await client.chat.completions.create(
                model="m", messages=_messages(PROMPT if marked else f"plain {index}"), stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            return text if text == (SCRIPTED if marked else "UPSTREAM ANSWER") else None

        results = await asyncio.gather(*(one(i) for i in range(40)))
    assert all(results)
