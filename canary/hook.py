"""The in-process hook's client, for agents whose model runs in their own process (MLX, llama.cpp).

Before each model call the agent asks the proxy: ``answer = ask(messages, tools=tools)``. When this
call is a canary's injection point the proxy hands back the fabrication (text or a tool call),
which the agent uses as its model's answer; otherwise ``ask`` returns None and the agent asks its
own model. Only the standard library is used, so an agent can import this module alone or copy
it. Any failure to reach the proxy is None too: the monitor never stops the agent. What JSON
cannot hold is sent as best it can be: a tool given as a function by its name, any other object
as its text; a message that contains itself is not sent (None).

The wire is ``POST http://<[model] listen>/canary/v1/answer`` with ``{"messages": [...]}`` or
``{"prompt": "..."}`` (plus ``"tools"``), answered ``200 {"text": ...}``,
``200 {"tool_call": {"name": ..., "arguments": {...}}}`` or ``204``.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_URL", "Answer", "ToolCallAnswer", "ask"]

#: Where the hook is when ``$CANARY_HOOK_URL`` is not set: the proxy's default listen address.
DEFAULT_URL = "http://127.0.0.1:11435/canary/v1/answer"
PATH = "/canary/v1/answer"


@dataclass(frozen=True)
class ToolCallAnswer:
    """A fabricated tool call: the tool's name and its arguments."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str = ""


@dataclass(frozen=True)
class Answer:
    """What the agent's model is to answer this call with: a text, or a tool call."""

    text: str | None = None
    tool_call: ToolCallAnswer | None = None


def ask(
    messages: Sequence[Mapping[str, Any]] | None = None, *, prompt: str | None = None,
    tools: Sequence[Any] | None = None, url: str | None = None, timeout: float = 5.0,
) -> Answer | None:
    """The canary's answer for this model call, or None: ask the model as usual."""
    body: dict[str, Any] = {"messages": list(messages)} if messages is not None else {"prompt": prompt or ""}
    if tools:
        body["tools"] = list(tools)
    target = urllib.parse.urlsplit(url or os.environ.get("CANARY_HOOK_URL") or DEFAULT_URL)
    try:
        # ASCII escapes carry any text, a lone surrogate included; what JSON has no type for is
        # sent as its name (a tool given as a function) or its text.
        data = json.dumps(body, default=_plain).encode("ascii")
    except (ValueError, TypeError, RecursionError):  # a message that contains itself
        return None
    try:
        connection = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port or 80,
                                                timeout=timeout)
        try:
            connection.request("POST", target.path or PATH, body=data,
                               headers={"content-type": "application/json"})
            response = connection.getresponse()
            reply = response.read()
        finally:
            connection.close()
    except (OSError, http.client.HTTPException):
        return None
    if response.status != 200:
        return None
    return _answer(reply)


def _plain(value: object) -> object:
    """What JSON cannot hold: a function (a tool) by its name and description, else its text."""
    if callable(value) and hasattr(value, "__name__"):
        return {"name": value.__name__, "description": (value.__doc__ or "").strip()}
    return str(value)


def _answer(reply: bytes) -> Answer | None:
    try:
        doc = json.loads(reply)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    text = doc.get("text")
    if isinstance(text, str):
        return Answer(text=text)
    call = doc.get("tool_call")
    if isinstance(call, dict) and isinstance(call.get("name"), str):
        arguments = call.get("arguments")
        return Answer(tool_call=ToolCallAnswer(call["name"], arguments if isinstance(arguments, dict) else {},
                                               str(call.get("id") or "")))
    return None
