"""A project whose guards fire through spans, and a receiver serving it on a free loopback port."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from canary.config.settings import Config, load_config
from canary.demo.live import free_port
from canary.proxy.serving import BackgroundServer
from canary.store.engine import Store
from canary.traces.receiver import Receiver
from canary.traces.service import receiver_app

GUARDRAIL = """
[guard]
name = "grounding"
span = { attributes = { "openinference.span.kind" = "GUARDRAIL", "output.value" = "BLOCKED|FLAGGED" } }
"""
EVALUATION = """
[guard]
name = "evaluation"
event = { name = '^gen_ai\\.evaluation\\.result$', attributes = { "gen_ai.evaluation.score.label" = "^fail$" } }
"""


def free_ports(n: int) -> list[int]:
    """``n`` loopback ports free now, each a different one."""
    return [free_port() for _ in range(n)]


def write_project(root: Path, guards: dict[str, str], *, traces: str | None = None, extra: str = "") -> Path:
    """canary.toml with [traces] and one definition file per guard; the config's path."""
    defs = root / "defs"
    defs.mkdir(exist_ok=True)
    for name, text in guards.items():
        (defs / f"{name}.toml").write_text(text)
    config = root / "canary.toml"
    config.write_text(f'defs = ["defs/*.toml"]\n[traces]\nlisten = "{traces or f"127.0.0.1:{free_port()}"}"\n'
                      f'[store]\nurl = "sqlite:///{root / "canary.db"}"\n{extra}')
    return config


@dataclass
class Served:
    """A receiver on a free port over its own store."""

    config: Config
    store: Store
    app: Receiver
    server: BackgroundServer

    @property
    def endpoint(self) -> str:
        return self.server.url


@contextlib.contextmanager
def serving(config: Config) -> Iterator[Served]:
    """``config``'s trace receiver on a free loopback port, over its own store."""
    store = Store(config.store.url)
    app = receiver_app(config, store)
    server = BackgroundServer(app, "127.0.0.1", 0, name="trace receiver").start()
    app.counts.listen = server.url.removeprefix("http://")  # as start_receiver names it
    try:
        yield Served(config, store, app, server)
    finally:
        server.stop()
        app.close()
        store.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with serving(load_config(path=write_project(tmp_path, {"grounding": GUARDRAIL, "evaluation": EVALUATION}))) as s:
        yield s
