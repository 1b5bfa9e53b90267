"""Which API a model upstream speaks, and how each SDK of it is pointed at the proxy."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

__all__ = ["Kind", "base_url_advice", "upstream_kind"]

Kind = Literal["anthropic", "gemini", "openai", "ollama"]

_HOSTS: tuple[tuple[str, Kind], ...] = (
    ("anthropic.com", "anthropic"),
    ("generativelanguage.googleapis.com", "gemini"),
    ("aiplatform.googleapis.com", "gemini"),
    ("openai.com", "openai"),
)


def upstream_kind(url: str | None) -> Kind | None:
    """The API an upstream URL speaks, by its host (Ollama by its port), or None when it cannot tell."""
    if not url:
        return None
    parts = urlsplit(url if "://" in url else f"http://{url}")
    host = (parts.hostname or "").lower()
    for suffix, kind in _HOSTS:
        if host == suffix or host.endswith(f".{suffix}"):
            return kind
    if parts.port == 11434:
        return "ollama"
    return None


def base_url_advice(listen: str, kind: Kind | None) -> list[str]:
    """One line per SDK: how to point it at the proxy on ``listen``; every SDK's line when the
    upstream's address does not tell which API it speaks (a local server may speak any)."""
    root = f"http://{listen}"
    anthropic = [
        f"anthropic SDK, Claude Agent SDK:      ANTHROPIC_BASE_URL={root}  "
        f'(or Anthropic(base_url="{root}"))',
        f'pydantic-ai:                          AnthropicProvider(base_url="{root}")',
    ]
    gemini = [
        f'google-genai:                         Client(http_options=HttpOptions(base_url="{root}"))  '
        f"(or GOOGLE_GEMINI_BASE_URL={root})",
        f'pydantic-ai:                          GoogleProvider(base_url="{root}")',
    ]
    openai = [
        f'openai SDK, LangChain, pydantic-ai:  base_url="{root}/v1"  (or OPENAI_BASE_URL)',
        f'ollama:                              Client(host="{root}")  (or OLLAMA_HOST)',
    ]
    if kind == "anthropic":
        return anthropic
    if kind == "gemini":
        return gemini
    if kind is None:
        return [*openai, anthropic[0], gemini[0]]
    return openai
