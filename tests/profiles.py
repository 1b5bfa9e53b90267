"""How much work the property tests do: all of it in CI, a fraction on a developer's machine.

``HYPOTHESIS_PROFILE=ci`` (set by ``.ci/run``) draws every example a test asks for; the default
``dev`` profile draws a tenth, so ``uv run pytest`` stays quick while CI keeps the full search.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")

settings.register_profile("ci", max_examples=100, print_blob=True)
settings.register_profile("dev", max_examples=20)
settings.load_profile(PROFILE)


def examples(full: int) -> int:
    """The examples a property test draws: ``full`` under the ci profile, a tenth (at least 10) under dev."""
    return full if PROFILE == "ci" else max(10, full // 10)
