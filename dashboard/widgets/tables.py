"""A DataTable drawn again only where it changed: the same columns and rows update cell by cell."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

__all__ = ["Column", "Drawn", "draw", "seen_as"]

#: A column: its key, its header and its width (None: as wide as its cells).
Column = tuple[str, str, int | None]
Row = tuple[str, Sequence[Any]]


def seen_as(value: Any) -> Any:
    """What a cell looks like: a Text's words, style and spans (``Text ==`` ignores its style)."""
    if isinstance(value, Text):
        return value.plain, str(value.style), tuple(value.spans)
    return value


@dataclass(frozen=True)
class Drawn:
    """What a table shows now."""

    columns: tuple[Column, ...] = ()
    keys: tuple[str, ...] = ()
    cells: dict[str, tuple[Any, ...]] = field(default_factory=dict)


def draw(table: DataTable[Any], columns: Sequence[Column], rows: Sequence[Row], drawn: Drawn | None) -> Drawn:
    """Show ``rows`` under ``columns``; with the same columns and row keys as ``drawn``, only the
    cells that changed are updated. What is shown now is returned."""
    now = Drawn(tuple(columns), tuple(key for key, _cells in rows),
                {key: tuple(seen_as(c) for c in cells) for key, cells in rows})
    if drawn is not None and drawn.columns == now.columns and drawn.keys == now.keys:
        for key, cells in rows:
            before = drawn.cells[key]
            for (column, _header, width), old, new, value in zip(columns, before, now.cells[key], cells,
                                                                strict=True):
                if old != new:
                    table.update_cell(key, column, value, update_width=width is None)
        return now
    table.clear(columns=True)
    for key, header, width in columns:
        table.add_column(header, key=key, width=width)
    for key, cells in rows:
        table.add_row(*cells, key=key)
    return now
