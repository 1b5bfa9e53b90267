"""The in-process hook (``POST /canary/v1/answer``), for agents whose model runs in their own process.

The agent sends what it would give its model (``{"messages": [...]}`` or ``{"prompt": "..."}``, plus
``"tools"``); the answer is ``{"text": ...}`` or ``{"tool_call": {"name", "arguments", "id"}}`` when
the call is the injection point. Any other call gets ``204``: the agent asks its own model.
"""

from __future__ import annotations

from canary.proxy.dialects import base
from canary.proxy.dialects.base import (
    AnswerRequest,
    Family,
    Scripted,
    ToolCall,
)

__all__ = ["HOOK_PATH", "INPROCESS", "NO_ANSWER"]

HOOK_PATH = "/canary/v1/answer"
#: The answer to every call that is not the injection point: no content, the agent asks its model.
NO_ANSWER: tuple[tuple[bytes, bytes], ...] = ((b"content-length", b"0"),)


class InProcess(Family):
    """The hook: never streamed, never relayed."""

    name = "inprocess"
    paths = (HOOK_PATH,)

    def messages(self, path: str, body: bytes) -> list[dict[str, str]]:
        """``messages``, or the ``prompt`` as one user message."""
        data = base.parse_object(body)
        if "messages" in data:
            return base.chat_messages(data.get("messages"))
        return base.chat_messages([{"role": "user", "content": data.get("prompt")}])

    def stream(self, path: str, body: bytes) -> bool:
        """The hook answers whole."""
        return False

    def read_request(self, path: str, body: bytes, query: bytes = b"") -> AnswerRequest:
        """Nothing of the request shapes the answer."""
        return AnswerRequest(model="", stream=False)

    def text(self, text: str, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """``{"text": ...}``."""
        return base.json_body({"text": text})

    def tool(self, call: ToolCall, request: AnswerRequest, *, now: float, token: str) -> Scripted:
        """``{"tool_call": {"name": ..., "arguments": {...}, "id": ...}}``."""
        return base.json_body({"tool_call": {"name": call.name, "arguments": dict(call.arguments),
                                          "id": call.call_id}})

    def error(self, status: int, kind: str, message: str) -> bytes:
        """``{"error": {"message": ..., "type": ...}}``."""
        return base.dump({"error": {"message": message, "type": kind}})


INPROCESS = InProcess()
