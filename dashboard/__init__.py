"""The terminal dashboard of guard-canary: reads the store through ``canary``, never writes policy."""

from __future__ import annotations

from dashboard.app import DashboardApp, run_dashboard

__all__ = ["DashboardApp", "run_dashboard"]
