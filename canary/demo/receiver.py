"""The demo's alert receiver: a local webhook that keeps every alert it is sent.

The demo's alert pipeline delivers to it for real (the daemon's webhook channel over
loopback), so the dashboard's alert history shows sent deliveries. Each alert body is
appended to ``alerts.jsonl`` as one re-encoded JSON line, never the raw bytes.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

#: The file in the demo's folder that holds what the receiver got.
ALERTS_FILE = "alerts.jsonl"
#: Largest alert body kept; an alert is a few hundred bytes.
MAX_BODY = 64 * 1024


def create_receiver(path: Path) -> Starlette:
    """An app that answers ``POST /alerts`` with 204 and appends the JSON body to ``path``."""
    lock = threading.Lock()

    async def receive(request: Request) -> Response:
        raw = await request.body()
        if len(raw) > MAX_BODY:
            return Response("too large", status_code=413)
        try:
            body = json.loads(raw)
        except ValueError:
            return Response("expected a JSON body", status_code=400)
        line = json.dumps(body, ensure_ascii=True, sort_keys=True)
        with lock, path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        return Response(status_code=204)

    return Starlette(routes=[Route("/alerts", receive, methods=["POST"])])


def received(path: Path) -> list[dict[str, object]]:
    """The alerts the receiver kept, oldest first."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
