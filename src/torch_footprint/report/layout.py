"""Tables that fit the terminal without cutting a number.

rich shortens a cell that does not fit to ``…``; a figure cut that way is worse than no
figure. :func:`fit_tables` lays one logical table out as one or more rich tables no wider
than the console: figure columns always keep their full width; name columns (the key
column, a module path, a note) may fold onto several lines; the columns that do not fit
go, in order of priority, to continuation tables that repeat the key column. Nothing is
dropped and nothing is cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

Cell = str | Text


@dataclass(frozen=True)
class Column:
    """One column of a logical table.

    ``wrap``: a name that may fold onto several lines (never a figure). ``priority``: lower
    stays in the first table longer (default: the column's position).
    """

    header: str
    justify: str = "right"
    wrap: bool = False
    style: str | None = None
    priority: int | None = None


def table_width(widths: Sequence[int]) -> int:
    """The printed width of a table with these column widths (rich's heavy-head box, one
    space of padding inside each border, none at the outer edges)."""
    return sum(widths) + 3 * len(widths) - 1 if widths else 0


def _len(cell: Cell) -> int:
    text = cell.plain if isinstance(cell, Text) else cell
    return max((cell_len(line) for line in text.split("\n")), default=0)


def _min_width(col: Column, natural: int) -> int:
    """The narrowest a column may get: a figure column none narrower than its widest cell."""
    return min(natural, max(_len(col.header), 20)) if col.wrap else natural


def _widths(cols: list[int], natural: list[int], minimum: list[int], wrap: list[bool], width: int) -> list[int] | None:
    """Widths for the columns ``cols`` within ``width``, shrinking the folding columns
    (widest first); None when even their narrowest does not fit."""
    w = {i: natural[i] for i in cols}
    excess = table_width(list(w.values())) - width
    while excess > 0:
        shrinkable = [i for i in cols if wrap[i] and w[i] > minimum[i]]
        if not shrinkable:
            return None
        widest = max(shrinkable, key=lambda i: w[i])
        w[widest] -= 1
        excess -= 1
    return [w[i] for i in cols]


def fit_tables(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int, *, title: str | None = None,
               row_styles: Sequence[str | None] | None = None, key: int = 1) -> list[Table]:
    """Lay ``rows`` out as rich tables no wider than ``width``: the first ``key`` columns in
    every table, the others by priority in the first table where they fit."""
    n = len(columns)
    natural = [max([_len(c.header), *(_len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    minimum = [_min_width(c, natural[i]) for i, c in enumerate(columns)]
    wrap = [c.wrap for c in columns]
    keys = list(range(min(key, n)))
    order = sorted(range(len(keys), n), key=lambda i: (columns[i].priority if columns[i].priority is not None
                                                        else i, i))
    groups: list[list[int]] = []
    left = order
    while left or not groups:
        group = list(keys)
        rest = []
        for i in left:
            if _widths(sorted([*group, i]), natural, minimum, wrap, width) is not None or group == keys:
                group.append(i)  # a table holds at least one column besides its keys, fitting or not
            else:
                rest.append(i)
        groups.append(sorted(group))
        left = rest
    tables = []
    for g, group in enumerate(groups):
        widths = _widths(group, natural, minimum, wrap, width) or [minimum[i] for i in group]
        name = title if g == 0 else "(continued)"
        t = Table(title=name, title_justify="left", header_style="bold", pad_edge=False)
        for i, w in zip(group, widths):
            c = columns[i]
            t.add_column(c.header, justify=c.justify, style=c.style, width=w, no_wrap=not c.wrap,  # type: ignore
                         overflow="fold" if c.wrap else "ellipsis")
        for r, row in enumerate(rows):
            t.add_row(*(row[i] for i in group), style=row_styles[r] if row_styles else None)
        tables.append(t)
    return tables
