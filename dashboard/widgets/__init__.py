"""The dashboard's widgets; each draws what its reactive attributes hold and reads nothing itself."""

from __future__ import annotations

from dashboard.widgets.definitions import DefinitionProblems
from dashboard.widgets.history import (
    AlertsTable,
    DetailHead,
    FiringsTable,
    RunPanel,
    RunsTable,
    TransitionsTable,
)
from dashboard.widgets.overview import DaemonBar, GuardsTable, GuardSummary, RecentRuns

__all__ = [
    "AlertsTable",
    "DaemonBar",
    "DefinitionProblems",
    "DetailHead",
    "FiringsTable",
    "GuardSummary",
    "GuardsTable",
    "RecentRuns",
    "RunPanel",
    "RunsTable",
    "TransitionsTable",
]
