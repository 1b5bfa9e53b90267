"""Which proxy a webhook alert goes through: none unless ``[alerts] webhook_proxy`` says so, whatever
HTTP_PROXY holds; the environment's with ``"env"``; a named one with its URL. Real sockets on loopback:
a webhook receiver, and a forward proxy that records the request line it was given."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.alerts import channels
from canary.alerts.channels import AlertPayload
from canary.cli.main import main
from canary.errors import DeliveryError
from tests.cli.test_alerts_cmd import Receiver, write


class RecordingProxy:
    """A forward proxy that never forwards: it keeps each request line and answers 204."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.lines.append(data.split(b"\r\n", 1)[0].decode("latin-1"))
                conn.sendall(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


@pytest.fixture
def proxy() -> Iterator[RecordingProxy]:
    recording = RecordingProxy()
    yield recording
    recording.close()


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Receiver, str]]:
    from canary.proxy.serving import BackgroundServer

    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    receiver = Receiver()
    with BackgroundServer(receiver.app, name="webhook receiver") as server:
        yield receiver, f"{server.url}/hook/s3cret"


def test_a_webhook_goes_direct_whatever_http_proxy_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxy: RecordingProxy, hook: tuple[Receiver, str]
) -> None:
    receiver, url = hook
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("http_proxy", proxy.url)
    write(tmp_path, f"desktop = false\nwebhook = '{url}'")
    result = CliRunner().invoke(main, ["alerts", "test"])
    assert result.exit_code == 0, result.output
    assert proxy.lines == [] and len(receiver.bodies) == 1


def test_webhook_proxy_env_takes_the_environments_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxy: RecordingProxy, hook: tuple[Receiver, str]
) -> None:
    receiver, url = hook
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("http_proxy", proxy.url)
    write(tmp_path, f"desktop = false\nwebhook = '{url}'\nwebhook_proxy = 'env'")
    result = CliRunner().invoke(main, ["alerts", "test"])
    assert result.exit_code == 0, result.output
    assert proxy.lines == [f"POST {url} HTTP/1.1"] and receiver.bodies == []


def test_webhook_proxy_url_names_the_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxy: RecordingProxy, hook: tuple[Receiver, str]
) -> None:
    receiver, url = hook
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
    write(tmp_path, f"desktop = false\nwebhook = '{url}'\nwebhook_proxy = '{proxy.url}'")
    result = CliRunner().invoke(main, ["alerts", "test"])
    assert result.exit_code == 0, result.output
    assert proxy.lines == [f"POST {url} HTTP/1.1"] and receiver.bodies == []


def test_a_webhook_proxy_that_is_neither_env_nor_a_url_is_a_config_error(tmp_path: Path) -> None:
    write(tmp_path, "desktop = false\nwebhook = 'https://hooks.example.org/x'\nwebhook_proxy = 'corp:3128'")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 2, result.output
    assert "alerts.webhook_proxy" in result.stderr and "corp:3128" in result.stderr


def test_a_failed_direct_webhook_names_the_proxy_it_did_not_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxy: RecordingProxy, hook: tuple[Receiver, str]
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    write(tmp_path, f"desktop = false\nwebhook = 'http://127.0.0.1:{port}/hook'")
    result = CliRunner().invoke(main, ["alerts", "test"])
    assert result.exit_code == 3, result.output
    assert 'HTTP_PROXY is set, but webhooks go direct unless [alerts] webhook_proxy = "env"' in result.stdout


@pytest.mark.parametrize("url", ["http://[::1/hooks/s3cretTOKEN", "http://127.0.0.1:99999/hooks/s3cretTOKEN"])
def test_a_webhook_url_that_cannot_be_used_is_a_delivery_error_that_keeps_its_path_secret(url: str) -> None:
    with pytest.raises(DeliveryError) as caught:
        channels.webhook(_PAYLOAD, url, timeout=2)
    assert "s3cretTOKEN" not in str(caught.value)


_PAYLOAD: AlertPayload = {"guard": "citation", "status": "asleep", "previous": "alive", "reason": "r",
                          "since": "2026-12-01T00:00:00Z", "evidence": None, "kind": "change", "text": "t"}
