"""Showing URLs without their secrets: user names and passwords never reach a screen or a log."""

from __future__ import annotations

import re

__all__ = ["redact_url"]

# ``//`` then an authority's userinfo: everything up to the last ``@`` before the path starts.
_USERINFO = re.compile(r"//[^/?#\s@]*(?:@[^/?#\s@]*)*@")


def redact_url(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``***`` (``http://***@host:port/``)."""
    return _USERINFO.sub("//***@", text)
