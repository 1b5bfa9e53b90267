"""A small agent that asks its model in one dialect with that API's real SDK, streamed or not.

The prompt says which: ``dialect=<chat|responses|ollama|anthropic|gemini> stream=<yes|no>
life=<alive|dead>``. The agent fetches the page named in the prompt, offers its model a
``fetch_url`` tool, and checks the answer: a tool call to a host it never saw is refused
(``ToolPolicy: refused``), a text citing a URL it never fetched is rejected
(``CitationGuard: rejected``); ``life=dead`` turns both checks off.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

URL = re.compile(r"https?://[^\s\"')<>]+")
SCHEMA = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}
Answer = tuple[str, tuple[str, dict[str, Any]] | None]


def ask(dialect: str, root: str, prompt: str, stream: bool) -> Answer:
    """The model's answer: its text, and the tool call it made (name, arguments) if any."""
    return {"chat": _chat, "responses": _responses, "ollama": _ollama, "anthropic": _anthropic,
            "gemini": _gemini}[dialect](root, prompt, stream)


def _chat(root: str, prompt: str, stream: bool) -> Answer:
    import openai

    tools: Any = [{"type": "function", "function": {"name": "fetch_url", "parameters": SCHEMA}}]
    messages: Any = [{"role": "user", "content": prompt}]
    with openai.OpenAI(base_url=f"{root}/v1", api_key="x", max_retries=0) as client:
        if stream:
            with client.chat.completions.stream(model="m", messages=messages, tools=tools) as s:
                message = s.get_final_completion().choices[0].message
        else:
            message = client.chat.completions.create(model="m", messages=messages, tools=tools).choices[0].message
    calls = message.tool_calls or []
    call = (calls[0].function.name, json.loads(calls[0].function.arguments)) if calls else None  # type: ignore[union-attr]
    return message.content or "", call


def _responses(root: str, prompt: str, stream: bool) -> Answer:
    import openai

    tools: Any = [{"type": "function", "name": "fetch_url", "parameters": SCHEMA, "strict": False}]
    with openai.OpenAI(base_url=f"{root}/v1", api_key="x", max_retries=0) as client:
        if stream:
            with client.responses.stream(model="m", input=prompt, tools=tools) as s:
                response = s.get_final_response()
        else:
            response = client.responses.create(model="m", input=prompt, tools=tools)
    calls = [item for item in response.output if item.type == "function_call"]
    call = (calls[0].name, json.loads(calls[0].arguments)) if calls else None
    return response.output_text, call


def _ollama(root: str, prompt: str, stream: bool) -> Answer:
    import ollama

    tools: Any = [{"type": "function", "function": {"name": "fetch_url", "parameters": SCHEMA}}]
    messages = [{"role": "user", "content": prompt}]
    with ollama.Client(host=root) as client:
        parts = (list(client.chat(model="m", messages=messages, tools=tools, stream=True)) if stream
                 else [client.chat(model="m", messages=messages, tools=tools)])
    text = "".join(p.message.content or "" for p in parts)
    calls = [c for p in parts for c in p.message.tool_calls or []]
    return text, ((calls[0].function.name, dict(calls[0].function.arguments)) if calls else None)


def _anthropic(root: str, prompt: str, stream: bool) -> Answer:
    import anthropic

    tools: Any = [{"name": "fetch_url", "description": "Fetch a page.", "input_schema": SCHEMA}]
    messages: Any = [{"role": "user", "content": prompt}]
    with anthropic.Anthropic(base_url=root, api_key="x", max_retries=0) as client:
        if stream:
            with client.messages.stream(model="m", max_tokens=512, messages=messages, tools=tools) as s:
                message = s.get_final_message()
        else:
            message = client.messages.create(model="m", max_tokens=512, messages=messages, tools=tools)
    text = "".join(b.text for b in message.content if b.type == "text")
    uses = [b for b in message.content if b.type == "tool_use"]
    return text, ((uses[0].name, dict(uses[0].input)) if uses else None)


def _gemini(root: str, prompt: str, stream: bool) -> Answer:
    from google import genai
    from google.genai import types

    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(
            name="fetch_url", parameters_json_schema=SCHEMA)])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    with genai.Client(api_key="x", http_options=types.HttpOptions(base_url=root)) as client:
        replies = (list(client.models.generate_content_stream(model="gemini-2.5-flash", contents=prompt,
                                                              config=config)) if stream
                   else [client.models.generate_content(model="gemini-2.5-flash", contents=prompt,
                                                        config=config)])
    text = "".join(r.text or "" for r in replies if r.candidates and any(
        p.text for p in (r.candidates[0].content.parts or []) if r.candidates[0].content))
    calls = [c for r in replies for c in r.function_calls or []]
    return text, ((calls[0].name or "", dict(calls[0].args or {})) if calls else None)


def agent_app(proxy: str, log: Path) -> Starlette:
    """The agent as an ASGI app: ``POST /ask`` with ``{"prompt": ...}``."""
    lock = threading.Lock()

    def write(line: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        with lock, log.open("a", encoding="utf-8") as f:
            f.write(f"{stamp} {line}\n")

    def think(prompt: str) -> str:
        said = dict(re.findall(r"(\w+)=(\w+)", prompt))
        page_url = next(u for u in URL.findall(prompt) if "/r/" in u)
        page = httpx.get(page_url).text
        text, call = ask(said["dialect"], proxy, f"{prompt}\n\nPAGE:\n{page}", said["stream"] == "yes")
        alive = said["life"] == "alive"
        if call is not None:
            target = str(call[1].get("url", ""))
            if alive and target not in prompt:
                write(f"WARN ToolPolicy: refused {call[0]} {target}")
                return "I may not fetch that page."
            return f"Fetched {target}."
        cited = [u for u in URL.findall(text) if u not in prompt]
        if alive and cited:
            write(f"WARN CitationGuard: rejected {cited[0]} not in fetched urls")
            return "I could not verify a source."
        return text

    async def handle(request: Request) -> Response:
        prompt = (await request.json())["prompt"]
        return JSONResponse({"answer": await asyncio.to_thread(think, prompt)})

    return Starlette(routes=[Route("/ask", handle, methods=["POST"])])
