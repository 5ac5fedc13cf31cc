"""Fast-forward against exact mode over every workload x variant x policy x profile.

Fast-forward promises the rows exact mode gives, byte for byte (:mod:`sim.engine.fastforward.repeat`).
The test suite checks that promise on chosen cells; ``sim equivalence`` checks all of
them: each built-in workload (its ``QUICK`` parameters where it has them, the probe's
quick run, else its defaults), each of its variants, under every policy and profile
asked, once with fast-forward and once with ``--exact``. A cell is

``same``
    both runs gave equal rows;
``differs``
    both ran and the rows differ (the first differing row is named);
``refused``
    both runs refused the cell with the same message (a GPU workload on a profile
    without a GPU, a policy that cannot run the program);
``refused-differently``
    one run refused and the other did not, or with another message;
``too-slow``
    a run went over the time budget (``timeout`` seconds of wall time per run): not
    compared (exact mode of a long chain is quadratic, as burn is).

It takes minutes (every cell runs in exact mode), so it is a command, not a test.
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path

from ..analysis.data import format_value
from ..engine import runner
from ..engine.simulation import Limits
from ..errors import LimitExceeded, UserError
from ..policies import POLICIES
from ..engine.workers import local_pool
from ..engine.workloads import builtin_names, load_workload

__all__ = ["cells", "cell_key", "check_cell", "check", "PartialResults", "COLUMNS", "RESULTS"]

#: what a cell's comparison can find (see the module doc)
RESULTS = ("same", "differs", "refused", "refused-differently", "too-slow")

#: the columns of ``--out``
COLUMNS = ("workload", "variant", "policy", "profile", "result", "rows", "difference",
           "exact_cpu_s", "ff_cpu_s")


def cells(workloads=None, policies=None, profiles=None) -> list:
    """``(workload, variant, policy, profile, sets)`` for every combination asked (None:
    every built-in workload, every policy, the two shipped platform profiles)."""
    names = list(workloads) if workloads else builtin_names()
    policies = list(policies) if policies else list(POLICIES)
    profiles = list(profiles) if profiles else ["m2max-macos", "linux-x86_64"]
    out = []
    for name in names:
        workload = load_workload(name)
        sets = dict(workload.quick)
        for variant in workload.variants:
            for policy in policies:
                for profile in profiles:
                    out.append((name, variant, policy, profile, sets))
    return out


#: the start of the message of a run stopped by its time budget
_TIME_BUDGET = "time budget exceeded"


def _run(cell, fast_forward, timeout):
    workload, variant, policy, profile, sets = cell
    start = time.process_time()
    try:
        rows = runner.run_cell(workload, variant, policy, profile, sets=dict(sets),
                               fast_forward=fast_forward, limits=Limits(max_wall_s=timeout))
    except UserError as exc:
        # a time budget's message, prefixed by the runner with the workload's line that
        # was running (PATH:LINE: ...), is told apart from every other refusal
        message = str(exc)
        if isinstance(exc, LimitExceeded) and _TIME_BUDGET in message:
            message = _TIME_BUDGET
        return None, message, time.process_time() - start
    return rows, None, time.process_time() - start


def check_cell(cell, timeout=None) -> dict:
    """Run ``cell`` with fast-forward and exactly (each within ``timeout`` seconds of wall
    time, None: no budget); the comparison as a row of :data:`COLUMNS`."""
    fast, fast_error, ff_cpu = _run(cell, True, timeout)
    exact, exact_error, exact_cpu = _run(cell, False, timeout)
    workload, variant, policy, profile, _ = cell
    row = {"workload": workload, "variant": variant, "policy": policy, "profile": profile,
           "rows": 0 if exact is None else len(exact), "difference": "",
           "exact_cpu_s": round(exact_cpu, 3), "ff_cpu_s": round(ff_cpu, 3)}
    if _TIME_BUDGET in (fast_error, exact_error):
        slow = [name for name, error in (("fast-forward", fast_error), ("exact", exact_error))
                if error == _TIME_BUDGET]
        row["result"] = "too-slow"
        row["difference"] = f"{' and '.join(slow)} over {timeout:g} s"
        return row
    if fast_error is not None or exact_error is not None:
        same = fast_error == exact_error
        row["result"] = "refused" if same else "refused-differently"
        row["difference"] = exact_error if same else \
            f"fast-forward: {fast_error or 'ran'}; exact: {exact_error or 'ran'}"
        return row
    row["result"] = "same" if fast == exact else "differs"
    if fast != exact:
        row["difference"] = _first_difference(fast, exact)
    return row


def _first_difference(fast, exact) -> str:
    """Where two runs' rows part: the first row that differs, by its metric and x."""
    for i, (a, b) in enumerate(zip(fast, exact)):
        if a != b:
            keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            what = ", ".join(f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in keys[:3])
            return (f"row {i} ({b.get('phase', '')} {b.get('metric', '')} at "
                    f"{b.get('x', '')}): {what} (fast-forward vs exact)")
    return f"{len(fast)} rows with fast-forward, {len(exact)} exactly"


def check(cells_, jobs=1, progress=None, timeout=None, on_result=None) -> list:
    """Every cell's comparison (:func:`check_cell`, each run within ``timeout`` s), in the
    order of ``cells_``; ``jobs`` local processes; ``progress``: a
    :class:`sim.commands.progress.Progress`; ``on_result(row)`` as each cell finishes (a
    long check shows what it found before it ends)."""
    labels = [" ".join(c[:4]) for c in cells_]
    if jobs <= 1:
        out = []
        for cell, label in zip(cells_, labels):
            if progress is not None:
                progress.running(label)
            out.append(check_cell(cell, timeout))
            if on_result is not None:
                on_result(out[-1])
            if progress is not None:
                progress.advance(label)
        return out
    from concurrent.futures import wait, FIRST_COMPLETED
    results = [None] * len(cells_)
    with local_pool(jobs) as pool:
        pending = {pool.submit(check_cell, cell, timeout): i for i, cell in enumerate(cells_)}
        while pending:
            done, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for future in done:
                i = pending.pop(future)
                results[i] = future.result()
                if on_result is not None:
                    on_result(results[i])
                if progress is not None:
                    progress.advance(labels[i])
            if progress is not None:
                progress.tick()
    return results


def cell_key(cell) -> tuple:
    """A cell's name: ``(workload, variant, policy, profile)`` (its parameters follow from
    the workload)."""
    return tuple(cell[:4])


class PartialResults:
    """``OUT.partial``: the cells of a run checked so far, one CSV line each, appended and
    flushed as each finishes, so a run that is stopped keeps what it found. ``OUT`` itself
    is written only when every cell is done (then the partial file goes)."""

    def __init__(self, out):
        self.path = Path(f"{out}.partial")
        self.count = 0
        self._fh = None

    def start(self, every, resume: bool) -> dict:
        """Open the file for this run; with ``resume`` the rows an earlier run wrote for
        cells of ``every`` are kept and returned by :func:`cell_key`, else it starts empty."""
        kept = {}
        wanted = {cell_key(cell) for cell in every}
        if resume and self.path.exists():
            with open(self.path, newline="") as fh:
                reader = csv.reader(fh)
                header = next(reader, None)
                if header != list(COLUMNS):
                    raise UserError(f"{self.path}: not a partial result of sim equivalence "
                                    f"(its header is not {','.join(COLUMNS)})")
                for line in reader:
                    if len(line) != len(COLUMNS):
                        continue            # a line the stopped run did not finish
                    row = dict(zip(COLUMNS, line))
                    row["rows"] = int(row["rows"])
                    row["exact_cpu_s"] = float(row["exact_cpu_s"])
                    row["ff_cpu_s"] = float(row["ff_cpu_s"])
                    key = cell_key([row[c] for c in COLUMNS[:4]])
                    if key in wanted:
                        kept[key] = row
        self._fh = open(self.path, "w", newline="")
        self._writer = csv.writer(self._fh, lineterminator="\n")
        self._writer.writerow(COLUMNS)
        for row in kept.values():
            self._write(row)
        self.count = len(kept)
        return kept

    def add(self, row) -> None:
        """Append one finished cell."""
        self._write(row)
        self.count += 1

    def _write(self, row) -> None:
        self._writer.writerow([format_value(row.get(c, "")) for c in COLUMNS])
        self._fh.flush()

    def remove(self) -> None:
        """The run finished and ``OUT`` is written: the partial file goes."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
