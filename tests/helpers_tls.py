"""Servers on loopback for probes of an https upstream: one that speaks TLS with a test CA's
certificate (trustme), one that speaks plain HTTP."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import trustme


def ca_pem(ca: trustme.CA, tmp_path: Path) -> str:
    """The path of a PEM file holding ``ca``'s certificate, for ``[model] ca_file``."""
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@contextmanager
def _serving(answer: Callable[[socket.socket], None]) -> Iterator[int]:
    """A loopback port whose every connection ``answer`` handles, in a thread, until the block ends."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                with suppress(OSError):  # a client that refused the certificate broke the handshake off
                    answer(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


@contextmanager
def tls_server(cert: trustme.LeafCert) -> Iterator[int]:
    """A loopback port that completes TLS handshakes with ``cert``, then closes."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)

    def answer(conn: socket.socket) -> None:
        with context.wrap_socket(conn, server_side=True) as tls:
            tls.recv(1)

    with _serving(answer) as port:
        yield port


@contextmanager
def plain_http_server() -> Iterator[int]:
    """A loopback port that answers whatever it reads with an HTTP 400, as a plain-HTTP server would."""

    def answer(conn: socket.socket) -> None:
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")

    with _serving(answer) as port:
        yield port
