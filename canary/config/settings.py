"""``canary.toml``: where it is found and how it is loaded (``canary.config.summary`` describes it).

Loading is strict: unknown keys, wrong types and unusable values in the config
and in every definition file are collected and raised together as one
:class:`~canary.errors.ConfigError`; warnings are kept in :attr:`Config.warnings`.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Literal

from canary import locations
from canary.config.agent import AgentConfig, check_conversations, read_agent
from canary.config.definitions import GuardDef, absolute_glob, load_definitions
from canary.config.logs import check_correlate
from canary.config.placeholders import ALERT_PLACEHOLDERS
from canary.config.schema import Fields, Section
from canary.config.sections import ALERTS, CONFIG, DAEMON, FIXTURES, LOGS, MODEL, STORE, TRACES
from canary.config.tomlcheck import (
    KeyPath,
    Sink,
    check_matcher,
    check_placeholders,
    compile_regex,
    dotted,
    is_http_url,
    load_toml,
    locate,
)
from canary.config.urls import redact_url, store_url
from canary.errors import ConfigError, Problem
from canary.records import field, frozen, replace

__all__ = [
    "AgentConfig",
    "AlertsConfig",
    "Config",
    "DaemonConfig",
    "FixturesConfig",
    "LogsConfig",
    "ModelConfig",
    "StoreConfig",
    "TracesConfig",
    "find_config",
    "load_config",
]

# Patterns of values only some configs write, as text: ``re`` compiles each when one is written.
_ENV_NAME = r"env:[A-Za-z_][A-Za-z0-9_]*"
_DB_URL = r"[A-Za-z][A-Za-z0-9_]*(\+[A-Za-z0-9_]+)?://.*"


@frozen
class ModelConfig:
    """The interposition proxy: where it listens and the real model server behind it."""

    listen: str = MODEL.defaults.listen
    upstream: str | None = MODEL.defaults.upstream
    allow_remote: bool = MODEL.defaults.allow_remote
    max_body: int = MODEL.defaults.max_body
    ca_file: str | None = MODEL.defaults.ca_file  # extra CAs (PEM) for an https upstream


@frozen
class FixturesConfig:
    """The server of fixture pages."""

    listen: str = FIXTURES.defaults.listen
    allow_remote: bool = FIXTURES.defaults.allow_remote


@frozen
class TracesConfig:
    """The OTLP/HTTP receiver of the agent's traces and logs."""

    listen: str = TRACES.defaults.listen
    allow_remote: bool = TRACES.defaults.allow_remote
    max_body: int = TRACES.defaults.max_body


@frozen
class LogsConfig:
    """The agent's log files (absolute globs) and how to read their lines."""

    paths: tuple[str, ...] = LOGS.defaults.paths
    format: Literal["text", "jsonl"] = LOGS.defaults.format
    activity: str | dict[str, object] | None = LOGS.defaults.activity
    activity_pattern: re.Pattern[str] | None = None
    correlate: str | None = LOGS.defaults.correlate
    correlate_pattern: re.Pattern[str] | None = None
    timestamp: str = LOGS.defaults.timestamp
    timestamp_format: str | None = LOGS.defaults.timestamp_format
    clock_skew: timedelta = LOGS.defaults.clock_skew


@frozen
class StoreConfig:
    """Where runs, firings and statuses are kept (any SQLAlchemy URL)."""

    url: str = field(default_factory=locations.default_store_url)
    retention: timedelta = STORE.defaults.retention
    machine: str | None = STORE.defaults.machine  # None: this host's name


@frozen
class AlertsConfig:
    """Alert channels; ``webhook`` may be ``env:VAR``, resolved when an alert is sent."""

    desktop: bool = ALERTS.defaults.desktop
    webhook: str | None = ALERTS.defaults.webhook
    webhook_proxy: str | None = ALERTS.defaults.webhook_proxy  # None: direct; "env"; a proxy URL
    command: tuple[str, ...] | None = ALERTS.defaults.command
    repeat: timedelta = ALERTS.defaults.repeat
    #: ``desktop`` was written in canary.toml, not only defaulted (a missing notifier warns only then).
    desktop_set: bool = field(default=False, compare=False)
    #: Where ``command`` runs: canary.toml's folder, so a path in it reads as the config's others do.
    folder: Path | None = field(default=None, compare=False)


@frozen
class DaemonConfig:
    """The daemon's control API address, and the variables its service carries."""

    control: str = DAEMON.defaults.control
    allow_remote: bool = DAEMON.defaults.allow_remote
    pass_env: tuple[str, ...] = ()


@frozen
class Config:
    """A loaded, valid configuration with its guards and any warnings."""

    path: Path | None = None
    defs: tuple[str, ...] = CONFIG.defaults.defs
    project: str = locations.DEFAULT_PROJECT
    agent: AgentConfig | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    fixtures: FixturesConfig = field(default_factory=FixturesConfig)
    traces: TracesConfig | None = None  # None: no [traces] table, nothing is received
    logs: LogsConfig = field(default_factory=LogsConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    guards: tuple[GuardDef, ...] = ()
    warnings: tuple[Problem, ...] = ()
    #: Errors in definition files whose guards were left out (only with ``load_config(keep_going=True)``).
    broken: tuple[Problem, ...] = ()

    @property
    def state_folder(self) -> Path:
        """The project's state folder (``locations.project_dir``); the state directory without a file."""
        if self.path is None:
            return locations.state_dir()
        return locations.project_dir(self.path, self.project)


def find_config(explicit: str | None) -> Path | None:
    """The config file to use: --config, $CANARY_CONFIG, ./canary.toml, the platform dir.

    A path named by --config or $CANARY_CONFIG that is not a file is a ConfigError;
    None means no config file exists in the default places.
    """
    candidates = locations.config_candidates(explicit)
    first, source = candidates[0]
    if source == "--config" or source.startswith("$"):
        if not first.is_file():
            state = "is a directory" if first.is_dir() else "does not exist"
            raise ConfigError([Problem(first, "", f"{source} names {first}, which {state}")])
        return first.absolute()
    return next((path.absolute() for path, _ in candidates if path.is_file()), None)


def load_config(explicit: str | None = None, *, path: Path | None = None, keep_going: bool = False) -> Config:
    """Load the config and every definition it names; raise ConfigError with every problem.

    With ``keep_going``, errors inside definition files leave those guards out and are kept in
    ``Config.broken`` instead (``canary status`` shows the running daemon's status beside them);
    an error in canary.toml itself is raised all the same.
    """
    if path is None:
        path = find_config(explicit)
    if path is None:
        looked = " and ".join(str(p) for p, _ in locations.config_candidates(None))
        raise ConfigError([Problem(None, "", f"no canary.toml found (looked at {looked}); "
                                   "run `canary init` to write one from your agent's logs, "
                                   "or pass --config PATH")])
    path = path.absolute()
    data, sink = load_toml(path)
    if data is None:
        raise ConfigError(sink.problems)
    top = CONFIG.open(sink, (), data)
    defs = top.read("defs")
    project = _project(top, path)
    agent = read_agent(top)
    model_t, fixtures_t, daemon_t = (_section(top, section) for section in (MODEL, FIXTURES, DAEMON))
    model = ModelConfig(**model_t.read_all())
    model = replace(model, ca_file=_ca_file(model_t, model.ca_file, path.parent))
    fixtures = FixturesConfig(**fixtures_t.read_all())
    daemon = DaemonConfig(control=daemon_t.read("control", default=_project_control(path, model, fixtures)),
                          allow_remote=daemon_t.read("allow_remote"), pass_env=_pass_env(daemon_t))
    traces_t = top.table("traces")
    traces = (TracesConfig(**TRACES.open(sink, ("traces",), traces_t).read_all())
              if traces_t is not None else None)
    _distinct_ports(sink, [(("model", "listen"), model.listen),
                           (("fixtures", "listen"), fixtures.listen),
                           *([(("traces", "listen"), traces.listen)] if traces is not None else []),
                           (("daemon", "control"), daemon.control)])
    logs = _logs(_section(top, LOGS), path.parent)
    store = _store(_section(top, STORE), path, project)
    alerts = _alerts(_section(top, ALERTS), path.parent)

    guards, def_problems = load_definitions(defs, path.parent, log_format=logs.format)
    _unreceived(sink, traces, guards)
    check_conversations(sink, agent, [(c.key, c.path, c.inject_turn) for g in guards for c in g.canaries
                                      if c.multi_turn], has_upstream=bool(model.upstream))
    problems = sink.problems + _placed(def_problems, sink, path)
    broken = _broken(problems, path) if keep_going else []
    if any(p.severity == "error" and p not in broken for p in problems):
        raise ConfigError(problems)
    return Config(path=path, defs=tuple(defs), project=project, agent=agent, model=model, fixtures=fixtures,
                  traces=traces, logs=logs, store=store, alerts=alerts, daemon=daemon, guards=tuple(guards),
                  warnings=tuple(p for p in problems if p.severity == "warning"), broken=tuple(broken))


def _placed(def_problems: list[Problem], sink: Sink, config_path: Path) -> list[Problem]:
    """The definitions' problems, those of no file of their own placed on canary.toml's ``defs`` line."""
    if all(p.path is not None for p in def_problems):
        return def_problems  # nothing to place: the config's text is not searched
    line = locate(sink.text, ("defs",))
    return [replace(p, path=config_path, line=line) if p.path is None else p for p in def_problems]


def _broken(problems: list[Problem], config_path: Path) -> list[Problem]:
    """The errors inside definition files (not canary.toml itself): their guards can be left out."""
    return [p for p in problems if p.severity == "error" and p.path not in (None, config_path)]


def _unreceived(sink: Sink, traces: TracesConfig | None, guards: list[GuardDef]) -> None:
    """A guard that fires only through spans, with no [traces] table to receive them, is never seen."""
    if traces is not None:
        return
    for guard in guards:
        if guard.signals:
            sink.warning(("traces",), f"the guard {guard.name!r} ({guard.path.name}) matches spans "
                         "or events, but there is no [traces] table, so nothing receives them: "
                         "add [traces] with listen = \"127.0.0.1:4318\"")


def _ca_file(t: Fields, value: str | None, base: Path) -> str | None:
    """``ca_file`` as an absolute path (``~`` expanded, relative to the config), checked to hold CAs."""
    if value is None:
        return None
    import ssl  # only a config with ca_file pays for it (``canary status`` reads none)

    path = Path(value).expanduser()
    path = path if path.is_absolute() else base / path

    try:
        ssl.create_default_context().load_verify_locations(cafile=str(path))
    except FileNotFoundError:
        t.sink.error((*t.keys, "ca_file"), f"no such file: {str(path)!r}")
    except (OSError, ssl.SSLError, ValueError) as exc:
        t.sink.error((*t.keys, "ca_file"), f"{str(path)!r} holds no CA certificate the proxy can read "
                     f"(PEM expected): {exc}")
    return str(path)


def _section(top: Fields, section: Section) -> Fields:
    """The ``[name]`` table (empty when absent or not a table) with its keys checked."""
    return section.open(top.sink, (section.header,), top.table(section.header) or {})


def _distinct_ports(sink: Sink, listeners: list[tuple[KeyPath, str]]) -> None:
    """Two of our listeners on one port would fail at startup; say so now."""
    owners: dict[str, KeyPath] = {}
    for keys, address in listeners:
        port = address.rpartition(":")[2]
        if port in owners:
            sink.error(keys, f"port {port} is also used by {dotted(owners[port])}")
        owners.setdefault(port, keys)


def _logs(t: Fields, base: Path) -> LogsConfig:
    sink, keys = t.sink, t.keys
    paths = t.read("paths")
    fmt = t.read("format")
    if fmt not in ("text", "jsonl"):
        sink.error((*keys, "format"), f"expected 'text' or 'jsonl', got {fmt!r}",
                   suggestion=t.closest(fmt, ("text", "jsonl")))
    log_format: Literal["text", "jsonl"] = "jsonl" if fmt == "jsonl" else "text"
    activity, activity_pattern = None, None
    if t.has("activity"):
        activity, activity_pattern = check_matcher(sink, (*keys, "activity"), t.get("activity"),
                                                   log_format)
    correlate, correlate_pattern = check_correlate(t, log_format)
    timestamp = t.read("timestamp")
    if timestamp != "auto":
        timestamp_pattern = compile_regex(sink, (*keys, "timestamp"), timestamp)
        if timestamp_pattern is not None and "ts" not in timestamp_pattern.groupindex:
            sink.error((*keys, "timestamp"), "expected 'auto' or a regex with a group named ts, "
                       r"like '^(?P<ts>\S+ \S+)'; this one has no (?P<ts>...) group")
    timestamp_format = t.read("timestamp_format")
    if timestamp_format is not None:
        if timestamp == "auto":
            sink.error((*keys, "timestamp_format"), "timestamp_format only applies with a "
                       "timestamp regex; with timestamp = 'auto' the format is detected")
        elif "%" not in timestamp_format:
            sink.error((*keys, "timestamp_format"), "expected a strptime format like "
                       f"'%Y-%m-%d %H:%M:%S', got {timestamp_format!r}")
    return LogsConfig(paths=tuple(absolute_glob(p, base) for p in paths), format=log_format,
                      activity=activity, activity_pattern=activity_pattern, correlate=correlate,
                      correlate_pattern=correlate_pattern, timestamp=timestamp,
                      timestamp_format=timestamp_format, clock_skew=t.read("clock_skew"))


def _project_control(path: Path, model: ModelConfig, fixtures: FixturesConfig) -> str:
    """The project's own control address, moved off a port its proxy or fixtures already use."""
    address = locations.project_control(path)
    taken = {model.listen.rpartition(":")[2], fixtures.listen.rpartition(":")[2]}
    host, _, port = address.rpartition(":")
    while port in taken:
        port = str(locations.PROJECT_PORTS.start + (int(port) + 1 - locations.PROJECT_PORTS.start)
                   % len(locations.PROJECT_PORTS))
    return f"{host}:{port}"


def _project(top: Fields, path: Path) -> str:
    """The project's name: written, else its folder's name made into one."""
    name = top.read("project")
    if name is None:
        return locations.default_project(path)
    if not locations.PROJECT_NAME.fullmatch(name):
        top.sink.error(("project",), "expected a name of a-z, 0-9, '_' and '-' that starts with a "
                       f"letter or a digit, at most 40 characters, like 'my-agent'; got {name!r}",
                       suggestion=locations.as_project_name(name) or None)
        return locations.default_project(path)
    return str(name)


_MACHINE = r"[a-z0-9][a-z0-9._-]{0,62}"  # canary.store.sites.MACHINE_NAME


_VARIABLE = r"[A-Za-z_][A-Za-z0-9_]*"


def _pass_env(t: Fields) -> tuple[str, ...]:
    names = tuple(t.read("pass_env") or ())
    for i, name in enumerate(names):
        if not re.fullmatch(_VARIABLE, name):
            t.sink.error((*t.keys, "pass_env", i), f"expected an environment variable's name (letters, "
                         f"digits and '_', not first a digit), got {name!r}")
    return tuple(n for n in names if re.fullmatch(_VARIABLE, n))


def _from_folder(url: str, folder: Path) -> str:
    """A SQLite URL whose file is named relative (``sqlite:///canary.db``), made to name it in ``folder``
    (canary.toml's); any other URL as it is (an absolute or ``~`` path, an in-memory store, a server)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        return url
    database, mark, query = url[len(prefix):].partition("?")
    if not database or database == ":memory:" or database.startswith(("/", "~")):
        return url
    return f"{prefix}{(folder.absolute() / database).as_posix()}{mark}{query}"


def _store(t: Fields, config_path: Path, project: str) -> StoreConfig:
    url = t.read("url")
    retention = t.read("retention")
    machine = t.read("machine")
    if machine is not None and not re.fullmatch(_MACHINE, machine):
        t.sink.error((*t.keys, "machine"), "expected a name of a-z, 0-9, '.', '_' and '-' that starts "
                     f"with a letter or a digit, at most 63 characters, like 'ci-runner'; got {machine!r}")
        machine = None
    if url is None:
        return StoreConfig(url=locations.project_store_url(config_path, project), retention=retention,
                           machine=machine)
    if not re.fullmatch(_DB_URL, url):
        t.sink.error((*t.keys, "url"), "expected a database URL like 'sqlite:////path/to/"
                     f"canary.db', got {redact_url(url)!r}")
    else:
        url = _store_driver(t, url)
    url = _from_folder(url, config_path.parent)
    return StoreConfig(url=url, retention=retention, machine=machine)


def _store_driver(t: Fields, url: str) -> str:
    """``url`` as the store reads it (``canary.config.urls.store_url``); an error naming the key for a
    database or driver it cannot use."""
    read, problem = store_url(url)
    if problem is not None:
        t.sink.error((*t.keys, "url"), problem)
    return read


def _alerts(t: Fields, folder: Path) -> AlertsConfig:
    sink, keys = t.sink, t.keys
    webhook = t.read("webhook")
    if webhook is not None and not (re.fullmatch(_ENV_NAME, webhook) or is_http_url(webhook)):
        sink.error((*keys, "webhook"), "expected an http(s) URL or env:VAR (to read it from the "
                   f"environment), got {webhook!r}")
    proxy = t.read("webhook_proxy")
    if proxy is not None and proxy != "env" and not is_http_url(proxy):
        sink.error((*keys, "webhook_proxy"), "expected \"env\" (the proxy of HTTPS_PROXY / HTTP_PROXY) "
                   f"or an http(s) URL like 'http://proxy.internal:3128', got {redact_url(proxy)!r}")
    command = t.read("command")
    if command is not None and not command:
        sink.error((*keys, "command"), "an empty command: give the program and its arguments")
    for i, arg in enumerate(command or ()):
        check_placeholders(sink, (*keys, "command", i), arg, ALERT_PLACEHOLDERS)
    return AlertsConfig(webhook=webhook, webhook_proxy=proxy, command=command, repeat=t.read("repeat"),
                        desktop=t.read("desktop"), desktop_set=t.has("desktop"), folder=folder)
