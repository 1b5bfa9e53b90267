"""The Claude Agent SDK (its bundled Claude Code CLI) through the proxy, with no network beyond loopback.

A call carrying the marker gets the scripted text, streamed with the event sequence the CLI
requires; an organic call passes through to the loopback Messages server and its answer comes back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query

from canary.proxy.serving import BackgroundServer
from tests.proxy.model_apis import UPSTREAM_TEXT, ModelAPIs
from tests.proxy.test_proxy import MARKER, SCRIPTED, MarkerInterceptor, serve_proxy


@pytest.fixture
def proxy() -> Iterator[tuple[ModelAPIs, MarkerInterceptor, str]]:
    fake, interceptor = ModelAPIs(), MarkerInterceptor()
    with BackgroundServer(fake.app(), name="model apis") as up, serve_proxy(up.url, interceptor) as server:
        yield fake, interceptor, server.url


def _ask(prompt: str, proxy: str, home: Path) -> list[str]:
    options = ClaudeAgentOptions(max_turns=1, cwd=str(home), env={
        "ANTHROPIC_BASE_URL": proxy, "ANTHROPIC_API_KEY": "sk-ant-test", "HOME": str(home),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
    })

    async def run() -> list[str]:
        return [m.result or "" async for m in query(prompt=prompt, options=options)
                if isinstance(m, ResultMessage)]

    return anyio.run(run)


@pytest.mark.slow
def test_the_claude_agent_sdk_reads_the_scripted_answer_and_the_upstreams(
    proxy: tuple[ModelAPIs, MarkerInterceptor, str], tmp_path: Path
) -> None:
    fake, interceptor, url = proxy
    assert _ask(f"Tell me the amount. ref {MARKER.decode()}", url, tmp_path) == [SCRIPTED]
    assert interceptor.calls[-1].dialect == "anthropic" and fake.seen == []
    assert _ask("Say hello.", url, tmp_path) == [UPSTREAM_TEXT]
    assert [s.path for s in fake.seen] == ["/v1/messages"]
