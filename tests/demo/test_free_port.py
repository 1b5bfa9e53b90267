"""``free_port``: a port the tests and the demo can bind, that no outgoing connection takes meanwhile."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from canary.demo.live import QUIET_PORTS, free_port


def _ephemeral() -> range:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    except OSError:  # macOS: IANA's dynamic range
        return range(49152, 65536)
    return range(int(low), int(high) + 1)


def test_the_port_is_below_the_ephemeral_range_and_can_be_bound() -> None:
    ephemeral = _ephemeral()
    for _ in range(20):
        port = free_port()
        assert port in QUIET_PORTS and port not in ephemeral
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_held_by_a_listener_is_never_given() -> None:
    held = []
    try:
        for _ in range(30):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", free_port()))
            sock.listen()
            held.append(sock)
        ports = {s.getsockname()[1] for s in held}
        assert len(ports) == len(held)
    finally:
        for sock in held:
            sock.close()


def test_a_port_given_once_is_not_given_again_in_the_same_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several listeners are picked before any binds (the demo's, a test's config): a port drawn
    twice would make two of them one."""
    first = free_port()
    draws = iter([first, first, first])
    monkeypatch.setattr(random, "choice", lambda seq: next(draws, seq[len(seq) // 2]))
    assert free_port() != first
