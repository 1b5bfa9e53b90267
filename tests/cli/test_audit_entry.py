"""``canary audit`` through the console script: a plain audit line answers without click, and
prints, byte for byte, what the click command prints, with the same exit code; any other line is
click's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from canary.cli.entry import audit_args
from canary.cli.main import main
from tests.cli.test_status_entry import console
from tests.cli.test_status_faults import GUARD


def plain(explicit: str | None = None, since: str | None = None, window: str | None = None,
          as_json: bool = False, otlp: list[str] | None = None) -> dict[str, object]:
    return {"explicit": explicit, "since": since, "window": window, "as_json": as_json, "otlp": otlp or []}


@pytest.mark.parametrize(("argv", "expected"), [
    (["audit"], plain()),
    (["audit", "--json"], plain(as_json=True)),
    (["--config", "a.toml", "audit", "--window", "7d"], plain("a.toml", window="7d")),
    (["audit", "--config=a.toml", "--since=6h", "--json"], plain("a.toml", since="6h", as_json=True)),
    (["audit", "--otlp", "a.json", "--otlp=b.json"], plain(otlp=["a.json", "b.json"])),
    (["--json", "audit"], None),  # not an option of the group: click says so
    (["--since", "6h", "audit"], None),
    (["audit", "--since", "6h", "--since", "7h"], None),  # click takes the last: let it
    (["audit", "--config", "a", "--config", "b"], None),
    (["audit", "--since"], None),  # the value is missing: click says so
    (["audit", "--since", "--json"], None),
    (["audit", "--since="], None),
    (["audit", "--help"], None),
    (["audit", "-h"], None),
    (["audit", "--wndow", "7d"], None),
    (["audit", "citation"], None),
    (["status", "audit"], None),
    (["collect", "--once"], None),
])
def test_only_a_plain_audit_line_takes_the_quick_way(argv: list[str], expected: object) -> None:
    assert audit_args(argv) == expected


def moments_out(text: str) -> str:
    """``text`` without the audit's moments (``until`` is now; a ``--window``'s start is now less it)."""
    text = re.sub(r'"(since|until)": "[^"]*"', r'"\1": "?"', text)
    return re.sub(r"from \S+ \S+ to \S+ \S+", "from ? to ?", text)


def project(tmp_path: Path) -> Path:
    (tmp_path / "defs").mkdir()
    lines = [
        "2026-12-01T10:00:00Z WARN citation: rejected url=http://x.test/\x1b[31mred",
        "2026-12-01T10:00:01Z INFO task finished status=ok",
        "citation: rejected with no time",
        "2026-12-01T10:00:02Z INFO quote: accepted",
    ]
    (tmp_path / "agent.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "agent.log.1").write_bytes(b"2026-11-30T10:00:00Z citation: rejected \xff\xfe\n")
    for name in ("citation", "quote"):
        (tmp_path / "defs" / f"{name}.toml").write_text(GUARD.format(name=name))
    (tmp_path / "canary.toml").write_text(
        f"defs = ['defs/*.toml']\n[logs]\npaths = ['{tmp_path / 'agent.log'}']\n"
        "activity = 'task finished'\n"
        f"[store]\nurl = 'sqlite:///{tmp_path / 'c.db'}'\n"
    )
    return tmp_path / "canary.toml"


@pytest.mark.slow
@pytest.mark.parametrize("extra", [
    [], ["--json"], ["--since", "2026-12-01"], ["--window", "100000d", "--json"],
    ["--since", "yesterday-ish"], ["--since", "6h", "--window", "7d"], ["--otlp", "missing.json"],
], ids=["text", "json", "since", "window", "bad-since", "since-and-window", "otlp-missing"])
def test_the_quick_way_prints_what_the_click_command_prints(tmp_path: Path, extra: list[str]) -> None:
    config = project(tmp_path)
    args = ["--config", str(config), "audit", *extra]
    quick = console(args, probe=True)
    slow = CliRunner().invoke(main, args)
    stderr, _, loaded = quick.stderr.rpartition("LOADED ")
    assert quick.returncode == slow.exit_code, (quick.stderr, slow.stderr)
    assert moments_out(quick.stdout) == moments_out(slow.stdout)
    assert stderr == slow.stderr
    bad = extra[:1] == ["--since"] and extra[1] != "2026-12-01"
    assert ("'click'" in loaded) == bad, loaded  # a line the short way cannot take is click's
    if extra[-1:] == ["--json"]:
        doc = json.loads(quick.stdout)
        # the untimed line counts only without a window; the rotated copy's line, bad UTF-8, counts
        assert [g["firings"] for g in doc["guards"]] == [2 if "--window" in extra else 3, 0]
        assert doc["activity"] == 1


@pytest.mark.slow
def test_a_broken_config_is_told_as_the_click_command_tells_it(tmp_path: Path) -> None:
    config = project(tmp_path)
    config.write_text(config.read_text() + "[logs]\n")
    args = ["--config", str(config), "audit"]
    quick = console(args)
    slow = CliRunner().invoke(main, args)
    assert quick.returncode == slow.exit_code == 2
    assert (quick.stdout, quick.stderr) == (slow.stdout, slow.stderr)
    assert "Traceback" not in quick.stderr
