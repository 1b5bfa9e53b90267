"""A daemon restarting itself without a service manager: SIGUSR2 hands its listening sockets to a successor.

The running daemon starts ``canary daemon`` again (its own command line) with the proxy's and
the fixture server's listening sockets passed the way systemd passes them (descriptors from 3 on,
``LISTEN_FDS``, ``LISTEN_FDNAMES``, and ``LISTEN_PID`` set to the successor's pid by a small
wrapper that then execs the command under that pid), and stops as on SIGTERM: it drains while
the successor already serves the same sockets, so the kernel queue is never without a reader.
The successor waits for the store's lock while its parent drains (``steps.store_lock``).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from canary.daemon.loop import Daemon

log = logging.getLogger("canary.daemon.handover")

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

#: The variable naming the daemon a successor takes over from (its parent's pid).
TAKEOVER_ENV = "CANARY_TAKEOVER_FROM"


def own_command() -> list[str]:
    """This process's command line, interpreter options included, with this interpreter first."""
    return [sys.executable, *sys.orig_argv[1:]]


def start_successor(
    sockets: Mapping[str, socket.socket], argv: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """Start the successor with ``sockets`` (by name) passed as systemd would; it inherits stdout, stderr."""
    fds = [s.fileno() for s in sockets.values()]
    env = dict(os.environ)
    env.update({"LISTEN_FDS": str(len(fds)), "LISTEN_FDNAMES": ":".join(sockets),
                TAKEOVER_ENV: str(os.getpid())})
    env.pop("LISTEN_PID", None)
    command = argv or own_command()
    log.info("handing the %s socket(s) over to a new daemon", ", ".join(sockets) or "no")
    return subprocess.Popen([sys.executable, "-c", _WRAPPER, ",".join(map(str, fds)), *command],
                            pass_fds=fds, env=env, stdin=subprocess.DEVNULL)


def predecessor(environ: dict[str, str] | None = None) -> int | None:
    """The pid of the daemon this one takes over from, read once (and removed from the environment)."""
    env = os.environ if environ is None else environ
    value = env.pop(TAKEOVER_ENV, "")
    return int(value) if value.isdigit() else None


def hand_over(daemon: Daemon) -> bool:
    """Start a new daemon on ``daemon``'s listening sockets, then stop it; False if it cannot.

    The definitions are checked first: a new daemon that could not start would leave none.
    """
    from canary.daemon.reload import load_checked

    if daemon.managed:
        # The service manager would take the daemon's exit for the service's, and end the successor.
        log.warning("not restarting: a service manager runs this daemon; restart it through that "
                    "(systemctl --user restart guard-canary.service, or launchctl kickstart -k)")
        return False
    session = daemon.session
    servers = [("proxy", session.proxy if session else None),
               ("fixtures", session.fixtures if session else None)]
    sockets = {n: s.listener for n, s in servers if s is not None and s.listener is not None}
    if daemon.successor is not None or daemon.stop_event.is_set() or not sockets:
        log.warning("not restarting: the daemon is starting, stopping or already handing over")
        return False
    problems = load_checked(daemon.config)
    if isinstance(problems, str):
        log.error("not restarting: the new daemon would not start with these definitions:\n%s", problems)
        return False
    try:
        daemon.successor = start_successor(sockets)
    except OSError as exc:
        log.error("not restarting: cannot start a new daemon: %s", exc)
        return False
    daemon.stop_event.set()
    return True
