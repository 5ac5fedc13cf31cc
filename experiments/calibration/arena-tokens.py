#!/usr/bin/env python3
"""The summed validation loss's steps on glibc's arena as address-free programs: are they
exact, how many templates predict, and what making one costs (issue 39).

The bench's program (`sim bench`'s loop kind "validation loss summed": a 32-32-32 MLP,
Adam, input [8, 32], each step's validation mean added to a running total) runs in exact
mode on linux-x86_64, step by step. At each step of STEPS the arena's requests are logged
as tokens (`arenatokens.TokenLog`: a free named by its rank among the live blocks of its
size), each tagged with the part of the step that made it (`own`, `walk`, `unav`,
`useful`, `sweep`, as `arena-step-events.py` tags them). The step's program is the runs
of one part each, in order, every run compressed on its own (`arenatokens.runs_of`:
runs of frees, repeated bodies, balanced runs the tcache served folded, but for the
parts named by --unfolded).

Printed per step: requests, the program's items; `exact`: the whole program made by the
compiled `PtmallocArena.run_program` on a copy of the arena taken before the step ends as
exact mode's arena (`state()`: every chunk, bin, tcache and fastbin entry, plus the live
lists in order) and with its heap counters (allocation calls, live bytes and blocks,
peak); `bare`: the same without the folded runs' tokens; the replay's CPU ms (best of 3)
against the step's own CPU ms in a second, unlogged simulation run alongside; which runs
a template predicted (`y`), and whether the step's program with the passes' runs (walk,
unav, useful) as their templates wrote them and the rest as logged is exact (`short`:
wrong, and a folded run found its bins short; `silent`: wrong otherwise). A template of a
run is fitted over its --points latest occurrences PERIOD steps apart (`arenatokens.fit`,
loose: the folded runs' calls only in their sum), for each PERIOD up to --periods; the
first that fits is chosen before the step is seen. At the end, the counts per part.

Run it (not pinned; about 0.2 s of CPU a step at step 200):

    python3 experiments/calibration/arena-tokens.py 100-300
    python3 experiments/calibration/arena-tokens.py 100-300 --no-time --periods 1 \
        --unfolded unav
"""
import argparse
import collections
import copy
import time

from sim.burn.runtime import graph as graph_mod
from sim.burn.runtime import pass_blocks
from sim.commands.bench import training_step
from sim.engine.fastforward import arenatokens
from sim.engine.profile import load_profile
from sim.engine.simulation import Limits, Simulation

PART = ["own"]
PERIODS = list(range(1, 9))
LOOSE = [True]
UNFOLDED = []
POINTS = [3]
PASSES = ("walk", "unav", "useful")


def tag(owner, name, part):
    """Requests made inside ``owner.name`` count as ``part``'s."""
    call = getattr(owner, name)

    def tagged(*args, **kwargs):
        outer, PART[0] = PART[0], part
        try:
            return call(*args, **kwargs)
        finally:
            PART[0] = outer
    setattr(owner, name, tagged)


def _ignore(*args):
    pass


def arena_copy(arena):
    """A copy of ``arena`` alone (its fault and trim hooks, the simulation's, not copied:
    the copy's do nothing)."""
    hooks = arena.fault, arena.trim
    arena.fault = arena.trim = None
    try:
        spare = copy.deepcopy(arena)
    finally:
        arena.fault, arena.trim = hooks
    spare.fault = spare.trim = _ignore
    return spare


def alike(guess, actual):
    """Whether two programs make the same requests but for how their folded runs' calls
    are shared out (same shape, the same numbers elsewhere, the same calls in all)."""
    folded = []
    shape, numbers = arenatokens.shape_of(guess, folded)
    other_shape, other = arenatokens.shape_of(actual)
    if shape != other_shape:
        return False
    loose = {at for at, _ in folded}
    return (all(a == b for i, (a, b) in enumerate(zip(numbers, other)) if i not in loose)
            and arenatokens.flatten(guess).allocs == arenatokens.flatten(actual).allocs)


def arena_key(arena):
    return arena.state(), {n: list(b) for n, b in arena.live.items() if b}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", help="steps to log, e.g. 100-200")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--unfolded", default="",
                    help="parts whose balanced runs are not folded, e.g. unav,useful")
    ap.add_argument("--periods", type=int, default=8,
                    help="the longest period a template is fitted over (1: each run from "
                         "the steps right before it)")
    ap.add_argument("--points", type=int, default=3,
                    help="occurrences a template is fitted over (the chosen period: the "
                         "smallest whose occurrences so many steps apart fit)")
    a = ap.parse_args()
    POINTS[0] = a.points
    UNFOLDED[:] = [part for part in a.unfolded.split(",") if part]
    PERIODS[:] = range(1, a.periods + 1)
    first, _, last = a.steps.partition("-")
    first, last = int(first), int(last or first)
    tag(pass_blocks, "_passes_block_by_block", "walk")
    tag(pass_blocks._BlockPasses, "useful_propagation", "useful")
    tag(pass_blocks._BlockPasses, "unavailable_propagation", "unav")
    tag(graph_mod.GraphCleaner, "cleanup_orphaned_entries", "sweep")
    sim = Simulation(load_profile("linux-x86_64"), fast_forward=False,
                     limits=Limits(max_ops=10 ** 12))
    logged = arenatokens.TokenLog(sim.heap._arena, lambda: PART[0])
    sim.heap._arena = logged
    body, _ = training_step(sim, "adam", validation_loss=True)
    plain = Simulation(load_profile("linux-x86_64"), fast_forward=False,
                       limits=Limits(max_ops=10 ** 12))
    plain_body, _ = training_step(plain, "adam", validation_loss=True)

    history = {}
    hits = collections.defaultdict(collections.Counter)
    exact_steps = bare_steps = 0
    ms_replay = ms_step = 0.0
    for k in range(1, last + 1):
        t0 = time.process_time()
        plain_body()
        step_ms = (time.process_time() - t0) * 1e3
        if k < first:
            body()
            continue
        heap = sim.heap
        before = arena_copy(logged.arena)
        counters = (heap.allocs, heap.live_bytes, heap.live_blocks, heap.peak_bytes)
        logged.__dict__["log"] = []
        body()
        log = logged.log
        logged.__dict__["log"] = None
        kept = arenatokens.runs_of(log, True, UNFOLDED)
        runs = arenatokens.runs_of(log, False, UNFOLDED)
        history[k] = runs
        items = [item for _, part_items in kept for item in part_items]
        program = arenatokens.flatten(items)
        best = float("inf")
        for _ in range(1 if a.no_time else 3):
            spare = arena_copy(before)
            t0 = time.process_time()
            spare.run_program(program.flat)
            best = min(best, time.process_time() - t0)
        same = arena_key(spare) == arena_key(logged.arena)
        # the folded program without the folded runs' tokens: exact where every folded
        # run finds its bins as deep as it needs
        bare = arenatokens.flatten([item for _, part_items in runs for item in part_items])
        spare = arena_copy(before)
        short = spare.run_program(bare.flat)
        bare_exact = short == 0 and arena_key(spare) == arena_key(logged.arena)
        bare_steps += bare_exact
        allocs, live, blocks, peak0 = counters
        peak = max(peak0, live + program.peak)
        same_counters = (allocs + program.allocs, live + program.live,
                         blocks + program.blocks, peak) == (
            heap.allocs, heap.live_bytes, heap.live_blocks, heap.peak_bytes)
        exact_steps += same and same_counters
        ms_replay += best * 1e3
        ms_step += step_ms
        # templates: each run predicted from its occurrences PERIOD steps apart
        parts = [part for part, _ in runs]
        predicted, guesses = {}, {}
        for i, (part, actual) in enumerate(runs):
            right, chosen = set(), None
            for p in PERIODS:
                back = [history.get(k - j * p) for j in range(POINTS[0], 0, -1)]
                if any(h is None or [q for q, _ in h] != parts for h in back):
                    continue
                template = arenatokens.fit([h[i][1] for h in back], loose=LOOSE[0])
                if template is None:
                    continue
                guess = template.at(1)
                good = guess is not None and alike(guess, actual)
                if chosen is None:
                    chosen = good
                    guesses[i] = guess
                if good:
                    right.add(p)
            hits[part]["runs"] += 1
            hits[part]["first"] += bool(chosen)
            hits[part]["any"] += bool(right)
            for p in right:
                hits[part][f"p{p}"] += 1
            predicted[i] = bool(chosen)
        whole = None
        if len(guesses) == len(runs) and all(g is not None for g in guesses.values()):
            # the step's program as the templates wrote it, made on the arena before it
            guessed = arenatokens.flatten([item for i in range(len(runs))
                                           for item in guesses[i]])
            spare = arena_copy(before)
            short = spare.run_program(guessed.flat)
            whole = (short == 0 and arena_key(spare) == arena_key(logged.arena)
                     and (guessed.allocs, guessed.live, guessed.blocks, guessed.peak)
                     == (program.allocs, program.live, program.blocks, program.peak))
        hits["step"]["runs"] += 1
        hits["step"]["written"] += whole is not None
        hits["step"]["exact"] += bool(whole)
        # the passes' runs as their templates wrote them, the rest as logged (the chain
        # form's replay of the probed step's trace, the sweep's clone from the map)
        passes = None
        if all(guesses.get(i) is not None for i, part in enumerate(parts)
               if part in PASSES):
            mixed = arenatokens.flatten([
                item for i, (part, actual) in enumerate(runs)
                for item in (guesses[i] if part in PASSES else actual)])
            spare = arena_copy(before)
            short = spare.run_program(mixed.flat)
            passes = (short == 0 and arena_key(spare) == arena_key(logged.arena)
                      and (mixed.allocs, mixed.live, mixed.blocks, mixed.peak)
                      == (program.allocs, program.live, program.blocks, program.peak))
        hits["passes"]["runs"] += 1
        hits["passes"]["written"] += passes is not None
        hits["passes"]["exact"] += bool(passes)
        if passes is False:
            # a wrong program found out by a folded run's short bins, or silently
            hits["passes"]["wrong, short bins" if short else "wrong, silent"] += 1
            passes = "short" if short else "silent"
        print(f"step {k}: {len(log)} requests, {len(items)} items, runs "
              f"{'/'.join(parts)}; exact {same and same_counters}; replay "
              f"{best * 1e3:.3f} ms, step {step_ms:.2f} ms; bare {bare_exact}; predicted "
              f"{''.join('y' if v else '.' for v in predicted.values())}, step written "
              f"{whole is not None}, exact {whole}; passes written, exact {passes}")
        history.pop(k - POINTS[0] * max(PERIODS), None)
    n = last - first + 1
    print(f"exact: {exact_steps} of {n} steps, without folded tokens {bare_steps}; "
          f"replay {ms_replay / n:.3f} ms a step, "
          f"exact step {ms_step / n:.2f} ms")
    for part, counted in hits.items():
        print(f"{part}: " + ", ".join(f"{key} {value}" for key, value in
                                      sorted(counted.items())))


if __name__ == "__main__":
    main()
