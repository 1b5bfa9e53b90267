"""The dialects the proxy speaks, as one table: one family per API, each answering the same questions.

:class:`~canary.proxy.dialects.base.Family` lists the questions (is this path a model call, does
it stream, does it offer tools, did it ask for thinking, how to write a text answer and a tool
call, how an error looks). Deciding whether a call is a model call and which dialect it speaks
is :func:`family_for`, apart from relaying, so any relay can use it.
"""

from __future__ import annotations

from typing import Literal

from canary.proxy.dialects.anthropic import ANTHROPIC
from canary.proxy.dialects.base import (
    JSON_HEADERS,
    NDJSON_HEADERS,
    SSE_HEADERS,
    AnswerRequest,
    Family,
    Headers,
    Scripted,
    ToolCall,
    estimate_tokens,
    new_token,
    requested_stream,
)
from canary.proxy.dialects.gemini import GEMINI
from canary.proxy.dialects.inprocess import HOOK_PATH, INPROCESS
from canary.proxy.dialects.ollama import OLLAMA_CHAT, OLLAMA_GENERATE, ollama_timestamp
from canary.proxy.dialects.openai_chat import CHAT
from canary.proxy.dialects.openai_completions import COMPLETIONS
from canary.proxy.dialects.openai_responses import RESPONSES

__all__ = [
    "DEFAULT_STREAM", "FAMILIES", "HOOK_PATH", "JSON_HEADERS", "MODEL_PATHS", "NDJSON_HEADERS",
    "SSE_HEADERS", "AnswerRequest", "Dialect", "Family", "Headers", "Scripted", "ToolCall", "error_body",
    "estimate_tokens", "family", "family_for", "new_token", "ollama_timestamp", "read_request",
    "requested_stream", "script",
]

Dialect = Literal[
    "chat", "completions", "responses", "ollama-chat", "ollama-generate", "anthropic", "gemini", "inprocess",
]

#: Every family the proxy relays for, by name.
FAMILIES: dict[str, Family] = {
    f.name: f for f in (CHAT, COMPLETIONS, RESPONSES, OLLAMA_CHAT, OLLAMA_GENERATE, ANTHROPIC, GEMINI)
}
_ALL: dict[str, Family] = {**FAMILIES, INPROCESS.name: INPROCESS}

#: The exact paths of model calls, and their dialect (Gemini's are told by a pattern instead).
MODEL_PATHS: dict[str, Dialect] = {path: f.name for f in FAMILIES.values() for path in f.paths}  # type: ignore[misc]

#: The stream mode each dialect uses when the request says nothing (Ollama's REST API streams).
DEFAULT_STREAM: dict[str, bool] = {name: f.default_stream for name, f in _ALL.items()}

_PATTERNED: tuple[Family, ...] = tuple(f for f in FAMILIES.values() if not f.paths)


def family(dialect: str) -> Family:
    """The family of a dialect name."""
    return _ALL[dialect]


def family_for(path: str) -> Family | None:
    """The family whose model call ``path`` is (for a POST), or None: it is relayed as it is."""
    name = MODEL_PATHS.get(path)
    if name is not None:
        return FAMILIES[name]
    for candidate in _PATTERNED:
        if candidate.matches(path):
            return candidate
    return None


def read_request(dialect: str, body: bytes, path: str = "", query: bytes = b"") -> AnswerRequest:
    """Parse the request body just enough to answer it; a body that is not a JSON object gets defaults."""
    return _ALL[dialect].read_request(path, body, query)


def script(dialect: str, text: str | ToolCall, request: AnswerRequest, *, now: float, token: str) -> Scripted:
    """The scripted ``text`` (or tool call) as ``dialect`` answers it, in the request's stream mode."""
    spoken = _ALL[dialect]
    if isinstance(text, str):
        return spoken.text(text, request, now=now, token=token)
    return spoken.tool(text, request, now=now, token=token)


def error_body(path: str, status: int, kind: str, message: str) -> bytes:
    """An error body the SDK of the dialect ``path`` speaks understands (OpenAI style elsewhere)."""
    if path.startswith("/api/"):
        return OLLAMA_CHAT.error(status, kind, message)
    spoken = INPROCESS if path == HOOK_PATH else family_for(path)
    return (spoken or CHAT).error(status, kind, message)
