"""The dashboard demo's stage: the bundled agent, its scripted models, organic traffic and a daemon.

The demo agent serves a trickle of organic traffic about small local pages,
answered by a model that fabricates every third answer, so the live guards fire
now and then and the sparklines move. The daemon runs every canary every few
minutes: the dead guards turn ASLEEP as their canaries leak, the live ones ALIVE.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import func, select
from sqlmodel import col
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from canary.config.settings import Config, load_config
from canary.daemon.loop import Daemon
from canary.demo.agent import create_agent
from canary.demo.live import free_port, write_config
from canary.demo.model import create_model_server
from canary.demo.receiver import ALERTS_FILE, create_receiver
from canary.errors import UnavailableError
from canary.locations import ENV_STATE_DIR
from canary.proxy.serving import BackgroundServer
from canary.records import replace
from canary.status.overview import daemon_info
from canary.store.engine import Store
from canary.store.tables import Run

__all__ = ["DEMO_EVERY", "DaemonDemo", "Traffic", "daemon_demo", "demo_config"]

#: How often each demo canary runs (the bundled definitions say hours; a demo cannot wait that long).
DEMO_EVERY = timedelta(minutes=2)
#: Seconds between two organic requests to the demo agent.
TRAFFIC_EVERY = 4.0
_LOGGERS = ("canary", "collectors", "uvicorn", "uvicorn.error", "apscheduler")


def _pages_app() -> Starlette:
    """Small pages for the organic traffic: one sentence with a number each."""

    async def page(request: Request) -> HTMLResponse:
        n = int(request.path_params["n"])
        return HTMLResponse(
            f"<html><body><h1>Weekly report {n}</h1>"
            f"<p>The permit office processed {120 + 7 * n} applications in week {n}.</p>"
            f"<p>Most of them were renewals.</p></body></html>"
        )

    return Starlette(routes=[Route("/pages/{n:int}", page)])


class Traffic:
    """A thread that asks the demo agent a question every few seconds, as a user would."""

    def __init__(self, agent_url: str, pages_url: str, store: Store, *, every: float = TRAFFIC_EVERY) -> None:
        self.agent_url = agent_url
        self.pages_url = pages_url
        self.store = store
        self.every = every
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="demo-traffic", daemon=True)

    def start(self) -> Traffic:
        """Start sending."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sending and wait for the request in flight."""
        self._stop.set()
        self._thread.join(30)

    def _canary_in_flight(self) -> bool:
        # A firing without a nonce that lands while a run of its guard is in flight belongs to the run
        # (the contract's attribution rule), so organic traffic waits while canaries run.
        with self.store.engine.connect() as conn:
            in_flight = select(func.count()).select_from(Run).where(col(Run.verdict).is_(None))
            return bool(conn.execute(in_flight).scalar())

    def _loop(self) -> None:
        with httpx.Client(timeout=60, trust_env=False) as client:
            for n in itertools.count(1):
                if self._stop.wait(self.every):
                    return
                if self._canary_in_flight():
                    continue
                prompt = f"Read {self.pages_url}/pages/{n} and tell me how many applications were processed."
                with contextlib.suppress(httpx.HTTPError):
                    client.post(self.agent_url, json={"prompt": prompt})
                    self.sent += 1


def demo_config(config: Config, every: timedelta = DEMO_EVERY) -> Config:
    """The demo's config with every canary running every ``every``."""
    guards = tuple(
        replace(g, canaries=tuple(replace(c, every=every, cron=None) for c in g.canaries))
        for g in config.guards
    )
    return replace(config, guards=guards)


@contextlib.contextmanager
def _demo_environment(directory: Path) -> Iterator[None]:
    """The demo's token and logs live in its directory; its log lines never reach the terminal."""
    previous = os.environ.get(ENV_STATE_DIR)
    os.environ[ENV_STATE_DIR] = str(directory / "state")
    handler = logging.FileHandler(directory / "daemon.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-5s %(name)s %(message)s"))
    saved = {}
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        saved[name] = (logger.handlers, logger.propagate, logger.level)
        logger.handlers, logger.propagate = [handler], False
        if name == "canary":
            logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for name, (handlers, propagate, level) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers, logger.propagate, logger.level = handlers, propagate, level
        handler.close()
        if previous is None:
            os.environ.pop(ENV_STATE_DIR, None)
        else:
            os.environ[ENV_STATE_DIR] = previous


def _wait_for_daemon(store: Store, thread: threading.Thread, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and thread.is_alive():
        if daemon_info(store, now=datetime.now(UTC)).running:
            return True
        time.sleep(0.2)
    return False


@dataclass(frozen=True)
class DaemonDemo:
    """The running demo: its config, and a store the dashboard may read."""

    directory: Path
    config: Config
    store: Store
    traffic: Traffic


@contextlib.contextmanager
def daemon_demo(directory: Path, *, dialect: str = "chat") -> Iterator[DaemonDemo]:
    """Start the demo agent, its models, a daemon and organic traffic; stop them all on exit.

    Raises UnavailableError when the daemon does not come up (its log says why).
    """
    directory.mkdir(parents=True, exist_ok=True)
    servers: list[BackgroundServer] = []
    daemon: Daemon | None = None
    thread: threading.Thread | None = None
    traffic: Traffic | None = None
    store: Store | None = None
    with _demo_environment(directory):
        try:
            model = BackgroundServer(create_model_server(), name="demo model").start()
            servers.append(model)
            sloppy = BackgroundServer(
                create_model_server(fabricate_every=3), name="demo model (organic)"
            ).start()
            servers.append(sloppy)
            pages = BackgroundServer(_pages_app(), name="demo pages").start()
            servers.append(pages)
            proxy, fixtures, agent_port, control = free_port(), free_port(), free_port(), free_port()
            log = directory / "agent.log"
            log.touch()
            agent = BackgroundServer(
                create_agent(f"http://127.0.0.1:{proxy}/v1", log, dialect=dialect), "127.0.0.1", agent_port,
                name="demo agent"
            ).start()
            servers.append(agent)
            # The same agent again, on the same log, for the users: its model fabricates every third
            # answer. Canaries keep an honest model behind the proxy: a fabricated retry inside one
            # canary's task would fire another guard.
            users = BackgroundServer(
                create_agent(f"{sloppy.url}/v1", log), "127.0.0.1", free_port(), name="demo agent (organic)"
            ).start()
            servers.append(users)
            # The alert pipeline sends for real, to a receiver on loopback.
            receiver = BackgroundServer(create_receiver(directory / ALERTS_FILE), name="demo alerts").start()
            servers.append(receiver)
            path = write_config(
                directory, agent=agent_port, proxy=proxy, fixtures=fixtures, model_url=model.url
            )
            with path.open("a", encoding="utf-8") as handle:
                handle.write(f'\n[daemon]\ncontrol = "127.0.0.1:{control}"\n\n[alerts]\ndesktop = false\n'
                             f'webhook = "{receiver.url}/alerts"\n')
            config = demo_config(load_config(str(path)))
            daemon = Daemon(config, tick=1.0, spread=timedelta(seconds=3))
            thread = threading.Thread(target=daemon.run, kwargs={"install_signals": False},
                                      name="demo-daemon", daemon=True)
            thread.start()
            store = Store.of(config)
            if not _wait_for_daemon(store, thread):
                raise UnavailableError(f"the demo daemon did not start; see {directory / 'daemon.log'}")
            traffic = Traffic(f"{users.url}/ask", pages.url, store).start()
            yield DaemonDemo(directory, config, store, traffic)
        finally:
            if traffic is not None:
                traffic.stop()
            if daemon is not None:
                daemon.stop_event.set()
            if thread is not None:
                thread.join(60)
            for server in reversed(servers):
                server.stop()
            if store is not None:
                store.close()
