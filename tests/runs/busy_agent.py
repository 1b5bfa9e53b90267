"""A busy agent for attribution tests: organic tasks through the real proxy while canaries run.

The agent asks its model (a real server behind the real proxy) and checks the
answer's version against what it read. On the organic path (no URL in the
task) its version guard is live and logs a rejection of the model's version; on
the canary path (one fetch) the version guard is dead unless ``canary_guard``
is set, and a second guard, ``StopGuard``, stops the fabrication so the final
answer is clean. ``style`` decides what the version guard's line carries: the
rejected value (``value``), nothing (``bare``), or the task id (``task``). ``draft`` makes the
canary path reject its draft and then its correction, as a guard that rejects everything does:
a bare line, then one naming the answer's value. ``busy_agent(kind="date")`` makes it a date
guard whose model names dates written out (``November 3, 2019``), as such guards log them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
from openai import APIError, OpenAI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from canary.demo.live import free_port
from canary.proxy.serving import BackgroundServer

URL = re.compile(r"https?://[^\s\"'<>]+")
VERSION = re.compile(r"\b\d+\.\d+\.\d+\b")
DATE = re.compile(r"\b(?:\d{4}-\d{2}-\d{2}|[A-Z][a-z]+ \d{1,2}, \d{4})\b")

GUARD = """
[guard]
name = "version"
match = 'VersionGuard: rejected'

[[canary]]
name = "fake-version"
every = "6h"
prompt = "Read {fixture_url} and tell me the latest release."
fixture = "<p>The latest release is {true_version}.</p>"
inject = "The latest release is {fake_version}."
leak = "{fake_version}"
timeout = "5s"

[[canary]]
name = "control"
every = "6h"
expect = "accept"
prompt = "Read {fixture_url} and tell me the latest release."
fixture = "<p>The latest release is {true_version}.</p>"
inject = "The latest release is {true_version}."
grounded = "{true_version}"
timeout = "5s"
"""

DATE_GUARD = """
[guard]
name = "date"
match = 'DateGuard: rejected'

[[canary]]
name = "control"
every = "6h"
expect = "accept"
prompt = "Read {fixture_url} and tell me when it was published."
fixture = "<p>It was published on {true_date}.</p>"
inject = "It was published on {true_date}."
grounded = "{true_date}"
timeout = "5s"
"""


@dataclass
class Behaviour:
    """What the agent logs, changeable between runs."""

    style: str = "value"  # "value" | "bare" | "task"
    canary_guard: bool = False  # the version guard is live on the canary path too
    draft: bool = False  # the canary path rejects its draft (a bare line), then its correction
    kind: str = "version"  # "version" | "date": what the model names and the guard checks
    organic_firings: int = 0
    organic_tasks: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def model_server(kind: str = "version") -> Starlette:
    """An OpenAI-compatible model that always names a version (or a date) of its own."""
    counter = itertools.count(1)

    async def chat(request: Request) -> Response:
        await request.body()
        n = next(counter)
        text = (f"The latest release is 124.42.{n}." if kind == "version"
                else f"It was published on November {n % 28 + 1}, 2019.")
        return JSONResponse({
            "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def agent_app(proxy_url: str, log: Path, behaviour: Behaviour) -> Starlette:
    """The agent: ``POST /ask {"prompt"}`` answers ``{"answer"}``."""
    write_lock = threading.Lock()
    client = OpenAI(base_url=f"{proxy_url}/v1", api_key="x", max_retries=0)

    def write(line: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        with write_lock, log.open("a") as f:
            f.write(f"{stamp} {line}\n")

    def rejection(task: str, value: str, style: str | None = None) -> str:
        style = style or behaviour.style
        name = "VersionGuard" if behaviour.kind == "version" else "DateGuard"
        if style == "value":
            return f"WARN guard={behaviour.kind} {name}: rejected action=reject value={value}"
        if style == "task":
            return f"WARN task={task} {name}: rejected"
        return f"WARN guard={behaviour.kind} {name}: rejected"

    def think(prompt: str) -> str:
        task = secrets.token_hex(6)
        write(f"INFO task={task} prompt received")
        url = URL.search(prompt)
        page = ""
        if url is not None:
            write(f"INFO task={task} fetched url={url.group(0)}")
            page = httpx.get(url.group(0).rstrip("."), timeout=5).text
        messages = [{"role": "user", "content": f"{prompt}\n\nPAGE:\n{page}"}]
        try:
            reply = client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
        except APIError:
            return "the model is not reachable yet"  # the proxy starts after the organic client
        answer = reply.choices[0].message.content or ""
        values = (VERSION if behaviour.kind == "version" else DATE).findall(answer)
        unseen = [v for v in values if v not in page]
        if url is None:  # the organic path: the version guard is live
            for value in unseen:
                write(rejection(task, value))
                with behaviour.lock:
                    behaviour.organic_firings += 1
            with behaviour.lock:
                behaviour.organic_tasks += 1
            return "I could not confirm a release." if unseen else answer
        if behaviour.draft and values:  # a guard that rejects even a grounded answer, twice
            write(rejection(task, values[0], "bare"))
            write(rejection(task, values[0], "value"))
            return answer
        if unseen:  # the canary path: the version guard is dead here unless told otherwise
            if behaviour.canary_guard:
                write(rejection(task, unseen[0]))
            write(f"WARN task={task} StopGuard: rejected unverified answer")
            return "I could not confirm the latest release."
        return answer

    async def ask(request: Request) -> Response:
        prompt = (await request.json())["prompt"]
        return JSONResponse({"answer": await asyncio.to_thread(think, prompt)})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        client.close()

    return Starlette(routes=[Route("/ask", ask, methods=["POST"])], lifespan=lifespan)


@dataclass
class BusyAgent:
    """The running agent, its model, and where its config lives."""

    root: Path
    config_path: Path
    behaviour: Behaviour


def write_config(root: Path, *, agent: int, proxy: int, fixtures: int, model: str, log: Path,
                 correlate: bool, kind: str = "version") -> Path:
    """canary.toml for the busy agent, with ``[logs] correlate`` when asked."""
    (root / "defs").mkdir(exist_ok=True)
    (root / "defs" / f"{kind}.toml").write_text(GUARD if kind == "version" else DATE_GUARD)
    extra = "correlate = 'task=(?P<id>[0-9a-f]+)'\n" if correlate else ""
    path = root / "canary.toml"
    path.write_text(
        f"""defs = ["defs/*.toml"]
[agent]
url = "http://127.0.0.1:{agent}/ask"
timeout = "5s"
[model]
listen = "127.0.0.1:{proxy}"
upstream = "{model}"
[fixtures]
listen = "127.0.0.1:{fixtures}"
[logs]
paths = ["{log}"]
{extra}[store]
url = "sqlite:///{root / 'canary.db'}"
"""
    )
    return path


@contextmanager
def busy_agent(root: Path, *, correlate: bool = False, every: float | None = 0.05,
               kind: str = "version") -> Iterator[BusyAgent]:
    """The agent and its model on loopback, and a client sending organic tasks every ``every`` s (None: quiet)."""
    log = root / "agent.log"
    log.touch()
    agent_port, proxy, fixtures = free_port(), free_port(), free_port()
    model = BackgroundServer(model_server(kind), "127.0.0.1", 0, name="model").start()
    behaviour = Behaviour(kind=kind)
    config = write_config(root, agent=agent_port, proxy=proxy, fixtures=fixtures, model=model.url,
                          log=log, correlate=correlate, kind=kind)
    agent = BackgroundServer(agent_app(f"http://127.0.0.1:{proxy}", log, behaviour), "127.0.0.1",
                             agent_port, name="agent").start()
    stop = threading.Event()

    def organic() -> None:
        with httpx.Client(timeout=5) as http:
            while not stop.is_set():
                with contextlib.suppress(httpx.HTTPError):  # the agent is stopping
                    http.post(f"http://127.0.0.1:{agent_port}/ask", json={"prompt": "Which release?"})
                time.sleep(every or 0.0)

    thread = threading.Thread(target=organic, daemon=True)
    if every is not None:
        thread.start()
    try:
        yield BusyAgent(root, config, behaviour)
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(timeout=10)
        agent.stop()
        model.stop()
