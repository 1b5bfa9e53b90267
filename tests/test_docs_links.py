"""Every relative link and ``#anchor`` in README.md and docs/*.md resolves, as GitHub renders them,
and every file of the checkout they name in code (``canary/runs/runner.py``) exists.

Links are read with markdown-it-py (CommonMark), so a URL inside a code block is no link and a
reference-style link is one. A link's file must exist inside the checkout; an anchor must be the
slug GitHub gives one of the target file's headings: the heading's text, lower-cased, with every
character that is not a letter, digit, space, ``-`` or ``_`` dropped and spaces made ``-``; a
repeated slug gets ``-1``, ``-2``...
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from itertools import pairwise
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[1]
_PARSER = MarkdownIt("commonmark")
_DROPPED = re.compile(r"[^\w\- ]")


def documents(root: Path = ROOT) -> list[Path]:
    """The README and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading of this text (before any ``-N`` for a repeat)."""
    return _DROPPED.sub("", heading.strip().lower()).replace(" ", "-")


def _text(inline: Token) -> str:
    """A heading's rendered text: its words and code spans, without the markup."""
    return "".join(child.content for child in inline.children or () if child.type in ("text", "code_inline"))


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, repeats numbered as GitHub numbers them."""
    tokens = _PARSER.parse(path.read_text(encoding="utf-8"))
    seen: Counter[str] = Counter()
    found: set[str] = set()
    for opening, inline in pairwise(tokens):
        if opening.type != "heading_open":
            continue
        base = slug(_text(inline))
        found.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def links(path: Path) -> list[str]:
    """Every link target of a Markdown file (inline, reference-style and autolinks)."""
    targets: list[str] = []
    for token in _PARSER.parse(path.read_text(encoding="utf-8")):
        for child in token.children or ():
            if child.type == "link_open":
                targets.append(str(child.attrs["href"]))
    return targets


def broken_links(paths: Iterable[Path], root: Path = ROOT) -> list[str]:
    """``file: target (why)`` for every relative link or anchor that does not resolve."""
    problems: list[str] = []
    for path in paths:
        for target in links(path):
            parts = urlsplit(target)
            if parts.scheme or parts.netloc:
                continue  # a web address: not this checkout's to check
            where = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if not where.is_relative_to(root.resolve()):
                problems.append(f"{path.name}: {target} (outside the checkout)")
            elif not where.exists():
                problems.append(f"{path.name}: {target} (no such file)")
            elif parts.fragment and (where.suffix != ".md" or unquote(parts.fragment) not in anchors(where)):
                problems.append(f"{path.name}: {target} (no heading with that anchor)")
    return problems


@pytest.mark.parametrize(("heading", "expected"), [
    ("Set up", "set-up"),
    ("`[logs]`: the agent's logs", "logs-the-agents-logs"),
    ("Multi-turn canaries: `[[canary.turn]]`", "multi-turn-canaries-canaryturn"),
    ("Fabricated tool calls: `inject_tool`", "fabricated-tool-calls-inject_tool"),
    ("What `canary run` shows", "what-canary-run-shows"),
])
def test_slug_is_githubs(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_every_link_of_the_docs_resolves() -> None:
    assert broken_links(documents()) == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / urlsplit(t).path).resolve() for t in links(ROOT / "README.md") if not urlsplit(t).scheme}
    assert [p.name for p in documents()[1:] if p.resolve() not in linked] == []


_PATH = re.compile(r"`((?:canary|collectors|dashboard|tests|canaries_defs|docs|\.ci)/[^`*<>{} ]*)`")


def missing_paths(paths: Iterable[Path], root: Path = ROOT) -> list[str]:
    """``file: path`` for every checkout path a page names in code (``canary/runs/runner.py``) that is gone."""
    return [f"{path.name}: {named}" for path in paths for named in _PATH.findall(path.read_text(encoding="utf-8"))
            if not (root / named).exists()]


def test_every_path_the_docs_name_exists() -> None:
    assert missing_paths(documents()) == []


def test_a_broken_file_or_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text("# Page\n\n## Twice\n\n## Twice\n\n```\n[not a link](gone.md)\n```\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Title\n\n[ok](docs/page.md#twice-1) [ok](#title) [web](https://example.org/x#y)\n"
        "[gone](docs/gone.md) [bad](docs/page.md#twice-2) [self](#nope) [up](../elsewhere.md)\n"
        "[ref][r]\n\n[r]: docs/page.md#missing\n",
        encoding="utf-8",
    )
    assert broken_links(documents(tmp_path), tmp_path) == [
        "README.md: docs/gone.md (no such file)",
        "README.md: docs/page.md#twice-2 (no heading with that anchor)",
        "README.md: #nope (no heading with that anchor)",
        "README.md: ../elsewhere.md (outside the checkout)",
        "README.md: docs/page.md#missing (no heading with that anchor)",
    ]
    (tmp_path / "tests").mkdir()
    page.write_text("`canaries_defs/<name>.toml` `docs/page.md` `canary/gone.py` and `tests/`\n", encoding="utf-8")
    assert missing_paths(documents(tmp_path), tmp_path) == ["page.md: canary/gone.py"]
