"""A small agent on the real ``anthropic`` client, and a model server that fails the calls it is told to.

The agent (an HTTP server) fetches the page its prompt names and asks its model through the
proxy with a ``fetch_url`` tool, extended thinking on when the prompt says ``thinking=on`` and
streamed when it says ``stream=on``; its client retries a failed call as often as ``retries=N``
says (never by default). A tool call it refuses and sends back; with ``crash=on`` it fails
itself once its model has answered. It reports a failure as a web agent does,
``502 {"error": "<the exception>"}``. ``serve_project`` writes a project around it while it serves.

``FailingModel`` speaks Anthropic Messages on loopback (the standard library's HTTP server): a
call whose body says ``FAIL500`` or ``FAIL529`` gets that status with the API's error body,
``FAILONCE529`` a 529 the first time that body comes only, and ``FAILCUT`` a 200 whose body (or
SSE stream) stops half-way as the connection closes.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from canary.demo.live import free_port
from canary.proxy.serving import BackgroundServer

URL = re.compile(r"https?://[^\s\"')<>]+")
THINKING = {"type": "enabled", "budget_tokens": 1024}
TOOLS: list[Any] = [{"name": "fetch_url", "description": "Fetch a page.",
                     "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}}]
MESSAGE = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "The page says what it says."}], "stop_reason": "end_turn",
    "stop_sequence": None, "usage": {"input_tokens": 25, "output_tokens": 12},
}


def _ask(proxy: str, prompt: str) -> str:
    page = httpx.get(next(u for u in URL.findall(prompt) if "/r/" in u), trust_env=False).text
    messages: list[Any] = [{"role": "user", "content": f"{prompt}\n\nPAGE:\n{page}"}]
    extra: dict[str, Any] = {"thinking": THINKING} if "thinking=on" in prompt else {}
    retries = re.search(r"retries=(\d+)", prompt)
    with anthropic.Anthropic(base_url=proxy, api_key="sk-ant-test",
                             max_retries=int(retries.group(1)) if retries else 0) as client:
        for _ in range(3):
            if "stream=on" in prompt:
                with client.messages.stream(model="claude-sonnet-4-5", max_tokens=2048, messages=messages,
                                            tools=TOOLS, **extra) as stream:
                    reply = stream.get_final_message()
            else:
                reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=2048, messages=messages,
                                               tools=TOOLS, **extra)
            uses = [b for b in reply.content if b.type == "tool_use"]
            if not uses and "crash=on" in prompt:
                raise RuntimeError("the agent's own bug, after its model answered")
            if not uses:
                return "".join(b.text for b in reply.content if b.type == "text")
            messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": u.id, "content": "Error: refused by policy"} for u in uses]})
    return "I could not finish."


def agent_app(proxy: str) -> Starlette:
    """The agent as an ASGI app: ``POST /ask`` with ``{"prompt": ...}``."""

    async def ask(request: Request) -> Response:
        prompt = (await request.json())["prompt"]
        try:
            answer = await asyncio.to_thread(_ask, proxy, prompt)
        except Exception as exc:  # every failure, as a web agent reports it
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=502)
        return JSONResponse({"answer": answer})

    return Starlette(routes=[Route("/ask", ask, methods=["POST"])])


@contextmanager
def serve_project(root: Path, defs: dict[str, str], upstream: str, *, control: int | None = None) -> Iterator[Path]:
    """canary.toml in ``root`` (with a ``[daemon]`` on ``control``, if given) and the guard files
    ``defs`` names, while the agent serves; yields the config's path."""
    log = root / "agent.log"
    log.touch()
    (root / "defs").mkdir(exist_ok=True)
    for name, text in defs.items():
        (root / "defs" / f"{name}.toml").write_text(text)
    proxy, fixtures = free_port(), free_port()
    daemon = f'[daemon]\ncontrol = "127.0.0.1:{control}"\n' if control else ""
    with BackgroundServer(agent_app(f"http://127.0.0.1:{proxy}"), name="agent") as agent:
        config = root / "canary.toml"
        config.write_text(
            f'defs = ["defs/*.toml"]\n[agent]\nurl = "{agent.url}/ask"\ntimeout = "20s"\n'
            f'[model]\nlisten = "127.0.0.1:{proxy}"\nupstream = "{upstream}"\n'
            f'[fixtures]\nlisten = "127.0.0.1:{fixtures}"\n[logs]\npaths = ["{log}"]\n'
            f'[store]\nurl = "sqlite:///{root / "canary.db"}"\n[alerts]\ndesktop = false\n{daemon}'
        )
        yield config


class _Messages(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if b"FAIL500" in body:
            self._json(500, {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}})
        elif b"FAIL529" in body:
            self._json(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        elif b"FAILONCE529" in body and body not in self.server.failed_once:  # type: ignore[attr-defined]
            self.server.failed_once.add(body)  # type: ignore[attr-defined]
            self._json(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        elif b"HANG" in body:  # a model server that takes the call and does not answer in time
            time.sleep(8)
            self.close_connection = True
        elif b"FAILCUT" in body:
            self._cut(bool(json.loads(body).get("stream")))
        else:
            self._json(200, MESSAGE)

    def _cut(self, stream: bool) -> None:
        """Half an answer, then the connection closes: a JSON body short of its length, or an SSE
        stream after its first event, without the chunk that ends it."""
        self.send_response(200)
        if stream:
            start = {"type": "message_start", "message": {**MESSAGE, "content": [], "stop_reason": None}}
            event = f"event: message_start\ndata: {json.dumps(start)}\n\n".encode()
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        else:
            whole = json.dumps(MESSAGE).encode()
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(whole)))
            self.end_headers()
            self.wfile.write(whole[: len(whole) // 2])
        self.wfile.flush()
        self.close_connection = True

    def _json(self, status: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class FailingModel:
    """The model server, serving from a thread on a free loopback port until ``stop``."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Messages)
        self.server.daemon_threads = True
        self.server.failed_once = set()  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, name="failing model", daemon=True)

    @property
    def url(self) -> str:
        """Its base URL."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FailingModel:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
