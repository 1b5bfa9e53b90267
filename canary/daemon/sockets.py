"""Listening sockets handed over by the service manager, so connections wait while the daemon restarts.

On Linux, systemd's socket activation per ``sd_listen_fds(3)``: ``$LISTEN_PID`` names this
process, ``$LISTEN_FDS`` counts the descriptors from 3 on, ``$LISTEN_FDNAMES`` names them
(colon-separated, from ``FileDescriptorName=``). The variables are removed once read, so a child
process never mistakes them for its own. On macOS, ``launch_activate_socket(3)`` from libSystem,
called through ctypes, returns the descriptors of a ``Sockets`` entry of the job's plist. A daemon
started by hand finds neither and binds its own sockets.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import socket
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

log = logging.getLogger(__name__)

#: The listeners a service manager may hold for the daemon, by the name it gives them.
LISTENERS = ("proxy", "fixtures")
#: The first inherited descriptor (``SD_LISTEN_FDS_START``).
LISTEN_FDS_START = 3
_ENV = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


def _listening_stream(fd: int) -> socket.socket | None:
    """The descriptor as a socket when it is a listening TCP socket, else None (it is left open)."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        ok = sock.type == socket.SOCK_STREAM and sock.family in (socket.AF_INET, socket.AF_INET6) and bool(
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        )
    except OSError:
        ok = False
    family, kind = sock.family, sock.type
    sock.detach()
    if not ok:
        return None
    # IPPROTO_TCP named, so asyncio sets TCP_NODELAY on every accepted connection (where the
    # platform cannot report a descriptor's protocol, it would otherwise be 0).
    tcp = socket.socket(family, kind, socket.IPPROTO_TCP, fileno=fd)
    tcp.set_inheritable(False)
    return tcp


def systemd_sockets(
    environ: MutableMapping[str, str] | None = None, *, pid: int | None = None
) -> dict[str, socket.socket]:
    """Sockets passed by systemd, by name (an unnamed one is called ``unknown``, as systemd does)."""
    env = os.environ if environ is None else environ
    listen_pid, count, names = (env.get(k, "") for k in _ENV)
    for key in _ENV:
        env.pop(key, None)
    if not count:
        return {}
    if not listen_pid.isdigit() or int(listen_pid) != (os.getpid() if pid is None else pid):
        log.warning("LISTEN_FDS is set for process %s, not for this one; ignoring it", listen_pid or "?")
        return {}
    if not count.isdigit():
        log.warning("LISTEN_FDS=%r is not a number; ignoring it", count)
        return {}
    labels = names.split(":") if names else []
    found: dict[str, socket.socket] = {}
    for index in range(int(count)):
        fd = LISTEN_FDS_START + index
        name = labels[index] if index < len(labels) and labels[index] else "unknown"
        sock = _listening_stream(fd)
        if sock is None:
            log.warning("inherited descriptor %d (%s) is not a listening TCP socket; ignoring it", fd, name)
            continue
        if name in found:
            log.warning("a second inherited socket is named %s; keeping the first", name)
            sock.close()
            continue
        found[name] = sock
    return found


#: ``int launch_activate_socket(const char *name, int **fds, size_t *cnt)``
LaunchActivate = Callable[[bytes, Any, Any], int]


def _libsystem_activate() -> LaunchActivate | None:
    path = ctypes.util.find_library("System") or "/usr/lib/libSystem.dylib"
    try:
        fn = ctypes.CDLL(path).launch_activate_socket
    except (OSError, AttributeError):
        return None
    fn.argtypes = [
        ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int)), ctypes.POINTER(ctypes.c_size_t),
    ]
    fn.restype = ctypes.c_int
    result: LaunchActivate = fn
    return result


def _libc_free() -> Callable[[Any], None]:
    free = ctypes.CDLL(None).free
    free.argtypes = [ctypes.c_void_p]
    free.restype = None
    result: Callable[[Any], None] = free
    return result


def launchd_sockets(
    names: tuple[str, ...],
    *,
    activate: LaunchActivate | None = None,
    free: Callable[[Any], None] | None = None,
    platform: str = sys.platform,
) -> dict[str, socket.socket]:
    """Sockets of the job's plist ``Sockets`` entries, by name; empty when launchd gave none.

    ``launch_activate_socket`` allocates the descriptor array, which is freed here; it answers
    ESRCH when the process is not managed by launchd and ENOENT for a name not in the plist.
    """
    if activate is None:
        if platform != "darwin":
            return {}
        activate = _libsystem_activate()
        if activate is None:
            return {}
    release = free or _libc_free()
    found: dict[str, socket.socket] = {}
    for name in names:
        fds = ctypes.POINTER(ctypes.c_int)()
        count = ctypes.c_size_t(0)
        err = activate(name.encode(), ctypes.byref(fds), ctypes.byref(count))
        if err != 0:
            if err not in (3, 2):  # ESRCH: not under launchd; ENOENT: no such entry
                log.warning("launchd did not hand over the %s socket: %s", name, os.strerror(err))
            continue
        try:
            socks = [s for s in (_listening_stream(fds[i]) for i in range(count.value)) if s is not None]
        finally:
            release(fds)
        if socks:
            found[name] = socks[0]
            for extra in socks[1:]:  # one address per entry is what the plist asks for
                extra.close()
    return found


def activated_sockets(names: tuple[str, ...]) -> dict[str, socket.socket]:
    """The listeners the service manager holds for this daemon (systemd or launchd), by name."""
    found = systemd_sockets()
    if not found:
        found = launchd_sockets(names)
    unknown = sorted(set(found) - set(names))
    for name in unknown:
        log.warning("the service manager passed a socket named %s, which the daemon does not use", name)
        found.pop(name).close()
    return found
