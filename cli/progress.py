"""Rich progress bars that library stages report into through a plain callback."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

err_console = Console(stderr=True)
out_console = Console()


@contextlib.contextmanager
def task(description: str, *, quiet: bool = False) -> Iterator[Callable[[int, int], None]]:
    """Yield ``update(done, total)`` driving one progress bar on stderr.

    No bar when ``quiet`` or when stderr is not a terminal (logs and pipes get no
    redraw noise, and a failure leaves exactly its one ``error:`` line).
    """
    if quiet or not err_console.is_terminal:
        yield lambda done, total: None
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=False,
    ) as prog:
        tid = prog.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            prog.update(tid, completed=done, total=total)

        try:
            yield update
        except BaseException:
            # A failed stage leaves no half-drawn bar above its one-line error.
            prog.live.transient = True
            raise
