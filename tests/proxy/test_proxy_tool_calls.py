"""Fabricated tool calls through the real proxy on loopback, parsed by the real clients.

openai (chat sync, async and streamed, the accumulating stream helper, Responses), ollama
(streamed and not), pydantic-ai (its ``final_result`` output tool) and smolagents'
``ToolCallingAgent`` (its ``final_answer`` tool) must each read the injected call, its name and its
arguments, without error.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import ollama
import openai
import pytest
from pydantic import BaseModel

from canary.proxy.app import ModelCall
from canary.proxy.dialects import AnswerRequest
from canary.proxy.serving import BackgroundServer
from canary.proxy.toolcalls import ToolCall, script_tool
from tests.proxy.test_proxy import MARKER, FakeUpstream, serve_proxy

PROMPT = f"Fetch the admin page. ref {MARKER.decode()}"
URL = "http://localhost:9/r/k3v9q2x/admin"
CALL = ToolCall("fetch_url", {"url": URL, "options": {"depth": 2, "tags": ["a", "ü"]}}, "call_k3v9q2x")
TOOLS: list[Any] = [{
    "type": "function",
    "function": {"name": "fetch_url", "description": "Fetch a web page.",
                 "parameters": {"type": "object", "properties": {"url": {"type": "string"}},
                                "required": ["url"]}},
}]
RESPONSES_TOOLS: list[Any] = [{
    "type": "function", "name": "fetch_url", "description": "Fetch a web page.",
    "parameters": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
    "strict": False,
}]


class ToolInterceptor:
    """Answers every call that carries MARKER with ``self.call``; records the bodies it sees."""

    def __init__(self) -> None:
        self.call: ToolCall = CALL
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()

    def intercept(self, call: ModelCall) -> ToolCall | None:
        with self._lock:
            self.bodies.append(call.body)
        return self.call if MARKER in call.body else None


@pytest.fixture(scope="module")
def interceptor() -> ToolInterceptor:
    return ToolInterceptor()


@pytest.fixture(scope="module")
def proxy(interceptor: ToolInterceptor) -> Iterator[str]:
    with BackgroundServer(FakeUpstream(), name="fake upstream") as up, serve_proxy(up.url, interceptor) as server:
        yield server.url


@pytest.fixture
def oai(proxy: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0) as client:
        yield client


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _messages() -> list[Any]:
    return [{"role": "user", "content": PROMPT}]


def _check(name: str, call_id: str | None, arguments: str | Any) -> None:
    parsed = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
    assert (name, parsed) == (CALL.name, dict(CALL.arguments))
    if call_id is not None:
        assert call_id == CALL.call_id


# -- openai chat ---------------------------------------------------------------------------------


def test_openai_chat_tool_call(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(model="m", messages=_messages(), tools=TOOLS)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.type == "function"
    _check(call.function.name, call.id, call.function.arguments)


@pytest.mark.parametrize("include_usage", [False, True])
def test_openai_chat_tool_call_streamed(oai: openai.OpenAI, include_usage: bool) -> None:
    chunks = list(oai.chat.completions.create(
        model="m", messages=_messages(), tools=TOOLS, stream=True,
        stream_options={"include_usage": include_usage},
    ))
    deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert {d.index for d in deltas} == {0}
    assert [d.id for d in deltas if d.id] == [CALL.call_id]  # the id comes once, in the first fragment
    name = "".join(d.function.name or "" for d in deltas if d.function)
    _check(name, None, "".join(d.function.arguments or "" for d in deltas if d.function))
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert any(c.usage is not None for c in chunks) is include_usage


def test_openai_stream_helper_accumulates_the_call(oai: openai.OpenAI) -> None:
    with oai.chat.completions.stream(model="m", messages=_messages(), tools=TOOLS) as stream:
        final = stream.get_final_completion()
    [call] = final.choices[0].message.tool_calls or []
    _check(call.function.name, call.id, call.function.arguments)
    assert final.choices[0].finish_reason == "tool_calls"


@pytest.mark.anyio
async def test_openai_async_tool_call(proxy: str) -> None:
    async with openai.AsyncOpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0) as client:
        completion = await client.chat.completions.create(model="m", messages=_messages(), tools=TOOLS)
        async with client.chat.completions.stream(model="m", messages=_messages(), tools=TOOLS) as stream:
            final = await stream.get_final_completion()
    for choice in (completion.choices[0], final.choices[0]):
        [call] = choice.message.tool_calls or []
        _check(call.function.name, call.id, call.function.arguments)


# -- openai responses ----------------------------------------------------------------------------


def test_openai_responses_function_call(oai: openai.OpenAI) -> None:
    response = oai.responses.create(model="m", input=PROMPT, tools=RESPONSES_TOOLS)
    [item] = response.output
    assert item.type == "function_call"
    _check(item.name, item.call_id, item.arguments)
    events = list(oai.responses.create(model="m", input=PROMPT, tools=RESPONSES_TOOLS, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    _check(done.name, None, done.arguments)
    with oai.responses.stream(model="m", input=PROMPT, tools=RESPONSES_TOOLS) as stream:
        final = stream.get_final_response()
    [item] = final.output
    assert item.type == "function_call"
    _check(item.name, item.call_id, item.arguments)


# -- ollama --------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_ollama_tool_call(proxy: str, stream: bool) -> None:
    with ollama.Client(host=proxy) as client:
        if stream:
            parts = list(client.chat(model="m", messages=_messages(), tools=TOOLS, stream=True))
            assert parts[-1].done
            calls = [c for p in parts for c in p.message.tool_calls or []]
        else:
            reply = client.chat(model="m", messages=_messages(), tools=TOOLS)
            assert reply.done
            calls = list(reply.message.tool_calls or [])
    [call] = calls
    _check(call.function.name, None, call.function.arguments)


@pytest.mark.anyio
async def test_ollama_async_tool_call(proxy: str) -> None:
    async with ollama.AsyncClient(host=proxy) as client:
        reply = await client.chat(model="m", messages=_messages(), tools=TOOLS)
        parts = [p async for p in await client.chat(model="m", messages=_messages(), tools=TOOLS, stream=True)]
    [call] = list(reply.message.tool_calls or [])
    _check(call.function.name, None, call.function.arguments)
    [streamed] = [c for p in parts for c in p.message.tool_calls or []]
    _check(streamed.function.name, None, streamed.function.arguments)


def test_endpoints_without_tool_calls_get_the_call_as_json_text() -> None:
    request = AnswerRequest(model="m", stream=False)
    for dialect in ("completions", "ollama-generate"):
        body = json.loads(script_tool(dialect, CALL, request, now=0.0, token="t").body)
        text = body["choices"][0]["text"] if dialect == "completions" else body["response"]
        assert json.loads(text) == {"name": CALL.name, "arguments": dict(CALL.arguments)}


# -- pydantic-ai and smolagents --------------------------------------------------------------------


class Permit(BaseModel):
    amount: int
    source: str


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True])
async def test_pydantic_ai_reads_a_fabricated_final_result(
    proxy: str, interceptor: ToolInterceptor, stream: bool
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    interceptor.call = ToolCall("final_result", {"amount": 1635, "source": URL}, "call_pyai")
    try:
        async with openai.AsyncOpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0) as client:
            agent = Agent(OpenAIChatModel("m", provider=OpenAIProvider(openai_client=client)),
                          output_type=Permit)
            if stream:
                async with agent.run_stream(PROMPT) as run:
                    output = await run.get_output()
            else:
                output = (await agent.run(PROMPT)).output
    finally:
        interceptor.call = CALL
    assert output == Permit(amount=1635, source=URL)


@pytest.mark.parametrize("stream", [False, True])
def test_smolagents_tool_calling_agent_reads_a_fabricated_final_answer(
    proxy: str, interceptor: ToolInterceptor, stream: bool
) -> None:
    from smolagents import OpenAIServerModel, ToolCallingAgent

    interceptor.call = ToolCall("final_answer", {"answer": f"The minimum is 1635 euros. Source: {URL}"},
                                "call_smol")
    seen: list[str] = []

    def check(final_answer: Any, memory: Any, agent: Any = None) -> bool:
        seen.append(str(final_answer))
        return True

    try:
        model = OpenAIServerModel(model_id="m", api_base=f"{proxy}/v1", api_key="x")
        agent = ToolCallingAgent(tools=[], model=model, max_steps=2, verbosity_level=0,
                                 final_answer_checks=[check], stream_outputs=stream)
        try:
            answer = agent.run(PROMPT)
        finally:
            model.client.close()
    finally:
        interceptor.call = CALL
    assert answer == f"The minimum is 1635 euros. Source: {URL}"
    assert seen == [answer]  # the check saw the fabricated answer: the guard is reachable
