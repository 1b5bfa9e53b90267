"""Showing URLs without their secrets: passwords and secret parameters reach no screen, log or store.

A URL's userinfo (``user:pass@``) is hidden whole. In its query and fragment, the value of every
parameter whose name says it holds a secret (``token``, ``key``, ``api_key``, ``sig``, ``secret``,
``password``, ``auth``, ``session``, ``credential``... in any case, with ``-`` or ``_``) is hidden.
"""

from __future__ import annotations

import re

__all__ = ["redact_url"]

# ``//`` then an authority's userinfo: everything up to the last ``@`` before the path starts.
# (Patterns as text: ``re`` compiles each on first use, so a URL without ``@`` or parameters pays
# for neither, as ``canary status`` showing a SQLite store does not.)
_USERINFO = r"//[^/?#\s@]*(?:@[^/?#\s@]*)*@"
# A ``name=value`` parameter of a query or fragment whose name names a secret; the value runs to the
# next separator, a quote or a space, less a closing ``:,.)]`` of the sentence around it.
_SECRET_PARAMETER = (
    r"(?P<name>[?&;#][^=&;#\s'\"?]*(?:token|key|secret|passw|pwd|sig|auth|credential|session|jwt)"
    r"[^=&;#\s'\"?]*=)[^&;#\s'\"]*[^&;#\s'\":,.)\]]"
)


def redact_url(text: str) -> str:
    """``text`` with every URL's userinfo and secret parameters replaced by ``***``.

    ``http://u:p@host:1/ask?mode=x&token=abc`` reads ``http://***@host:1/ask?mode=x&token=***``.
    """
    if "@" in text:
        text = re.sub(_USERINFO, "//***@", text)
    if any(separator in text for separator in "?&;#"):  # a parameter starts with one of them
        text = re.sub(_SECRET_PARAMETER, r"\g<name>***", text, flags=re.IGNORECASE)
    return text


#: The stores it opens: SQLite, and PostgreSQL through psycopg (what guard-canary[postgres] installs).
PSYCOPG = "postgresql+psycopg"


def store_url(url: str) -> tuple[str, str | None]:
    """A ``[store] url`` (``scheme://rest``) as the store reads it, a PostgreSQL URL as a host hands it
    out (``postgresql://``, ``postgres://``) read as psycopg's; and what is wrong with it, if it names
    a database or a driver the store cannot use (None when nothing is)."""
    scheme, rest = url.split("://", 1)
    backend, _, driver = scheme.lower().partition("+")
    if backend == "sqlite" and driver in ("", "pysqlite"):
        return url, None
    if backend in ("postgresql", "postgres") and driver in ("", "psycopg"):
        return f"{PSYCOPG}://{rest}", None
    if backend in ("postgresql", "postgres"):
        return url, f"guard-canary speaks to PostgreSQL through psycopg: write {redact_url(f'{PSYCOPG}://{rest}')}"
    return url, (f"{backend} is not a store guard-canary can use: give sqlite:////path/to/canary.db or "
                 f"{PSYCOPG}://user@host/database")
