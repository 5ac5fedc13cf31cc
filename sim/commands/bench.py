"""``sim bench``: how fast the simulator runs, on a fixed set of cases.

Each case is a small program against the tensor API, run in exact mode and with
fast-forward; we report simulated ops per second of wall time and of the process's CPU
time (an op is one registered step: a tensor op on an autodiff device, a root), Python heap bytes
per live simulated node in exact mode (tracemalloc; the nodes the add loops
leave in the locator: dead untracked single-node graphs, which exact mode keeps
as run records, and a's graph's dead nodes, kept as objects), the wall time of
the seed's EMA run extended to 20,000 steps (``p10-ema`` detach: its chain grows and its
sweep costs more every step; fast-forward builds the chain, :mod:`sim.engine.fastforward.chainrun`), and the
process's peak RSS. Timings on a shared
2-core machine are noisy: compare ratios within one run.

The **event floor** puts the exact add loops in proportion: every allocation and free of
burn's bookkeeping is one event on the simulated heap (:mod:`sim.platform.heap`), and every
Rust object an op builds (node, ref count, step, tensor handles, a graph and its tables)
is one Python object, so an op costs at least its events and its constructors. The bench
counts both per op in its exact runs (the constructors with a profile hook on a short
run that builds every object burn builds: the exact engine leaves out some, such as the
server of an untracked op's graph that dies at once, and the floor does not) and times that many calls on :class:`_CountingHeap`, a heap that only counts live
bytes and blocks, and that many constructions of :class:`_Record`, three slots set in
``__init__`` (no size classes, no residency, no locator, no time): the most a Python
engine that mirrors those objects and events could reach on this machine, measured in the
same process and minute as the cases. The floor and the exact runs it is compared with are
timed in CPU seconds of this process, so that other jobs on a shared machine, which take
the core for a while during one of them and not the other, do not move the fraction.

Under a profile whose allocator is a glibc arena (``--profile linux-x86_64``),
fast-forward applies a loop that leaves nodes behind in closed form only where its
iterations qualify for a carve run (:mod:`sim.engine.fastforward.arenarun`); otherwise it replays every
iteration's heap events on the arena (:mod:`sim.engine.fastforward.repeat`). A run of
:data:`ARENA_PROBE_ITERATIONS` iterations of each add loop tells how much; a case
that replays more than :data:`ARENA_REPLAY_CAP_SHARE` of it runs
:data:`ARENA_FF_ITERATIONS` iterations rather than 10^9, and the table says so.
"""

from __future__ import annotations

import gc
import json
from itertools import repeat
import resource
import sys
import time
import tracemalloc

from ..platform.rss import Allocator
from ..engine.simulation import Limits, Simulation
from ..burn.nn import Mlp, Linear
from ..burn.optim import GradientsParams, Sgd, OPTIMIZERS
from ..engine.profile import load_profile
from ..burn.tensor import Tensor, drop
from ..paths import PACKAGE_PREFIX
from ..engine.runner import run_cell

__all__ = ["CASES", "run_bench", "format_table"]


def _add_loop(sim, n, tracked):
    """The adleak loop: ``drop(a.clone() + b.clone())``, with ``a`` requiring grad or not."""
    dev = sim.device("flex").autodiff()
    a = Tensor.from_floats([1.0] * 16, dev)
    b = Tensor.from_floats([2.0] * 16, dev)
    if tracked:
        a.require_grad()

    def body():
        drop(a.clone() + b.clone())
    sim.repeat(n, body)
    return n


def _untracked(sim, n):
    return _add_loop(sim, n, tracked=False)


def _tracked(sim, n):
    return _add_loop(sim, n, tracked=True)


def _mlp_forward(sim, n):
    dev = sim.device("flex").autodiff()
    model = Mlp(64, 64, 64, dev)
    x = Tensor.random((8, 64), dev)
    before = sim.registered

    def body():
        model.forward(x.clone()).sum().into_scalar()
    sim.repeat(n, body)
    return sim.registered - before


def _ema_step(sim, n):
    dev = sim.device("flex").autodiff()
    model = Linear(64, 64, dev)
    x = Tensor.random((8, 64), dev)
    optim = Sgd(sim)
    state = {"ema": model.weight.val().detach()}
    before = sim.registered

    def body():
        loss = model.forward(x.clone()).powi_scalar(2).mean()
        grads = GradientsParams.from_grads(loss.backward(), model)
        optim.step(1e-3, model, grads)
        state["ema"] = state["ema"] * 0.99 + model.weight.val().detach() * 0.01
    sim.repeat(n, body)
    return sim.registered - before


def _three_untracked_ops(sim, n):
    """A body of several untracked ops in a row, each output dropped."""
    dev = sim.device("flex").autodiff()
    a = Tensor.from_floats([1.0] * 16, dev)
    b = Tensor.from_floats([2.0] * 16, dev)
    before = sim.registered

    def body():
        drop((a.clone() + b.clone()).mul_scalar(2.0).exp())
    sim.repeat(n, body)
    return sim.registered - before


def _backward_every_kth(sim, n, k=10):
    """A leaf that requires grad: ``k - 1`` dead tracked ops, then a backward through it
    (the loop is written as nested repeats, as fast-forward needs)."""
    dev = sim.device("flex").autodiff()
    a = Tensor.from_floats([1.0] * 16, dev).require_grad()
    b = Tensor.from_floats([2.0] * 16, dev)
    before = sim.registered

    def round_():
        sim.repeat(k - 1, lambda: drop(a.clone() * b.clone()))
        (a.clone() * b.clone()).sum().backward()
    sim.repeat(max(1, n // k), round_)
    return sim.registered - before


def training_step(sim, optimizer, validation_loss=False):
    """The body of the training loop kinds: one step of a 2-layer MLP with ``optimizer``;
    with ``validation_loss`` also a validation forward whose loss is summed across steps
    (a tracked chain never backwarded, the classic leak). Returns ``(body, state)``:
    ``state["model"]`` the current model, ``state["total"]`` the running total."""
    dev = sim.device("flex").autodiff()
    state = {"model": Mlp(32, 32, 32, dev), "total": Tensor.zeros((1,), dev)}
    x = Tensor.random((8, 32), dev)
    optim = OPTIMIZERS[optimizer](sim)

    def body():
        model = state["model"]
        loss = model.forward(x.clone()).powi_scalar(2).mean()
        grads = GradientsParams.from_grads(loss.backward(), model)
        state["model"] = model = optim.step(1e-3, model, grads)
        if validation_loss:
            state["total"] = state["total"] + model.forward(x.clone()).mean()
    return body, state


def _training(optimizer, validation_loss=False):
    """The loop kind of :func:`training_step` repeated."""
    def program(sim, n):
        body, _ = training_step(sim, optimizer, validation_loss)
        before = sim.registered
        sim.repeat(n, body)
        return sim.registered - before
    return program


#: the loop kinds fast-forward is asked to cover: name -> (program, iterations; --quick:
#: the second count); each runs exactly and with fast-forward, timed in CPU seconds
LOOP_KINDS = {
    "three untracked ops": (_three_untracked_ops, 50_000, 2_000),
    "backward every 10th": (_backward_every_kth, 20_000, 1_000),
    "training step, SGD": (_training("sgd"), 2_000, 100),
    "training step, Adam": (_training("adam"), 2_000, 100),
    "inference forward": (_mlp_forward, 5_000, 200),
    "validation loss summed": (_training("adam", validation_loss=True), 400, 60),
}

#: how much faster than exact mode fast-forward is asked to run each loop kind
LOOP_KIND_TARGET_SPEEDUP = 10


def _loop_kinds(profile, quick, echo=None):
    """Each loop kind in exact mode and with fast-forward: CPU seconds of each (the
    process's, so that a shared machine's other work does not count; the program's, as
    :data:`CASES` are timed: the collection before it, which walks every live object of
    the process, is the harness's), the speed-up, and whether the two runs ended in the
    same state (heap, registered steps, simulated time)."""
    kinds = []
    for name, (program, n, n_quick) in LOOP_KINDS.items():
        n = n_quick if quick else n
        cpu, ends = {}, {}
        for mode in ("exact", "fast-forward"):
            gc.collect()
            # the program's run alone, as the other cases time it (not the simulation's
            # set-up and the full collection before the run: about 13 ms of either mode)
            ops, _, cpu[mode], sim = _timed_case(program, n, mode == "fast-forward",
                                                 profile)
            ends[mode] = (sim.heap.live_bytes, sim.heap.live_blocks, sim.registered,
                          sim.work_ps)
            # the iterations fast-forward applied in closed form, by shape (the rest ran
            # exactly: probes, and iterations the horizon kept out of a batch)
            applied = {shape: k for shape, k in sorted(sim.ff_applied.items()) if k}
            # the next run's timed gc.collect() must not walk this run's live objects
            sim = None
        speedup = cpu["exact"] / cpu["fast-forward"] if cpu["fast-forward"] > 0 else None
        kinds.append({"kind": name, "iterations": n, "ops": ops,
                      "exact_cpu_s": round(cpu["exact"], 3),
                      "ff_cpu_s": round(cpu["fast-forward"], 3),
                      "speedup": round(speedup, 2) if speedup else None,
                      "applied": applied,
                      "same_end": ends["exact"] == ends["fast-forward"]})
        if echo:
            echo(f"  {name:<24} {n:>7,} iterations  exact {cpu['exact']:7.2f} s  "
                 f"fast-forward {cpu['fast-forward']:7.2f} s  "
                 f"x{speedup or float('inf'):.1f}  applied: {_applied_text(applied)}")
    return kinds


def _applied_text(applied) -> str:
    """The iterations fast-forward applied in closed form, by shape (``chain 176``; a
    nested loop's inner iterations count as the inner loop's), or ``none`` (every
    iteration ran exactly)."""
    if not applied:
        return "none"
    return ", ".join(f"{shape} {k:,}" for shape, k in applied.items())


#: fast-forward's iterations of an add loop that a glibc arena replays iteration by
#: iteration instead of applying in closed form
ARENA_FF_ITERATIONS = 1_000_000
#: iterations of the run that tells how much of a loop the arena replays, and the share
#: of replayed iterations above which the case is capped at ARENA_FF_ITERATIONS
ARENA_PROBE_ITERATIONS = 1_000_000
ARENA_REPLAY_CAP_SHARE = 0.01

#: name -> (program, iterations in exact mode, iterations with fast-forward)
CASES = {
    "untracked add loop": (_untracked, 200_000, 1_000_000_000),
    "tracked add loop": (_tracked, 200_000, 1_000_000_000),
    "MLP forward": (_mlp_forward, 2_000, 2_000),
    "EMA step with backward": (_ema_step, 1_000, 1_000),
}

#: simulated ops per second the engine-speed issue asks of the exact add loops
TARGET_OPS_PER_S = 300_000

#: the cases whose exact runs the event floor is taken for (the issue's add loops)
FLOOR_CASES = ("untracked add loop", "tracked add loop")


def _run_case(program, n, fast_forward, profile):
    """``program`` run ``n`` iterations: ``(ops, wall seconds, simulation)``."""
    ops, wall, _, sim = _timed_case(program, n, fast_forward, profile)
    return ops, wall, sim


def _timed_case(program, n, fast_forward, profile):
    """``program`` run ``n`` iterations: ``(ops, wall seconds, CPU seconds of this
    process, simulation)``."""
    sim = Simulation(profile, fast_forward=fast_forward, limits=Limits(max_ops=10 ** 12))
    gc.collect()
    gc.disable()
    try:
        start, cpu_start = time.perf_counter(), time.process_time()
        ops = program(sim, n)
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
    finally:
        sim.heap.close()     # the case is over: collecting it frees nothing
        gc.enable()
    return ops, wall, cpu, sim


class _CountingHeap:
    """The least a heap event can do: count live bytes and blocks (one call per event)."""

    __slots__ = ("live_bytes", "live_blocks")

    def __init__(self):
        self.live_bytes = 0
        self.live_blocks = 0

    def alloc(self, nbytes):
        self.live_bytes += nbytes
        self.live_blocks += 1

    def free(self, nbytes):
        self.live_bytes -= nbytes
        self.live_blocks -= 1


class _Record:
    """The least a mirrored Rust object can be: three slots set in ``__init__``."""

    __slots__ = ("a", "b", "c")

    def __init__(self, a, b, c):
        self.a = a
        self.b = b
        self.c = c


def _constructors_per_op(program, profile, n=200):
    """Rust objects built per op in ``n`` exact iterations of ``program``, less its set-up
    (counted on a run of 1): calls of the package's ``__init__`` methods in a run that
    builds every graph's server when the graph is created, as burn does (an exact run
    defers the server of an untracked op's new graph and seldom builds it:
    :class:`~sim.burn.runtime.graph.SingleNodeGraph`; the floor stays the cost of burn's
    objects, not of the fewer the engine builds)."""
    def count(iterations):
        calls = [0]

        def hook(frame, event, arg):
            if event == "call" and frame.f_code.co_name == "__init__" and \
                    frame.f_code.co_filename.startswith(PACKAGE_PREFIX):
                calls[0] += 1
        sim = Simulation(profile, fast_forward=False, limits=Limits(max_ops=10 ** 12))
        sim.defer_servers = False
        sys.setprofile(hook)
        try:
            ops = program(sim, iterations)
        finally:
            sys.setprofile(None)
            sim.heap.close()
        return calls[0], ops
    calls_1, ops_1 = count(1)
    calls_n, ops_n = count(n)
    return (calls_n - calls_1) / (ops_n - ops_1)


def _events_per_op(sim, ops):
    """Heap allocations and frees per op of a finished exact run (``realloc`` counts as
    neither: it keeps its block)."""
    heap = sim.heap
    return heap.allocs / ops, (heap.allocs - heap.live_blocks) / ops


def _event_floor(allocs_per_op, frees_per_op, objects_per_op, ops):
    """Ops per CPU second (this process's: what other jobs on a shared machine take does
    not count, as in the exact runs' ``cpu_s``) of ``ops`` ops that only make their heap
    events, each a method call on :class:`_CountingHeap`, and build their objects, each a
    :class:`_Record`, with the collector off as in a run (the objects are dropped at once:
    no memory grows)."""
    heap = _CountingHeap()
    alloc, free = heap.alloc, heap.free
    n_alloc, n_free = round(allocs_per_op * ops), round(frees_per_op * ops)
    n_objects = round(objects_per_op * ops)
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        for _ in repeat(None, n_alloc):
            alloc(48)
        for _ in repeat(None, n_free):
            free(48)
        for _ in repeat(None, n_objects):
            _Record(1, 2, 3)
        cpu = time.process_time() - start
    finally:
        gc.enable()
    return ops / cpu if cpu > 0 else None


def _bytes_per_node(profile, program, n=20_000):
    """Python heap per live simulated node in exact mode: the nodes ``n`` iterations of
    ``program`` leave in the locator (dead untracked graphs, or a's graph's nodes)."""
    gc.collect()
    gc.disable()  # as during a simulation run: what reference cycles keep counts too
    try:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        sim = Simulation(profile, fast_forward=False)
        program(sim, n)
        used = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
    finally:
        gc.enable()
    return used / n


def run_bench(profile="m2max-macos", quick=False, echo=None):
    """Run every case; returns a JSON-able dict of results."""
    prof = load_profile(profile)
    arena = not Allocator.from_classes(prof.process.allocator).bulk_exact()
    results = []
    replayed = []
    floor = []
    for name, (program, n_exact, n_ff) in CASES.items():
        for mode, n in (("exact", n_exact), ("fast-forward", n_ff)):
            if mode == "fast-forward" and arena and n > ARENA_FF_ITERATIONS:
                probe = ARENA_PROBE_ITERATIONS // (20 if quick else 1)
                _, _, sim = _run_case(program, probe, True, prof)
                share = sim.arena_replayed / max(1, sim.arena_replayed + sim.arena_carved)
                replayed.append({"case": name, "probe_iterations": probe,
                                 "replayed_share": round(share, 4)})
                if share > ARENA_REPLAY_CAP_SHARE:
                    n = ARENA_FF_ITERATIONS
                    replayed[-1]["capped"] = True
            if quick:
                n = max(n // 20, 50)
            ops, wall, cpu, sim = _timed_case(program, n, mode == "fast-forward", prof)
            results.append({"case": name, "mode": mode, "iterations": n, "ops": ops,
                            "wall_s": round(wall, 4),
                            "ops_per_s": round(ops / wall) if wall > 0 else None,
                            "cpu_s": round(cpu, 4),
                            "ops_per_cpu_s": round(ops / cpu) if cpu > 0 else None})
            if echo:
                echo(f"  {name:<24} {mode:<13} {n:>13,} iterations  {wall:8.3f} s  "
                     f"{ops / wall if wall else float('inf'):>14,.0f} ops/s")
            if mode == "exact" and name in FLOOR_CASES:
                allocs, frees = _events_per_op(sim, ops)
                objects = _constructors_per_op(program, prof)
                rate = _event_floor(allocs, frees, objects, ops)
                floor.append({"case": name, "allocs_per_op": round(allocs, 3),
                              "frees_per_op": round(frees, 3),
                              "objects_per_op": round(objects, 3),
                              "ops_per_s": round(rate) if rate else None})
                if echo and rate:
                    echo(f"  {name:<24} {'event floor':<13} {ops:>13,} ops         "
                         f"{'':8}    {rate:>14,.0f} ops/s")
    kinds = _loop_kinds(prof, quick, echo)
    n_nodes = 2_000 if quick else 20_000
    per_node = {name: round(_bytes_per_node(prof, CASES[name][0], n_nodes))
                for name in ("untracked add loop", "tracked add loop")}
    scale = [_ema_run(prof, 1_000 if quick else 20_000, echo),
             _ema_run(prof, 500 if quick else 2_000, echo, "target", "detach-constant"),
             _ema_run(prof, 500 if quick else 2_000, echo, "log", "burn-0.20-pre.1"),
             _ema_run(prof, 1_000 if quick else 20_000, echo, workload="ema-balanced",
                      report_every=1_000)]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"profile": prof.name, "arena_replay": replayed, "cases": results,
            "event_floor": floor, "loop_kinds": kinds,
            "python_bytes_per_live_node": per_node, "scale": scale,
            "peak_rss_bytes": peak}


def _ema_run(profile, steps, echo=None, variant="detach", policy="burn-0.22.1",
             workload="p10-ema", report_every=None):
    """The seed's EMA run extended to ``steps`` steps (``workload``'s ``variant`` under
    ``policy``, its CSV rows included; ema-balanced's chain keeps each step's weight in
    its Balanced backups, :mod:`sim.engine.fastforward.keptchain`): wall seconds, and how many steps fast-forward
    applied as a growing chain (:mod:`sim.engine.fastforward.chainrun`) or by replaying their heap events
    (``drift``: ``target`` under detach-constant, whose tape deepens every step); the
    others ran exactly (the first of each report interval, the probes, the steps that
    resize the chain's tables); ``log`` under burn-0.20-pre.1 leaks a graph every step,
    whose skipped steps are built again (:mod:`sim.engine.fastforward.leakrun`)."""
    gc.collect()
    kept = []
    start = time.perf_counter()
    sets = {"steps": steps}
    if report_every:
        sets["report_every"] = report_every
    run_cell(workload, variant, policy=policy, profile=profile, sets=sets, keep=kept)
    wall = time.perf_counter() - start
    name = f"{workload} {variant}, {steps:,} steps"
    if policy != "burn-0.22.1":
        name += f", {policy}"
    sim = kept[0]
    chained, drifted, leaked = sim.chain_applied, sim.drift_applied, sim.leak_applied
    how = (f"{leaked:,} leaking steps built" if leaked else
           f"{chained:,} steps as a chain" if chained or not drifted
           else f"{drifted:,} steps replayed")
    if echo:
        echo(f"  {name:<38} {wall:8.3f} s  ({how})")
    return {"run": name, "steps": steps, "wall_s": round(wall, 3), "chain_steps": chained,
            "drift_steps": drifted, "leak_steps": leaked}


def format_table(result) -> str:
    lines = [f"{'case':<24} {'mode':<13} {'iterations':>14} {'wall s':>9} {'ops/s':>14} "
             f"{'cpu s':>9} {'ops/cpu s':>14}"]
    for r in result["cases"]:
        line = (f"{r['case']:<24} {r['mode']:<13} {r['iterations']:>14,} "
                f"{r['wall_s']:>9.3f} {r['ops_per_s'] or 0:>14,}")
        if "cpu_s" in r:
            line += f" {r['cpu_s']:>9.3f} {r['ops_per_cpu_s'] or 0:>14,}"
        lines.append(line)
    for f in result.get("event_floor") or ():
        # the floor is timed in CPU seconds; results without them compare wall times
        exact = next((r.get("ops_per_cpu_s", r["ops_per_s"]) for r in result["cases"]
                      if r["case"] == f["case"] and r["mode"] == "exact"), None)
        line = (f"event floor ({f['case']}): its {f['allocs_per_op']:.2f} heap "
                f"allocations, {f['frees_per_op']:.2f} frees and {f['objects_per_op']:.2f} "
                f"objects per op alone (each event one call on a heap that only counts, "
                f"each object three slots) run at {f['ops_per_s'] or 0:,} ops/s")
        if f["ops_per_s"] and f["ops_per_s"] < TARGET_OPS_PER_S:
            line += f", under the {TARGET_OPS_PER_S:,} ops/s the engine-speed issue asks"
        if exact and f["ops_per_s"]:
            line += f"; the exact engine runs at {exact / f['ops_per_s']:.1%} of the floor"
        lines.append(line)
    for case in result.get("arena_replay") or ():
        line = (f"{case['case']}: on the glibc arena fast-forward replays "
                f"{case['replayed_share']:.2%} of a {case['probe_iterations']:,}-iteration "
                f"loop one iteration at a time (where the bins serve its requests), the "
                f"rest in carve runs")
        if case.get("capped"):
            line += f"; its row is capped at {ARENA_FF_ITERATIONS:,} iterations (--quick: /20)"
        lines.append(line)
    kinds = result.get("loop_kinds") or ()
    if kinds:
        lines.append(f"{'loop kind':<24} {'iterations':>10} {'exact cpu s':>12} "
                     f"{'ff cpu s':>9} {'speed-up':>9}  iterations applied in closed form")
    for kind in kinds:
        speedup = kind["speedup"]
        note = "" if speedup and speedup >= LOOP_KIND_TARGET_SPEEDUP else \
            f"  under the x{LOOP_KIND_TARGET_SPEEDUP} asked"
        if not kind["same_end"]:
            note += "  (fast-forward ended elsewhere than exact mode)"
        applied = _applied_text(kind.get("applied") or {})
        lines.append(f"{kind['kind']:<24} {kind['iterations']:>10,} "
                     f"{kind['exact_cpu_s']:>12.2f} {kind['ff_cpu_s']:>9.2f} "
                     f"{'x' + format(speedup, '.1f') if speedup else 'inf':>9}  "
                     f"{applied}{note}")
    for name, nbytes in result["python_bytes_per_live_node"].items():
        lines.append(f"Python memory per live simulated node ({name}, exact mode): {nbytes} B")
    for run in result.get("scale", ()):
        if run.get("leak_steps"):
            how = (f"{run['leak_steps']:,} of them fast-forwarded by replaying their heap "
                   f"events and building the graph each leaks")
        elif run.get("drift_steps") and not run["chain_steps"]:
            how = (f"{run['drift_steps']:,} of them fast-forwarded by replaying their heap "
                   f"events")
        else:
            how = f"{run['chain_steps']:,} of them fast-forwarded as a growing chain"
        lines.append(f"{run['run']}: {run['wall_s']:.1f} s ({how}, the rest exact)")
    lines.append(f"peak RSS of this process: {result['peak_rss_bytes'] / 1e6:.1f} MB")
    return "\n".join(lines) + "\n"


def to_json(result) -> str:
    return json.dumps(result, indent=1, sort_keys=True) + "\n"
