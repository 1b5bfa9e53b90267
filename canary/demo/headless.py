"""``canary demo --headless`` and ``--sample-audit``: the demo run once, with no screen."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from canary.config.settings import load_config
from canary.demo.live import start_demo
from canary.demo.sample import write_demo
from canary.logs.audit import AuditReport, audit
from canary.runs.record import RunRecord


@dataclass(frozen=True)
class DemoRuns:
    """What one headless demo did: where its agent and proxy listened, and every run's result."""

    agent_url: str
    proxy_url: str
    results: list[RunRecord]


def run_every_canary(directory: Path, *, started: Callable[[str, str, int], None] | None = None,
                     dialect: str = "chat") -> DemoRuns:
    """Start the demo agent and its model, run every canary once, stop everything."""
    running = start_demo(directory, dialect=dialect)
    try:
        agent_url = running.config.agent.url if running.config.agent and running.config.agent.url else "?"
        proxy_url = running.session.proxy.url if running.session.proxy else "?"
        pairs = [(g, c) for g in running.config.guards for c in g.canaries]
        if started is not None:
            started(agent_url, proxy_url, len(pairs))
        assert running.session.runner is not None
        results = running.session.runner.run_many(pairs)
    finally:
        running.stop()
    return DemoRuns(agent_url, proxy_url, results)


def sample_audit(directory: Path) -> tuple[Path, AuditReport]:
    """Write the bundled sample logs and their config into ``directory``, and audit them."""
    config_path = write_demo(directory)
    return config_path, audit(load_config(str(config_path)), now=datetime.now(UTC))
