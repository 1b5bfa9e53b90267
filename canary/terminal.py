"""Untrusted text made safe to print: control characters shown, never obeyed by the terminal.

Log lines, model answers and agent error bodies come from outside; a line holding
``ESC ] 52`` would otherwise write the user's clipboard, retitle the window or clear
the screen. Every command and every dashboard widget passes such text through
``safe`` before it is printed or drawn; ``--json`` documents keep the exact text.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import logging

__all__ = ["safe", "safe_lines"]  # and SafeFormatter, made on first use (``__getattr__``)


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


#: C0 controls but tab, DEL and the C1 controls, each mapped to its visible ``\xNN`` form.
_TABLE: dict[int, str] = {
    code: _escape(code) for code in (*range(0x00, 0x20), *range(0x7F, 0xA0)) if code != 0x09
}
_LINES_TABLE = {code: text for code, text in _TABLE.items() if code != 0x0A}


def safe(text: str) -> str:
    """``text`` with every control character but tab (newlines too) shown as ``\\xNN``."""
    return text.translate(_TABLE)


def safe_lines(text: str) -> str:
    """Like ``safe``, but newlines stay: for messages that are several lines on purpose."""
    return text.translate(_LINES_TABLE)


@functools.cache
def _safe_formatter() -> type[logging.Formatter]:
    import logging  # defined on first use: ``canary status`` prints no log record

    class SafeFormatter(logging.Formatter):
        """A log formatter whose lines show control characters, for logs read in a terminal."""

        def format(self, record: logging.LogRecord) -> str:
            """The record formatted as usual, then made safe (its own newlines, as in a traceback, stay)."""
            return safe_lines(super().format(record))

    return SafeFormatter


def __getattr__(name: str) -> Any:
    """``SafeFormatter``: a ``logging.Formatter`` whose lines show control characters."""
    if name == "SafeFormatter":
        return _safe_formatter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
