"""The model proxy process of a daemon started by hand, and a session's link to it.

A daemon no service manager runs serves the agent's model address from a process of its own
(``canary.proxy.standalone``), so the daemon can restart, reload or crash while the agent's
calls go on. The daemon finds the running proxy by its link socket in the project's state
folder, or starts it (in a session of its own, logging to ``<project>-proxy.log`` beside the
daemon's log); it then serves the full path (the ASGI app, on a loopback port) and tells the
proxy where, and which nonces are live, before each run's prompt is sent. The proxy's notes
(calls relayed without a live nonce, the model server's answers and failures) go to the
registry and the counts, as if the daemon had relayed them itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from canary.config.settings import Config
from canary.errors import UnavailableError
from canary.locations import private_dir, project_log
from canary.proxy.app import ProxyApp
from canary.proxy.health import ProxyCounts
from canary.proxy.serving import BackgroundServer, listen_names
from canary.runs.failures import RelayedFailures
from canary.runs.registry import Registry

__all__ = ["DetachedProxy", "link_path", "proxy_running"]

log = logging.getLogger("canary.daemon.proxylink")

#: Seconds to wait for a proxy process to serve, and for it to acknowledge new nonces.
START_WAIT = 15.0
ACK_WAIT = 2.0
_UNIX_PATH_MAX = 100
_LAUNCH = "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True)"


def link_path(config: Config) -> Path:
    """The link socket of the project's proxy: in its state folder, or, where that path is too long
    for a Unix socket, in an owner-only folder of the temporary directory."""
    folder = private_dir(config.state_folder)
    path = folder / "proxy.sock"
    if len(os.fsencode(path)) <= _UNIX_PATH_MAX:
        return path
    short = Path(tempfile.gettempdir()) / f"canary-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    info = short.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise UnavailableError(f"{short} is not a folder of yours that only you can open; remove it")
    return short / (hashlib.sha256(os.fsencode(folder)).hexdigest()[:20] + ".sock")


def proxy_running(config: Config) -> bool:
    """Whether a proxy process of this project answers on its link."""
    path = link_path(config)
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(os.fspath(path))
        except OSError:
            return False
    return True


class DetachedProxy:
    """The proxy process seen from the daemon: the ``BackgroundServer`` interface, and the link."""

    def __init__(self, config: Config, app: ProxyApp, registry: Registry, counts: ProxyCounts) -> None:
        self.config = config
        self.app = app
        self.registry = registry
        self.counts = counts
        self.path = link_path(config)
        self.listener: socket.socket | None = None  # the proxy's socket is its own, never handed over
        self.inner: BackgroundServer | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._acked = threading.Condition()
        self._seq = 0
        self._ack = 0
        self._stopped = threading.Event()
        self._reader: threading.Thread | None = None
        self.pid: int | None = None  # the proxy process this daemon started, if it started one

    @property
    def url(self) -> str:
        """The agent's model base URL: the proxy's address."""
        return f"http://{self.config.model.listen}"

    def start(self) -> DetachedProxy:
        """Serve the full path, then link to the running proxy or start one."""
        full = RelayedFailures(self.app, self.registry, self.app.upstream)
        self.inner = BackgroundServer(full, "127.0.0.1", 0, name="model proxy (full path)").start()
        try:
            self._link()
        except BaseException:
            self.inner.stop()
            raise
        self.registry.on_change = self._nonces
        self._reader = threading.Thread(target=self._read, name="canary-proxy-link", daemon=True)
        self._reader.start()
        return self

    def _link(self) -> None:
        sock = self._connect()
        if sock is not None and self._serves(sock) != self.config.model.listen:
            sock = None
        if sock is None:
            self._spawn()
            sock = self._connect()
            if sock is None:
                raise UnavailableError(f"the model proxy started but its link {self.path} does not answer")
        else:
            log.info("the model proxy on %s is already running; linking to it", self.config.model.listen)
        self._sock = sock
        self._hello()

    def _connect(self) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(os.fspath(self.path))
        except OSError:
            sock.close()
            return None
        return sock

    def _serves(self, sock: socket.socket) -> str | None:
        """The address the linked proxy serves; one serving another than [model] listen is told to stop."""
        listen = None
        try:
            sock.settimeout(START_WAIT)
            sock.sendall(b'{"seq": 0}\n')
            stream = sock.makefile("rb")
            for line in stream:  # notes may come first
                message = json.loads(line)
                if "ack" in message:
                    listen = message.get("listen")
                    break
            stream.close()
            sock.settimeout(None)
        except (OSError, ValueError):
            pass
        if listen == self.config.model.listen:
            return str(listen)
        log.warning("the model proxy running serves %s, not [model] listen %s; starting one there",
                    listen, self.config.model.listen)
        with contextlib.suppress(OSError):
            sock.sendall(b'{"stop": true}\n')
        sock.close()
        deadline = time.monotonic() + START_WAIT
        while os.path.exists(self.path) and time.monotonic() < deadline:
            time.sleep(0.05)  # it lets its link go before it drains
        return None

    def _spawn(self) -> None:
        model = self.config.model
        spec = {"listen": model.listen, "upstream": model.upstream, "ca_file": model.ca_file,
                "max_body": model.max_body, "allowed_hosts": list(listen_names(model.listen)),
                "link": os.fspath(self.path)}
        logfile = project_log(self.config.path, self.config.project)
        logfile = logfile.with_name(logfile.stem + "-proxy.log")
        private_dir(logfile.parent)
        with open(logfile, "ab") as err:
            os.chmod(logfile, 0o600)
            # Started through a launcher that exits at once, so the proxy is no child of this daemon
            # (nothing to reap, and a daemon killed leaves no zombie behind).
            launcher = subprocess.Popen(
                [sys.executable, "-c", _LAUNCH, sys.executable, "-m", "canary.proxy.standalone",
                 json.dumps(spec)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
            )
        assert launcher.stdout is not None
        with launcher.stdout:
            line = launcher.stdout.readline()  # "serving ADDRESS PID" once it listens; nothing if it exits
        launcher.wait(START_WAIT)
        if not line.startswith(b"serving"):
            tail = logfile.read_text(errors="replace").strip().splitlines()[-1:] or [""]
            raise UnavailableError(f"the model proxy did not start on {model.listen} ([model] listen): "
                                   f"{tail[0].removeprefix('error: ')}")
        self.pid = int(line.split()[-1])
        log.info("the model proxy serves on %s (pid %d), a process of its own", model.listen, self.pid)

    def _hello(self) -> None:
        assert self.inner is not None
        model = self.config.model
        self._send({"full": f"{self.inner.host}:{self.inner.port}", "upstream": model.upstream,
                    "ca_file": model.ca_file, "max_body": model.max_body,
                    "nonces": [r.nonce for r in self.registry.active()]})

    def _send(self, message: dict[str, Any]) -> int:
        with self._lock:
            self._seq += 1
            message["seq"] = self._seq
            sock = self._sock
            if sock is None:
                return self._seq
            try:
                sock.sendall(json.dumps(message).encode() + b"\n")
            except OSError:
                log.warning("the link to the model proxy broke; relinking")
            return self._seq

    def _nonces(self, nonces: list[str]) -> None:
        """The runs in flight changed: tell the proxy, and wait until it knows (before the prompt goes)."""
        seq = self._send({"nonces": nonces})
        deadline = time.monotonic() + ACK_WAIT
        with self._acked:
            while self._ack < seq and time.monotonic() < deadline:
                self._acked.wait(deadline - time.monotonic())

    def _read(self) -> None:
        pause = 0.2
        while not self._stopped.is_set():
            sock = self._sock
            if sock is not None:
                self._drain_lines(sock)
            if self._stopped.is_set():
                return
            time.sleep(pause)
            try:
                with self._lock:
                    self._sock = None
                self._link()
                pause = 0.2
            except (OSError, UnavailableError) as exc:
                log.warning("the model proxy could not be linked again: %s", exc)
                pause = min(pause * 2, 5.0)

    def _drain_lines(self, sock: socket.socket) -> None:
        buffer = b""
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line:
                    self._heard(json.loads(line))

    def _heard(self, message: dict[str, Any]) -> None:
        if message.get("replaced"):
            log.info("another daemon linked to the model proxy; this one no longer takes its calls")
            self._stopped.set()
        if "ack" in message:
            with self._acked:
                self._ack = max(self._ack, int(message["ack"]))
                self._acked.notify_all()
        notes = message.get("notes")
        if notes and self.inner is not None and self.inner.loop is not None:
            # The counts are kept by one thread: the full path's loop.
            self.inner.loop.call_soon_threadsafe(self._apply, notes)

    def _apply(self, notes: list[list[Any]]) -> None:
        for kind, value in notes:
            try:
                if kind == "passed":
                    self.registry.passed(value)
                elif kind == "answered":
                    self.counts.answered(int(value[0]), float(value[1]))
                elif kind == "failed":
                    self.counts.failed(str(value[0]), str(value[1]), b"")
                elif kind == "counted":
                    self.counts.counted(str(value))
            except Exception:
                log.exception("a note from the model proxy could not be counted")

    def stop(self, timeout: float = 5.0) -> None:
        """Unlink (the proxy goes on relaying alone) and stop the full path."""
        self._stopped.set()
        self.registry.on_change = None
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the reader
            sock.close()
        if self.inner is not None:
            self.inner.stop(timeout)
            self.inner = None
