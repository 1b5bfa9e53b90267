"""The live demo: the bundled agent, its scripted model, and a session in front of both.

Everything listens on free loopback ports. The agent asks its model through the
proxy, and writes its guard lines to a log the collectors follow.
"""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass
from pathlib import Path

from canary.config.settings import Config, load_config
from canary.demo.agent import create_agent
from canary.demo.model import FABRICATIONS, create_model_server
from canary.locations import bundled_defs_dir
from canary.proxy.serving import BackgroundServer
from canary.runs.session import Session, open_store
from canary.store.engine import Store

#: The demo agent's guards; each has a definition of the same name in canaries_defs/.
DEMO_GUARDS = ("citation", "quote", "number", "denial", "version", "date", "conversation")
#: ``[logs] correlate`` for the demo agent, whose lines carry ``task=t<hex>``.
DEMO_CORRELATE = "task=(?P<id>t[0-9a-f]+)"


#: Ports below the ephemeral ranges (Linux 32768-60999, macOS 49152-65535): no outgoing
#: connection is given one of them between the moment it is chosen and the moment it is bound.
QUIET_PORTS = range(20000, 32768)


_GIVEN: set[int] = set()  # the ports handed out in this process: several are picked before any binds


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now, drawn at random below the ephemeral ranges, and never one
    handed out before in this process."""
    for _ in range(64):
        port = random.choice(QUIET_PORTS)
        if port in _GIVEN:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue  # taken, or reserved: draw another
            _GIVEN.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port = int(sock.getsockname()[1])
    _GIVEN.add(port)
    return port


def write_config(directory: Path, *, agent: int, proxy: int, fixtures: int, model_url: str,
                 correlate: bool = False) -> Path:
    """The demo's canary.toml, pointing at the bundled definitions and the demo's ports."""
    correlate_line = f"correlate = {DEMO_CORRELATE!r}\n" if correlate else ""
    defs = ", ".join(repr((bundled_defs_dir() / f"{name}.toml").as_posix()) for name in DEMO_GUARDS)
    path = directory / "canary.toml"
    path.write_text(
        f"""defs = [{defs}]

[agent]
url = "http://127.0.0.1:{agent}/ask"
body = {{ prompt = "{{prompt}}", conversation = "{{conversation}}" }}
answer = "answer"
conversation = "conversation"
timeout = "60s"

[model]
listen = "127.0.0.1:{proxy}"
upstream = "{model_url}"

[fixtures]
listen = "127.0.0.1:{fixtures}"

[logs]
paths = [{(directory / "agent.log").as_posix()!r}]
activity = 'task finished'
{correlate_line}
[store]
url = {"sqlite:///" + (directory / "canary.db").as_posix()!r}
""",
        encoding="utf-8",
    )
    return path


@dataclass
class Demo:
    """The running demo: its config, store, session and servers."""

    directory: Path
    config: Config
    store: Store
    session: Session
    servers: list[BackgroundServer]

    def stop(self) -> None:
        """Stop everything the demo started."""
        self.session.stop()
        for server in reversed(self.servers):
            server.stop()
        self.store.close()


def start_demo(directory: Path, *, fabricate_every: int = 0, grace: float = 2.0,
               kinds: tuple[str, ...] = FABRICATIONS, terse: bool = False,
               correlate: bool = False, dialect: str = "chat") -> Demo:
    """Start the scripted model, the agent and a session; return them running."""
    directory.mkdir(parents=True, exist_ok=True)
    servers: list[BackgroundServer] = []
    try:
        model = BackgroundServer(create_model_server(fabricate_every=fabricate_every, kinds=kinds),
                                 name="demo model")
        servers.append(model.start())
        proxy, fixtures, agent_port = free_port(), free_port(), free_port()
        log = directory / "agent.log"
        log.touch()
        agent = BackgroundServer(
            create_agent(f"http://127.0.0.1:{proxy}/v1", log, terse=terse, dialect=dialect), "127.0.0.1",
            agent_port,
            name="demo agent",
        )
        servers.append(agent.start())
        path = write_config(directory, agent=agent_port, proxy=proxy, fixtures=fixtures,
                            model_url=model.url, correlate=correlate)
        config = load_config(str(path))
        store = open_store(config)
        session = Session(config, store, grace=grace).start()
    except BaseException:
        for server in reversed(servers):
            server.stop()
        raise
    return Demo(directory, config, store, session, servers)
