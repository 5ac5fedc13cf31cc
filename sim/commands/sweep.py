"""Sweeps: many cells (workload x variant x policy x parameter point), parallel and resumable.

A *cell* is one simulated program run: a workload's variant under a policy,
with some workload parameters overridden (a point of the ``--set`` grid). Cells
are independent, so a sweep runs them in any order, on local processes
(``jobs``) or on a dask distributed cluster (``scheduler``), and puts their rows
back in one canonical order: the predicted data do not depend on how or where
the cells ran.

Resume. Each finished cell is written, as soon as it finishes, to
``OUT/.cache/<code version>/<cell key>.json`` (write then rename). The key
covers the workload file, the variant, the policy, the profile's parameters
and the workload parameters; the code version covers the simulator's and the
workloads' Python sources (:func:`code_version`). A rerun reads finished cells back
instead of simulating them again, unless ``force``; an interrupted sweep loses
only the cells that were running.

See also
--------
sim.output.results : what a sweep writes (predicted.csv, errors.csv, figures, report).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis.compare import cells_for, measured_files, quick_params, known_checker
from ..analysis.data import atomic_write, format_value, PREDICTED_COLUMNS, read_measured
from ..engine.simulation import GRADING_KEYS, Simulation, Limits
from ..errors import UserError
from ..platform.host import (describe, host_kind, mismatch_warning, other_kind_note,
                             profile_machine)
from ..paths import PACKAGE_DIR, ROOT
from ..policies import POLICIES, get_policy, policy_file, policy_rank, policy_sources
from ..policies.trace import may_share, same_behaviour
from ..engine.profile import Profile, load_profile
from .progress import Progress, CellBeat, Heartbeat
from ..output.results import prepare_out, join_errors, previous_figures, publish
from ..engine.runner import run_cell  # forked workers inherit the simulator loaded with it
from ..engine.workloads import load_workload, builtin_names, parse_sets, EXPERIMENTS_DIR
from ..engine.workers import local_pool

__all__ = ["Cell", "SweepRun", "code_version", "select_workloads", "select_policies",
           "parse_grid", "plan_cells", "run_cells", "compute_cell", "workload_ref",
           "REFERENCE_POLICY"]


#: the policy the measured programs ran under (burn 0.22.1): measured points are
#: compared with its predictions (``*-pytorch`` experiments with ``pytorch``'s)
REFERENCE_POLICY = "burn-0.22.1"

#: modules that only present results (paths in the repository); editing them does not
#: invalidate cached cells
PRESENTATION_MODULES = {"sim/commands/cli.py", "sim/output/plot.py", "sim/output/report.py", "sim/output/results.py",
                        "sim/commands/progress.py", "sim/analysis/growth.py", "sim/commands/accuracy.py", "sim/commands/calibrate.py",
                        "sim/commands/fixes.py", "sim/analysis/fixes.py", "sim/commands/measure.py", "sim/commands/patches.py",
                        "sim/output/figures.py", "sim/analysis/fit.py"}

CACHE_DIR = ".cache"


@dataclass(frozen=True)
class Cell:
    """One simulated run: ``workload`` (built-in name or path of a ``.py`` file),
    ``variant``, ``policy``, and ``params``, the overridden workload parameters as
    ``((name, value), ...)`` in the workload's parameter order (empty: defaults)."""

    workload: str
    variant: str
    policy: str
    params: tuple = ()

    @property
    def params_text(self) -> str:
        """``"steps=500 report_at=1,50"``: the overrides as one label (empty: defaults)."""
        return params_text(self.params)

    @property
    def label(self) -> str:
        """``workload/variant/policy [params]``, for progress and error lines (a workload
        file by its workload's name, as its rows and figures have it)."""
        name = self.workload
        if name.endswith(".py"):
            try:
                name = load_workload(name).name
            except UserError:           # a file that does not load: its own error says so
                name = Path(name).stem
        text = f"{name}/{self.variant}/{self.policy}"
        return f"{text} [{self.params_text}]" if self.params else text


def params_text(params) -> str:
    """``((name, value), ...)`` as ``"name=value name=value"``."""
    return " ".join(f"{key}={_value_text(value)}" for key, value in params)


def _value_text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else format_value(value)


@dataclass
class SweepRun:
    """What :func:`run_cells` did: rows per cell, and how many cells came from the cache."""

    cells: list
    rows: dict                      # Cell -> list of row dicts
    code: str = ""                  # code version the cells were simulated with
    cached: int = 0
    computed: int = 0
    #: cells given the rows of an equivalent policy's cell (:mod:`sim.policies.trace`):
    #: cell -> the cell whose rows they are
    reused: dict = field(default_factory=dict)
    wall_s: float = 0.0
    seconds: dict = field(default_factory=dict)   # Cell -> wall seconds of its simulation

    def ordered_rows(self, with_params=False) -> list:
        """Every row, cells in plan order, each cell's rows in the order it recorded them."""
        out = []
        for cell in self.cells:
            for row in self.rows[cell]:
                row = dict(row)
                if with_params:
                    row["params"] = cell.params_text
                out.append(row)
        return out


# -- what to run ---------------------------------------------------------------------------

def select_workloads(names) -> list:
    """Workloads named on the command line, without repeats.

    ``all`` is the default set: the built-in workloads except those that declare
    ``SWEEP = False`` (the replicas of the Linux probes), which run when named.
    """
    chosen = []
    for name in names or ("all",):
        for one in (builtin_names() if name == "all" else [name]):
            workload = load_workload(one)
            if name == "all" and not workload.sweep:
                continue
            if all(w.path != workload.path for w in chosen):
                chosen.append(workload)
    return chosen


def select_policies(names) -> list:
    """Policy names (``all``: every built-in policy; a ``.py`` path: the policy that file
    defines, loaded and registered), validated, built-ins first in the registry's order."""
    wanted = set()
    for name in names or ("all",):
        if name == "all":
            wanted.update(POLICIES)
        else:
            wanted.add(get_policy(name).name)
    return sorted(wanted, key=policy_rank)


def construct_file_policies(names, profile) -> None:
    """Build each policy of ``names`` that a user's file defines once, on a simulation of
    its own under ``profile``, before any cell runs: a constructor that raises is its one
    error line now, not after the cells of other policies have run. (A seam that raises
    can only show when a run reaches it.)"""
    for name in names:
        if policy_file(name):
            Simulation(profile, policy=name).heap.close()


def parse_grid(items, workloads) -> dict:
    """``--set KEY=V1,V2`` items -> {workload name: [override dict per grid point]}.

    A key applies to every selected workload that has that parameter; a key no
    selected workload has is an error. Values of a numeric or boolean parameter,
    or of one with ``CHOICES``, are split at commas; another string parameter's
    value is taken whole (it may hold commas itself, e.g. ``report_at=1,50,60``). Repeating a key adds values.
    The grid is the product of the value lists, in the order given.

    Examples
    --------
    >>> from sim.engine.workloads import load_workload
    >>> grid = parse_grid(["steps=60,120", "report_at=1,50"], [load_workload("p10-ema")])
    >>> [sorted(p.items()) for p in grid["p10-ema"]]
    [[('report_at', '1,50'), ('steps', 60)], [('report_at', '1,50'), ('steps', 120)]]
    """
    raw = {}
    for item in items or ():
        (key, text), = parse_sets([item]).items()
        raw.setdefault(key, []).append(text)
    for key in raw:
        if not any(key in w.params for w in workloads):
            known = sorted({k for w in workloads for k in w.params})
            raise UserError(f"--set {key}: no selected workload has a parameter '{key}' "
                            f"(parameters: {', '.join(known) or 'none'})")
    grids = {}
    for w in workloads:
        axes = []
        for key in w.params:
            if key not in raw:
                continue
            values = []
            for text in raw[key]:
                whole = isinstance(w.params[key], str) and key not in w.choices
                parts = [text] if whole else text.split(",")
                for part in parts:
                    if not part.strip():
                        raise UserError(f"--set {key}={text}: empty value")
                    value = w.resolve(None, {key: part.strip()})[key]
                    if value not in values:
                        values.append(value)
            axes.append((key, values))
        keys = [key for key, _ in axes]
        grids[w.name] = [dict(zip(keys, combo))
                         for combo in itertools.product(*(values for _, values in axes))]
    return grids


def plan_cells(workloads, policies, grid, extra=()) -> list:
    """Every (workload, variant, policy, grid point) cell, plus ``extra`` ones, in plan order.

    Plan order: workloads as selected, variants as the workload lists them,
    policies in the registry's order, grid points as given. ``extra`` holds
    ``(workload name, variant, policy)`` cells (the ones measured points need)
    run at every grid point of their workload.
    """
    cells, rank = set(), {}
    for i, w in enumerate(workloads):
        wanted = {(v, p) for v in w.variants for p in policies}
        wanted |= {(v, p) for name, v, p in extra if name == w.name}
        for j, point in enumerate(grid.get(w.name, [{}])):
            params = tuple((k, point[k]) for k in w.params if k in point)
            rank[workload_ref(w), params] = (i, j)
            for variant, policy in wanted:
                w.resolve(variant, point)   # checks the combination before anything runs
                cells.add(Cell(workload_ref(w), variant, policy, params))
    variant_rank = {(workload_ref(w), v): k for w in workloads for k, v in enumerate(w.variants)}

    def sort_key(c):
        i, j = rank[c.workload, c.params]
        return (i, variant_rank[c.workload, c.variant], policy_rank(c.policy), j)
    return sorted(cells, key=sort_key)


def workload_ref(workload) -> str:
    """How a worker finds the workload again: a built-in name, or its file's path."""
    if workload.path.parent == EXPERIMENTS_DIR:
        return workload.name
    return str(workload.path)


# -- code version and cache ------------------------------------------------------------------

def code_version() -> str:
    """Hash of the simulator's and workloads' Python sources (``sim/``, ``experiments/``).

    Modules that only present results (:data:`PRESENTATION_MODULES`) are left
    out: a change to a figure does not make finished cells stale.
    """
    digest = hashlib.sha256()
    paths = sorted(PACKAGE_DIR.rglob("*.py")) + sorted(EXPERIMENTS_DIR.glob("*.py"))
    for path in paths:
        rel = path.relative_to(ROOT)
        if rel.as_posix() in PRESENTATION_MODULES:
            continue
        digest.update(rel.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _file_hash(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class Cache:
    """Finished cells on disk, one JSON file each, under ``root/<code version>/``."""

    def __init__(self, out_dir, code):
        self.root = Path(out_dir) / CACHE_DIR
        self.dir = self.root / code

    def get(self, key):
        """The rows stored under ``key``, or ``None`` (missing, unreadable or another cell's)."""
        try:
            data = json.loads((self.dir / f"{key}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("key") != key:
            return None
        return data.get("rows")

    def put(self, key, cell, rows) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"key": key, "cell": cell.label, "rows": rows}, sort_keys=True)
        atomic_write(self.dir / f"{key}.json", text + "\n")

    def prune(self) -> None:
        """Delete the cells of other code versions (they can never be reused)."""
        import shutil
        if not self.root.is_dir():
            return
        for child in self.root.iterdir():
            if child.is_dir() and child != self.dir:
                shutil.rmtree(child, ignore_errors=True)


def _cell_key(cell, workload, profile, code, exact=False) -> str:
    sources = policy_sources(cell.policy)
    identity = {
        "code": code,
        "workload": workload.name,
        "workload_file": _file_hash(workload.path),
        "variant": cell.variant,
        "policy": cell.policy,
        "policy_file": "+".join(_file_hash(path) for path in sources),
        "profile": profile.name,
        "profile_data": profile.data,
        "params": workload.resolve(cell.variant, dict(cell.params)),
    }
    if exact:
        identity["exact"] = True      # the same rows by design: kept apart to compare them
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# -- running ---------------------------------------------------------------------------------

def compute_cell(spec) -> dict:
    """Simulate one cell (in whatever process runs it); rows as plain values.

    ``spec``: ``workload`` (name or path), ``variant``, ``policy``, ``profile``
    (name, path and the parsed content the parent read: a profile edited
    during a sweep does not mix into it), ``params`` (overrides), ``remote``
    (run by a dask worker), ``trace`` (record the policy's attributes the run reads),
    ``plain`` (rows as plain values of the predicted columns, as the cache keeps them;
    else as the run returned them), ``heartbeat`` (the label of a
    :class:`~sim.commands.progress.Heartbeat` on this process's stderr, ``sim run``'s
    lines, instead of reports to the progress bar).
    Returns ``rows``, ``seconds`` (wall), ``reads`` (the names read, sorted; None unless
    traced) and, when remote, this process's :func:`code_version` (a worker must run
    the same simulator).

    A remote cell runs in a thread of its own. A dask worker's statistical
    profiler samples the task thread's stack and keeps references to its
    frames for a while; the frames keep the workload's local tensors alive, so
    their drops (``Tensor.__del__``, burn's ``Drop``) would happen later than
    in the program, and differently on every run. The profiler does not
    sample a thread it did not start the task in.
    """
    start = time.perf_counter()
    if _sink is not None and spec.get("label") and not spec.get("heartbeat"):
        _sink(spec["label"], "starting")
    if spec.get("remote"):
        outcome = {}

        def target():
            try:
                outcome["rows"] = _simulate(spec)
            except BaseException as exc:   # re-raised in the task thread
                outcome["error"] = exc
        thread = threading.Thread(target=target, name="sim-cell")
        thread.start()
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        rows, reads = outcome["rows"]
    else:
        rows, reads = _simulate(spec)
    return {"rows": rows, "seconds": time.perf_counter() - start,
            "reads": None if reads is None else sorted(reads),
            "code": code_version() if spec.get("remote") else None}


def _simulate(spec):
    """``(rows as plain values, the policy's attributes read or None)``."""
    import copy
    if spec.get("policy_file"):
        get_policy(spec["policy_file"])   # a fresh worker process registers the file's policy
    name, path, data = spec["profile"]
    reads = set() if spec.get("trace") else None
    beat = None
    if spec.get("heartbeat"):
        beat = Heartbeat(spec["heartbeat"])
    elif _sink is not None and spec.get("label"):
        beat = CellBeat(spec["label"], _sink)
    try:
        rows = run_cell(spec["workload"], spec["variant"], spec["policy"],
                        Profile(name, path, copy.deepcopy(data)), dict(spec["params"]),
                        policy_reads=reads, fast_forward=not spec.get("exact"),
                        heartbeat=beat, limits=_limits(spec))
    finally:
        if isinstance(beat, Heartbeat):
            beat.close()
    return [_plain(row) for row in rows] if spec.get("plain", True) else rows, reads


def _limits(spec):
    """The budgets of a cell: the defaults, with ``max_elements``, ``timeout`` (wall
    seconds), ``max_nodes`` and ``max_ops`` where the run set them."""
    if all(spec.get(key) is None for key in ("max_elements", "timeout", "max_nodes",
                                             "max_ops")):
        return None
    limits = Limits(max_tensor_elements=spec.get("max_elements") or Limits.MAX_TENSOR_ELEMENTS,
                    max_wall_s=spec.get("timeout"))
    if spec.get("max_nodes") is not None:
        limits.max_live_nodes = spec["max_nodes"]
    if spec.get("max_ops") is not None:
        limits.max_ops = spec["max_ops"]
    return limits


def _plain(row) -> dict:
    """A predicted row as plain values: its columns, and the keys a comparison grades it
    by where it has them (``GRADING_KEYS``: dropped here before, the rows of ``sim
    compare`` and ``sim fixes`` lost them, and no RSS row was ever graded as text-dominated
    or top-trimmed there)."""
    out = {}
    for column in (*PREDICTED_COLUMNS, *(key for key in GRADING_KEYS if key in row)):
        value = row.get(column, "")
        out[column] = value.item() if hasattr(value, "item") else value
    return out


class _FigureWarmUp:
    """Matplotlib imported, and one small figure drawn, in a thread of this process while
    the cells run in the workers: the figures' processes, forked from this one
    afterwards, start with the fonts and the math-text parser loaded (about 1 s of this
    process's time, and some of each figure process's, off the end of a sweep). Started
    only once the cells' workers exist (a fork while a thread imports would copy a held
    import lock).

    Joined however the cells end: a failed cell's error used to end the process while
    the thread still imported or drew, and the interpreter's teardown then met a thread
    inside matplotlib's C code and aborted, about one run in 20 (``Fatal Python error:
    PyThreadState_Get``, exit 134). An interrupt does not wait for it: the ``sim``
    command then exits without the teardown (:func:`sim.engine.interrupts.exit_now`)."""

    def __init__(self):
        self.thread = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="figure-warm-up", daemon=True)
        self.thread.start()

    @staticmethod
    def _run() -> None:
        try:
            import io
            from matplotlib.figure import Figure
            from ..output import plot  # noqa: F401
            fig = Figure(figsize=(2, 1.5))
            ax = fig.add_subplot()
            ax.plot([1, 10, 100], [1, 100, 10000])
            ax.set_yscale("log")
            ax.set_title("warm-up (MiB)", fontsize=9)
            fig.savefig(io.BytesIO(), format="png", dpi=100)
        except Exception:   # only a head start: the figures are drawn regardless
            pass

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()


def run_cells(cells, profile, out_dir, jobs=1, scheduler=None, force=False, progress=True,
              reuse=True, started=None, exact=False, max_elements=None, cache_dir=None,
              timeout=None, max_nodes=None, max_ops=None, heartbeat=None, in_order=False):
    """Run ``cells`` (reading finished ones from the cache); returns a :class:`SweepRun`.

    The one executor of cells: ``sim sweep``, ``compare`` and ``fixes`` run theirs with
    it, and ``sim run`` its variants x policies (no cache, ``heartbeat``, ``in_order``).

    Parameters
    ----------
    cells : list of Cell
        In plan order (see :func:`plan_cells`); the rows come back in that order.
    profile : sim.engine.profile.Profile
    out_dir : Path or None
        The cache lives in ``out_dir/.cache`` (``cache_dir/.cache`` if given: runs that
        share it read each other's cells). None (and no ``cache_dir``): nothing is
        cached or read back, and each cell's rows are as its run returned them (with
        every key and value type the run gave them); cached rows are plain values of
        the predicted columns (:func:`compute_cell`).
    jobs : int
        Local worker processes (1: run in this process).
    scheduler : str, optional
        Address of a dask distributed scheduler: run the cells there instead.
    force : bool
        Simulate every cell even if the cache has it.
    progress : bool
        Show a progress bar on stderr.
    reuse : bool
        Cells that differ only in the policy (same workload, variant and parameters)
        wait for the first of them; one whose policy defines every attribute that run
        read as it does gets its rows (:mod:`sim.policies.trace`: the same run, step by
        step), the others are simulated. Not with ``scheduler``.
    started : callable, optional
        Called once local worker processes run the cells (none are forked after it).
    exact : bool
        Simulate every loop iteration (no fast-forward; cached apart from the
        fast-forwarded cells, to compare the two).
    max_elements : int, optional
        Elements of one tensor at most (``--max-elements``; default:
        ``Limits.MAX_TENSOR_ELEMENTS``). A limit changes no row, only which cells
        are refused: it is not part of the cells' keys.
    timeout : float, optional
        Seconds of wall time one cell may run (``--timeout``; a budget as ``max_elements``
        is: a cell past it stops the run with one error, the finished cells stay cached).
    max_nodes : int, optional
        Simulated nodes one cell may hold individually (``--max-nodes``; default:
        ``Limits``'): a memory budget, as ``timeout`` is a time budget.
    max_ops : int, optional
        Steps one cell may register (``sim run --max-ops``; default: ``Limits``').
    heartbeat : callable, optional
        ``heartbeat(cell)``: the label of the :class:`~sim.commands.progress.Heartbeat`
        the cell's run shows on stderr of the process that runs it (``sim run``'s lines;
        with ``progress`` false).
    in_order : bool
        A failed cell stops the run once every cell before it in plan order has
        finished (the cells after it are not waited for): the error is the first
        failing cell's in plan order, however many ``jobs`` ran them, raised as the cell
        raised it (not named), with ``rows_before``, the rows of the cells before it in
        plan order. (Else the first failure to arrive stops the run, named.)

    Raises
    ------
    UserError
        A cell failed on bad input (a budget exceeded, impossible parameters):
        the message names the cell (unless ``in_order``). Finished cells stay cached.
    """
    start = time.perf_counter()
    cached = cache_dir or out_dir
    code = code_version() if cached or scheduler else ""
    cache = Cache(cached, code) if cached else None
    run = SweepRun(cells=list(cells), rows={}, code=code)
    keys, todo = {}, []
    for cell in cells:
        rows = None
        if cache is not None:
            keys[cell] = _cell_key(cell, load_workload(cell.workload), profile, code, exact)
            rows = None if force else cache.get(keys[cell])
        if rows is None:
            todo.append(cell)
        else:
            run.rows[cell] = rows
    run.cached = len(cells) - len(todo)
    # a cell of a family (workload, variant, parameters) waits for the first cell of the
    # family to simulate (plan order puts it first) whose run it may share; a cell whose
    # policy can share no earlier one's (the pytorch policy, a policy file) runs at once
    deps = {}
    if reuse and scheduler is None:
        firsts = {}
        for cell in todo:
            family = firsts.setdefault((cell.workload, cell.variant, cell.params), [])
            policy = get_policy(cell.policy)
            rep = next((r for r in family if may_share(get_policy(r.policy), policy)), None)
            if rep is None:
                family.append(cell)
            else:
                deps[cell] = rep
    reps = set(deps.values())
    specs = {cell: {"workload": cell.workload, "variant": cell.variant, "policy": cell.policy,
                    "policy_file": policy_file(cell.policy),
                    "profile": (profile.name, str(profile.path), profile.data),
                    "params": dict(cell.params), "trace": cell in reps,
                    "remote": scheduler is not None, "exact": exact, "label": cell.label,
                    "plain": cache is not None,
                    "heartbeat": heartbeat(cell) if heartbeat is not None else None,
                    "max_elements": max_elements, "timeout": timeout, "max_nodes": max_nodes,
                    "max_ops": max_ops}
             for cell in todo}
    bar = None

    def beat(label, where):
        if label is None:
            bar.tick()
        else:
            bar.running(label, where)
    global _sink
    if scheduler is not None and todo:
        results = _on_dask(specs, _dask_client(scheduler))
    elif jobs > 1 and len(todo) > 1:
        results = _on_processes(specs, jobs, deps, started, beat if progress else None)
    else:
        results = _in_process(specs, deps)
        _sink = beat if progress else None
    bar = Progress(len(cells), run.cached) if progress else None   # once the cells can run
    place = {cell: i for i, cell in enumerate(run.cells)}
    failed = None       # (plan index, exception) of the first failed cell in plan order
    try:
        for cell, result in results:
            if "error" in result:
                if not in_order:
                    raise _named(cell, result["error"])
                if failed is None or place[cell] < failed[0]:
                    failed = (place[cell], result["error"])
            else:
                if result.get("code") not in (None, code):
                    raise UserError(f"a dask worker runs other simulator code (version "
                                    f"{result['code']}, here {code}): install this checkout "
                                    f"on the workers")
                if cache is not None:
                    cache.put(keys[cell], cell, result["rows"])
                run.rows[cell] = result["rows"]
                if "reused" in result:
                    run.reused[cell] = result["reused"]
                else:
                    run.seconds[cell] = result["seconds"]
                    run.computed += 1
                if bar:
                    bar.advance(cell.label)
            if failed is not None and all(c in run.rows for c in run.cells[:failed[0]]):
                break
    finally:
        _sink = None
        results.close()   # stops the workers of an interrupted or failed run
        if bar:
            bar.close()
    if failed is not None:
        index, exc = failed
        exc.rows_before = [row for c in run.cells[:index] for row in run.rows[c]]
        raise exc
    if cache is not None:
        cache.prune()
    run.wall_s = time.perf_counter() - start
    return run


def _named(cell, exc):
    """A cell's user error (bad input, a budget) as one line that names the cell."""
    return UserError(f"{cell.label}: {exc}")


def _shared(cell, rep, result):
    """The result of ``cell`` taken from its family's first cell ``rep`` (simulated, with
    ``result``), or None when ``cell``'s policy may act differently in that run."""
    reads = result.get("reads")
    if reads is None:
        return None
    policy = get_policy(cell.policy)
    if not same_behaviour(set(reads), get_policy(rep.policy), policy):
        return None
    rows = [dict(row, policy=policy.name) for row in result["rows"]]
    return {"rows": rows, "seconds": 0.0, "reused": rep}


def _in_process(specs, deps):
    """Yield ``(cell, result)`` simulating the cells in this process, in order (a cell
    that waits for another comes after it: :func:`run_cells`); a cell that failed on
    bad input gives ``{"error": exception}``."""
    done, reps = {}, set(deps.values())
    for cell, spec in specs.items():
        rep = deps.get(cell)
        result = _shared(cell, rep, done[rep]) if rep is not None else None
        if result is None:
            try:
                result = compute_cell(spec)
            except UserError as exc:
                result = {"error": exc}
        if cell in reps:
            done[cell] = result
        yield cell, result


#: where :func:`compute_cell` reports where its cell is, ``sink(label, where)``: the
#: progress bar when cells run in this process, a queue to it in a worker (None: nowhere)
_sink = None


def _report_to(queue) -> None:
    """A worker's initializer: its cells report where they are on ``queue``."""
    global _sink
    _sink = lambda label, where: queue.put((label, where))   # noqa: E731


def _on_processes(specs, jobs, deps=None, started=None, beat=None):
    """Yield ``(cell, result)`` as local worker processes finish them (``deps``: cell ->
    the cell it waits for, submitted once that one is done unless :func:`_shared` gives
    its result from it). Workers ignore Ctrl-C; an interrupted or failed sweep (or one
    whose consumer stops early) terminates them and joins them within a deadline
    (:mod:`sim.engine.workers`) instead of waiting for the cells they run.

    ``beat(label, where)``: called with what the running cells report (:class:`sim.commands.progress.CellBeat`),
    and ``beat(None, None)`` at least every half second while they run."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, wait
    deps = deps or {}
    queue = multiprocessing.SimpleQueue() if beat is not None else None

    def drain():
        while not queue.empty():
            beat(*queue.get())
        beat(None, None)

    with local_pool(min(jobs, len(specs)), *((_report_to, (queue,)) if queue else ())) as pool:
        futures, submitted, waiting = {}, {}, {}

        def submit(cell):
            future = pool.submit(compute_cell, specs[cell])
            futures[future] = cell
            submitted[future] = len(submitted)
            return future

        for cell in specs:
            if cell in deps:
                waiting.setdefault(deps[cell], []).append(cell)
            else:
                submit(cell)
        if started is not None:
            started()   # a fork-started pool has spawned all its workers at its first submit
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5 if queue else None,
                                 return_when=FIRST_COMPLETED)
            if queue:
                drain()     # before the results: a cell's last report precedes its result
            for future in sorted(done, key=submitted.get):
                cell = futures[future]
                result = _result(future)
                yield cell, result
                if "error" in result:
                    continue    # its family's later cells are after a failure: not needed
                for dependent in waiting.pop(cell, ()):
                    reused = _shared(dependent, cell, result)
                    if reused is None:
                        pending.add(submit(dependent))
                    else:
                        yield dependent, reused


def _result(future):
    """A finished cell's result, or ``{"error": exception}`` where it failed on bad input."""
    try:
        return future.result()
    except UserError as exc:
        return {"error": exc}


def _dask_client(address):
    """A client of the dask distributed scheduler at ``address``; one error line if there is none."""
    try:
        from dask.distributed import Client
    except ImportError:
        # (autodiff-sim is not on PyPI: the extra comes from this checkout)
        raise UserError(f"--scheduler needs dask: {sys.executable} -m pip install "
                        f"-e '{ROOT}[dask]'") from None
    try:
        # a malformed address is an error before a client (and its event loop) exists
        from distributed.comm.addressing import get_address_host_port
        get_address_host_port(address)
    except (ValueError, TypeError) as exc:
        raise UserError(f"--scheduler {address}: not a scheduler address, expected "
                        f"tcp://HOST:PORT ({exc})") from None
    client = Client.__new__(Client)
    try:
        client.__init__(address, timeout="10s", set_as_default=False)
    except Exception as exc:
        _discard(client)
        if isinstance(exc, (OSError, TimeoutError, ValueError)):
            raise UserError(f"--scheduler {address}: cannot connect ({exc})") from None
        raise
    return client


def _discard(client) -> None:
    """Let a client whose constructor failed go without closing: its ``__del__`` would
    try to close the connection that was never made, and wait 20 s for it."""
    try:
        client.status = "closed"
        runner = getattr(client, "_loop_runner", None)
        if runner is not None:
            runner.stop()
    except Exception:   # best effort: the object is half-built
        pass


def _on_dask(specs, client):
    """Yield ``(cell, result)`` as the workers of ``client``'s cluster finish them."""
    from dask.distributed import as_completed
    futures = {}
    try:
        for cell, spec in specs.items():
            key = "sim-cell-" + hashlib.sha256(
                json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:24]
            futures[client.submit(compute_cell, spec, key=key, pure=False)] = cell
        for future in as_completed(list(futures), loop=client.loop):
            yield futures[future], _result(future)
    finally:
        try:
            client.cancel(list(futures))
        except Exception:   # the scheduler may be gone already; nothing to cancel then
            pass
        client.close()


def default_jobs() -> int:
    """Local processes for ``--jobs 0`` (auto): the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


# -- the commands ----------------------------------------------------------------------------

DEFAULT_MEASURED = EXPERIMENTS_DIR / "measured" / "seeds-m2max.csv"


def sweep(workloads=("all",), policies=("all",), profile="m2max-macos", measured=(),
          out="results", jobs=1, scheduler=None, force=False, sets=(), progress=True,
          command="", reuse=True, exact=False, max_elements=None, timeout=None,
          max_nodes=None):
    """``sim sweep``: workloads x variants x policies x grid, compared with the measurements.

    Every measured point of the selected workloads is compared with the
    ``burn-0.22.1`` prediction (``pytorch``'s for ``*-pytorch`` experiments);
    those cells run even when their policy was not selected. Writes the results
    directory (see :mod:`sim.output.results`) and returns the run description
    (run.json's content).
    """
    chosen = select_workloads(workloads)
    names = select_policies(policies)
    prof = load_profile(profile)
    warn_host(prof)
    construct_file_policies(names, prof)
    grid = parse_grid(sets, chosen)
    paths = measured_files(list(measured) or [DEFAULT_MEASURED])
    experiments = {e for w in chosen for e in w.measured}
    rows = [r for r in _read_measured(paths, chosen) if r["experiment"] in experiments]
    quick = _with_quick(grid, chosen, rows)
    extra = cells_for(rows, REFERENCE_POLICY, chosen)
    cells = plan_cells(chosen, names, grid, extra)
    info = {"title": "autodiff-sim sweep", "command": command, "policies": names,
            "policy_files": _policy_files(names),
            "reference_cells": any(p not in names for _, _, p in extra), "exact": exact,
            "max_elements": max_elements,
            "quick": quick}
    _budgets(info, timeout, max_nodes)
    with _output_dir(out) as out_dir:
        return _execute(chosen, cells, [REFERENCE_POLICY], rows, paths, prof, grid,
                        out_dir, jobs, scheduler, force, progress, info, reuse)


def _budgets(info, timeout, max_nodes) -> None:
    """A run's time and memory budgets per cell into its description (``info``), where
    given (``max_elements`` is always there)."""
    if timeout is not None:
        info["timeout"] = timeout
    if max_nodes is not None:
        info["max_nodes"] = max_nodes


def _with_quick(grid, workloads, rows) -> dict:
    """Where the measured ``rows`` of one of ``workloads`` come from ``sim measure
    --quick``, put its ``QUICK`` parameters under each of its points of ``grid`` (the
    ``--set`` grid, :func:`parse_grid`; ``--set`` keeps the last word): see
    :func:`sim.analysis.compare.quick_params`. Returns workload name -> those parameters as text,
    for the report."""
    quick = quick_params(rows, workloads)
    for name, params in quick.items():
        grid[name] = [{**params, **point} for point in grid.get(name, [{}])]
    return {name: params_text(tuple(params.items())) for name, params in quick.items()}


def compare(measured, workloads=(), policies=(REFERENCE_POLICY,), profile="m2max-macos",
            out="results/compare", jobs=1, scheduler=None, force=False, sets=(),
            progress=True, command="", reuse=True, figures=True, max_elements=None,
            cache_dir=None, timeout=None, max_nodes=None):
    """``sim compare``: a user's measurements against the predictions of ``policies``.

    Runs only the cells the measured rows need (restricted to ``workloads`` if
    given) and writes the same results directory as :func:`sweep` (without figures
    and report if ``figures`` is false: the CSVs only, as ``sim fixes`` needs).
    ``cache_dir``: where the cells are cached (default ``out``; see :func:`run_cells`);
    ``max_elements``, ``timeout``, ``max_nodes``: each cell's budgets, as :func:`sweep`'s.
    """
    cells, chosen, grid, rows, measured, names, prof, quick = compare_cells(
        measured, workloads, policies, profile, sets)
    warn_host(prof)
    info = {"title": "autodiff-sim compare", "command": command, "policies": names,
            "policy_files": _policy_files(names), "reference_cells": False, "quick": quick,
            "max_elements": max_elements}
    _budgets(info, timeout, max_nodes)
    if not figures:
        info["no_figures"] = True
    with _output_dir(out) as out_dir:
        return _execute(chosen, cells, names, rows, measured, prof, grid, out_dir, jobs,
                        scheduler, force, progress, info, reuse, cache_dir)


def compare_cells(measured, workloads=(), policies=(REFERENCE_POLICY,), profile="m2max-macos",
                  sets=()):
    """The cells :func:`compare` runs, in plan order, and what it reads to plan them:
    ``(cells, workloads, grid, measured rows, measured files, policy names, profile,
    quick parameters as text)``."""
    names = select_policies(policies)
    prof = load_profile(profile)
    construct_file_policies(names, prof)
    measured = measured_files(measured)
    named = select_workloads(workloads) if workloads else []
    rows = _read_measured(measured, named)
    if workloads:
        experiments = {e for w in named for e in w.measured}
        rows = [r for r in rows if r["experiment"] in experiments]
        if not rows:
            raise UserError(f"no measured rows for {', '.join(w.name for w in named)} in "
                            f"{', '.join(map(str, measured))}")
    extra = sorted({cell for policy in names for cell in cells_for(rows, policy, named)})
    if not extra:
        raise UserError(f"no row of {', '.join(map(str, measured))} names a workload to run")
    # the workloads the cells need: the ones named with -w (a user's files among them),
    # else the built-in that predicts the rows' experiment
    by_name = {w.name: w for w in named}
    chosen = [by_name.get(name) or load_workload(name)
              for name in dict.fromkeys(name for name, _, _ in extra)]
    grid = parse_grid(sets, chosen)
    quick = _with_quick(grid, chosen, rows)
    cells = plan_cells(chosen, [], grid, extra)
    return cells, chosen, grid, rows, measured, names, prof, quick


def warn_host(profile, stream=None) -> None:
    """One warning line on stderr when ``profile`` (a Linux profile with a ``[host]``
    table) describes another host than this one (:func:`sim.platform.host.mismatch_warning`)."""
    line = mismatch_warning(profile)
    if line:
        print(line, file=stream or sys.stderr, flush=True)


def _hosts(profile, paths) -> dict:
    """The hosts the report states: the machine the profile describes (its ``[host]`` table
    and ``[meta] platform``, :func:`sim.platform.host.profile_machine`), the measurements'
    (``measure-info.json`` beside each measured file, as ``sim measure`` writes it, where
    recorded), and this machine's kind (``running``) with, where the profile is of another
    kind, the line saying so (``note``, :func:`sim.platform.host.other_kind_note`)."""
    measured = {}
    for path in paths:
        info = Path(path).parent / "measure-info.json"
        host = None
        if info.is_file():
            try:
                machine = json.loads(info.read_text(encoding="utf-8")).get("machine", {})
            except (OSError, ValueError, AttributeError):
                machine = {}
            host = machine.get("host") or ({"cpu_model": machine["cpu"],
                                            "cores": machine.get("cpus")}
                                           if machine.get("cpu") else None)
        measured[str(path)] = describe(host) if host else None
    running = host_kind()
    return {"profile": profile_machine(profile), "measured": measured,
            "kind": profile.data["meta"]["platform"], "running": running,
            "note": other_kind_note(profile, running)}


@contextmanager
def _output_dir(out):
    """The results directory (created if missing, :func:`sim.output.results.prepare_out`) for the
    block; if the block fails, the directories it created are removed again if they are
    still empty (a sweep that failed before any cell finished leaves nothing behind; one
    that cached cells keeps them for the next run to resume from)."""
    path = Path(out).absolute()
    created = []
    while not path.exists() and path.parent != path:
        created.append(path)
        path = path.parent
    out_dir = prepare_out(out)
    try:
        yield out_dir
    except BaseException:
        for directory in created:   # deepest first
            try:
                directory.rmdir()
            except OSError:         # not empty (finished cells, earlier files), or gone
                break
        raise


def _policy_files(names) -> dict:
    """For run.json: each file policy's file and description (the report names them after
    the process that loaded them is gone)."""
    out = {}
    for name in names:
        path = policy_file(name)
        if path:
            cls = get_policy(name)
            out[name] = {"file": path, "changes": cls.changes, "expected": cls.expected,
                         "semantic_change": bool(cls.semantic_change)}
    return out


def _read_measured(paths, workloads=()) -> list:
    """The rows of the measured CSVs ``paths``, checked against the experiments of the
    built-in workloads and of ``workloads`` (the ones selected, a user's files among them)."""
    known = known_checker(workloads)
    rows = []
    for path in paths:
        rows.extend(read_measured(path, known))
    return rows


def _execute(workloads, cells, error_policies, measured, paths, profile, grid, out, jobs,
             scheduler, force, progress, info, reuse=True, cache_dir=None):
    start = time.perf_counter()
    stale = previous_figures(out)
    warm = _FigureWarmUp()
    try:
        run = run_cells(cells, profile, out, jobs, scheduler, force, progress, reuse,
                        started=warm.start, exact=info.get("exact", False),
                        max_elements=info.get("max_elements"), cache_dir=cache_dir,
                        timeout=info.get("timeout"), max_nodes=info.get("max_nodes"))
    except KeyboardInterrupt:
        raise
    except BaseException:
        warm.join()
        raise
    warm.join()
    with_params = any(cell.params for cell in cells)
    runs, produces = [], {}
    for cell in cells:
        w = load_workload(cell.workload)
        runs.append((w.name, w.measured, cell.params_text, cell.policy, run.rows[cell]))
        pairs = produces.setdefault(w.name, [])
        for row in run.rows[cell]:
            if [row["experiment"], row["variant"]] not in pairs:
                pairs.append([row["experiment"], row["variant"]])
    fitted = profile.data.get("calibration", {}).get("points", [])
    errors = join_errors(measured, runs, error_policies, profile.name, fitted)
    values = {}
    for points in grid.values():
        for point in points:
            for key, value in point.items():
                texts = values.setdefault(key, [])
                if _value_text(value) not in texts:
                    texts.append(_value_text(value))
    info["hosts"] = _hosts(profile, paths)
    tlb = tlb_curve_source(profile)
    if tlb:
        info["tlb"] = tlb
    info.update({
        "profile": profile.name, "code_version": run.code,
        "workloads": [{"name": w.name, "description": w.description,
                       "variants": list(w.variants), "experiments": list(w.measured),
                       "produces": produces.get(w.name, [])}
                      for w in workloads],
        "grid": values, "measured": [str(p) for p in paths],
        "cells": len(cells), "cached": run.cached, "computed": run.computed,
        "reused": {cell.label: rep.label for cell, rep in run.reused.items()},
        "jobs": None if scheduler else jobs, "scheduler": scheduler,
        "cells_wall_s": round(run.wall_s, 3),
        "cell_seconds": {cell.label: round(s, 3) for cell, s in run.seconds.items()},
    })
    # the data, figures, report and run.json replace the earlier run's together, at the end
    # (an interrupt before then leaves that run's files as they were)

    def finish(info):
        info["wall_s"] = round(time.perf_counter() - start, 3)
    if progress and not info.get("no_figures") and sys.stderr.isatty():
        # the figures and report take seconds after the bar's "done" (a terminal only)
        print("drawing the figures and the report ...", file=sys.stderr, flush=True)
    publish(out, info, stale, jobs=jobs, finish=finish,
            figures=not info.pop("no_figures", False),
            data=(run.ordered_rows(with_params), errors, with_params))
    return info


def tlb_curve_source(profile) -> str | None:
    """What the orphan sweep's data TLB misses come from on ``profile`` (a sentence for the
    report's *What was run*), or None where it models no TLB."""
    process, time = profile.data["process"], profile.data["time"]
    if not (process.get("dtlb_entries") and process.get("dtlb_ways")
            and time.get("sweep_tlb_read_ns")):
        return None
    if time.get("sweep_tlb_order_reads"):
        layouts = sorted(set(time.get("sweep_tlb_order_spacing") or []))
        at = (f", on {len(layouts)} key layouts ("
              + ", ".join(f"{s:g}" for s in layouts) + " B a key), each graph reading those "
              "of its own key spacing" if len(layouts) > 1 else "")
        return ("the miss curve measured in the orphan sweep's own order and key spacing "
                f"(sweep-scan `order` rows, [time] sweep_tlb_order_*{at})")
    if time.get("sweep_tlb_miss_reads"):
        return ("the random-order miss curve (sweep-scan `tlbr` rows; the profile has no "
                "sweep_tlb_order_* curve in the sweep's own order)")
    return "the TLB's size and ways (no measured miss curve on this profile's host)"
