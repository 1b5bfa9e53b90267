"""guard-canary: proves, continuously, which of an LLM agent's guards are awake."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
