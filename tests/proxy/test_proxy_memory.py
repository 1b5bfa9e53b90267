"""A 600 MB request body through the proxy process: streamed upstream, so its memory stays flat."""

from __future__ import annotations

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
from canary.proxy.serving import BackgroundServer
server = BackgroundServer(create_proxy(sys.argv[1]), name="proxy").start()
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
