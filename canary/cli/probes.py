"""What ``canary check`` learns by knocking: whether a daemon answers, whether the model server
does, whether a PostgreSQL store takes a connection.

The first two are a short TCP connect (no HTTP client is loaded for ``check``), the store a login
with its driver; what is found is a warning, never a problem: the files are valid, and a server
may come up later.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from canary.config.urls import redact_url

if TYPE_CHECKING:
    from canary.config.settings import Config

#: How long a knock waits for a connection.
KNOCK_SECONDS = 1.0


def knock(host: str, port: int, timeout: float = KNOCK_SECONDS) -> str | None:
    """None when something accepts a connection at host:port, else what went wrong, in words."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except ConnectionRefusedError:
        return "connection refused"
    except OSError as exc:
        return exc.strerror or str(exc)


def answers(address: str) -> bool:
    """Whether something listens on a ``host:port`` address (the daemon's control address)."""
    host, _, port = address.rpartition(":")
    try:
        return knock(host.strip("[]") or "127.0.0.1", int(port), timeout=0.5) is None
    except ValueError:
        return False


def upstream_warning(config: Config) -> str | None:
    """A warning naming ``[model] upstream`` when nothing accepts a connection there."""
    upstream = config.model.upstream
    if not upstream:
        return None
    parts = urlsplit(upstream)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None  # loading already refused such a URL
    host = parts.hostname or "127.0.0.1"
    failure = knock(host, port)
    if failure is None:
        return None
    return (f"warning: [model] upstream = {redact_url(upstream)!r}: nothing answers at {host}:{port} "
            f"({failure}); every model call through the proxy fails until your model server runs there, "
            "or upstream names the address it does run at")


#: How long the store's login may take.
STORE_SECONDS = 3


def store_warning(config: Config) -> str | None:
    """A warning naming ``[store] url`` when a PostgreSQL store does not take a connection (nothing
    answers, a login refused, the driver missing); None for SQLite, which is never created here."""
    url = config.store.url
    if not url.startswith("postgresql"):
        return None
    from sqlalchemy import create_engine
    from sqlalchemy.exc import SQLAlchemyError

    try:
        engine = create_engine(url, connect_args={"connect_timeout": STORE_SECONDS}, poolclass=_no_pool())
        try:
            with engine.connect():
                return None
        finally:
            engine.dispose()
    except ImportError as exc:
        reason = f"its driver is not installed ({exc}); install guard-canary[postgres]"
    except (SQLAlchemyError, OSError) as exc:
        reason = _first_line(getattr(exc, "orig", None) or exc)
    return (f"warning: [store] url = {redact_url(url)!r}: cannot connect ({redact_url(reason)}); the "
            "daemon and canary status cannot work until it can")


def _no_pool() -> type:
    from sqlalchemy.pool import NullPool

    return NullPool


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
