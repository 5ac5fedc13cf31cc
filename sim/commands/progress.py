"""A plain-text progress bar for a batch of cells, written to stderr.

On a terminal the bar is one line rewritten in place (``\\r``), at least every
second while cells run; when stderr is a file or a pipe (CI logs, tests), a full
line is written at each tenth of the work and every 2 s while cells run (the running
cells and their loop positions). Nothing is written to stdout.
"""

from __future__ import annotations

import shutil
import sys
import time

__all__ = ["Progress", "Heartbeat", "CellBeat", "position"]


class Progress:
    """Counts finished cells, names the running ones and where each is.

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
        How many cells run at once (unused: kept for callers that pass it).
    every : float, optional
        Seconds between redraws while cells run (:meth:`tick`); default 1 s on a
        terminal, 2 s in a log.
    clock : callable, optional
        The clock (seconds), ``time.perf_counter`` by default.

    No estimate of the time left: the cells of a sweep differ in cost by orders of
    magnitude (a 40-s cell among 0.1-s ones), and a mean of the finished ones said
    "ETA 14 s" before six minutes of one cell. Instead the bar names the cells that
    are running and the loop position each last reported (:meth:`running`, from
    :class:`CellBeat`), and is redrawn at least every ``every`` seconds while they run
    (:meth:`tick`), so a long cell shows that it moves.

    Examples
    --------
    >>> import io
    >>> out = io.StringIO()
    >>> p = Progress(4, cached=2, stream=out)
    >>> p.advance("a"); p.advance("b"); p.close()
    >>> out.getvalue().splitlines()[-1].split("]")[1].split(" cells")[0].strip()
    '4/4'
    >>> now = [0.0]
    >>> p = Progress(5, stream=out, every=2, clock=lambda: now[0])
    >>> p.running("c", "step 1,200"); now[0] = 3.0; p.tick()
    >>> out.getvalue().splitlines()[-1].split("  ", 2)[2]
    'running: c (step 1,200, 3 s)'
    """

    WIDTH = 24

    def __init__(self, total: int, cached: int = 0, stream=None, unit: str = "cells",
                 workers=None, every=None, clock=None):
        self.total = total
        self.workers = workers
        self.unit = unit
        self.done = cached
        self.cached = cached
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.clock = clock or time.perf_counter
        self.every = every if every is not None else 1.0 if self.tty else 2.0
        self.start = self.clock()
        self.shown_at = self.start
        self._last_tenth = -1
        self._label = ""
        #: running cell -> where it last said it is
        self.cells = {}
        #: running cell -> when it first said so (the bar shows each cell's seconds, also
        #: while it reports nothing: a long fast-forward, a loop without a position)
        self.since = {}
        self._show()

    def advance(self, label: str = "") -> None:
        """One more cell finished (``label`` names it on the bar until one is running)."""
        self.done += 1
        self._label = label
        self.cells.pop(label, None)
        self.since.pop(label, None)
        self._show()

    def running(self, label: str, where: str = "starting") -> None:
        """Cell ``label`` runs, at ``where`` (its loop position, or ""); redrawn by
        :meth:`tick`."""
        self.cells[label] = where
        self.since.setdefault(label, self.clock())
        self.tick()

    def tick(self) -> None:
        """Redraw if ``every`` seconds passed since the last time (the elapsed time, the
        running cells' positions)."""
        if self.clock() - self.shown_at >= self.every:
            self._show(force=True)

    def close(self) -> None:
        """End the bar's line (on a terminal)."""
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _line(self) -> str:
        total = max(self.total, 1)
        filled = int(self.WIDTH * self.done / total)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        elapsed = self.clock() - self.start
        cached = f", {self.cached} cached" if self.cached else ""
        if self.done >= self.total:
            state = "done"
        elif self.cells:
            now = self.clock()
            state = "running: " + ", ".join(
                f"{label} ({where + ', ' if where else ''}{now - self.since[label]:.0f} s)"
                for label, where in self.cells.items())
        else:
            state = self._label
        return f"[{bar}] {self.done}/{self.total} {self.unit}{cached}  {elapsed:.1f} s  {state}"

    def _show(self, force=False) -> None:
        self.shown_at = self.clock()
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r\x1b[K" + self._line()[:width])
            self.stream.flush()
            return
        tenth = 10 * self.done // max(self.total, 1)
        if tenth != self._last_tenth or force:
            self._last_tenth = tenth
            self.stream.write(self._line().rstrip() + "\n")
            self.stream.flush()


def position(sim, unplaced="starting") -> str:
    """Where a simulation is: the loop position the workload last set (``sim.at``), or
    ``unplaced`` where it set none, and, while fast-forward works through a long batch
    iteration by iteration, how far."""
    x = sim.last_x
    where = (f"{sim.last_x_unit} {x:,}" if sim.last_x_unit and isinstance(x, (int, float))
             else unplaced)
    batch = getattr(sim, "ff_progress", None)
    if batch:
        where += f", fast-forwarding {batch[0]:,} of {batch[1]:,} iterations"
    return where


class CellBeat:
    """A sweep cell's heartbeat: ``report(label, where)`` with its position
    (:func:`position`) at most every ``every`` seconds, called by the simulation as it
    checks its budgets (as :class:`Heartbeat`). A cell whose workload reports no loop
    position (its figures are read after the loop) reports the steps burn has registered
    so far, or nothing before the first (the bar shows its seconds either way).

    >>> class Sim: last_x, last_x_unit, registered = None, "", 1_234_567
    >>> said = []
    >>> beat = CellBeat("adleak-count-params/untracked", lambda *a: said.append(a), every=0)
    >>> beat(Sim()); said
    [('adleak-count-params/untracked', '1,234,567 steps registered')]
    """

    def __init__(self, label, report, every=1.0):
        self.label = label
        self.report = report
        self.every = every
        self.next = time.perf_counter() + every

    def __call__(self, sim) -> None:
        now = time.perf_counter()
        if now < self.next:
            return
        self.next = now + self.every
        steps = sim.registered
        self.report(self.label,
                    position(sim, unplaced=f"{steps:,} steps registered" if steps else ""))


class Heartbeat:
    """Where a long single run is, on stderr: the loop position the workload last set
    (``sim.at``), the steps registered so far and the wall time. Called by the simulation
    as it checks its budgets (:meth:`sim.engine.simulation.Simulation._check_limits`), so it costs a
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
        where = position(sim)
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

