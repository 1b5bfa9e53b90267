"""A plain ASCII character of a guard's regex is translated without compiling a regex for it, to
the same bytes the general derivation gives (loading definitions compiles nothing per character)."""

from __future__ import annotations

import re

import pytest

from collectors import patterns

LITERAL = patterns._c.LITERAL  # the opcode the regex parser gives a plain character


@pytest.mark.parametrize("flags", [0, re.ASCII, re.MULTILINE | re.DOTALL, re.UNICODE])
def test_every_ascii_literal_translates_as_the_general_derivation_does(flags: int) -> None:
    for code in range(128):
        shortcut = patterns._char_uncached(LITERAL, code, flags)
        assert shortcut == patterns._char_compiled(LITERAL, code, flags), code
