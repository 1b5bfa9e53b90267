"""An agent process sending organic model calls through the proxy at a steady rate (open loop).

``python organic_agent.py URL RATE STOP_FILE OUT_FILE [--stream]``: every 1/RATE seconds a
chat completion is sent through one keep-alive connection pool (the openai client's limits and
timeouts), with no retry; when STOP_FILE
appears, the calls in flight finish and OUT_FILE gets one JSON record per call:
``[scheduled unix time, seconds to the full answer, outcome, detail]``, where the outcome is
``ok``, ``refused`` (the connection was refused) or ``failed`` (anything else).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

BODY = {"model": "demo", "messages": [{"role": "user", "content": "What is the minimum monthly amount?"}]}


async def one(client: httpx.AsyncClient, url: str, scheduled: float, stream: bool) -> list[Any]:
    try:
        if stream:
            async with client.stream("POST", url, json={**BODY, "stream": True}) as response:
                text = b"".join([chunk async for chunk in response.aiter_bytes()])
                ok = response.status_code == 200 and b"[DONE]" in text
                detail = f"HTTP {response.status_code}" if not ok else ""
        else:
            response = await client.post(url, json=BODY)
            ok = response.status_code == 200 and "choices" in response.json()
            detail = f"HTTP {response.status_code}: {response.text[:200]}" if not ok else ""
    except httpx.ConnectError as exc:
        return [scheduled, time.time() - scheduled, "refused", repr(exc)]
    except Exception as exc:
        return [scheduled, time.time() - scheduled, "failed", repr(exc)]
    return [scheduled, time.time() - scheduled, "ok" if ok else "failed", detail]


async def main(url: str, rate: float, stop: Path, out: Path, stream: bool) -> None:
    # The openai client's own pool and timeouts (openai/_constants.py), which agents run with;
    # trust_env=False: a stray HTTP_PROXY must not carry loopback traffic; no retries anywhere.
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    timeout = httpx.Timeout(600.0, connect=5.0)
    async with httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False) as client:
        tasks: list[asyncio.Task[list[Any]]] = []
        start = time.time()
        n = 0
        while not stop.exists():
            scheduled = start + n / rate
            delay = scheduled - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(client, url, scheduled, stream)))
            n += 1
            if n == 1:  # the caller waits for this: the agent is sending
                out.with_suffix(".started").touch()
        if not tasks:
            out.write_text("[]")
            return
        done, pending = await asyncio.wait(tasks, timeout=90)
        results = [t.result() for t in tasks if t in done]
        # a call still unanswered 90 s after the stop is a failure, named as such
        results += [[0.0, 90.0, "failed", "no answer 90 s after the agent stopped"] for _ in pending]
        for task in pending:
            task.cancel()
    out.write_text(json.dumps(results))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--stream"]
    asyncio.run(main(args[0], float(args[1]), Path(args[2]), Path(args[3]), "--stream" in sys.argv))
