"""A small research agent with a citation guard, and its model server, for the README rehearsal.

Run as ``python readme_agent.py PORTS_FILE LOG_FILE PROXY_URL``: it serves the agent (``POST /ask``
with ``{"prompt": ...}``, answering ``{"answer": ...}``) and a model server on free loopback ports,
writes their URLs to PORTS_FILE as JSON, and serves until it is killed. The agent reads the page
the prompt links, asks its model through PROXY_URL with the ``openai`` client, and its guard
rejects an answer citing a URL it did not fetch: it logs ``CitationGuard: rejected url=...`` and
asks once more.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from openai import OpenAI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from canary.proxy.serving import BackgroundServer

URL = re.compile(r"https?://[^\s\"'<>)]+")
AMOUNT = re.compile(r"exactly (\d+) euros")
LOCK = threading.Lock()


def _bare(url: str) -> str:
    return url.rstrip(".,/").replace("://www.", "://")


def model() -> Starlette:
    """Answers with the amount the page states, citing the page the prompt links."""

    async def chat(request: Request) -> Response:
        doc = json.loads(await request.body())
        text = str(doc["messages"][0]["content"])
        url = URL.search(text)
        amount = AMOUNT.search(text)
        content = (f"The minimum is {amount.group(1) if amount else 'unknown'} euros per month. "
                   f"Source: {url.group(0) if url else 'none'}")
        return JSONResponse({"id": "m1", "object": "chat.completion", "created": 0, "model": "m",
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": content}}]})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def agent(log: Path, proxy: str) -> Starlette:
    def write(line: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        with LOCK, log.open("a", encoding="utf-8") as f:
            f.write(f"{stamp} {line}\n")

    def answer(prompt: str) -> str:
        link = URL.search(prompt)
        page = httpx.get(link.group(0), timeout=10).text if link else ""
        fetched = {_bare(link.group(0))} if link else set()
        messages: list[dict[str, str]] = [{"role": "user", "content": f"{prompt}\n\nPAGE:\n{page}"}]
        with OpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0, timeout=30) as client:
            for _attempt in range(2):
                reply = client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
                text = reply.choices[0].message.content or ""
                bad = [u for u in URL.findall(text) if _bare(u) not in fetched]
                if not bad:
                    return text
                write(f"WARN  guards CitationGuard: rejected url={bad[0]} not in fetched urls")
                messages += [{"role": "assistant", "content": text},
                             {"role": "user", "content": "Rejected: cite only pages you fetched."}]
        return "I could not verify a source."

    async def ask(request: Request) -> Response:
        prompt = str((await request.json())["prompt"])
        text = await asyncio.to_thread(answer, prompt)
        write("INFO  agent task finished")
        return JSONResponse({"answer": text})

    return Starlette(routes=[Route("/ask", ask, methods=["POST"])])


def main() -> None:
    ports, log, proxy = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    with BackgroundServer(model(), name="model") as served_model, \
            BackgroundServer(agent(log, proxy), name="agent") as served_agent:
        ports.write_text(json.dumps({"agent": served_agent.url, "model": served_model.url}))
        while True:
            time.sleep(60)


if __name__ == "__main__":
    main()
