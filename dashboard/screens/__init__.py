"""The dashboard's screens: the overview, a guard's detail, the alert history and the mute dialog."""

from __future__ import annotations

from dashboard.screens.alerts import AlertsScreen
from dashboard.screens.detail import DetailScreen
from dashboard.screens.mute import MuteChoice, MuteScreen
from dashboard.screens.overview import OverviewScreen

__all__ = ["AlertsScreen", "DetailScreen", "MuteChoice", "MuteScreen", "OverviewScreen"]
