"""Following log files and turning their lines into guard firings.

This package knows nothing of ``canary`` or ``dashboard``: it is handed rules
and a place to commit what it read, and hands back errors through a callback.
"""

from __future__ import annotations

__all__: list[str] = []
