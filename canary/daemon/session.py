"""The daemon's session: the runs' ``Session``, adopting the servers that started first."""

from __future__ import annotations

from typing import Any

from canary.config.settings import Config
from canary.daemon.first import FirstServers
from canary.daemon.proxylink import DetachedProxy
from canary.errors import UnavailableError
from canary.proxy.app import ProxyApp
from canary.proxy.serving import Served, is_loopback, split_listen
from canary.runs.holders import naming_the_key
from canary.runs.session import Session
from canary.store.engine import Store


class DaemonSession(Session):
    """A ``Session`` whose proxy and fixture server may already serve (``canary.daemon.first``).

    The running servers serve the registry of the store's attribution, and the session takes
    their counts as its own: canary runs script that proxy, and its failures reach them.
    """

    def __init__(self, config: Config, store: Store, first: FirstServers, *, detached_proxy: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(config, store, **kwargs)
        self._detached = detached_proxy
        if first.registry is not self.registry:
            raise ValueError("the first servers serve another registry than the store's attribution")
        self._first = first
        self.counts = first.counts
        first.counts.on_failure = self._upstream_failed

    def _server(self, app: Any, listen: str, allow_remote: bool, name: str, key: str) -> Served:
        running = self._first.proxy if key.startswith("[model]") else self._first.fixtures
        if running is not None:
            return running  # ``app`` was built for it and is not needed
        if self._detached and isinstance(app, ProxyApp):
            host, port = split_listen(listen)
            if not allow_remote and not is_loopback(host):
                raise UnavailableError(f"the {name} may only listen on loopback, not {host}")
            with naming_the_key(key, port, self.store.path):
                return DetachedProxy(self.config, app, self.registry, self.counts).start()
        return super()._server(app, listen, allow_remote, name, key)
