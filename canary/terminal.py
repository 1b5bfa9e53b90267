"""Untrusted text made safe to print: control characters shown, never obeyed by the terminal.

Log lines, model answers and agent error bodies come from outside; a line holding
``ESC ] 52`` would otherwise write the user's clipboard, retitle the window or clear
the screen. Every command and every dashboard widget passes such text through
``safe`` before it is printed or drawn; ``--json`` documents keep the exact text.

What the terminal may be sent of our own is decided here too: no colour when ``NO_COLOR`` is
set (and not empty, as no-color.org says) or ``TERM`` is ``dumb``, and no cursor moves on a
dumb terminal.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import logging

# and SafeFormatter, made on first use (``__getattr__``)
__all__ = ["colour_wanted", "cursor_moves_wanted", "safe", "safe_lines"]


def colour_wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether colours may be written: not with ``NO_COLOR`` set and not empty, nor with ``TERM=dumb``."""
    env = os.environ if environ is None else environ
    return not env.get("NO_COLOR") and cursor_moves_wanted(env)


def cursor_moves_wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the terminal may be sent cursor moves (live lines redrawn in place): not when ``TERM=dumb``."""
    env = os.environ if environ is None else environ
    return env.get("TERM") != "dumb"


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


#: Characters that reorder the text around them (Trojan Source, CVE-2021-42574): the embeddings and
#: overrides U+202A-U+202E, the isolates U+2066-U+2069, and the marks LRM, RLM and ALM.
BIDI_CONTROLS = (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)

#: C0 controls but tab, DEL, the C1 controls and the bidirectional controls, each mapped to its
#: visible ``\xNN`` or ``\uNNNN`` form.
_TABLE: dict[int, str] = {
    code: _escape(code) for code in (*range(0x00, 0x20), *range(0x7F, 0xA0), *BIDI_CONTROLS) if code != 0x09
}
_LINES_TABLE = {code: text for code, text in _TABLE.items() if code != 0x0A}


def safe(text: str) -> str:
    """``text`` with every control character but tab (newlines too) shown as ``\\xNN``, and every
    bidirectional control as ``\\uNNNN``."""
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
