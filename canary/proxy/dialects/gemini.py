"""Gemini (``models/{model}:generateContent`` and ``:streamGenerateContent``), as google-genai calls it.

The model is named in the path, and the path tells the stream mode. A text answer is a
``text`` part, a tool call a ``functionCall`` part (name, args as an object), both with
``finishReason: "STOP"``. Streamed with ``?alt=sse``: whole ``GenerateContentResponse`` objects,
one per ``data:`` frame, with no ``[DONE]``; without it, one JSON array of them. No thought
signature is ever written.
"""

from __future__ import annotations

import re
from typing import Any

from canary.proxy.dialects import base
from canary.proxy.dialects.base import (
    JSON_HEADERS,
    AnswerRequest,
    OneShape,
    Scripted,
    ToolCall,
    estimate_tokens,
    sse,
    text_of,
    tools_listed,
)

__all__ = ["GEMINI", "gemini_body", "model_of"]

_METHODS = (":generateContent", ":streamGenerateContent")
_STREAM = ":streamGenerateContent"
# Gemini 3 and later always think, and reject a tool turn that lacks its thought signature.
_ALWAYS_THINKS = re.compile(r"gemini-(\d+)")
_STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 413: "INVALID_ARGUMENT",
           429: "RESOURCE_EXHAUSTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def model_of(path: str) -> str:
    """The model a call's path names (``/v1beta/models/gemini-2.5-flash:generateContent``)."""
    head = path.rpartition(":")[0]
    return head.rpartition("/models/")[2]


def _part(answer: str | ToolCall) -> dict[str, Any]:
    if isinstance(answer, str):
        return {"text": answer}
    return {"functionCall": {"name": answer.name, "args": dict(answer.arguments)}}


def gemini_body(answer: str | ToolCall, request: AnswerRequest, *, token: str) -> dict[str, Any]:
    """One ``GenerateContentResponse``: the part, its finish reason and usage."""
    shown = answer if isinstance(answer, str) else answer.as_text
    output = estimate_tokens(len(shown.encode()))
    return {
        "candidates": [{"content": {"parts": [_part(answer)], "role": "model"}, "finishReason": "STOP",
                        "index": 0}],
        "usageMetadata": {"promptTokenCount": request.prompt_tokens, "candidatesTokenCount": output,
                          "totalTokenCount": request.prompt_tokens + output},
        "modelVersion": request.model,
        "responseId": token,
    }


def _thinking_config(data: dict[str, Any]) -> dict[str, Any] | None:
    for key in ("generationConfig", "generation_config"):
        config = data.get(key)
        if isinstance(config, dict):
            thinking = config.get("thinkingConfig", config.get("thinking_config"))
            if isinstance(thinking, dict):
                return thinking
    return None


class Gemini(OneShape):
    """The Gemini API (``/v1beta``, ``/v1``) and Vertex AI paths (``.../publishers/google/models/...``)."""

    name = "gemini"

    def matches(self, path: str) -> bool:
        """A ``models/{m}:generateContent`` or ``:streamGenerateContent`` path."""
        return path.endswith(_METHODS) and "/models/" in path

    def stream(self, path: str, body: bytes) -> bool:
        """The method in the path tells the stream mode."""
        return path.endswith(_STREAM)

    def read_request(self, path: str, body: bytes, query: bytes = b"") -> AnswerRequest:
        """The model from the path; the stream mode from the method, its framing from ``alt=sse``."""
        stream = self.stream(path, body)
        return AnswerRequest(model=model_of(path), stream=stream, prompt_tokens=estimate_tokens(len(body)),
                             array=stream and b"alt=sse" not in query)

    def messages(self, path: str, body: bytes) -> list[dict[str, str]]:
        """``systemInstruction`` and ``contents``, the ``model`` role as ``assistant``."""
        data = base.parse_object(body)
        found: list[dict[str, str]] = []
        system = data.get("systemInstruction", data.get("system_instruction"))
        if isinstance(system, dict):
            found.append({"role": "system", "content": text_of(system.get("parts"))})
        for turn in data.get("contents") or []:
            if isinstance(turn, dict):
                role = "assistant" if turn.get("role") == "model" else "user"
                found.append({"role": role, "content": text_of(turn.get("parts"))})
        return found

    def offers_tools(self, body: bytes) -> bool:
        """A ``tools`` entry with ``functionDeclarations`` (search or code tools take no call)."""
        def declared(data: Any) -> list[Any]:
            tools = data.get("tools")
            if not isinstance(tools, list):
                return []
            return [d for tool in tools if isinstance(tool, dict)
                    for key in ("functionDeclarations", "function_declarations")
                    for d in (tool.get(key) or []) if isinstance(tool.get(key), list)]
        return tools_listed(body, b'"tools"', declared)

    def asks_thinking(self, path: str, body: bytes) -> bool:
        """A ``thinkingConfig`` that leaves thinking on, or a model that always thinks (Gemini 3 on)."""
        found = _ALWAYS_THINKS.search(model_of(path))
        if found is not None and int(found.group(1)) >= 3:
            return True
        if b"hinking" not in body:
            return False
        thinking = _thinking_config(base.parse_object(body))
        if thinking is None:
            return False
        budget = thinking.get("thinkingBudget", thinking.get("thinking_budget"))
        return budget != 0 or bool(thinking.get("includeThoughts") or thinking.get("thinkingLevel"))

    def answer(self, answer: str | ToolCall, request: AnswerRequest, token: str) -> Scripted:
        """A ``text`` or ``functionCall`` part, whole in one response even when streamed."""
        body = gemini_body(answer, request, token=token)
        if not request.stream:
            return base.json_body(body)
        if request.array:
            return Scripted(JSON_HEADERS, (base.dump([body]),), stream=True)
        return sse(iter([body]), done=False, end=b"\r\n\r\n")

    def error(self, status: int, kind: str, message: str) -> bytes:
        """Google's error body: ``{"error": {"code": ..., "message": ..., "status": ...}}``."""
        state = _STATUS.get(status, "INTERNAL")
        return base.dump({"error": {"code": status, "message": message, "status": state}})


GEMINI = Gemini()

