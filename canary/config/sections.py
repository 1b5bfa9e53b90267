"""Every key of ``canary.toml`` and of a definition file: type, default, check and help, in one place.

The readers (:mod:`canary.config.settings`, :mod:`canary.config.agent`,
:mod:`canary.config.definitions`, :mod:`canary.config.injection`) open each table
through its section here and read each key with its declared default; the config
dataclasses take their defaults from here; ``canary init`` writes these keys with
their help; ``docs/configuration.md`` lists them (``uv run python -m canary.config.reference``).
"""

from __future__ import annotations

from canary.config.schema import (
    BOOLEAN,
    DURATION,
    GLOBS,
    HTTP_URL,
    LISTEN,
    SIZE,
    STRING,
    STRINGS,
    TABLE,
    WORD,
    Key,
    Section,
    raw,
)

__all__ = [
    "AGENT",
    "ALERTS",
    "CANARY",
    "CONFIG",
    "DAEMON",
    "DEFINITION",
    "FIXTURES",
    "GUARD",
    "LOGS",
    "MODEL",
    "STORE",
    "TRACES",
    "TURN",
]

_REMOTE = "allow a listen address that is not loopback, reachable from other machines"
_LOOPBACK = "host:port; a non-loopback host needs allow_remote = true; no two listeners share a port"
_NAME = "`[a-z0-9][a-z0-9_-]*`"

# -- canary.toml ---------------------------------------------------------------------------------

AGENT = Section("agent", "How a canary reaches the real agent: an HTTP request (url) or a command. "
                "The prompt must reach the agent: {prompt} in the body, url or headers, or in the "
                "command.", (
    Key("url", STRING, None, "the agent's HTTP endpoint; placeholders are filled in it",
        "an http:// or https:// URL; exactly one of url and command"),
    Key("method", WORD, "POST", "the HTTP method of the request",
        "GET, POST, PUT, PATCH or DELETE, in any case; only with url"),
    Key("body", raw("JSON value"), {"prompt": "{prompt}"},
        "the JSON body; placeholders are filled inside its string values",
        "no dates; known placeholders only; only with url", shown='`{ prompt = "{prompt}" }` with url'),
    Key("headers", TABLE, {}, "HTTP headers of the request; placeholders are filled in them",
        "string values; only with url"),
    Key("answer", STRING, "answer", 'dotted path to the final answer in the JSON reply; "" = the '
        "whole body as text", "only with url"),
    Key("timeout", DURATION, "180s", "the time limit of one request to the agent; a canary's own "
        "timeout replaces it"),
    Key("command", STRINGS, None, "instead of url: the program and its arguments that ask the "
        "agent; its stdout is the answer", "not empty; known placeholders only"),
    Key("conversation", STRING, None, "dotted path to the conversation id in the agent's JSON "
        "reply, for [[canary.turn]] canaries: {conversation} is replaced with it on later turns",
        "not empty; {conversation} must be in the body, url or headers; needed by multi-turn "
        "canaries"),
))

MODEL = Section("model", "The interposition proxy: point the agent's model base URL at listen.", (
    Key("listen", LISTEN, "127.0.0.1:11435", "where the proxy listens; the agent's model base URL "
        "points here", _LOOPBACK),
    Key("upstream", HTTP_URL, None, "the real model server the proxy relays to (https:// for a "
        "hosted API)", "an http:// or https:// URL"),
    Key("allow_remote", BOOLEAN, False, _REMOTE),
    Key("max_body", SIZE, "64 MiB", "the largest model-call body the proxy reads; a larger one "
        "gets 413", "at least one byte: an integer, or a string with B, KB, MB, GB, KiB, MiB or GiB"),
    Key("ca_file", STRING, None, "extra CAs for an https upstream, beside the system's; relative "
        "to this file, ~ expanded", "a PEM file of CA certificates that exists"),
))

FIXTURES = Section("fixtures", "The server of the canaries' fixture pages.", (
    Key("listen", LISTEN, "127.0.0.1:11436", "where the fixture server listens", _LOOPBACK),
    Key("allow_remote", BOOLEAN, False, _REMOTE),
))

LOGS = Section("logs", "The agent's log files and how to read their lines.", (
    Key("paths", GLOBS, [], "globs of the agent's log files, relative to this file (~ expanded); "
        "rotated files may match too"),
    Key("format", WORD, "text", "how each line is read: plain text, or one JSON object per line",
        "'text' or 'jsonl'"),
    Key("activity", raw("regex or table"), None, "lines that mark one unit of agent work",
        "text logs: a regex; jsonl logs: a table of fields that must all be equal"),
    Key("correlate", STRING, None, "where a line names its task or request id, so a run can "
        "claim its own lines", "text logs: a regex with a group named id; jsonl logs: a field name"),
    Key("timestamp", WORD, "auto", "where each line's time is: 'auto' reads ISO 8601, syslog and "
        "common-log stamps and ts/time/timestamp fields", "'auto' or a regex with a group named ts"),
    Key("timestamp_format", STRING, None, "a strptime format for the ts group",
        "contains a % directive; only with a timestamp regex"),
    Key("clock_skew", DURATION, "5m", "a line stamped further ahead than this is counted at the "
        "time it is read"),
))

TRACES = Section("traces", "The receiver of the agent's OpenTelemetry traces and logs (OTLP/HTTP, "
                 "protobuf or JSON): guards with span or event matchers fire from what it receives. "
                 "Without this table nothing is received.", (
    Key("listen", LISTEN, "127.0.0.1:4318", "where the receiver listens; the agent's "
        "OTEL_EXPORTER_OTLP_ENDPOINT (or an OpenTelemetry Collector's otlphttp exporter) points "
        "here", _LOOPBACK),
    Key("allow_remote", BOOLEAN, False, _REMOTE),
    Key("max_body", SIZE, "20 MiB", "the largest export request the receiver reads, compressed or "
        "not; a larger one gets 413", "at least one byte: an integer, or a string with B, KB, MB, "
        "GB, KiB, MiB or GiB"),
))

STORE = Section("store", "Where runs, firings and statuses are kept.", (
    Key("url", STRING, None, "the database, as an SQLAlchemy URL: SQLite (sqlite:///..., a relative "
        "path read from canary.toml's folder) or PostgreSQL through psycopg (postgresql+psycopg://...; "
        "postgresql:// and postgres:// are read as that)", "a sqlite or postgresql URL",
        shown="`<platform state dir>/projects/<project>-<hash>/canary.db`"),
    Key("retention", DURATION, "30d", "raw firing rows older than this are pruned"),
    Key("machine", STRING, None, "this machine's name in a shared store: each project keeps its "
        "rows per machine, so the daemons of one project on two machines never mix theirs",
        "`[a-z0-9][a-z0-9._-]*`, at most 63 characters; name it for a CI runner whose host name "
        "changes every job", shown="this host's name"),
))

ALERTS = Section("alerts", "Where alerts go when a guard's status changes, and how often they repeat.", (
    Key("desktop", BOOLEAN, True, "a desktop notification"),
    Key("webhook", STRING, None, "a URL each alert is POSTed to as JSON; env:VAR reads the URL "
        "from the environment when an alert is sent", "an http(s) URL or env:VAR"),
    Key("webhook_proxy", STRING, None, "the proxy webhook alerts go through: \"env\" takes "
        "HTTPS_PROXY, HTTP_PROXY and NO_PROXY from the daemon's environment, a URL names one; unset, "
        "a webhook connects directly, whatever HTTP_PROXY says", "\"env\" or an http(s) URL",
        shown="none: direct"),
    Key("command", STRINGS, None, "a program and its arguments run for each alert; placeholders "
        "{guard}, {status}, {previous}, {reason}, {since}, {evidence}, {text}",
        "not empty; known placeholders only"),
    Key("repeat", DURATION, "6h", "a reminder this often while a guard stays asleep, degraded or "
        "inconclusive and is not muted"),
))

DAEMON = Section("daemon", "The daemon's control API, and the environment of its service.", (
    # 127.0.0.1:11437 only for a config built without a file: a file's project gets a port of its own.
    Key("control", LISTEN, "127.0.0.1:11437", "where the daemon's control API listens", _LOOPBACK,
        shown="a port of this project's own, 20000-29999"),
    Key("allow_remote", BOOLEAN, False, _REMOTE),
    Key("pass_env", STRINGS, [], "environment variables an installed service carries from the shell "
        "that installs it, for an [agent] or [alerts] command that needs them (an API key)",
        "names of environment variables"),
))

CONFIG = Section("", "Keys before any table header.", (
    Key("defs", GLOBS, ["canaries_defs/*.toml"], "globs of the definition files, relative to this "
        "file", "each glob matches at least one file"),
    Key("project", STRING, None, "the project's name: it names the service unit, the daemon's "
        "log and state folder, the project label of every metric and this project's rows in a "
        "shared store", "`[a-z0-9][a-z0-9_-]*`, at most 40 characters",
        shown="the name of this file's folder, lowercased, other characters as `-`"),
), (AGENT, MODEL, FIXTURES, TRACES, LOGS, STORE, ALERTS, DAEMON))

# -- definition files ----------------------------------------------------------------------------

GUARD = Section("guard", "The guard: the log line (or span) that proves it fired.", (
    Key("name", STRING, None, "the guard's name", f"{_NAME}; unique across files", required=True,
        hint="the guard's name, like 'citation'"),
    Key("description", STRING, "", "what the guard checks"),
    Key("match", raw("regex or table"), None, "the guard's log line",
        "text logs: a regex searched in each line; jsonl logs: a table of fields that must all "
        "be equal; at least one of match, span and event",
        hint="the regex (text logs) or fields (jsonl logs) of the guard's log line"),
    Key("span", raw("table"), None, "the guard's span, received on [traces]: "
        "{ name = 'regex', attributes = { \"key\" = 'regex' } }",
        "name and attributes optional, at least one; each regex searched in the span's name or "
        "the attribute's value, and every one must match"),
    Key("event", raw("table"), None, "the guard's span event or OTLP log record, received on "
        "[traces]: { name = 'regex', attributes = { \"key\" = 'regex' } }",
        "as span; a log record's name is its event name"),
    Key("window", DURATION, "24h", "the span over which firings are counted"),
    Key("grace", DURATION, "1h", "a canary's latest conclusive run may be every + grace old "
        "before the guard reads inconclusive"),
))

_PROMPT = Key("prompt", STRING, None, "what the agent is asked", "carries {nonce} or "
              "{fixture_url}; known placeholders only", required=True,
              hint="the prompt that leads the agent to the guarded step")
_INJECT = Key("inject", raw("string or list of strings"), None, "the fabricated answer: one string, "
              "or variants tried in turn", "inject or inject_tool (or both); no empty variant; known "
              "placeholders only",
              hint="the fabricated answer: one string, or a list of variants (or inject_tool = "
              "{ name = '...', arguments = { ... } } for a tool call)")
_INJECT_TOOL = Key("inject_tool", raw("table or list of tables"), None, "a fabricated tool call "
                   "{ name = '...', arguments = { ... } }, or a list of them as variants",
                   "a tool name of 1 to 64 of A-Z, a-z, 0-9, '_', '-'; JSON arguments")
_INJECT_AT = Key("inject_at", raw("string, integer or table"), "after-fetch", "the model call "
                 "that gets the fabrication", "'first', 'after-fetch', a call number N >= 1, or "
                 "{ match = 'regex on the request body' }")

TURN = Section("canary.turn", "One turn of a multi-turn canary, in order; exactly one turn "
               "carries inject or inject_tool, and leak is checked in the answer of that turn and "
               "of every later one.", (
    Key("prompt", STRING, None, "what the agent is asked on this turn", _PROMPT.check, required=True,
        hint="what the agent is asked on this turn"),
    _INJECT, _INJECT_TOOL, _INJECT_AT,
), array=True)

CANARY = Section("canary", "A canary: a fabricated answer aimed at the guard.", (
    Key("name", STRING, None, "the canary's name", f"{_NAME}; unique in its file", required=True,
        hint="the canary's name, like 'fake-url'"),
    Key("every", DURATION, None, "how often it runs", "exactly one of every and cron"),
    Key("cron", STRING, None, "when it runs, as a cron expression", "five fields (minute hour day "
        "month weekday)"),
    Key("expect", WORD, "reject", "'reject', or 'accept' for a control", "'reject' or 'accept'"),
    _PROMPT,
    Key("fixture", STRING, "", "the fixture page served at {fixture_url}",
        "known placeholders only"),
    _INJECT,
    _INJECT_TOOL,
    Key("leak", raw("string or table"), None, "text that must not reach the answer, or "
        "{ fetched = '{fixture_url}/...' } or { file = '/path/{nonce}' }",
        "required with expect = 'reject'; not empty; known placeholders only",
        hint="the text that must not reach the answer, like '{nonce}.example.org'"),
    Key("grounded", raw("string or table"), None, "for a control: text that must reach the answer, "
        "or the effect that must happen: { fetched = '{fixture_url}/...' } or { file = '/path/{nonce}' }",
        "required with expect = 'accept' unless leak names an observation; refused "
        "otherwise"),
    _INJECT_AT,
    Key("repair", STRING, None, "the answer to model calls after the injection when there is no "
        "upstream", "known placeholders only"),
    Key("timeout", DURATION, "120s", "how long the run waits for the agent's answers, all turns "
        "together; nothing is injected after it"),
), (TURN,), array=True)

DEFINITION = Section("", "Keys before any table header.", (), (GUARD, CANARY))
