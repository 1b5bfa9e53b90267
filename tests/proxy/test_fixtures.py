"""The fixture server: only GET records a fetch, and only loopback or listen Hosts are answered."""

from __future__ import annotations

import httpx
import pytest

from canary.proxy.fixtures import create_fixture_server
from canary.proxy.serving import BackgroundServer, host_allowed, listen_names
from canary.runs.inflight import ActiveRun
from canary.runs.registry import Registry

NONCE = "abcdefghijklmnopqrst"


def _run() -> ActiveRun:
    return ActiveRun(run_id=1, guard="g", nonce=NONCE, inject_at="after-fetch", inject_text="x",
                     repair_text=None, page="<p>the page</p>", started=0.0, deadline=1e12)


def test_a_head_is_answered_but_only_a_get_counts_as_the_fetch() -> None:
    registry = Registry(has_upstream=True)
    run = _run()
    registry.add(run)
    with BackgroundServer(create_fixture_server(registry)) as fixtures, httpx.Client(trust_env=False) as http:
        head = http.head(f"{fixtures.url}/r/{NONCE}")
        assert head.status_code == 200 and head.content == b""
        assert run.fetched is None
        assert http.head(f"{fixtures.url}/r/zzzzzzzzzzzzzzzzzzzz").status_code == 404
        page = http.get(f"{fixtures.url}/r/{NONCE}")
        assert page.status_code == 200 and page.text == "<p>the page</p>"
        assert run.fetched is not None


@pytest.mark.parametrize("host", ["evil.example", "evil.example:11436", "127.0.0.1.nip.io"])
def test_a_foreign_host_is_refused_and_not_recorded(host: str) -> None:
    registry = Registry(has_upstream=True)
    run = _run()
    registry.add(run)
    with BackgroundServer(create_fixture_server(registry)) as fixtures, httpx.Client(trust_env=False) as http:
        r = http.get(f"{fixtures.url}/r/{NONCE}", headers={"host": host})
    assert r.status_code == 403 and "the page" not in r.text
    assert run.fetched is None


@pytest.mark.parametrize("host", ["localhost:{port}", "[::1]:{port}", "127.0.0.1", "box.lan:{port}"])
def test_loopback_and_listen_names_get_the_page(host: str) -> None:
    registry = Registry(has_upstream=True)
    registry.add(_run())
    app = create_fixture_server(registry, allowed_hosts=["box.lan"])
    with BackgroundServer(app) as fixtures, httpx.Client(trust_env=False) as http:
        r = http.get(f"{fixtures.url}/r/{NONCE}", headers={"host": host.format(port=fixtures.port)})
    assert r.status_code == 200 and r.text == "<p>the page</p>"


@pytest.mark.parametrize(("listen", "host", "allowed"), [
    ("127.0.0.1:11436", "evil.example", False),
    ("box.lan:11436", "box.lan:11436", True),
    ("box.lan:11436", "evil.example", False),
    ("0.0.0.0:11436", "host.docker.internal:11436", True),  # every address: allow_remote was set
    ("[::]:11436", "box.lan", True),
])
def test_listen_names_decide_which_hosts_are_answered(listen: str, host: str, allowed: bool) -> None:
    assert host_allowed(host, listen_names(listen)) is allowed
    assert host_allowed("127.0.0.1", listen_names(listen))
    assert not host_allowed("", listen_names(listen))
