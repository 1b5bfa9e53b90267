"""The ``[agent]`` section of canary.toml: how a canary reaches the real agent.

``conversation = "dotted.path"`` names where the agent's JSON reply carries its
conversation id, for multi-turn canaries: ``{conversation}`` in the body, url or
headers is replaced with that id on every turn after the first. On the first
turn there is no id yet: a body value that is exactly ``"{conversation}"``
becomes JSON ``null`` (what agents that start a conversation on a missing id
expect); inside a longer string, in the url or in a header it becomes ``""``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from canary.config.placeholders import AGENT_PLACEHOLDERS, fill, placeholders_in
from canary.config.schema import Fields
from canary.config.sections import AGENT
from canary.config.tomlcheck import (
    KeyPath,
    Sink,
    Table,
    check_placeholders,
    is_http_url,
    type_name,
)
from canary.config.urls import redact_url
from canary.records import field, frozen

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
_URL_ONLY = ("method", "body", "headers", "answer", "conversation")


@frozen
class AgentConfig:
    """How a canary reaches the real agent: an HTTP request (``url``) or a ``command``."""

    url: str | None = AGENT.defaults.url
    method: str = AGENT.defaults.method
    body: object | None = None  # with a url and no body written, the section's default body
    headers: dict[str, str] = field(default_factory=lambda: AGENT.default("headers"))
    answer: str = AGENT.defaults.answer
    timeout: timedelta = AGENT.defaults.timeout
    command: tuple[str, ...] | None = AGENT.defaults.command
    conversation: str | None = AGENT.defaults.conversation  # dotted path to the id in the JSON reply

    @property
    def inject_mode(self) -> bool:
        """Whether the fabricated answer travels in the request itself (``{inject}`` is used)."""
        return "inject" in _agent_placeholders(self)


def _strings_in(value: object) -> list[str]:
    """Every string inside a JSON-like value (keys excluded)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings_in(v)]
    return []


def _agent_placeholders(agent: AgentConfig) -> set[str]:
    """The placeholder names used in the agent's url, body, headers and command."""
    texts = [agent.url or "", *_strings_in(agent.body), *agent.headers.values(),
             *(agent.command or ())]
    return {name for text in texts for name in placeholders_in(text)}


def _check_body(sink: Sink, keys: KeyPath, value: object) -> None:
    """Placeholders in every string of the body, each reported at its own key."""
    if isinstance(value, str):
        check_placeholders(sink, keys, value, AGENT_PLACEHOLDERS)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_body(sink, (*keys, k), v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_body(sink, (*keys, i), v)
    elif value is not None and not isinstance(value, int | float | bool):
        sink.error(keys, f"a JSON body cannot hold {type_name(value)}; quote it")


def read_agent(top: Table) -> AgentConfig | None:
    """The ``[agent]`` table, every problem reported; None when there is none."""
    raw = top.table("agent")
    if raw is None:
        return None
    t = AGENT.open(top.sink, ("agent",), raw)
    agent = AgentConfig(url=t.read("url"), command=t.read("command"), method=t.read("method").upper(),
                        headers=_headers(t), body=_body(t), answer=t.read("answer"),
                        conversation=_conversation(t), timeout=t.read("timeout"))
    _check_target(t, agent)
    if agent.conversation and agent.url is not None and "conversation" not in _agent_placeholders(agent):
        t.sink.error(("agent", "body"), "{conversation} is in neither the body, the url nor the "
                     "headers: put it where the agent reads the conversation id, like "
                     "body = { prompt = '{prompt}', conversation = '{conversation}' }")
    _check_prompt_reaches(t, agent)
    return agent


def _headers(t: Fields) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in t.read("headers").items():
        if isinstance(value, str):
            headers[name] = value
            check_placeholders(t.sink, (*t.keys, "headers", name), value, AGENT_PLACEHOLDERS)
        else:
            t.sink.error((*t.keys, "headers", name), f"expected a string, got {type_name(value)}")
    return headers


def _body(t: Fields) -> object | None:
    body: object | None = t.get("body")
    _check_body(t.sink, (*t.keys, "body"), body)
    if body is None and t.has("url") and not t.has("command"):
        body = t.read("body")  # the section's default body, when none is written
    return body


def _conversation(t: Fields) -> str | None:
    conversation: str | None = t.read("conversation")
    if conversation is not None and not conversation.strip():
        t.sink.error((*t.keys, "conversation"), "an empty path: name where the reply carries the "
                     "conversation id, like 'conversation' or 'session.id'")
    return conversation


def _check_target(t: Fields, agent: AgentConfig) -> None:
    """One of url and command; what only a url uses is refused beside a command."""
    sink, keys = t.sink, t.keys
    if t.has("url") and t.has("command"):
        sink.error((*keys, "command"), "both url and command are set; keep one of them")
    elif not t.has("url") and not t.has("command"):
        t.missing("url", "url = 'http://127.0.0.1:8700/ask' or command = ['my-agent', '{prompt}']")
    if t.has("command"):
        for key in _URL_ONLY:
            if t.has(key):
                sink.error((*keys, key), f"{key} is only used with url; with command the answer "
                           "is the command's stdout")
        if agent.command is not None and not agent.command:
            sink.error((*keys, "command"), "an empty command: give the program and its arguments")
        for i, arg in enumerate(agent.command or ()):
            check_placeholders(sink, (*keys, "command", i), arg, AGENT_PLACEHOLDERS)
    url = agent.url
    if url is not None:
        check_placeholders(sink, (*keys, "url"), url, AGENT_PLACEHOLDERS)
        if not is_http_url(fill(url, dict.fromkeys(placeholders_in(url), "x"))):
            sink.error((*keys, "url"), f"expected an http:// or https:// URL, got {redact_url(url)!r}")
    if t.has("method") and agent.method not in HTTP_METHODS:
        sink.error((*keys, "method"), f"expected one of {', '.join(HTTP_METHODS)}, got "
                   f"{t.get('method')!r}", suggestion=t.closest(agent.method, HTTP_METHODS))


def _check_prompt_reaches(t: Fields, agent: AgentConfig) -> None:
    """``{prompt}`` somewhere the agent reads it; a misspelled one counts (already reported)."""
    others = AGENT_PLACEHOLDERS - {"prompt"}
    written = _agent_placeholders(agent) - others
    # "prompt" itself first: only a config without it pays for the fuzzy match
    if (agent.url is not None or agent.command) and "prompt" not in written and not any(
        t.closest(name, ("prompt",)) for name in written
    ):
        where = "command" if agent.command else "body"
        t.sink.error((*t.keys, where), "the prompt never reaches the agent: put '{prompt}' in the "
                     + ("command" if agent.command else "body, url or headers"))


def check_conversations(sink: Sink, agent: AgentConfig | None, canaries: Sequence[tuple[str, Path, int]],
                        *, has_upstream: bool) -> None:
    """Multi-turn canaries (``key``, file, injection turn) need ``[agent] conversation``, and the
    turns before the injection need a model server behind the proxy: name the first such canary."""
    if not canaries or agent is None:
        return
    late = [(key, path) for key, path, turn in canaries if turn > 0]
    if late and not has_upstream and not agent.inject_mode:
        sink.warning(("model", "upstream"), f"the canary {late[0][0]} in {late[0][1]} injects after "
                     "its first turn, and the model calls of earlier turns pass through the proxy: "
                     "with no upstream they fail; set upstream to the real model server")
    if agent.conversation:
        return
    key, path, _ = canaries[0]
    more = f" (and {len(canaries) - 1} more)" if len(canaries) > 1 else ""
    if agent.command:
        sink.error(("agent", "command"), f"the canary {key} in {path}{more} has [[canary.turn]] "
                   "tables, and a command cannot continue a conversation: reach the agent by url "
                   "and set conversation")
        return
    sink.error(("agent", "conversation"), f"the canary {key} in {path}{more} has [[canary.turn]] "
               "tables, so every turn must continue one conversation: set conversation to the "
               "dotted path of the conversation id in the agent's reply, like 'conversation'")

