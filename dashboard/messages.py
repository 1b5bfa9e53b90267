"""Messages the dashboard's thread workers post back to the app and its screens."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from textual.message import Message

from canary.status.team import SiteView
from dashboard.model import AlertHistory, Detail, Overview

__all__ = ["AlertsLoaded", "DetailLoaded", "GuardMuted", "OverviewLoaded", "RunsQueued", "TeamLoaded"]


@dataclass
class OverviewLoaded(Message):
    """Every guard's status and window figures were read from the store."""

    overview: Overview


@dataclass
class DetailLoaded(Message):
    """One guard's firings, runs and transitions were read from the store."""

    detail: Detail


@dataclass
class AlertsLoaded(Message):
    """The alert history was read from the store."""

    history: AlertHistory


@dataclass
class RunsQueued(Message):
    """The daemon accepted a request to run canaries now."""

    selection: list[str]
    queued: list[str]


@dataclass
class GuardMuted(Message):
    """A guard was muted until ``until``, or unmuted when ``until`` is None."""

    guard: str
    until: datetime | None


@dataclass
class TeamLoaded(Message):
    """Every site of the store was read: each project's daemon on each machine, and its guards."""

    sites: list[SiteView]
