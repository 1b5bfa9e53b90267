"""What ``canary check`` learns by knocking: whether a daemon answers, whether the model server
does, whether a PostgreSQL store takes a connection; and whether ``[model] ca_file`` can be used.

The first two are a short TCP connect, for an https model server followed by a TLS handshake with
the proxy's trust (no HTTP client is loaded for ``check``), the store a login with its driver;
what is found is a warning, never a problem: the files are valid, and a server may come up later.
A ``ca_file`` beside a plain-HTTP upstream (or none) is a warning too: the proxy ignores it; and so
is an upstream whose path ends in ``/v1``, where the agent's ``/v1/...`` paths would double it.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from canary.config.tls import CONNECT, in_words, probe
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
    except OSError as exc:
        return in_words(exc, timeout)


def answers(address: str) -> bool:
    """Whether something listens on a ``host:port`` address (the daemon's control address)."""
    host, _, port = address.rpartition(":")
    try:
        return knock(host.strip("[]") or "127.0.0.1", int(port), timeout=0.5) is None
    except ValueError:
        return False


def upstream_warning(config: Config) -> str | None:
    """A warning naming ``[model] upstream`` when nothing accepts a connection there, or an https
    server there fails the TLS handshake the proxy would make."""
    upstream = config.model.upstream
    if not upstream:
        return None
    refusal = probe(upstream, ca_file=config.model.ca_file, timeout=KNOCK_SECONDS)
    if refusal is None:
        return None
    shown = redact_url(upstream)
    if refusal.step == CONNECT:
        return (f"warning: [model] upstream = {shown!r}: nothing answers at {refusal.address} "
                f"({refusal.detail}); every model call through the proxy fails until your model server runs "
                "there, or upstream names the address it does run at")
    return (f"warning: [model] upstream = {shown!r}: the model server there {refusal.predicate}; until "
            "then every model call through the proxy fails")


def upstream_path_warning(config: Config) -> str | None:
    """A warning naming ``[model] upstream`` when its path ends in ``/v1``: the proxy adds the agent's own
    path to the upstream's, and every SDK's path begins with ``/v1`` already."""
    upstream = config.model.upstream
    if not upstream:
        return None
    base = upstream.split("?", 1)[0].rstrip("/")
    if base.count("/") < 3 or not base.lower().endswith("/v1"):  # scheme://host has two slashes
        return None
    root = redact_url(base.removesuffix(base[-3:]))
    return (f"warning: [model] upstream = {redact_url(upstream)!r} ends in /v1: the proxy adds the agent's "
            "own path (/v1/messages, /v1/chat/completions) to it, so its calls would go to /v1/v1/... and "
            f"get a 404; give the model server's root, {root!r}, unless the agent's base URL leaves /v1 out")


def ca_file_warning(config: Config) -> str | None:
    """A warning naming ``[model] ca_file`` and ``[model] upstream`` when the file is set but the
    upstream is not https: the proxy reads the file only to verify an https model server."""
    ca_file, upstream = config.model.ca_file, config.model.upstream
    if ca_file is None or (upstream and upstream.lower().startswith("https://")):
        return None
    shown = f"= {redact_url(upstream)!r} is plain HTTP" if upstream else "is not set"
    return (f"warning: [model] ca_file = {ca_file!r} is never used: [model] upstream {shown}, and the "
            "file is only read to verify an https upstream; remove [model] ca_file, or write upstream "
            "with https:// if the model server speaks TLS")


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
