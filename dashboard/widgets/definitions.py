"""The definition files with errors: shown above the guards, whose table shows their guards by the status
the store last recorded of them; or, in a project that defines no guard, that nothing is watched."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from canary.errors import Problem
from canary.terminal import safe

__all__ = ["DefinitionProblems"]


class DefinitionProblems(Static):
    """Each broken definition file's error (file, key, problem), its text made inert; hidden when none
    (unless no guard is defined)."""

    def show(
        self, problems: Sequence[Problem], shown: Sequence[str], *, none_defined: str | None = None
    ) -> None:
        """Show ``problems``; ``shown`` names the broken files' guards, as far as they can be read.

        With no problem, ``none_defined`` (what is said of a project that defines no guard) is shown
        when given: an empty table alone reads as nothing wrong."""
        if not problems and none_defined is not None:
            self.display = True
            self.update(Text(none_defined))
            return
        self.display = bool(problems)
        n = len(problems)
        one = len(shown) == 1
        guards = (f"the guard{'' if one else 's'} {safe(', '.join(shown))} {'is' if one else 'are'} shown "
                  f"below by the status the store last recorded of {'it' if one else 'them'}" if shown
                  else "their guards cannot be read from them")
        head = (f"{n} problem{'s' if n != 1 else ''} in the definitions: {guards} (a running daemon keeps "
                "the definitions it loaded until they are fixed)")
        self.update(Text("\n".join([head, *(safe(p.render()) for p in problems)])))
