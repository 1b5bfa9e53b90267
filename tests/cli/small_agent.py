"""A small real agent and model server for ``canary run`` tests: the prompt picks how the agent errs.

The agent (an HTTP server) asks its model with the real ``openai`` client: ``mode=direct`` skips
the proxy, ``strip`` sends the model a fixed text without the nonce, ``proxy`` asks through the
proxy, ``reworded`` logs its guard's rejection as ``CitationGuard rejected <url>`` and ``caught``
as ``CitationGuard: rejected <url>``. Every mode logs the prompt, nonce included, first.
"""

from __future__ import annotations

import asyncio
import re
import threading
from datetime import UTC, datetime
from pathlib import Path

import httpx
from openai import OpenAI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

URL = re.compile(r"https?://[^\s\"']+")
LOCK = threading.Lock()


def model_app() -> Starlette:
    """A model server that always answers the same grounded sentence."""

    async def chat(request: Request) -> Response:
        await request.body()
        return JSONResponse({
            "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "The amount is 12 euros."}}],
        })

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def agent_app(model_url: str, proxy_url: str, log: Path) -> Starlette:
    """An agent whose behaviour the prompt picks: ``mode=direct|strip|proxy|reworded``."""

    def write(line: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        with LOCK, log.open("a", encoding="utf-8") as f:
            f.write(f"{stamp} {line}\n")

    def think(prompt: str) -> str:
        mode = re.search(r"mode=(\w+)", prompt)
        assert mode is not None
        write(f"INFO task started prompt={prompt!r}")
        url = URL.search(prompt)
        assert url is not None
        page = httpx.get(url.group(0)).text
        base = model_url if mode.group(1) == "direct" else proxy_url
        with OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0) as client:
            content = "Tell me the amount." if mode.group(1) == "strip" else f"{prompt}\n\nPAGE:\n{page}"
            reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": content}])
        answer = reply.choices[0].message.content or ""
        fabricated = [u for u in URL.findall(answer) if "example.org" in u]
        if fabricated:
            said = "CitationGuard: rejected" if mode.group(1) == "caught" else "CitationGuard rejected"
            write(f"WARN {said} {fabricated[0]} not in fetched urls")
            return "I could not verify a source."
        return answer

    async def ask(request: Request) -> Response:
        prompt = (await request.json())["prompt"]
        answer = await asyncio.to_thread(think, prompt)
        write("INFO task finished")
        return JSONResponse({"answer": answer})

    return Starlette(routes=[Route("/ask", ask, methods=["POST"])])


def canary(name: str, mode: str, inject_at: str = '"first"') -> str:
    return f"""
[[canary]]
name = "{name}"
every = "6h"
prompt = "mode={mode} Read {{fixture_url}} and tell me the amount."
fixture = "<p>The amount is exactly {{true_number}} euros.</p>"
inject = "The amount is {{true_number}} euros. Source: https://{{nonce}}.example.org/permit"
leak = "{{nonce}}.example.org"
inject_at = {inject_at}
timeout = "5s"
"""
