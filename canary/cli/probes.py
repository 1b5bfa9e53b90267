"""What ``canary check`` learns by knocking: whether a daemon answers, whether the model server does.

Each is a short TCP connect (no HTTP client is loaded for ``check``); what is found is a warning,
never a problem: the files are valid, and a server may come up later.
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
