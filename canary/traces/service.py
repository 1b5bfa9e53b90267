"""The trace receiver served over a store: the firings of the config's guards are stored in it."""

from __future__ import annotations

from collections.abc import Sequence

from canary.config.settings import Config
from canary.proxy.serving import BackgroundServer, is_loopback, listen_names, split_listen
from canary.store.engine import Store
from canary.store.signals import SignalHit, commit_signals
from canary.traces.matching import SignalRules
from canary.traces.receiver import Receiver, ReceiverCounts, create_receiver

__all__ = ["Receiver", "ReceiverCounts", "receiver_app", "start_receiver"]


def receiver_app(config: Config, store: Store, counts: ReceiverCounts | None = None) -> Receiver:
    """The receiver of ``[traces]``, storing the firings of the config's guards in ``store``."""
    assert config.traces is not None

    def commit(hits: Sequence[SignalHit]) -> int:
        return commit_signals(store, hits, skew=config.logs.clock_skew)

    return create_receiver(SignalRules(config.guards), commit, max_body=config.traces.max_body,
                           allowed_hosts=listen_names(config.traces.listen), counts=counts)


def start_receiver(config: Config, store: Store, *, drain: float = 0.0) -> BackgroundServer:
    """Serve the receiver on ``[traces] listen``; an UnavailableError when it cannot listen there."""
    from canary.errors import UnavailableError

    assert config.traces is not None
    host, port = split_listen(config.traces.listen)
    if not config.traces.allow_remote and not is_loopback(host):
        raise UnavailableError(f"the trace receiver may only listen on loopback, not {host}")
    app = receiver_app(config, store)
    server = BackgroundServer(app, host, port, name="trace receiver", drain=drain).start()
    app.counts.listen = server.url.removeprefix("http://")
    return server
