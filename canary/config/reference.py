"""The key tables of ``docs/configuration.md``, written from :mod:`canary.config.sections`.

``uv run python -m canary.config.reference`` rewrites them in place (between the two
markers; the text around them is left as it is); a test fails when the committed
file differs from what this module writes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from canary.config.schema import Key, Section
from canary.config.sections import CONFIG, DEFINITION

__all__ = ["BEGIN", "END", "key_tables", "main", "rewrite"]

BEGIN = ("<!-- The key tables below are written by `uv run python -m canary.config.reference` "
         "from canary/config/sections.py: edit them there. -->")
END = "<!-- End of the generated key tables. -->"
DOC = Path("docs") / "configuration.md"
_FILES = (
    ("`canary.toml`", "Found at `--config PATH`, else `$CANARY_CONFIG`, else `./canary.toml`, else "
     "`<platform config dir>/canary.toml`.", CONFIG),
    ("Definition files: `canaries_defs/*.toml`", "One guard per file, with its canaries; `defs` in "
     "canary.toml names the files.", DEFINITION),
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(key: Key) -> str:
    if key.required:
        return "required"
    if key.shown:
        return _cell(key.shown)
    return "none" if key.default is None else f"`{_cell(key.shown_default)}`"


def _walk(section: Section) -> Iterator[Section]:
    yield section
    for child in section.children:
        yield from _walk(child)


def _table(section: Section) -> list[str]:
    lines = [f"### {section.title}", "", section.help, "",
             "| key | type | default | checked | meaning |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| `{key.name}` | {key.kind.name} | {_default(key)} | {_cell(key.check) or '-'} | "
              f"{_cell(key.help)} |" for key in section.keys]
    return [*lines, ""]


def key_tables() -> str:
    """Every section of canary.toml and of a definition file, one markdown table each."""
    lines: list[str] = []
    for title, about, root in _FILES:
        lines += [f"## {title}", "", about, ""]
        for section in _walk(root):
            if section.keys:
                lines += _table(section)
    return "\n".join(lines).rstrip("\n") + "\n"


def rewrite(text: str) -> str:
    """``text`` with the part between the markers replaced by the current tables (appended if none)."""
    block = f"{BEGIN}\n\n{key_tables()}\n{END}"
    if BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        return head + block + tail
    return text.rstrip("\n") + ("\n\n" if text.strip() else "") + block + "\n"


def main(argv: Sequence[str] = ()) -> int:
    """Rewrite the tables in the file named (default ``docs/configuration.md``); 0 when done."""
    path = Path(argv[0]) if argv else DOC
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    new = rewrite(old)
    if new != old:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(new, encoding="utf-8")
        print(f"rewrote the key tables in {path}")
    else:
        print(f"{path} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
