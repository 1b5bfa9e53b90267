"""The daemon's session: the runs' ``Session``, adopting the servers that started first."""

from __future__ import annotations

from typing import Any

from canary.config.settings import Config
from canary.daemon.first import FirstServers
from canary.proxy.serving import Served
from canary.runs.session import Session
from canary.store.engine import Store


class DaemonSession(Session):
    """A ``Session`` whose proxy and fixture server may already serve (``canary.daemon.first``).

    The running servers serve the registry of the store's attribution, and the session takes
    their counts as its own: canary runs script that proxy, and its failures reach them.
    """

    def __init__(self, config: Config, store: Store, first: FirstServers, **kwargs: Any) -> None:
        super().__init__(config, store, **kwargs)
        if first.registry is not self.registry:
            raise ValueError("the first servers serve another registry than the store's attribution")
        self._first = first
        self.counts = first.counts
        first.counts.on_failure = self._upstream_failed

    def _server(self, app: Any, listen: str, allow_remote: bool, name: str, key: str) -> Served:
        running = self._first.proxy if key.startswith("[model]") else self._first.fixtures
        if running is not None:
            return running  # ``app`` was built for it and is not needed
        return super()._server(app, listen, allow_remote, name, key)
