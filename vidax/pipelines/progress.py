"""Progress of a pipeline's long phases (loading, sampling, decoding): a rich bar on a
terminal, a line every few items into a log, one closing line per phase."""

from __future__ import annotations

import contextlib
import time


def log_every(total: int | None, lines: int = 10) -> int:
    """Every how many items a log (no terminal) gets a progress line: each item up to
    ``lines`` items, else ``ceil(total / lines)`` (about ``lines`` lines a phase)."""
    return 1 if not total or total <= lines else -(-total // lines)


class Progress:
    """Progress bars and one line per finished phase, on a rich console; silent without.
    Into a log or a pipe (no terminal) there is no live bar: a phase that counts ``unit``\\ s
    prints a line every :func:`log_every` of them (done/total, elapsed, time per unit since
    the last line), then its closing line."""

    def __init__(self, console):
        self.console = console

    def line(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, soft_wrap=True)  # paths stay whole, copy-pastable

    @contextlib.contextmanager
    def phase(self, description: str, total: int | None = None, unit: str | None = None):
        """Yields ``advance(n=1, total=None)``; prints ``description: done in X s`` at the
        end. ``unit`` (``"step"``, ``"chunk"``): what ``advance`` counts, for the log lines."""
        start = time.perf_counter()
        if self.console is None or not self.console.is_terminal:
            yield self._log_advance(description, total, unit, start)
            self.line(f"{description}: done in {time.perf_counter() - start:.1f} s")
            return
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                   TextColumn, TimeElapsedColumn)

        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=self.console,
                      transient=True) as bar:
            task = bar.add_task(description, total=total)

            def advance(n=1, total=None):
                if total is not None:
                    bar.update(task, total=total)
                bar.advance(task, n)

            yield advance
        self.line(f"{description}: done in {time.perf_counter() - start:.1f} s")

    def _log_advance(self, description: str, total: int | None, unit: str | None,
                     start: float):
        """``advance`` for a log: silent without a console or a ``unit``."""
        if self.console is None or unit is None:
            return lambda n=1, total=None: None
        state = {"done": 0, "total": total, "shown": 0, "at": start}

        def advance(n=1, total=None):
            if total is not None:
                state["total"] = total
            state["done"] += n
            done, total = state["done"], state["total"]
            if done % log_every(total) and done != total:
                return
            now = time.perf_counter()
            per = (now - state["at"]) / max(done - state["shown"], 1)
            state["shown"], state["at"] = done, now
            of = f"/{total}" if total else ""
            self.line(f"  {description}: {unit} {done}{of}, {now - start:.1f} s elapsed, "
                      f"{per:.2f} s/{unit}")

        return advance
