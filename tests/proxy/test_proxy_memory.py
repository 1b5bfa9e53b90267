"""The proxy process's memory: a 600 MB body streamed upstream keeps it flat; unfinished model-call
bodies are bounded, and their memory goes back once they are let go."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from canary.proxy.serving import BackgroundServer
from tests.proxy.test_proxy_hardening import Recorder

ROOT = Path(__file__).resolve().parents[2]
SIZE = 600 * 1024 * 1024
CHUNK = 1024 * 1024
SERVE = """
import sys
from canary.proxy.app import create_proxy
from canary.proxy.server import ProxyServer
server = ProxyServer(create_proxy(sys.argv[1]), name="proxy").start()
print(server.port, flush=True)
sys.stdin.read()
"""


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (``ps`` reports KiB on Linux and macOS)."""
    out = subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True, check=True)
    return int(out.stdout.strip()) * 1024


class Sampler(threading.Thread):
    """Samples a process's RSS every 50 ms; ``peak`` is the largest seen."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_bytes(self.pid))
            self.stop.wait(0.05)


@pytest.fixture
def proxy_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, Recorder]]:
    recorder = Recorder()
    with BackgroundServer(recorder, name="upstream") as upstream:
        child = subprocess.Popen([sys.executable, "-c", SERVE, upstream.url], cwd=ROOT, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert child.stdout is not None
            port = int(child.stdout.readline())
            yield child, port, recorder
        finally:
            child.kill()  # SIGKILL: nothing of it may outlive the test
            child.wait(10)
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()


@pytest.mark.slow
def test_a_600_mb_upload_to_a_non_model_path_keeps_the_proxy_flat(
    proxy_process: tuple[subprocess.Popen[str], int, Recorder],
) -> None:
    child, port, _ = proxy_process
    url = f"http://127.0.0.1:{port}/api/blobs/sha256-x"
    with httpx.Client(trust_env=False, timeout=120) as client:
        assert client.post(url, content=b"warm").status_code == 200
        time.sleep(0.2)
        before = rss_bytes(child.pid)
        sampler = Sampler(child.pid)
        sampler.start()
        piece = b"\0" * CHUNK
        started = time.monotonic()
        r = client.post(url, content=(piece for _ in range(SIZE // CHUNK)),
                        headers={"content-length": str(SIZE)})
        elapsed = time.monotonic() - started
        sampler.stop.set()
        sampler.join()
    assert r.status_code == 200 and r.text == f"recorded {SIZE}"
    grown = sampler.peak - before
    print(f"proxy RSS {before / 2**20:.0f} MiB before, peak {sampler.peak / 2**20:.0f} MiB during a "
          f"{SIZE / 2**20:.0f} MiB upload ({elapsed:.1f} s)")
    assert grown < 100 * 2**20, f"the proxy grew by {grown / 2**20:.0f} MiB"


@pytest.mark.slow
def test_unfinished_model_call_bodies_are_bounded_and_their_memory_goes_back(
    proxy_process: tuple[subprocess.Popen[str], int, Recorder],
) -> None:
    child, port, _ = proxy_process
    size = 64 * 1024 * 1024
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {size}\r\n\r\n").encode()
    before = rss_bytes(child.pid)
    sampler = Sampler(child.pid)
    sampler.start()
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(12)]

    def send(sock: socket.socket) -> None:
        piece = b"x" * CHUNK
        try:
            sock.sendall(head)
            for _ in range(size // CHUNK - 4):  # all but the last 4 MiB: never finished
                sock.sendall(piece)
        except OSError:
            pass  # refused once the proxy holds its budget

    senders = [threading.Thread(target=send, args=(sock,), daemon=True) for sock in socks]
    for thread in senders:
        thread.start()
    for thread in senders:
        thread.join(120)
    time.sleep(0.5)
    held = rss_bytes(child.pid)
    for sock in socks:
        sock.close()
    time.sleep(1.0)
    after = rss_bytes(child.pid)
    sampler.stop.set()
    sampler.join()
    print(f"proxy RSS {before / 2**20:.0f} MiB before, {held / 2**20:.0f} MiB holding 12 unfinished "
          f"{size / 2**20:.0f} MiB bodies (peak {sampler.peak / 2**20:.0f}), {after / 2**20:.0f} MiB after")
    assert sampler.peak - before < 400 * 2**20  # the budget (256 MiB) and what reading takes beside it
    assert after - before < 64 * 2**20, "the memory of the bodies was not given back"
