"""The model proxy as a process of its own: linked to the daemon, and serving through its restarts and crashes."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from canary.config.settings import load_config
from canary.demo.live import free_port
from canary.demo.model import create_model_server
from canary.proxy.app import create_proxy
from canary.proxy.health import ProxyCounts
from canary.proxy.serving import BackgroundServer
from canary.runs.inflight import ActiveRun
from canary.runs.registry import Registry
from canary.runs.values import new_nonce
from tests.helpers_processes import PROXY_LINE, terminate

CHAT = "/v1/chat/completions"
BODY = b'{"model":"m","messages":[{"role":"user","content":"what is the minimum?"}]}'


def _config(root: Path, upstream: str) -> Path:
    path = root / "canary.toml"
    path.write_text(f"""defs = []
[model]
listen = "127.0.0.1:{free_port()}"
upstream = "{upstream}"
[fixtures]
listen = "127.0.0.1:{free_port()}"
[daemon]
control = "127.0.0.1:{free_port()}"
[store]
url = "sqlite:///{root / 'canary.db'}"
[alerts]
desktop = false
""")
    return path


@pytest.fixture
def model() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_model_server(), name="model") as server:
        yield server


@pytest.mark.slow
def test_the_proxy_process_screens_by_the_daemons_live_nonces(tmp_path: Path, model: BackgroundServer) -> None:
    from canary.runs.proxylink import DetachedProxy

    config = load_config(path=_config(tmp_path, model.url))
    registry = Registry(has_upstream=True)
    counts = ProxyCounts()
    app = create_proxy(model.url, registry, recorder=counts)
    detached = DetachedProxy(config, app, registry, counts).start()
    pid = detached.pid
    try:
        nonce = new_nonce()
        now = time.time()
        registry.add(ActiveRun(1, "citation", nonce, "first", "SCRIPTED https://fake.example.org", None, "page",
                               started=now, deadline=now + 600))
        with httpx.Client(base_url=detached.url, trust_env=False, timeout=10) as client:
            organic = client.post(CHAT, content=BODY)
            canary = client.post(CHAT, content=BODY.replace(b"minimum", nonce.encode()))
        assert organic.status_code == 200 and "SCRIPTED" not in organic.text
        assert canary.status_code == 200 and "SCRIPTED" in canary.text
        deadline = time.monotonic() + 5
        while registry.active()[0].foreign_calls < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert registry.active()[0].foreign_calls == 1  # told by the proxy process
        assert counts.snapshot().requests["ok"] >= 1
    finally:
        detached.stop()
        terminate(pid)


@pytest.mark.slow
def test_a_call_that_names_the_runs_conversation_takes_the_full_path_through_the_process(
    tmp_path: Path, model: BackgroundServer,
) -> None:
    """A later turn's call carries the conversation id, not the nonce: the process must know that needle too."""
    from canary.runs.proxylink import DetachedProxy

    config = load_config(path=_config(tmp_path, model.url))
    registry = Registry(has_upstream=True)
    counts = ProxyCounts()
    detached = DetachedProxy(config, create_proxy(model.url, registry, recorder=counts), registry, counts).start()
    pid = detached.pid
    try:
        nonce, conversation = new_nonce(), "conv-7f3a9c2e41"
        now = time.time()
        registry.add(ActiveRun(1, "citation", nonce, "first", "SCRIPTED https://fake.example.org", None, "page",
                               started=now, deadline=now + 600))
        registry.converse(nonce, conversation)
        with httpx.Client(base_url=detached.url, trust_env=False, timeout=10) as client:
            later = client.post(CHAT, content=BODY.replace(b"minimum", conversation.encode()))
        assert later.status_code == 200 and "SCRIPTED" in later.text
    finally:
        detached.stop()
        terminate(pid)


class Agent:
    """An agent sending a chat completion every 20 ms on a keep-alive connection, never retrying."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.results: list[tuple[float, str]] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(trust_env=False, timeout=30) as client:
            while not self.stopped.is_set():
                at = time.time()
                try:
                    status = client.post(self.url + CHAT, content=BODY).status_code
                    self.results.append((at, "ok" if status == 200 else f"HTTP {status}"))
                except httpx.ConnectError as exc:
                    self.results.append((at, f"refused: {exc}"))
                except httpx.HTTPError as exc:
                    self.results.append((at, f"failed: {type(exc).__name__} {exc}"))
                time.sleep(0.02)


def _daemon(config: Path, err: Path) -> subprocess.Popen[bytes]:
    with open(err, "ab") as stream:
        return subprocess.Popen(
            [sys.executable, "-m", "canary.cli.main", "--config", str(config), "daemon", "--tick", "1"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stream,
        )


def _wait_up(proc: subprocess.Popen[bytes], err: Path, count: int) -> str:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        text = err.read_text(errors="replace")
        if text.count("daemon up") >= count:
            return text
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited:\n{text}")
        time.sleep(0.05)
    raise AssertionError(f"the daemon did not come up:\n{err.read_text(errors='replace')}")


@pytest.mark.slow
def test_no_agent_request_fails_while_the_daemon_is_killed_and_restarted(
    tmp_path: Path, model: BackgroundServer,
) -> None:
    config = _config(tmp_path, model.url)
    err = tmp_path / "daemon.err"
    proc = _daemon(config, err)
    listen = load_config(path=config).model.listen
    agent = Agent(f"http://{listen}")
    pid = None
    try:
        text = _wait_up(proc, err, 1)
        found = PROXY_LINE.search(text)
        assert found, text
        pid = int(found.group(1))
        agent.thread.start()
        for round_, sig in enumerate([signal.SIGKILL, signal.SIGTERM, signal.SIGKILL], start=2):
            time.sleep(1.0)
            proc.send_signal(sig)
            proc.wait(60)
            proc = _daemon(config, err)
            _wait_up(proc, err, round_)
        time.sleep(1.0)
    finally:
        agent.stopped.set()
        if agent.thread.is_alive():
            agent.thread.join(30)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        terminate(pid)
    text = err.read_text(errors="replace")
    assert text.count("is already running; linking to it") == 3, text
    bad = [r for r in agent.results if r[1] != "ok"]
    assert len(agent.results) > 100
    assert bad == [], bad[:5]


@pytest.mark.slow
def test_a_daemon_whose_listen_changed_replaces_the_proxy_process(tmp_path: Path, model: BackgroundServer) -> None:
    from canary.runs.proxylink import DetachedProxy

    path = _config(tmp_path, model.url)
    pids: list[int | None] = []
    try:
        for _ in range(2):  # the second daemon's canary.toml names another [model] listen
            config = load_config(path=path)
            registry, counts = Registry(has_upstream=True), ProxyCounts()
            detached = DetachedProxy(config, create_proxy(model.url, registry, recorder=counts),
                                     registry, counts).start()
            pids.append(detached.pid)
            with httpx.Client(trust_env=False, timeout=10) as client:
                assert client.post(detached.url + CHAT, content=BODY).status_code == 200
            detached.stop()
            text = path.read_text()
            old = config.model.listen
            path.write_text(text.replace(old, f"127.0.0.1:{free_port()}"))
        assert pids[0] is not None and pids[1] is not None and pids[0] != pids[1]
    finally:
        for pid in pids:
            terminate(pid)


@pytest.mark.slow
def test_a_session_links_to_the_proxy_process_left_running(tmp_path: Path, model: BackgroundServer) -> None:
    from canary.runs.proxylink import DetachedProxy
    from canary.runs.session import Session, open_store

    config = load_config(path=_config(tmp_path, model.url))
    registry, counts = Registry(has_upstream=True), ProxyCounts()
    first = DetachedProxy(config, create_proxy(model.url, registry, recorder=counts), registry, counts).start()
    first.stop()  # the daemon is gone; its proxy process goes on serving
    store = open_store(config)
    try:
        session = Session(config, store).start()  # as `canary run` without a daemon: no port taken
        try:
            assert isinstance(session.proxy, DetachedProxy) and session.proxy.pid is None
            with httpx.Client(trust_env=False, timeout=10) as client:
                assert client.post(session.proxy.url + CHAT, content=BODY).status_code == 200
        finally:
            session.stop()
    finally:
        store.close()
        terminate(first.pid)


@pytest.mark.slow
def test_a_daemon_whose_max_body_changed_sets_it_on_the_proxy_left_running(
    tmp_path: Path, model: BackgroundServer,
) -> None:
    """The proxy process outlives the daemon; the next daemon's [model] max_body holds from its link on."""
    from canary.runs.proxylink import DetachedProxy

    path = _config(tmp_path, model.url)
    path.write_text(path.read_text().replace("[model]\n", "[model]\nmax_body = 100000\n"))
    big = BODY.replace(b"minimum", b"x" * 5000)
    pids: list[int | None] = []
    statuses = []
    try:
        for limit in (100000, 2000, 100000):
            path.write_text(re.sub(r"max_body = \d+", f"max_body = {limit}", path.read_text()))
            config = load_config(path=path)
            registry, counts = Registry(has_upstream=True), ProxyCounts()
            detached = DetachedProxy(config, create_proxy(model.url, registry, recorder=counts,
                                                          max_body=config.model.max_body),
                                     registry, counts).start()
            pids.append(detached.pid)
            with httpx.Client(trust_env=False, timeout=10) as client:
                statuses.append(client.post(detached.url + CHAT, content=big).status_code)
            detached.stop()
        assert pids[0] is not None and pids[1:] == [None, None]  # one process, linked to three times
        assert statuses == [200, 413, 200]
    finally:
        for pid in pids:
            terminate(pid)
