"""Where a command's result goes: the terminal (at its width, in colour when it is one) and
the files asked for with --json, --csv and --html, each written whole or not at all."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

NOT_A_TERMINAL_WIDTH = 160  # piped output: wide enough for every table


def width() -> int:
    """The terminal's width: $COLUMNS, the terminal's own, or a width that fits the tables."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return NOT_A_TERMINAL_WIDTH


def show(render: Any, result: Any, **view: Any) -> None:
    """Print ``render(result, **view)`` at the terminal's width (colours on a terminal)."""
    sys.stdout.write(render(result, width=width(), color=sys.stdout.isatty(), **view))
    sys.stdout.flush()


def save_json(path: str | None, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """``--json FILE``: the result under its envelope; returns the envelope (None path: not written)."""
    from ..results.record import envelope

    doc = envelope(kind, payload)
    save_doc(path, doc)
    return doc


def save_doc(path: str | None, doc: dict[str, Any]) -> None:
    """A saved record (a result under its envelope) as JSON, when a path is given."""
    if path:
        from ..files import write_json

        write_json(path, doc)
        print(f"wrote {path}")


def save_text(path: str | None, text: str) -> None:
    if path:
        from ..files import write_text

        write_text(path, text)
        print(f"wrote {path}")


def save_html(path: str | None, result: Any, depth: int | None = None) -> None:
    """``--html FILE`` (or ``-o``): the report page of ``result`` (a live result or a saved record)."""
    if path:
        from ..report.html import render_html

        save_text(path, render_html(result, depth=depth))
