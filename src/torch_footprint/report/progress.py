"""Progress on stderr while long work runs: a spinner or a bar with the elapsed time, only
when stderr is a terminal (piped or redirected output stays clean)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

Update = Callable[..., None]  # update(message, fraction=None): fraction None spins, 0 to 1 fills the bar


@contextlib.contextmanager
def progress(message: str, console: Console | None = None) -> Iterator[Update]:
    """``with progress("tracing resnet50") as update: ... update("batch 8: timing", 0.4)``."""
    console = console or Console(stderr=True)
    if not console.is_terminal:
        yield lambda message, fraction=None: None
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(message, total=None)

        def update(message: str, fraction: float | None = None) -> None:
            bar.update(task, description=message, total=None if fraction is None else 1.0,
                       completed=fraction or 0.0)

        yield update
