"""The definition files with errors: shown above the guards, whose table leaves their guards out."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from canary.errors import Problem
from canary.terminal import safe

__all__ = ["DefinitionProblems"]


class DefinitionProblems(Static):
    """Each broken definition file's error (file, key, problem), its text made inert; hidden when none."""

    def show(self, problems: Sequence[Problem], left_out: Sequence[str]) -> None:
        """Show ``problems``; ``left_out`` names the broken files' guards, as far as they can be read."""
        self.display = bool(problems)
        n = len(problems)
        guards = (f"the guard{'s' if len(left_out) != 1 else ''} {safe(', '.join(left_out))} "
                  f"{'are' if len(left_out) != 1 else 'is'} left out below" if left_out
                  else "their guards are left out below")
        head = (f"{n} problem{'s' if n != 1 else ''} in the definitions: {guards} (a running daemon keeps "
                "the definitions it loaded until they are fixed)")
        self.update(Text("\n".join([head, *(safe(p.render()) for p in problems)])))
