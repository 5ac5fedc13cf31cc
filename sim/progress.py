"""A plain-text progress bar for a batch of cells, written to stderr.

On a terminal the bar is one line rewritten in place (``\\r``); when stderr is
a file or a pipe (CI logs, tests), a full line is written at each tenth of
the work instead, so logs stay short. Nothing is written to stdout.
"""

from __future__ import annotations

import shutil
import sys
import time

__all__ = ["Progress", "Heartbeat"]


class Progress:
    """Counts finished cells and estimates the time left.

    Parameters
    ----------
    total : int
        Number of cells in the batch.
    cached : int
        Cells already done before the batch starts (read from the cache).
    stream : file, optional
        Where to write (default: ``sys.stderr``).
    unit : str
        What is counted, as the bar names it (``total`` may grow while it runs).
    workers : int, optional
        How many cells run at once (local worker processes; None: unknown).

    The estimate of the time left is the mean wall time of the cells computed
    so far times the cells left: cells of a sweep differ in cost, so it firms
    up as the batch runs. Once no more cells are left than ``workers`` (every one
    left is running), the mean says nothing about them (the slow cells are often
    the last): the bar then says how many are still running instead.

    Examples
    --------
    >>> import io
    >>> out = io.StringIO()
    >>> p = Progress(4, cached=2, stream=out)
    >>> p.advance("a"); p.advance("b"); p.close()
    >>> out.getvalue().splitlines()[-1].split("]")[1].split(" cells")[0].strip()
    '4/4'
    >>> p = Progress(5, stream=out, workers=2)
    >>> for label in "abc": p.advance(label)
    >>> out.getvalue().splitlines()[-1].endswith("last 2 running  c")
    True
    """

    WIDTH = 24

    def __init__(self, total: int, cached: int = 0, stream=None, unit: str = "cells",
                 workers=None):
        self.total = total
        self.workers = workers
        self.unit = unit
        self.done = cached
        self.cached = cached
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self._last_tenth = -1
        self._label = ""
        self._show()

    def advance(self, label: str = "") -> None:
        """One more cell finished (``label`` names it on the bar)."""
        self.done += 1
        self._label = label
        self._show()

    def close(self) -> None:
        """End the bar's line (on a terminal)."""
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _line(self) -> str:
        total = max(self.total, 1)
        filled = int(self.WIDTH * self.done / total)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        elapsed = time.perf_counter() - self.start
        computed = self.done - self.cached
        left = self.total - self.done
        if left == 0:
            eta = "done"
        elif self.workers and left <= self.workers:
            eta = f"last {left} running"
        elif computed > 0:
            eta = f"ETA {elapsed / computed * left:.0f} s"
        else:
            eta = "ETA ?"
        cached = f", {self.cached} cached" if self.cached else ""
        return (f"[{bar}] {self.done}/{self.total} {self.unit}{cached}  {elapsed:.1f} s  {eta}"
                f"  {self._label}")

    def _show(self) -> None:
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r\x1b[K" + self._line()[:width])
            self.stream.flush()
            return
        tenth = 10 * self.done // max(self.total, 1)
        if tenth != self._last_tenth:
            self._last_tenth = tenth
            self.stream.write(self._line().rstrip() + "\n")
            self.stream.flush()


class Heartbeat:
    """Where a long single run is, on stderr: the loop position the workload last set
    (``sim.at``), the steps registered so far and the wall time. Called by the simulation
    as it checks its budgets (:meth:`sim.engine.Simulation._check_limits`), so it costs a
    clock read; silent for the first ``after`` seconds (short runs print nothing), then a
    line rewritten in place every ``every`` seconds on a terminal, or a full line every
    ``log_every`` seconds in a log.

    While fast-forward works through a long batch iteration by iteration (a growing
    chain, replayed heap events), the line says how far it is in the batch.

    Examples
    --------
    >>> import io
    >>> class Sim: last_x, last_x_unit, registered = 1200, "step", 5000
    >>> out = io.StringIO()
    >>> beat = Heartbeat("p10-ema/detach", stream=out, after=0, log_every=0)
    >>> beat(Sim()); beat.close()
    >>> out.getvalue().split("  ")[:2]
    ['p10-ema/detach: step 1,200', '5,000 steps registered']
    """

    def __init__(self, label, stream=None, after=2.0, every=0.5, log_every=10.0):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.after = after
        self.every = every if self.tty else log_every
        self.next = self.start + after
        self.shown = False

    def __call__(self, sim) -> None:
        now = time.perf_counter()
        if now < self.next:
            return
        self.next = now + self.every
        x = sim.last_x
        where = (f"{sim.last_x_unit} {x:,}" if sim.last_x_unit and isinstance(x, (int, float))
                 else "starting")
        batch = getattr(sim, "ff_progress", None)
        if batch:
            where += f", fast-forwarding {batch[0]:,} of {batch[1]:,} iterations"
        line = (f"{self.label}: {where}  {sim.registered:,} steps registered  "
                f"{now - self.start:.0f} s")
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r\x1b[K" + line[:width])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        """End the line (on a terminal, if anything was shown)."""
        if self.tty and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

