"""A model call carrying no run's nonce that the model server fails is retried by the agent's SDK as
it would be direct: the proxy's answer leaves the choice to the client's own retry policy.

A real loopback model server drops the first connections it takes; the real ``anthropic`` and
``openai`` clients call it direct and through the proxy.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import anthropic
import openai
import pytest

from tests.proxy.test_proxy import MARKER, MarkerInterceptor, serve_proxy

MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
           "content": [{"type": "text", "text": "UPSTREAM ANSWER"}], "stop_reason": "end_turn",
           "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}


class Screening(MarkerInterceptor):
    """Acts only on bodies carrying MARKER, and says so from the body (as the runs' registry does):
    every other call takes the front's byte relay."""

    def live(self, body: bytes) -> bool:
        return MARKER in body

    def passed(self, traceparent: str | None) -> None:
        pass


class DroppingUpstream:
    """Takes a connection, reads its request, and closes it unanswered ``drops`` times; answers the
    rest with an Anthropic message."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.requests = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            while self._read_request(conn):
                self.requests += 1
                if self.requests <= self.drops:
                    return  # closed with no answer: the exchange is broken off
                body = json.dumps(MESSAGE).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%b" % (len(body), body))

    @staticmethod
    def _read_request(conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            body += conn.recv(65536)
        return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def dropping() -> Iterator[DroppingUpstream]:
    upstream = DroppingUpstream(drops=1)
    yield upstream
    upstream.close()


def _ask(base_url: str, retries: int) -> str:
    with anthropic.Anthropic(base_url=base_url, api_key="k", max_retries=retries) as client:
        message = client.messages.create(model="m", max_tokens=5,
                                         messages=[{"role": "user", "content": "no marker here"}])
    block = message.content[0]
    assert isinstance(block, anthropic.types.TextBlock)
    return block.text


@pytest.mark.parametrize("through_proxy", [False, True])
def test_a_dropped_exchange_is_retried_by_the_anthropic_sdk_as_it_is_direct(
    dropping: DroppingUpstream, through_proxy: bool
) -> None:
    if through_proxy:
        with serve_proxy(dropping.url, Screening()) as proxy:
            assert _ask(proxy.url, retries=2) == "UPSTREAM ANSWER"
    else:
        assert _ask(dropping.url, retries=2) == "UPSTREAM ANSWER"
    assert dropping.requests == 2  # the dropped one, and the SDK's retry


@pytest.mark.parametrize("retries", [0, 2])
def test_the_openai_sdk_retries_a_failed_passthrough_call_as_its_own_policy_says(retries: int) -> None:
    upstream = DroppingUpstream(drops=10)
    try:
        with serve_proxy(upstream.url, Screening()) as proxy, openai.OpenAI(
            base_url=f"{proxy.url}/v1", api_key="x", max_retries=retries
        ) as client, pytest.raises(openai.APIStatusError) as raised:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "no marker"}])
    finally:
        upstream.close()
    assert raised.value.status_code == 502 and "broke off" in raised.value.message
    assert "x-should-retry" not in raised.value.response.headers
    assert upstream.requests == 1 + retries


def test_a_refused_passthrough_call_leaves_the_retry_to_the_sdk() -> None:
    from tests.proxy.test_proxy import closed_port_url

    with serve_proxy(closed_port_url(), Screening()) as proxy, openai.OpenAI(
        base_url=f"{proxy.url}/v1", api_key="x", max_retries=0
    ) as client, pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "no marker"}])
    assert raised.value.status_code == 502 and "not reachable" in raised.value.message
    assert "x-should-retry" not in raised.value.response.headers
