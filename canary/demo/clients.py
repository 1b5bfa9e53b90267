"""The demo agent's model client for each dialect: the SDK an agent on that API would use.

``openai`` ships with guard-canary; ``anthropic``, ``google-genai`` and ``ollama`` are the
agent's own dependencies, so ``canary demo --dialect`` asks for them by name when missing.
"""

from __future__ import annotations

import importlib.util
import ssl
from collections.abc import Mapping, Sequence
from typing import Any, cast

__all__ = ["DIALECTS", "MissingClient", "ask_model", "require_client"]

#: ``--dialect`` choices, and the package whose client speaks each one.
DIALECTS: dict[str, tuple[str, str]] = {
    "chat": ("openai", "openai"),
    "responses": ("openai", "openai"),
    "ollama": ("ollama", "ollama"),
    "anthropic": ("anthropic", "anthropic"),
    "gemini": ("google.genai", "google-genai"),
}


class MissingClient(Exception):
    """The dialect's client package is not installed."""


def require_client(dialect: str) -> None:
    """Raise MissingClient, naming the package to install, when the dialect's client is absent."""
    module, package = DIALECTS[dialect]
    if importlib.util.find_spec(module.partition(".")[0]) is None or importlib.util.find_spec(module) is None:
        raise MissingClient(f"the demo agent speaks {dialect} with the {package} package, which is not "
                            f"installed: pip install {package}")


def _split(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[tuple[str, str]]]:
    system = "\n".join(str(m["content"]) for m in messages if m.get("role") == "system")
    turns = [("assistant" if m.get("role") == "assistant" else "user", str(m.get("content") or ""))
             for m in messages if m.get("role") != "system"]
    return system, turns


def ask_model(dialect: str, root: str, model: str, messages: Sequence[Mapping[str, Any]], *,
              timeout: float, tls: ssl.SSLContext) -> str | None:
    """One model call in ``dialect`` to the server at ``root``; the answer's text."""
    if dialect in ("chat", "responses"):
        return _openai(dialect, f"{root}/v1", model, messages, timeout=timeout, tls=tls)
    if dialect == "ollama":
        return _ollama(root, model, messages, timeout)
    if dialect == "anthropic":
        return _anthropic(root, model, messages, timeout)
    return _gemini(root, model, messages, timeout)


def _ollama(root: str, model: str, messages: Sequence[Mapping[str, Any]], timeout: float) -> str | None:
    import ollama

    with ollama.Client(host=root, timeout=timeout) as client:
        reply = client.chat(model=model, messages=list(messages))
    content: str | None = reply.message.content
    return content


def _anthropic(root: str, model: str, messages: Sequence[Mapping[str, Any]], timeout: float) -> str:
    import anthropic

    system, turns = _split(messages)
    with anthropic.Anthropic(base_url=root, api_key="demo", timeout=timeout, max_retries=1) as client:
        message = client.messages.create(model=model, max_tokens=1024, system=system,
                                         messages=[{"role": r, "content": c} for r, c in turns])  # type: ignore[misc]
    return "".join(b.text for b in message.content if b.type == "text")


def _gemini(root: str, model: str, messages: Sequence[Mapping[str, Any]], timeout: float) -> str | None:
    from google import genai
    from google.genai import types

    system, turns = _split(messages)
    contents = [types.Content(role="model" if r == "assistant" else "user", parts=[types.Part(text=c)])
                for r, c in turns]
    options = types.HttpOptions(base_url=root, timeout=int(timeout * 1000))
    with genai.Client(api_key="demo", http_options=options) as client:
        reply = client.models.generate_content(model=model, contents=contents,
                                               config=types.GenerateContentConfig(system_instruction=system))
    return reply.text


def _openai(dialect: str, base: str, model: str, messages: Sequence[Mapping[str, Any]], *,
            timeout: float, tls: ssl.SSLContext) -> str | None:
    import openai

    http = openai.DefaultHttpxClient(trust_env=False, verify=tls)
    with openai.OpenAI(base_url=base, api_key="demo", timeout=timeout, max_retries=1,
                       http_client=http) as client:
        if dialect == "responses":
            system, turns = _split(messages)
            response = client.responses.create(model=model, instructions=system or None,
                                               input=[{"role": r, "content": c} for r, c in turns])  # type: ignore[misc]
            return response.output_text
        chat = client.chat.completions.create(model=model, messages=cast(Any, list(messages)), stream=False)
    return chat.choices[0].message.content if chat.choices else None
