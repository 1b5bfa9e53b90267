"""The proxy and fixture server, serving the service manager's sockets before the rest of the daemon loads.

Under socket activation the kernel queues the agent's connections while the daemon starts, so
what an agent waits for across a restart is the new daemon's start-up. This module imports only
what the two servers need (no store, no collectors, no scheduler: those are most of the
daemon's import time) and starts them on the inherited sockets; the daemon then loads the rest
and adopts the running servers (``canary.daemon.session``). A daemon started by hand, with no
sockets handed over, binds its servers later, once it holds the store's lock.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from canary.config.commandline import command_line
from canary.config.settings import Config
from canary.errors import UnavailableError
from canary.proxy.app import ProxyApp, create_proxy
from canary.proxy.fixtures import create_fixture_server
from canary.proxy.health import ProxyCounts
from canary.proxy.server import ProxyServer
from canary.proxy.serving import BackgroundServer, Served, format_listen, is_loopback, listen_names
from canary.runs.failures import RelayedFailures
from canary.runs.registry import Registry

log = logging.getLogger("canary.daemon.first")


@dataclass
class FirstServers:
    """What serves before the daemon's other parts exist: the registry, the counts, the servers."""

    registry: Registry
    counts: ProxyCounts
    proxy: Served | None = None
    fixtures: Served | None = None
    started: list[Served] = field(default_factory=list)

    def stop(self) -> None:
        """Stop what started (when the daemon cannot go on)."""
        for server in self.started:
            server.stop()
        self.started.clear()


#: Who held the sockets before this daemon: a service manager, or the daemon that handed them over.
MANAGER = "a socket the service manager holds"
HANDED = "a socket the previous daemon handed over"


def _start(
    app: object, sock: socket.socket, allow_remote: bool, name: str, *, drain: float, held: str,
    registry: Registry,
) -> Served:
    host = str(sock.getsockname()[0])
    if not allow_remote and not is_loopback(host):
        raise UnavailableError(f"the {name} may only listen on loopback, not {host}")
    server: Served
    if isinstance(app, ProxyApp):
        server = ProxyServer(app, host, 0, name=name, sock=sock, drain=drain,
                             asgi=RelayedFailures(app, registry, app.upstream)).start()
    else:
        server = BackgroundServer(app, host, 0, name=name, sock=sock, drain=drain).start()
    log.info("the %s serves on %s, %s", name, server.url, held)
    return server


def serve_first(
    config: Config, listeners: Mapping[str, socket.socket], registry: Registry, *, drain: float,
    held: str = MANAGER,
) -> FirstServers:
    """Start the proxy and the fixture server, over ``registry``'s runs in flight, on the sockets in
    ``listeners`` ("proxy", "fixtures"); ``held`` says where they came from, for the log."""
    first = FirstServers(registry, ProxyCounts())
    model, fixtures = config.model, config.fixtures
    try:
        sock = listeners.get("proxy")
        if sock is not None:
            proxy = create_proxy(model.upstream, first.registry, max_body=model.max_body,
                                 allowed_hosts=listen_names(model.listen), recorder=first.counts,
                                 ca_file=model.ca_file)
            first.proxy = _start(proxy, sock, model.allow_remote, "model proxy", drain=drain, held=held,
                                 registry=first.registry)
            first.started.append(first.proxy)
        sock = listeners.get("fixtures")
        if sock is not None:
            pages = create_fixture_server(first.registry, allowed_hosts=listen_names(fixtures.listen))
            first.fixtures = _start(pages, sock, fixtures.allow_remote, "fixture server",
                                    drain=drain, held=held, registry=first.registry)
            first.started.append(first.fixtures)
    except BaseException:
        first.stop()
        raise
    return first


def check_listeners(config: Config, listeners: Mapping[str, socket.socket], *, managed: bool = True) -> None:
    """Log each socket held for the daemon, warning where canary.toml names another address
    (``managed``: held by a service manager, else handed over by the previous daemon)."""
    configured = {"proxy": config.model.listen, "fixtures": config.fixtures.listen}
    for name, sock in listeners.items():
        host, port = sock.getsockname()[:2]
        held = format_listen(str(host), int(port))
        log.info("serving the %s on %s, %s", name, held, MANAGER if managed else HANDED)
        if not managed and held != configured.get(name):
            log.warning(
                "the %s goes on serving on %s, handed over by the previous daemon, but canary.toml "
                "says %s; stop and start the daemon to move it", name, held, configured.get(name),
            )
        elif held != configured.get(name):
            log.warning(
                "the service manager holds the %s on %s, but canary.toml says %s; "
                "run `%s` again to move it", name, held, configured.get(name),
                command_line("canary service install", config.path),
            )
