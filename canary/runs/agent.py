"""Reaching the real agent: the ``[agent]`` HTTP request or command, with its timeout.

Placeholders ``{prompt}``, ``{inject}``, ``{nonce}`` and ``{conversation}`` are
filled inside the URL, every string value of the JSON body, the header values
and each command argument. The final answer is read from the JSON reply by a
dotted path (``""`` takes the whole body as text), or from the command's stdout;
with ``[agent] conversation``, so is the conversation id a later turn carries
back. With no id yet (the first turn), a body value that is exactly
``"{conversation}"`` is sent as JSON ``null`` and any other ``{conversation}`` as ``""``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from canary.config.placeholders import fill
from canary.config.settings import AgentConfig
from canary.config.urls import redact_url
from canary.proxy.serving import is_loopback

#: The longest conversation id carried from one turn to the next.
MAX_CONVERSATION_ID = 512


@dataclass(frozen=True)
class AgentReply:
    """The agent's final answer, or why there is none."""

    answer: str | None
    error: str | None = None
    conversation: str | None = None  # the conversation id the reply names, with [agent] conversation
    conversation_error: str | None = None  # why the reply names none

    @property
    def ok(self) -> bool:
        """Whether an answer arrived."""
        return self.error is None and self.answer is not None


def _fill_json(value: Any, values: Mapping[str, str], *, new_conversation: bool = False) -> Any:
    if isinstance(value, str):
        if new_conversation and value == "{conversation}":
            return None  # no id yet: agents start a conversation on a null id
        return fill(value, values)
    if isinstance(value, list):
        return [_fill_json(v, values, new_conversation=new_conversation) for v in value]
    if isinstance(value, dict):
        return {k: _fill_json(v, values, new_conversation=new_conversation) for k, v in value.items()}
    return value


def _shape(node: Any, where: str) -> str:
    """What the reply holds where a dotted path stopped: its keys, or what kind of value it is."""
    if isinstance(node, dict):
        keys = ", ".join(sorted(map(str, node))[:20]) or "none"
        return f"{where} has the keys: {keys}"
    if isinstance(node, list):
        return f"{where} is a list of {len(node)} item{'' if len(node) == 1 else 's'}"
    return f"{where} is a {type(node).__name__}, not an object"


def extract(document: Any, path: str) -> str:
    """The value at a dotted path (``a.b.0.c``) as text.

    A KeyError carries the missing part and what the reply holds where the path stopped.
    """
    node = document
    if path:
        done: list[str] = []
        for part in path.split("."):
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                raise KeyError(part, _shape(node, repr(".".join(done)) if done else "the reply"))
            done.append(part)
    return node if isinstance(node, str) else json.dumps(node)


def _missing(exc: KeyError) -> str:
    shape = f"; {exc.args[1]}" if len(exc.args) > 1 else ""
    return f"missing {exc.args[0]!r}{shape}"


def _loopback(url: str) -> bool:
    try:
        host = httpx.URL(url).host
    except httpx.InvalidURL:
        return False
    return is_loopback(host)


def _send(method: str, url: str, body: object, headers: Mapping[str, str], limit: float
          ) -> httpx.Response | AgentReply:
    """The agent's HTTP response, or the reply saying which way reaching it failed."""
    try:
        return httpx.request(
            method, url, json=body if method.upper() != "GET" else None,
            headers=headers, timeout=httpx.Timeout(limit, connect=min(limit, 10.0)),
            # A loopback agent is never reached through HTTP_PROXY: a stray proxy variable
            # would hand it the prompt and the run's nonce.
            trust_env=not _loopback(url),
        )
    except httpx.TimeoutException:
        return AgentReply(None, f"the agent did not answer within {limit:g}s")
    except (httpx.ConnectError, httpx.UnsupportedProtocol) as exc:
        return AgentReply(None, f"the agent is unreachable at {redact_url(url)}: {redact_url(str(exc))}")
    except httpx.TransportError as exc:  # connected: it took the prompt, or part of it
        return AgentReply(None, f"the agent at {redact_url(url)} was reached, but its answer broke off: "
                                f"{redact_url(str(exc)) or type(exc).__name__}")


class AgentDriver:
    """Sends one prompt to the agent and waits for its final answer."""

    def __init__(self, config: AgentConfig, *, folder: Path | None = None) -> None:
        """``folder``: where ``command`` runs (canary.toml's, so a path in it reads as the config's do)."""
        self.config = config
        self.folder = folder

    def ask(self, prompt: str, *, nonce: str, inject: str = "", timeout: float | None = None,
            conversation: str | None = None) -> AgentReply:
        """Ask the agent (within ``conversation``, when one was started); never raises for an
        agent that is down, failing or slow."""
        values = {"prompt": prompt, "inject": inject, "nonce": nonce, "conversation": conversation or ""}
        limit = timeout if timeout is not None else self.config.timeout.total_seconds()
        if self.config.command:
            return self._run_command(values, limit)
        return self._request(values, limit, new_conversation=conversation is None)

    def _request(self, values: Mapping[str, str], limit: float, *, new_conversation: bool) -> AgentReply:
        cfg = self.config
        assert cfg.url is not None
        # The conversation id is the agent's own text: in the url it is one path segment, quoted.
        url = fill(cfg.url, {**values, "conversation": quote(values["conversation"], safe="")})
        headers = {k: fill(v, values) for k, v in cfg.headers.items()}
        body = (_fill_json(cfg.body, values, new_conversation=new_conversation) if cfg.body is not None
                else {"prompt": values["prompt"]})
        response = _send(cfg.method, url, body, headers, limit)
        if isinstance(response, AgentReply):
            return response
        if response.status_code >= 400:
            snippet = response.text[:300].strip()
            return AgentReply(None, f"the agent answered HTTP {response.status_code}: {snippet}")
        if not cfg.answer and not cfg.conversation:
            return AgentReply(response.text)
        try:
            document = response.json()
        except ValueError:
            if not cfg.answer:
                return AgentReply(response.text, conversation_error="the agent's reply is not JSON")
            return AgentReply(None, f"the agent's reply is not JSON: {response.text[:200]!r}")
        try:
            answer = extract(document, cfg.answer) if cfg.answer else response.text
        except KeyError as exc:
            return AgentReply(None, f"the agent's reply has no {cfg.answer!r} ({_missing(exc)})")
        if not cfg.conversation:
            return AgentReply(answer)
        try:
            conversation = extract(document, cfg.conversation)
        except KeyError as exc:
            return AgentReply(answer, conversation_error=f"the agent's reply has no "
                              f"{cfg.conversation!r} ({_missing(exc)})")
        if conversation in ("", "null"):
            return AgentReply(answer, conversation_error=f"the agent's reply has an empty "
                              f"{cfg.conversation!r}")
        if len(conversation) > MAX_CONVERSATION_ID or not conversation.isprintable():
            return AgentReply(answer, conversation_error=f"the agent's reply names a conversation id "
                              f"at {cfg.conversation!r} that is not one line of at most "
                              f"{MAX_CONVERSATION_ID} printable characters")
        return AgentReply(answer, conversation=conversation)

    def _run_command(self, values: Mapping[str, str], limit: float) -> AgentReply:
        assert self.config.command is not None
        argv = [fill(arg, values) for arg in self.config.command]
        try:
            done = subprocess.run(  # the user's own agent command, no shell
                argv, capture_output=True, timeout=limit, check=False, stdin=subprocess.DEVNULL,
                cwd=self.folder,
            )
        except FileNotFoundError:
            return AgentReply(None, f"the agent command {argv[0]!r} was not found")
        except subprocess.TimeoutExpired:
            return AgentReply(None, f"the agent command did not finish within {limit:g}s")
        except OSError as exc:
            return AgentReply(None, f"the agent command could not run: {exc}")
        out = done.stdout.decode("utf-8", "replace")
        if done.returncode != 0:
            err = done.stderr.decode("utf-8", "replace").strip()[-300:]
            return AgentReply(None, f"the agent command exited {done.returncode}: {err}")
        return AgentReply(out.strip())
