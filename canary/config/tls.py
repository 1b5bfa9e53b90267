"""Reaching ``[model] upstream`` as the proxy does: a TCP connection, then for https a TLS handshake
with the proxy's trust, the host name of the URL checked against the certificate.

``canary check`` and the daemon's probe of a failing model server use it; it loads no HTTP client.
"""

from __future__ import annotations

import os
import socket
import ssl
from typing import NamedTuple
from urllib.parse import urlsplit

__all__ = ["CERTIFICATE", "CONNECT", "HANDSHAKE", "TRUST", "Refusal", "in_words", "probe", "tls_context"]

#: The step at which a probe failed.
CONNECT, TRUST, HANDSHAKE, CERTIFICATE = "connect", "trust", "handshake", "certificate"


def certificate_predicate(detail: str) -> str:
    """What follows "the model server at URL" when the proxy refused its certificate for ``detail``."""
    return (f"presented a TLS certificate that was refused ({detail}): check the host in [model] upstream, "
            "or add the CA that signed it with [model] ca_file in canary.toml")


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """Verification against the system's CAs (certifi's if it has none) and those in ``ca_file``."""
    context = ssl.create_default_context()
    system = ssl.get_default_verify_paths()
    listed = bool(system.capath and os.path.isdir(system.capath) and os.listdir(system.capath))
    if not system.cafile and not listed:
        import certifi  # httpx's own CA bundle, for a Python that finds no system CAs (python.org on macOS)

        context.load_verify_locations(certifi.where())
    if ca_file is not None:
        context.load_verify_locations(ca_file)
    context.set_alpn_protocols(["http/1.1"])
    return context


class Refusal(NamedTuple):
    """Why the model server cannot be used: the step that failed, at which host:port, in words."""

    step: str  # CONNECT, TRUST, HANDSHAKE or CERTIFICATE
    address: str  # host:port
    detail: str  # "connection refused", "unable to get local issuer certificate"...

    @property
    def predicate(self) -> str:
        """What follows "the model server at URL", naming the setting to change."""
        if self.step == CERTIFICATE:
            return certificate_predicate(self.detail)
        if self.step == HANDSHAKE:
            return (f"accepted a connection at {self.address}, but the TLS handshake failed ({self.detail}): "
                    "if it speaks plain HTTP there, start [model] upstream with http://")
        if self.step == TRUST:
            return f"cannot be verified: [model] ca_file cannot be read ({self.detail})"
        return f"cannot be connected to at {self.address} ({self.detail})"


def in_words(exc: OSError, timeout: float) -> str:
    """What a failed connection or handshake was: "connection refused", "no answer within 1 s"..."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (exc.verify_message or "certificate verify failed").rstrip(".")
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return exc.reason.replace("_", " ").lower()
    return exc.strerror or str(exc) or type(exc).__name__


def probe(url: str, *, ca_file: str | None = None, timeout: float = 1.0) -> Refusal | None:
    """None when ``url``'s host and port accept a connection and, for https, complete a TLS handshake
    the proxy would accept; else where and why not."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    host = parts.hostname or "127.0.0.1"
    try:
        port = parts.port or (443 if https else 80)
    except ValueError:
        return Refusal(CONNECT, host, "no port number")
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        context = tls_context(ca_file) if https else None
    except (OSError, ValueError) as exc:
        return Refusal(TRUST, address, str(exc))
    try:
        conn = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        return Refusal(CONNECT, address, in_words(exc, timeout))
    with conn:
        if context is None:
            return None
        try:
            with context.wrap_socket(conn, server_hostname=host):
                return None
        except ssl.SSLCertVerificationError as exc:
            return Refusal(CERTIFICATE, address, in_words(exc, timeout))
        except OSError as exc:
            return Refusal(HANDSHAKE, address, in_words(exc, timeout))
