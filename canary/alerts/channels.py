"""Alert channels: a desktop notification, a webhook, a command.

Each channel takes one alert payload and either returns (``None`` when it was
delivered, or a short note when it was skipped on purpose, such as a missing
``notify-send``) or raises ``DeliveryError``, after which the delivery is
retried. ``canary.alerts.planning`` decides what to send and when; this module only
sends.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypedDict

import httpx

from canary.alerts.trial import CHANNELS, enabled_channels
from canary.config.placeholders import fill
from canary.config.settings import AlertsConfig
from canary.errors import DeliveryError

log = logging.getLogger("canary.alerts.planning")

__all__ = ["CHANNELS", "AlertPayload", "Sender", "default_sender", "desktop", "enabled_channels", "webhook"]

#: Seconds to wait for a webhook's TCP connection, and for the whole exchange.
WEBHOOK_CONNECT_TIMEOUT = 5.0
WEBHOOK_TIMEOUT = 10.0
#: Seconds an alert command may run before it is killed.
COMMAND_TIMEOUT = 30.0
#: Seconds a desktop notifier (osascript, notify-send) may run.
DESKTOP_TIMEOUT = 10.0

_EXCERPT = 300
_TITLE = "guard-canary"

#: Desktop tools already reported missing by this process (the warning is logged once).
_warned_missing: set[str] = set()


class AlertPayload(TypedDict):
    """What every channel receives: the webhook's JSON body, the command's placeholders."""

    guard: str
    status: str
    previous: str | None
    reason: str
    since: str  # ISO 8601 UTC: when the guard entered this status
    evidence: str | None
    kind: str  # "change" | "reminder" | "recovery"
    text: str  # one line a chat service or a person can read as is


#: Sends one payload on one channel: returns None when sent, a note when skipped on purpose,
#: raises DeliveryError when it should be retried.
Sender = Callable[[str, AlertPayload], str | None]


def excerpt(text: str, limit: int = _EXCERPT) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# -- desktop -----------------------------------------------------------------


def applescript_string(text: str) -> str:
    """``text`` as an AppleScript string literal (backslashes and double quotes escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def desktop_command(payload: AlertPayload, platform: str) -> list[str] | None:
    """The notifier's argv for ``platform`` (a ``sys.platform`` value); None where there is none."""
    subtitle = f"{payload['guard']}: {payload['status'].upper()}"
    if platform == "darwin":
        script = (
            f"display notification {applescript_string(payload['text'])} "
            f"with title {applescript_string(_TITLE)} subtitle {applescript_string(subtitle)}"
        )
        return ["osascript", "-e", script]
    if platform in ("win32", "cygwin"):
        return None
    urgency = "normal" if payload["kind"] == "recovery" else "critical"
    # "--" so a title or text starting with "-" is never read as an option.
    return ["notify-send", f"--app-name={_TITLE}", f"--urgency={urgency}", "--", subtitle, payload["text"]]


def desktop(
    payload: AlertPayload, *, platform: str = sys.platform, timeout: float = DESKTOP_TIMEOUT,
    warn: bool = True,
) -> str | None:
    """Show a desktop notification; a note when no notifier exists (and, with ``warn``, one
    warning per process: desktop alerts the user never asked for warn of nothing)."""
    argv = desktop_command(payload, platform)
    if argv is None:
        return _missing(f"no desktop notifier on {platform}", platform, warn)
    tool = shutil.which(argv[0])
    if tool is None:
        return _missing(f"{argv[0]} not found", argv[0], warn)
    _run([tool, *argv[1:]], timeout=timeout, channel="desktop")
    return None


def _missing(note: str, key: str, warn: bool) -> str:
    if warn and key not in _warned_missing:
        _warned_missing.add(key)
        log.warning("desktop alerts are skipped: %s (webhook and command alerts still go out)", note)
    return note


# -- command -----------------------------------------------------------------


def command_values(payload: AlertPayload) -> dict[str, str]:
    """The alert command's placeholder values (a missing previous or evidence is empty)."""
    return {
        "guard": payload["guard"],
        "status": payload["status"],
        "previous": payload["previous"] or "",
        "reason": payload["reason"],
        "since": payload["since"],
        "evidence": payload["evidence"] or "",
        "text": payload["text"],
    }


def command_argv(payload: AlertPayload, argv: Sequence[str]) -> list[str]:
    """The configured argv with every placeholder filled."""
    values = command_values(payload)
    try:
        return [fill(arg, values) for arg in argv]
    except KeyError as exc:
        raise DeliveryError(f"the alert command uses an unknown placeholder {{{exc.args[0]}}}",
                            channel="command") from exc


def command(payload: AlertPayload, argv: Sequence[str], *, timeout: float = COMMAND_TIMEOUT,
            folder: Path | None = None) -> None:
    """Run the alert command (no shell) in ``folder`` (canary.toml's); a non-zero exit is a DeliveryError."""
    _run(command_argv(payload, argv), timeout=timeout, channel="command", folder=folder)


def _run(argv: list[str], *, timeout: float, channel: str, folder: Path | None = None) -> None:
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                              check=False, cwd=folder)
    except subprocess.TimeoutExpired as exc:
        raise DeliveryError(f"{argv[0]} did not finish within {timeout:g}s", channel=channel) from exc
    except OSError as exc:
        raise DeliveryError(f"cannot run {argv[0]}: {exc.strerror or exc}", channel=channel) from exc
    if done.returncode != 0:
        stderr = excerpt(done.stderr.decode("utf-8", "replace")) or "(no stderr)"
        raise DeliveryError(f"{argv[0]} exited {done.returncode}: {stderr}", channel=channel)


# -- webhook -----------------------------------------------------------------


def resolve_webhook(target: str, environ: Mapping[str, str] | None = None) -> str:
    """The webhook URL: ``target`` itself, or the variable named by ``env:VAR`` read now."""
    if not target.startswith("env:"):
        return target
    name = target[4:]
    value = (os.environ if environ is None else environ).get(name, "").strip()
    if not value:
        raise DeliveryError(f"the webhook URL comes from ${name}, which is not set", channel="webhook")
    if not value.startswith(("http://", "https://")):
        raise DeliveryError(f"${name} should hold an http(s) URL for the webhook", channel="webhook")
    return value


def _where(url: str) -> str:
    """Scheme, host and port only: webhook paths often carry a secret token."""
    parsed = httpx.URL(url)
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme}://{parsed.host}{port}"


def _unused_proxy(proxy: str | None) -> str:
    """A hint when the environment names a proxy that a direct webhook does not use."""
    names = [n for n in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")
             if os.environ.get(n) or os.environ.get(n.lower())]
    if proxy is not None or not names:
        return ""
    return f" ({names[0]} is set, but webhooks go direct unless [alerts] webhook_proxy = \"env\")"


def webhook(
    payload: AlertPayload,
    target: str,
    *,
    timeout: float = WEBHOOK_TIMEOUT,
    connect_timeout: float = WEBHOOK_CONNECT_TIMEOUT,
    proxy: str | None = None,
) -> None:
    """POST the payload as JSON; any 2xx is delivered, anything else a DeliveryError.

    ``proxy`` is ``[alerts] webhook_proxy``: None connects directly (HTTP_PROXY is not read),
    ``"env"`` takes the environment's proxy settings, a URL names the proxy.
    """
    url = resolve_webhook(target)
    try:
        where = _where(url)
    except (httpx.InvalidURL, ValueError) as exc:  # named by the message alone: its path may be a secret
        raise DeliveryError(f"the webhook URL cannot be used: {type(exc).__name__}",
                            channel="webhook") from exc
    deadline = time.monotonic() + timeout
    limits = httpx.Timeout(timeout, connect=min(connect_timeout, timeout))
    body = bytearray()
    try:
        with httpx.Client(timeout=limits, follow_redirects=False, trust_env=proxy == "env",
                          proxy=None if proxy in (None, "env") else proxy) as client, client.stream(
            "POST", url, json=payload, headers={"User-Agent": _TITLE}
        ) as response:
            for chunk in response.iter_bytes():
                body += chunk[: _EXCERPT - len(body)]
                # The answer is only read for an error excerpt: stop at enough, or at the deadline.
                if len(body) >= _EXCERPT or time.monotonic() > deadline:
                    break
    except httpx.TimeoutException as exc:
        raise DeliveryError(f"webhook {where}: no answer within {timeout:g}s ({type(exc).__name__})"
                            f"{_unused_proxy(proxy)}", channel="webhook") from exc
    except httpx.HTTPError as exc:
        raise DeliveryError(f"webhook {where}: {type(exc).__name__}: {exc}{_unused_proxy(proxy)}",
                            channel="webhook") from exc
    if not 200 <= response.status_code < 300:
        text = excerpt(body.decode("utf-8", "replace")) or "(empty body)"
        raise DeliveryError(f"webhook {where} answered {response.status_code}: {text}", channel="webhook")


# -- all channels ------------------------------------------------------------


def default_sender(
    config: AlertsConfig,
    *,
    platform: str = sys.platform,
    webhook_timeout: float = WEBHOOK_TIMEOUT,
    command_timeout: float = COMMAND_TIMEOUT,
) -> Sender:
    """A Sender over the real channels as ``config`` sets them up."""

    def send(channel: str, payload: AlertPayload) -> str | None:
        if channel == "desktop":
            if not config.desktop:
                return "desktop alerts are no longer configured"
            return desktop(payload, platform=platform, warn=config.desktop_set)
        if channel == "webhook":
            if config.webhook is None:
                return "the webhook is no longer configured"
            webhook(payload, config.webhook, timeout=webhook_timeout, proxy=config.webhook_proxy)
            return None
        if channel == "command":
            if not config.command:
                return "the alert command is no longer configured"
            command(payload, config.command, timeout=command_timeout, folder=config.folder)
            return None
        raise DeliveryError(f"unknown alert channel {channel!r}", channel=channel)

    return send
