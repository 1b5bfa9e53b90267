"""Showing URLs without their secrets: passwords and secret parameters reach no screen, log or store.

A URL's userinfo (``user:pass@``) is hidden whole. In its query and fragment, the value of every
parameter whose name says it holds a secret (``token``, ``key``, ``api_key``, ``sig``, ``secret``,
``password``, ``auth``, ``session``, ``credential``... in any case, with ``-`` or ``_``) is hidden.
"""

from __future__ import annotations

import re

__all__ = ["redact_url"]

# ``//`` then an authority's userinfo: everything up to the last ``@`` before the path starts.
_USERINFO = re.compile(r"//[^/?#\s@]*(?:@[^/?#\s@]*)*@")
# A ``name=value`` parameter of a query or fragment whose name names a secret; the value runs to the
# next separator, a quote or a space, less a closing ``:,.)]`` of the sentence around it.
_SECRET_PARAMETER = re.compile(
    r"(?P<name>[?&;#][^=&;#\s'\"?]*(?:token|key|secret|passw|pwd|sig|auth|credential|session|jwt)"
    r"[^=&;#\s'\"?]*=)[^&;#\s'\"]*[^&;#\s'\":,.)\]]",
    re.IGNORECASE,
)


def redact_url(text: str) -> str:
    """``text`` with every URL's userinfo and secret parameters replaced by ``***``.

    ``http://u:p@host:1/ask?mode=x&token=abc`` reads ``http://***@host:1/ask?mode=x&token=***``.
    """
    return _SECRET_PARAMETER.sub(r"\g<name>***", _USERINFO.sub("//***@", text))
