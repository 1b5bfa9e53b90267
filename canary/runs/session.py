"""Everything a canary run needs, started together: proxy, fixture server, collectors, runner.

With a ``[traces]`` table, the OTLP receiver serves too, so spans fire guards during a run.
``canary run`` starts a session when no daemon is running; the demo starts one
on free loopback ports. The collectors read a log seen for the first time back over the
window, as the daemon's do (the position they store is the daemon's too, so whoever sees
a log first, its history is counted once), and that first read is committed before any
run is put in flight. They commit every firing to a store built with the attribution of
the session's runs in flight (``open_store``), so canary firings are stored with their runs.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any

from canary.config.settings import Config
from canary.errors import UnavailableError
from canary.logs.collect import Collection, ErrorSink
from canary.proxy.app import ProxyApp, create_proxy
from canary.proxy.fixtures import create_fixture_server
from canary.proxy.health import ProxyCounts
from canary.proxy.server import ProxyServer
from canary.proxy.serving import BackgroundServer, Served, is_loopback, listen_names, split_listen
from canary.runs.attribution import Attribution
from canary.runs.failures import RelayedFailures, model_server
from canary.runs.holders import naming_the_key
from canary.runs.proxylink import DetachedProxy, proxy_running
from canary.runs.runner import DEFAULT_GRACE, DEFAULT_SPAN_GRACE, Runner
from canary.store.engine import Store

#: Seconds a session waits for its collectors' first read before it runs anything.
FIRST_READ = 60.0


def open_store(config: Config, attribution: Attribution | None = None) -> Store:
    """The configured store, built with the attribution of the runs a session puts in flight."""
    return Store.of(config, attribution=attribution or Attribution.of(config))


def attribution_of(store: Store) -> Attribution:
    """The attribution a store was built with, for a session over it."""
    if not isinstance(store.attribution, Attribution):
        raise TypeError("a session needs a store built with its runs' attribution (open_store)")
    return store.attribution


class Session:
    """Proxy, fixtures, live collectors and a runner over one store (built by ``open_store``)."""

    def __init__(
        self,
        config: Config,
        store: Store,
        *,
        on_error: ErrorSink | None = None,
        on_resolved: ErrorSink | None = None,
        grace: float = DEFAULT_GRACE,
        span_grace: float = DEFAULT_SPAN_GRACE,
        rescan: float = 1.0,
        start_at_end: bool = False,
        listeners: Mapping[str, socket.socket] | None = None,
        drain: float = 0.0,
        detached_proxy: bool = False,
    ) -> None:
        self.config = config
        self.store = store
        # Serve the proxy from a process of its own (``canary.runs.proxylink``), starting one if none
        # runs; without it, one already running for this project is still linked to, never fought.
        self._detached = detached_proxy
        self.attribution = attribution_of(store)
        self.registry = self.attribution.runs
        self._on_error, self._on_resolved = on_error, on_resolved
        self._grace = grace
        self._span_grace = span_grace
        self._rescan = rescan
        self._start_at_end = start_at_end
        # Sockets the service manager holds ("proxy", "fixtures"), used instead of binding.
        self._listeners = dict(listeners or {})
        self._drain = drain
        # What the proxy saw of the model server; a failure during a run is told to that run.
        self.counts = ProxyCounts(on_failure=self._upstream_failed)
        self.proxy: Served | None = None
        self.fixtures: Served | None = None
        self.collection: Collection | None = None
        self.traces: BackgroundServer | None = None  # the OTLP receiver of [traces], if configured
        self.runner: Runner | None = None

    def _server(self, app: Any, listen: str, allow_remote: bool, name: str, key: str) -> Served:
        host, port = split_listen(listen)
        sock = self._listeners.get("proxy" if key.startswith("[model]") else "fixtures")
        if sock is not None:
            host = str(sock.getsockname()[0])
        if not allow_remote and not is_loopback(host):
            raise UnavailableError(f"the {name} may only listen on loopback, not {host}")
        with naming_the_key(key, port, self.store.path):
            if isinstance(app, ProxyApp) and sock is None and (self._detached or proxy_running(self.config)):
                return DetachedProxy(self.config, app, self.registry, self.counts).start()
            if isinstance(app, ProxyApp):
                return ProxyServer(app, host, port, name=name, sock=sock, drain=self._drain,
                                   asgi=RelayedFailures(app, self.registry, app.upstream)).start()
            return BackgroundServer(app, host, port, name=name, sock=sock, drain=self._drain).start()

    def start(self) -> Session:
        """Start the servers and the collectors; stop whatever started if one part fails."""
        try:
            model, fixtures = self.config.model, self.config.fixtures
            self.proxy = self._server(
                create_proxy(model.upstream, self.registry, max_body=model.max_body,
                             allowed_hosts=listen_names(model.listen), recorder=self.counts,
                             ca_file=model.ca_file),
                model.listen, model.allow_remote, "model proxy", "[model] listen",
            )
            self.fixtures = self._server(
                create_fixture_server(self.registry, allowed_hosts=listen_names(fixtures.listen)),
                fixtures.listen, fixtures.allow_remote, "fixture server", "[fixtures] listen",
            )
            self.collection = Collection(
                self.config, self.store, on_error=self._on_error, on_resolved=self._on_resolved,
                rescan=self._rescan, start_at_end=self._start_at_end,
            )
            self.collection.start()
            # What the logs hold already (the window read back on first sight) is committed
            # before a run is in flight, so none of it is offered to a run as its own.
            self.collection.follower.sync(FIRST_READ)
            if self.config.traces is not None:
                from canary.traces.service import start_receiver

                with naming_the_key("[traces] listen", split_listen(self.config.traces.listen)[1],
                                    self.store.path):
                    self.traces = start_receiver(self.config, self.store, drain=self._drain)
            if self.config.agent is not None:
                self.runner = Runner(
                    self.config, self.store, self.registry, self.fixtures.url,
                    sync=self.sync, grace=self._grace, span_grace=self._span_grace,
                )
        except BaseException:
            self.stop()
            raise
        return self

    def _upstream_failed(self, outcome: str, predicate: str, body: bytes) -> None:
        self.registry.upstream_failed(body, f"{model_server(self.config.model.upstream)} {predicate}")

    def sync(self, timeout: float = 10.0) -> bool:
        """Wait until the collectors committed what the logs hold now."""
        collection = self.collection
        return collection.follower.sync(timeout) if collection is not None else False

    def replace_collection(self, config: Config, *, before: Callable[[], object]) -> None:
        """Follow the logs with new definitions: the old collectors read to the end and stop,
        ``before`` runs, then new ones go on from the stored positions."""
        old = self.collection
        if old is not None:
            old.stop()
        before()
        self.config = config
        self.collection = Collection(
            config, self.store, on_error=self._on_error, on_resolved=self._on_resolved,
            rescan=self._rescan, start_at_end=False,
        )
        self.collection.start()
        if self.traces is not None:
            from canary.traces.matching import SignalRules

            self.traces.app.rules = SignalRules(config.guards)

    def stop(self) -> None:
        """Stop collectors (after a last read) and servers."""
        if self.collection is not None:
            self.collection.stop()
            self.collection = None
        for server in (self.traces, self.fixtures, self.proxy):
            if server is not None:
                server.stop()
        if self.traces is not None:
            self.traces.app.close()  # the firings it was given are stored before it stops
        self.traces = self.fixtures = self.proxy = None

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
