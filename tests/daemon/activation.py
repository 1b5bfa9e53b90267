"""Socket activation as systemd does it, for tests and benchmarks: this process holds the listeners.

``spawn`` starts a command with the sockets as descriptors 3, 4, ... and ``LISTEN_FDS``,
``LISTEN_FDNAMES`` and ``LISTEN_PID`` set, the last to the command's own pid (a small Python
wrapper moves the descriptors into place, sets it, then execs the command under the same pid).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

_WRAPPER = """
import fcntl, os, sys
fds = [int(f) for f in sys.argv[1].split(",")]
high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]
for fd in fds:
    os.close(fd)
for index, fd in enumerate(high):
    os.dup2(fd, 3 + index)
    os.close(fd)
os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(sys.argv[2], sys.argv[2:])
"""


def listener(host: str = "127.0.0.1") -> socket.socket:
    """A listening TCP socket on a free loopback port, as a socket unit would hold it."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(4096)
    return sock


def address(sock: socket.socket) -> str:
    """``host:port`` of a listener."""
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def spawn(
    argv: list[str],
    sockets: Mapping[str, socket.socket],
    *,
    env: Mapping[str, str] | None = None,
    stderr: Path | None = None,
    stdout: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` with ``sockets`` passed the systemd way (in order, named by their keys)."""
    fds = [s.fileno() for s in sockets.values()]
    environ = dict(os.environ if env is None else env)
    environ["LISTEN_FDS"] = str(len(fds))
    environ["LISTEN_FDNAMES"] = ":".join(sockets)
    environ.pop("LISTEN_PID", None)
    err = stderr.open("ab") if stderr is not None else None
    out = stdout.open("ab") if stdout is not None else None
    try:
        return subprocess.Popen(
            [sys.executable, "-c", _WRAPPER, ",".join(map(str, fds)), *argv],
            pass_fds=fds, env=environ, stdout=out if out is not None else subprocess.DEVNULL,
            stderr=err if err is not None else subprocess.DEVNULL,
        )
    finally:
        for sink in (err, out):
            if sink is not None:
                sink.close()
