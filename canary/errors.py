"""The exceptions guard-canary raises, one tree.

::

    CanaryError                 base of everything below; never raised itself
    ├── ConfigError             canary.toml or a definition file is invalid (exit 2);
    │                           carries every Problem found, not just the first
    ├── UsageError              a command was given arguments it cannot use (exit 2)
    ├── StoreError              the store cannot be opened, migrated or written (exit 3)
    ├── UnavailableError        something the command needs is not there: no log file
    │                           readable, a port taken, the agent unreachable (exit 3)
    └── DeliveryError           an alert channel could not deliver (webhook down, command
                                failed); the delivery is retried with backoff

Each class says when it is raised and keeps structured fields (paths, keys)
beside its message, so callers can render them without parsing text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from canary.records import frozen
from canary.vocabulary import EXIT_UNAVAILABLE, EXIT_USAGE

Severity = Literal["error", "warning"]


@frozen
class Problem:
    """One thing wrong (or worth a warning) in a config or definition file."""

    path: Path | None
    key: str
    message: str
    suggestion: str | None = None
    severity: Severity = "error"
    line: int | None = None
    #: The key as a person reads it, when it differs (``canary[fake-url].every`` for ``canary[1].every``).
    label: str | None = None

    def render(self) -> str:
        """One line a person can act on: file[:line]: key: what is wrong (did you mean ...?)."""
        where = str(self.path) if self.path is not None else "<config>"
        if self.line is not None:
            where += f":{self.line}"
        key = self.label or self.key
        text = f"{where}: {key}: {self.message}" if key else f"{where}: {self.message}"
        if self.suggestion:
            text += f" (did you mean {self.suggestion!r}?)"
        if self.severity == "warning":
            text = "warning: " + text
        return text


class CanaryError(Exception):
    """Base of every error guard-canary raises on purpose."""

    exit_code = EXIT_UNAVAILABLE


class ConfigError(CanaryError):
    """Raised when canary.toml or a definition file is invalid; holds every problem found."""

    exit_code = EXIT_USAGE

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = [p for p in problems if p.severity == "error"]
        self.warnings = [p for p in problems if p.severity == "warning"]
        super().__init__("\n".join(p.render() for p in self.problems))


class UsageError(CanaryError):
    """Raised when a command's arguments cannot be used (a bad --since, an unknown guard)."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, option: str | None = None) -> None:
        self.option = option
        super().__init__(message)


class StoreError(CanaryError):
    """Raised when the store cannot be opened, migrated or written."""

    exit_code = EXIT_UNAVAILABLE

    def __init__(self, message: str, *, url: str | None = None) -> None:
        self.url = url
        super().__init__(message)


class UnavailableError(CanaryError):
    """Raised when something a command needs is not there (no readable log, a port taken)."""

    exit_code = EXIT_UNAVAILABLE

    def __init__(self, message: str, *, paths: list[Path] | None = None) -> None:
        self.paths = list(paths or [])
        super().__init__(message)


class DeliveryError(CanaryError):
    """Raised by an alert channel when an alert could not be delivered; the delivery is retried."""

    def __init__(self, message: str, *, channel: str | None = None) -> None:
        self.channel = channel
        super().__init__(message)
