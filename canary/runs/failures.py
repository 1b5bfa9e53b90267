"""The model server failing a run's model call, told to the run so its ``error`` names that side.

A failure the proxy answers with its own error (refused, timed out, broken off before an
answer) reaches the run through the proxy's counts (``canary.runs.session``). An answer the
proxy relays as it came is the model server's own: ``RelayedFailures`` wraps the proxy's full
path, where every model call carrying a live nonce goes, and tells the run of a 5xx answer or
one broken off mid-way, and while a call waits on the model server's answer (a run whose time runs
out then names the model server first).
"""

from __future__ import annotations

import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from canary.proxy import dialects
from canary.proxy.health import redact
from canary.runs.inflight import ActiveRun
from canary.runs.registry import Registry

__all__ = ["RelayedFailures", "model_server"]


def model_server(upstream: str | None) -> str:
    """How a reason names the model server: its URL with any password hidden, and the key that sets it."""
    return f"the model server at {redact(upstream)} ([model] upstream)"


class RelayedFailures:
    """The proxy's full path (an ASGI app), telling a run when the model server failed its call."""

    def __init__(self, app: ASGIApp, registry: Registry, upstream: str | None) -> None:
        self.app = app
        self.registry = registry
        self.upstream = upstream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or self.upstream is None or self.registry.idle
                or dialects.family_for(scope["path"]) is None):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        run: ActiveRun | None = None
        answered = False

        async def reading() -> Message:
            nonlocal run
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    run = self.registry.relaying(b"".join(chunks))
                    chunks.clear()
                    if run is not None:
                        self.registry.waiting(run, model_server(self.upstream))
            return message

        async def answering(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.start":
                answered = True
                if run is not None:
                    self.registry.waiting(run, None)
                if run is not None and message["status"] >= 500:
                    self.registry.relayed_failure(
                        run, f"{model_server(self.upstream)} answered the run's model call with HTTP "
                        f"{message['status']}")
            await send(message)

        try:
            await self.app(scope, reading, answering)
        except httpx.TransportError:
            if run is not None and answered:
                self.registry.relayed_failure(run, f"{model_server(self.upstream)} broke off its answer to "
                                              "the run's model call mid-way")
            raise
        finally:
            if run is not None and not answered:
                self.registry.waiting(run, None)
