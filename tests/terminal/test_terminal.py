"""Untrusted text never drives the terminal: control characters are shown, not obeyed."""

from __future__ import annotations

import pytest

from canary.terminal import safe, safe_lines

ATTACK = "\x1b]0;PWNED\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J CitationGuard: rejected"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        # OSC title, OSC 52 clipboard and the clear-screen CSI: every ESC and BEL visible
        (ATTACK, "\\x1b]0;PWNED\\x07\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J CitationGuard: rejected"),
        ("a\tb", "a\tb"),  # tab stays
        ("a\nb\rc", "a\\x0ab\\x0dc"),  # a newline or carriage return cannot forge a second line
        ("\x00\x08\x7f", "\\x00\\x08\\x7f"),  # NUL, backspace, DEL
        ("\x9b2J\x85", "\\x9b2J\\x85"),  # C1: a one-character CSI, NEL
        ("héllo ␛ 日本", "héllo ␛ 日本"),  # printable text, any script, is untouched
    ],
)
def test_safe_shows_every_control_character(raw: str, shown: str) -> None:
    assert safe(raw) == shown


def test_safe_lines_keeps_newlines_only() -> None:
    assert safe_lines("one\ntwo\x1b[2J\r") == "one\ntwo\\x1b[2J\\x0d"


def test_nothing_below_space_but_tab_survives() -> None:
    everything = "".join(map(chr, range(0x00, 0x100)))
    kept = {c for c in safe(everything) if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0}
    assert kept == {"\t"}


def test_the_daemon_log_formatter_shows_escapes_and_keeps_traceback_lines() -> None:
    import logging

    from canary.terminal import SafeFormatter

    record = logging.LogRecord("canary", logging.WARNING, __file__, 1, "webhook said %s", (ATTACK,), None)
    line = SafeFormatter("%(levelname)s %(message)s").format(record)
    assert line == "WARNING webhook said " + safe(ATTACK)
    try:
        raise ValueError("bad\x1b[2J")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
        record.exc_text = None
    text = SafeFormatter("%(message)s").format(record)
    assert "\x1b" not in text and "\nValueError: bad\\x1b[2J" in text


def test_bidirectional_controls_are_shown_not_obeyed() -> None:
    from canary.terminal import safe, safe_lines

    raw = "a\u202eb\u2066c\u2069d\u200fe\u061c"
    assert safe(raw) == safe_lines(raw) == "a\\u202eb\\u2066c\\u2069d\\u200fe\\u061c"
    assert safe("é ü ß 日本") == "é ü ß 日本"  # other text is left as it is
