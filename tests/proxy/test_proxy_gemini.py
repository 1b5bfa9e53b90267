"""The real ``google-genai`` SDK and pydantic-ai's Google model through the proxy on loopback.

A fabricated text and a fabricated ``functionCall`` part must parse in ``generate_content`` and
``generate_content_stream`` (sync and async) and in pydantic-ai; calls without the marker pass
through byte for byte with ``x-goog-api-key``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest
from google import genai
from google.genai import errors, types
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.models.google import GoogleModel
from pydantic_ai.providers.google import GoogleProvider

from canary.proxy.dialects import family_for
from canary.proxy.serving import BackgroundServer
from canary.proxy.toolcalls import ToolCall
from tests.proxy.model_apis import UPSTREAM_TEXT, ModelAPIs
from tests.proxy.test_proxy import MARKER, SCRIPTED, serve_proxy
from tests.proxy.test_proxy_anthropic import CALL, TOOL_MARK, Scripts

PROMPT = f"Tell me the minimum amount. ref {MARKER.decode()}"
TOOLS = [types.Tool(function_declarations=[types.FunctionDeclaration(
    name="fetch_url", description="Fetch a web page.",
    parameters_json_schema={"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
)])]
NO_AUTO = types.AutomaticFunctionCallingConfig(disable=True)


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
def client(proxy: str) -> Iterator[genai.Client]:
    with genai.Client(api_key="AIza-test", http_options=types.HttpOptions(base_url=proxy)) as c:
        yield c


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize(("path", "name"), [
    ("/v1beta/models/gemini-2.5-flash:generateContent", "gemini"),
    ("/v1beta/models/gemini-2.5-flash:streamGenerateContent", "gemini"),
    ("/v1beta1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent",
     "gemini"),
    ("/v1beta/models/gemini-2.5-flash:countTokens", None),
    ("/v1beta/models/text-embedding-004:embedContent", None),
    ("/v1beta/cachedContents:generateContent", None),
    ("/v1/messages", "anthropic"),
    ("/v1/messages/count_tokens", None),
])
def test_which_paths_are_model_calls(path: str, name: str | None) -> None:
    found = family_for(path)
    assert (found.name if found else None) == name


def test_a_fabricated_text_parses_whole_and_streamed(client: genai.Client, scripts: Scripts) -> None:
    reply = client.models.generate_content(model="gemini-2.5-flash", contents=PROMPT)
    assert reply.text == SCRIPTED
    assert reply.candidates and reply.candidates[0].finish_reason == types.FinishReason.STOP
    assert reply.usage_metadata and reply.usage_metadata.candidates_token_count
    assert scripts.calls[-1].dialect == "gemini" and scripts.calls[-1].stream is False
    pieces = list(client.models.generate_content_stream(model="gemini-2.5-flash", contents=PROMPT))
    assert "".join(p.text or "" for p in pieces) == SCRIPTED
    assert scripts.calls[-1].stream is True


def test_a_fabricated_function_call_parses_whole_and_streamed(client: genai.Client) -> None:
    config = types.GenerateContentConfig(tools=TOOLS, automatic_function_calling=NO_AUTO)  # type: ignore[arg-type]
    prompt = f"{PROMPT} {TOOL_MARK}"
    reply = client.models.generate_content(model="gemini-2.5-flash", contents=prompt, config=config)
    [call] = reply.function_calls or []
    assert (call.name, call.args) == (CALL.name, dict(CALL.arguments))
    pieces = list(client.models.generate_content_stream(model="gemini-2.5-flash", contents=prompt,
                                                        config=config))
    streamed = [c for p in pieces for c in p.function_calls or []]
    assert [(c.name, c.args) for c in streamed] == [(CALL.name, dict(CALL.arguments))]


@pytest.mark.anyio
async def test_the_async_client_reads_both(proxy: str) -> None:
    config = types.GenerateContentConfig(tools=TOOLS, automatic_function_calling=NO_AUTO)  # type: ignore[arg-type]
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=proxy))
    try:
        reply = await client.aio.models.generate_content(model="gemini-2.5-pro", contents=PROMPT)
        stream = await client.aio.models.generate_content_stream(
            model="gemini-2.5-pro", contents=f"{PROMPT} {TOOL_MARK}", config=config)
        calls = [c async for p in stream for c in p.function_calls or []]
    finally:
        await client.aio.aclose()
        client.close()
    assert reply.text == SCRIPTED
    assert [c.name for c in calls] == [CALL.name]


def test_a_json_array_stream_without_alt_sse(proxy: str) -> None:
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]}).encode()
    with httpx.Client() as http:
        r = http.post(f"{proxy}/v1beta/models/gemini-2.5-flash:streamGenerateContent", content=body,
                      headers={"x-goog-api-key": "k"})
    [response] = r.json()
    assert response["candidates"][0]["content"]["parts"] == [{"text": SCRIPTED}]


@pytest.mark.parametrize("method", ["generateContent", "streamGenerateContent?alt=sse"])
def test_other_calls_pass_through_byte_for_byte(apis: tuple[ModelAPIs, str], proxy: str, method: str) -> None:
    fake, upstream = apis
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "organic"}]}],
                       "generationConfig": {"temperature": 0.2}}).encode()
    headers = {"x-goog-api-key": "AIza-secret", "content-type": "application/json"}
    target = f"/v1beta/models/gemini-2.5-flash:{method}"
    with httpx.Client() as http:
        direct = http.post(upstream + target, content=body, headers=headers)
        proxied = http.post(proxy + target, content=body, headers=headers)
    assert proxied.status_code == direct.status_code == 200
    assert proxied.content == direct.content and b"UPSTREAM" in proxied.content
    seen = fake.seen[-1]
    assert seen.body == body and seen.headers["x-goog-api-key"] == "AIza-secret"
    assert seen.query == ("alt=sse" if "?" in method else "")


def test_errors_the_proxy_answers_are_google_errors() -> None:
    with serve_proxy(None) as server, genai.Client(
        api_key="k", http_options=types.HttpOptions(base_url=server.url)
    ) as c, pytest.raises(errors.APIError) as raised:
        c.models.generate_content(model="gemini-2.5-flash", contents="hello")
    assert raised.value.code == 503 and "[model] upstream" in (raised.value.message or "")


class Permit(BaseModel):
    amount: int
    source: str


@asynccontextmanager
async def _model(proxy: str) -> AsyncIterator[GoogleModel]:
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=proxy))
    try:
        yield GoogleModel("gemini-2.5-flash", provider=GoogleProvider(client=client))
    finally:
        await client.aio.aclose()
        client.close()


@pytest.mark.anyio
async def test_pydantic_ai_reads_the_text_and_its_output_tool(proxy: str, scripts: Scripts) -> None:
    async with _model(proxy) as model:
        text = await Agent(model).run(PROMPT)
        scripts.tool = ToolCall("final_result", {"amount": 640, "source": "https://x.example.org"}, "c1")
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
