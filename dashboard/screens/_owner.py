"""The dashboard app a screen belongs to, typed, without importing the app module at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.dom import DOMNode

if TYPE_CHECKING:
    from dashboard.app import DashboardApp


def dashboard_app(node: DOMNode) -> DashboardApp:
    """The ``DashboardApp`` running ``node``."""
    return cast("DashboardApp", node.app)
