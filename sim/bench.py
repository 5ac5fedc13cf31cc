"""``sim bench``: how fast the simulator runs, on a fixed set of cases.

Each case is a small program against the tensor API, run in exact mode and with
fast-forward; we report simulated ops per second of wall time (an op is one
registered step: a tensor op on an autodiff device, a root), Python heap bytes
per live simulated node in exact mode (tracemalloc; the nodes the add loops
leave in the locator: dead untracked single-node graphs, which exact mode keeps
as run records, and a's graph's dead nodes, kept as objects), the wall time of
the seed's EMA run extended to 20,000 steps (``p10-ema`` detach: its chain grows and its
sweep costs more every step; fast-forward builds the chain, :mod:`sim.chainrun`), and the
process's peak RSS. Timings on a shared
2-core machine are noisy: compare ratios within one run.

Under a profile whose allocator is a glibc arena (``--profile linux-x86_64``),
fast-forward applies a loop that leaves nodes behind in closed form only where its
iterations qualify for a carve run (:mod:`sim.arenarun`); otherwise it replays every
iteration's heap events on the arena (:mod:`sim.fastforward`). A run of
:data:`ARENA_PROBE_ITERATIONS` iterations of each add loop tells how much; a case
that replays more than :data:`ARENA_REPLAY_CAP_SHARE` of it runs
:data:`ARENA_FF_ITERATIONS` iterations rather than 10^9, and the table says so.
"""

from __future__ import annotations

import gc
import json
import resource
import time
import tracemalloc

from .costs.rss import Allocator
from .engine import Limits, Simulation
from .profile import load_profile
from .tensor import Tensor, drop

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
    from .nn import Mlp
    dev = sim.device("flex").autodiff()
    model = Mlp(64, 64, 64, dev)
    x = Tensor.random((8, 64), dev)
    before = sim.registered

    def body():
        model.forward(x.clone()).sum().into_scalar()
    sim.repeat(n, body)
    return sim.registered - before


def _ema_step(sim, n):
    from .nn import Linear
    from .optim import GradientsParams, Sgd
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


def _run_case(program, n, fast_forward, profile):
    sim = Simulation(profile, fast_forward=fast_forward, limits=Limits(max_ops=10 ** 12))
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        ops = program(sim, n)
        wall = time.perf_counter() - start
    finally:
        sim.heap.close()     # the case is over: collecting it frees nothing
        gc.enable()
    return ops, wall, sim


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
            ops, wall, _ = _run_case(program, n, mode == "fast-forward", prof)
            results.append({"case": name, "mode": mode, "iterations": n, "ops": ops,
                            "wall_s": round(wall, 4),
                            "ops_per_s": round(ops / wall) if wall > 0 else None})
            if echo:
                echo(f"  {name:<24} {mode:<13} {n:>13,} iterations  {wall:8.3f} s  "
                     f"{ops / wall if wall else float('inf'):>14,.0f} ops/s")
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
            "python_bytes_per_live_node": per_node, "scale": scale,
            "peak_rss_bytes": peak}


def _ema_run(profile, steps, echo=None, variant="detach", policy="burn-0.22.1",
             workload="p10-ema", report_every=None):
    """The seed's EMA run extended to ``steps`` steps (``workload``'s ``variant`` under
    ``policy``, its CSV rows included; ema-balanced's chain keeps each step's weight in
    its Balanced backups, :mod:`sim.keptchain`): wall seconds, and how many steps fast-forward
    applied as a growing chain (:mod:`sim.chainrun`) or by replaying their heap events
    (``drift``: ``target`` under detach-constant, whose tape deepens every step); the
    others ran exactly (the first of each report interval, the probes, the steps that
    resize the chain's tables); ``log`` under burn-0.20-pre.1 leaks a graph every step,
    whose skipped steps are built again (:mod:`sim.leakrun`)."""
    from .runner import run_cell
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
    lines = [f"{'case':<24} {'mode':<13} {'iterations':>14} {'wall s':>9} {'ops/s':>14}"]
    for r in result["cases"]:
        lines.append(f"{r['case']:<24} {r['mode']:<13} {r['iterations']:>14,} "
                     f"{r['wall_s']:>9.3f} {r['ops_per_s'] or 0:>14,}")
    for case in result.get("arena_replay") or ():
        line = (f"{case['case']}: on the glibc arena fast-forward replays "
                f"{case['replayed_share']:.2%} of a {case['probe_iterations']:,}-iteration "
                f"loop one iteration at a time (where the bins serve its requests), the "
                f"rest in carve runs")
        if case.get("capped"):
            line += f"; its row is capped at {ARENA_FF_ITERATIONS:,} iterations (--quick: /20)"
        lines.append(line)
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
