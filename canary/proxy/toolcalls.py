"""Scripted tool calls in every dialect the proxy speaks (the shapes live with each dialect family).

A fabricated tool call is written in the dialect's own shape: OpenAI chat ``message.tool_calls``,
Responses a ``function_call`` item, Ollama ``message.tool_calls``, Anthropic a ``tool_use`` block,
Gemini a ``functionCall`` part. The legacy completions and Ollama generate endpoints have no tool
calls, so they get the call as JSON text.
"""

from __future__ import annotations

from canary.proxy.dialects import AnswerRequest, Scripted, ToolCall, family

__all__ = ["ToolCall", "offers_tools", "script_tool"]


def offers_tools(dialect: str, body: bytes) -> bool:
    """Whether a request can take a tool call: it offers its model tools (a non-empty ``tools``
    list), or its dialect has no tool calls at all (it gets the call as JSON text)."""
    return family(dialect).offers_tools(body)


def script_tool(dialect: str, call: ToolCall, request: AnswerRequest, *, now: float, token: str) -> Scripted:
    """The fabricated ``call`` as ``dialect`` writes a tool call, in the request's stream mode."""
    return family(dialect).tool(call, request, now=now, token=token)
