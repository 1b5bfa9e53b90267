"""An https upstream: verified against a CA given by ``ca_file``, with SNI and keep-alive; a
certificate the proxy cannot verify is refused with an error naming ``[model] upstream`` and
``[model] ca_file``.

The upstream is uvicorn serving TLS on loopback with a certificate from a test CA (trustme); the
agent is the real ``anthropic`` SDK.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
import trustme
import uvicorn

from canary.proxy.health import ProxyCounts
from tests.proxy.model_apis import UPSTREAM_TEXT, ModelAPIs
from tests.proxy.test_proxy import serve_proxy


class TLSServer:
    """uvicorn with TLS on a loopback port, recording the SNI name each handshake sent."""

    def __init__(self, app: Any, cert: trustme.LeafCert, tmp: Path) -> None:
        self.sni: list[str | None] = []
        key, chain = tmp / "key.pem", tmp / "chain.pem"
        cert.private_key_pem.write_to_path(str(key))
        cert.cert_chain_pems[0].write_to_path(str(chain))
        for extra in cert.cert_chain_pems[1:]:
            with chain.open("ab") as f:
                f.write(extra.bytes())
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", ssl_keyfile=str(key), ssl_certfile=str(chain),
                                lifespan="off")
        self.server = uvicorn.Server(config)
        original = config.load

        def load() -> None:
            original()
            assert config.ssl is not None
            config.ssl.sni_callback = lambda s, name, ctx: self.sni.append(name)  # type: ignore[assignment,misc]

        config.load = load  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> TLSServer:
        self.thread.start()
        while not self.server.started:
            self.thread.join(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def _ask(proxy: str) -> anthropic.types.Message:
    with anthropic.Anthropic(base_url=proxy, api_key="sk-ant-test", max_retries=0) as client:
        return client.messages.create(model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}])


def test_an_https_upstream_verified_with_ca_file(ca: trustme.CA, ca_file: str, tmp_path: Path) -> None:
    fake = ModelAPIs()
    with TLSServer(fake.app(), ca.issue_cert("localhost"), tmp_path) as server, \
            serve_proxy(f"https://localhost:{server.port}", ca_file=ca_file) as proxy:
        first, second = _ask(proxy.url), _ask(proxy.url)
    assert first.content[0].text == second.content[0].text == UPSTREAM_TEXT  # type: ignore[union-attr]
    assert server.sni == ["localhost"]  # one handshake, with the name: the connection was kept alive
    assert fake.seen[0].peer == fake.seen[1].peer


@pytest.mark.parametrize(("name", "with_ca", "why"), [
    ("localhost", False, "unable to get local issuer certificate"),  # a CA the system does not know
    ("other.example", True, "Hostname mismatch"),  # signed, but for another host
])
def test_a_certificate_it_cannot_verify_is_refused_clearly(
    ca: trustme.CA, ca_file: str, tmp_path: Path, name: str, with_ca: bool, why: str
) -> None:
    fake = ModelAPIs()
    failures: list[str] = []
    health = ProxyCounts(lambda outcome, predicate, body: failures.append(predicate))
    with TLSServer(fake.app(), ca.issue_cert(name), tmp_path) as server, \
            serve_proxy(f"https://localhost:{server.port}", ca_file=ca_file if with_ca else None,
                        recorder=health) as proxy, \
            pytest.raises(anthropic.APIStatusError) as raised:
        _ask(proxy.url)
    assert raised.value.status_code == 502 and fake.seen == []
    message = raised.value.message
    assert "TLS certificate" in message and why in message, message
    assert "[model] upstream" in message and "[model] ca_file" in message
    assert failures and "TLS certificate that was refused" in failures[0]  # what `canary status` tells
    # and a run's reason: the setting to change, in a sentence whose brackets close
    assert "[model] ca_file" in failures[0] and failures[0].count("(") == failures[0].count(")"), failures[0]


def test_a_refusal_known_only_by_its_text_is_told_without_the_ssl_module_s_source_line() -> None:
    from canary.proxy.upstream import certificate_refused

    wrapped = httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get "
                                 "local issuer certificate (_ssl.c:1006)")
    assert certificate_refused(wrapped) == "unable to get local issuer certificate"
    assert certificate_refused(httpx.ConnectError("All connection attempts failed")) is None
