"""The model proxy as a process of its own, which a daemon started by hand starts and which outlives it.

``python -m canary.proxy.standalone SPEC`` (SPEC: JSON with ``listen``, ``upstream``,
``ca_file``, ``max_body``, ``allowed_hosts``, ``link``, ``orphan``) binds the agent's address
and serves the front (``canary.proxy.front``). It imports no store, collectors or scheduler,
so a daemon restarting, reloading or crashing never takes the agent's model calls down.

A daemon connects to the ``link`` Unix socket (in the project's private state folder) and
tells it, one JSON object a line: ``full`` (the loopback address of the daemon's full path),
``nonces`` (the runs in flight), ``upstream`` and ``ca_file``, ``max_body`` (its own
``[model]`` settings, which hold from then on), ``seq`` (acknowledged, with the address it
serves), ``stop``.
The proxy sends back ``notes``: the calls it relayed with no live nonce (``passed``, with
their ``traceparent``), the model server's answers and failures, for the daemon's counts.
With no daemon linked it relays everything, the in-process hook answers 204, and after
``orphan`` seconds without one it drains and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
from typing import Any

from canary.proxy.drain import DRAIN, IDLE_CLOSE, DrainState, drain
from canary.proxy.front import Front
from canary.proxy.needles import Needles
from canary.proxy.serving import bind_listener, split_listen
from canary.proxy.upstream import Origin

__all__ = ["ORPHAN", "Link", "main"]

log = logging.getLogger("canary.proxy.standalone")

#: Seconds the proxy stays with no daemon linked before it drains and exits.
ORPHAN = 30.0


class Link:
    """The daemon's end as the proxy sees it: the live nonces, the full path, and notes to send."""

    def __init__(self, loop: asyncio.AbstractEventLoop, orphan: float, listen: str = "") -> None:
        self.loop = loop
        self.listen = listen
        self.front: Front | None = None
        self.finder: Needles[bool] = Needles({})
        self.writer: asyncio.StreamWriter | None = None
        self.notes: list[list[Any]] = []
        self.orphan = orphan
        self.orphaned: asyncio.TimerHandle | None = None
        self.done = asyncio.Event()

    # -- what the front asks (``Screen`` and ``Recorder``) ---------------------------------

    def live(self, body: bytes) -> bool:
        """Whether the body carries a nonce the daemon said is live."""
        finder = self.finder
        return bool(finder) and finder.find(body) is not None

    def passed(self, traceparent: str | None) -> None:
        """A model call without a live nonce went straight upstream."""
        if self.writer is not None:
            self._note("passed", traceparent)

    def answered(self, status: int, seconds: float) -> None:
        """The model server answered."""
        self._note("answered", [status, seconds])

    def failed(self, outcome: str, message: str, body: bytes) -> None:
        """The model server failed a request."""
        self._note("failed", [outcome, message])

    def counted(self, outcome: str) -> None:
        """A request that never reached the model server."""
        self._note("counted", outcome)

    def _note(self, kind: str, value: Any) -> None:
        if self.writer is None:
            return
        if not self.notes:
            self.loop.call_soon(self._flush)  # every note of one loop turn goes in one line
        self.notes.append([kind, value])

    def _flush(self) -> None:
        notes, self.notes = self.notes, []
        if notes and self.writer is not None and not self.writer.is_closing():
            self.writer.write(json.dumps({"notes": notes}).encode() + b"\n")

    # -- the daemon's connection -----------------------------------------------------------

    def alone(self) -> None:
        """No daemon: relay everything; exit after ``orphan`` seconds of it."""
        self.finder = Needles({})
        if self.front is not None:
            self.front.full = None
        if self.orphaned is None:
            self.orphaned = self.loop.call_later(self.orphan, self.done.set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One daemon, until it goes; a newer one replaces an older."""
        sock = writer.get_extra_info("socket")
        if not _same_user(sock):
            writer.close()
            return
        if self.writer is not None:
            # The daemon that was linked learns it was replaced, so it does not link again.
            self.writer.write(b'{"replaced": true}\n')
            self.writer.close()
        self.writer = writer
        if self.orphaned is not None:
            self.orphaned.cancel()
            self.orphaned = None
        try:
            while line := await reader.readline():
                self.apply(json.loads(line), writer)
        except (OSError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            if self.writer is writer:
                self.writer = None
                self.notes = []
                self.alone()
            writer.close()

    def apply(self, message: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        """One message from the daemon."""
        front = self.front
        assert front is not None
        if "full" in message:
            host, port = split_listen(str(message["full"]))
            front.full = Origin(host, port, shown="the daemon")
        if "nonces" in message:
            self.finder = Needles({str(n).encode("utf-8"): True for n in message["nonces"]})
        if "upstream" in message:
            upstream = message["upstream"]
            front.upstream = Origin.of_url(upstream, message.get("ca_file")) if upstream else None
        if isinstance(message.get("max_body"), int) and message["max_body"] > 0:
            front.max_body = message["max_body"]
        if "seq" in message:
            writer.write(json.dumps({"ack": message["seq"], "listen": self.listen}).encode() + b"\n")
        if message.get("stop"):
            self.done.set()


def _same_user(sock: socket.socket | None) -> bool:
    """Whether the peer of a Unix socket runs as this user (where the platform can tell)."""
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return True
    import struct

    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


async def serve(spec: dict[str, Any]) -> None:
    """Serve until told to stop, or orphaned; drain on the way out."""
    loop = asyncio.get_running_loop()
    host, port = split_listen(spec["listen"])
    sock = bind_listener(host, port, "model proxy")
    link = Link(loop, float(spec.get("orphan", ORPHAN)), spec["listen"])
    state = DrainState()
    upstream = Origin.of_url(spec["upstream"], spec.get("ca_file")) if spec.get("upstream") else None
    front = Front(loop, upstream=upstream, full=None, interceptor=link, recorder=link,
                  max_body=int(spec["max_body"]), allowed_hosts=tuple(spec.get("allowed_hosts", ())),
                  draining=state)
    link.front = front
    path = spec["link"]
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    old = os.umask(0o177)
    try:
        link_server = await asyncio.start_unix_server(link.handle, path)
    finally:
        os.umask(old)
    server = await loop.create_server(front.protocol, sock=sock, backlog=2048)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, link.done.set)
    link.alone()
    print(f"serving {spec['listen']} {os.getpid()}", flush=True)  # the daemon waits for this line
    sys.stdout.close()
    await link.done.wait()
    log.info("the model proxy stops: no daemon for %.0f s, or told to", link.orphan)
    link_server.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    await drain([server], front.connections, state, bound=float(spec.get("drain", DRAIN)),
                idle_close=IDLE_CLOSE)
    server.close()
    front.close()


def main(argv: list[str] | None = None) -> int:
    """Run the proxy process; exit 3 when its address is taken."""
    from canary.errors import UnavailableError

    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s model proxy: %(message)s")
    spec = json.loads(args[0])
    try:
        asyncio.run(serve(spec))
    except UnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
