"""``canary demo``: the bundled agent, its scripted model and a daemon, watched in the dashboard.

The stage (agent, models, organic traffic, daemon) is ``canary.demo.stage``; this module only
puts the dashboard in front of it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from canary.demo.stage import daemon_demo
from canary.errors import CanaryError
from canary.terminal import safe
from canary.vocabulary import EXIT_UNAVAILABLE

__all__ = ["run_demo_dashboard"]


def run_demo_dashboard(directory: Path, dialect: str = "chat") -> int:
    """Start the demo's stage and show the dashboard over it until quit; the exit code."""
    from dashboard.app import DashboardApp

    print(f"Starting the demo in {directory} …", file=sys.stderr)
    try:
        with daemon_demo(directory, dialect=dialect) as demo:
            app = DashboardApp(demo.config, store=demo.store, window="1h", refresh_every=1.0)
            app.run()
            return app.return_code or 0
    except CanaryError as exc:
        print(f"error: {safe(str(exc))}", file=sys.stderr)
        return EXIT_UNAVAILABLE
