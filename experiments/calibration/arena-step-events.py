#!/usr/bin/env python3
"""What one step of the summed validation loss asks of glibc's arena, part by part, and
what replaying it costs (issue 39: the design of the chain form on the arena).

The bench's program (`sim bench`'s loop kind "validation loss summed": a 32-32-32 MLP,
Adam, input [8, 32], each step's validation mean added to a running total) runs in exact
mode on linux-x86_64, step by step (no `sim.repeat`: a hook between steps). At each step
of STEPS the arena's requests are logged in order, each tagged with the part of the step
that made it: `unav` (burn's `unavailable_propagation`, replayed from its tape where it
can be), `useful` (`useful_propagation`), `walk` (the rest of `free_unavailable_nodes`'
block-by-block walk), `sweep` (`cleanup_orphaned_entries`: the clone of the locator's
`graphs` map and its drop), `own` (everything else: the forwards, the backward's steps,
Adam). Printed per step:

* requests by part: allocations (of them served by the tcache), frees, reallocs;
* for the run of the passes' requests (walk, unav, useful: one run a backward) and the
  run of the sweep's: the run compiled as a one-iteration `ReplayProgram` and replayed
  by the compiled arena (`PtmallocArena.replay`) on a copy of the arena as it was before
  the run, CPU ms (best of 5), and the same after *folding*: every contiguous, balanced
  segment of requests that the tcache serves and takes back (each allocation popped off
  its tcache bin, each free pushed onto one, every block the segment allocates freed in
  it) left out. The arena after each replay is compared with exact mode's (`state()`:
  every chunk, bin, tcache and fastbin entry), and so is the arena after the whole
  step replayed that way;
* `--structure`: for the descent (unav's 48-B chunks past the tcache) and the sweep's
  clone, the address steps between consecutive chunks and where they came from.

Run it (about 3 s of CPU to step 400, 100 s to step 2,000, not pinned):

    python3 experiments/calibration/arena-step-events.py 100,200,300,400 [--structure]
    python3 experiments/calibration/arena-step-events.py 100-400 --structure --no-replay
    python3 experiments/calibration/arena-step-events.py 100-400 --templates --no-replay
"""
import argparse
import collections
import copy
import time

from sim.burn.runtime import graph as graph_mod
from sim.burn.runtime import pass_blocks
from sim.commands.bench import training_step
from sim.engine.profile import load_profile
from sim.engine.simulation import Limits, Simulation
from sim.platform.ptmalloc import PtmallocArena, chunk_size

PART = ["own"]
GROUP = {"walk": "passes", "unav": "passes", "useful": "passes", "sweep": "sweep",
         "own": "own"}


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


class LoggedArena:
    """The simulation's arena with its requests logged (``log``: a list, or None):
    ``(kind, part, nbytes, arg, handle, tcache)``; ``tcache``: an allocation the tcache
    served, a free the tcache took."""

    def __init__(self, arena):
        self.__dict__.update(arena=arena, log=None, where=None)

    def __getattr__(self, name):
        return getattr(self.arena, name)

    def __setattr__(self, name, value):
        setattr(self.arena, name, value)

    def alloc(self, nbytes, align=0):
        arena = self.arena
        nb = chunk_size(nbytes)
        cached = arena.tcache.get(nb)
        before = len(cached) if cached is not None else 0
        where = self.where
        info = None
        if where is not None and before == 0 and PART[0] in ("unav", "sweep"):
            # the last remainder alone in the unsorted bin: the request splits it
            last = arena.last_remainder
            alone = len(arena.unsorted) == 1 and last in arena.unsorted
            info = (len(arena.fast.get(nb, ())), alone, last)
        handle = arena.alloc(nbytes, align)
        if info is not None:
            where.append((PART[0], nb, handle) + info)
        if self.log is not None:
            self.log.append(("alloc", PART[0], nbytes, align, handle, before > 0))
        return handle

    def free(self, block=None, nbytes=None):
        arena = self.arena
        size = arena.inuse.get(block) if type(block) is int else None
        cached = arena.tcache.get(size) if size is not None else None
        before = len(cached) if cached is not None else -1
        arena.free(block, nbytes)
        if self.log is not None:
            self.log.append(("free", PART[0], nbytes, block, None,
                             cached is not None and len(cached) == before + 1))

    def realloc(self, block, old_nbytes, nbytes):
        handle = self.arena.realloc(block, old_nbytes, nbytes)
        if self.log is not None:
            self.log.append(("realloc", PART[0], nbytes, (block, old_nbytes), handle, False))
        return handle


def replay_python(arena, events, made):
    """``events`` made again on ``arena`` one call each (old blocks keep their addresses;
    ``made``: handle in the log -> handle on ``arena``)."""
    for kind, _, nbytes, arg, handle, _ in events:
        if kind == "alloc":
            made[handle] = arena.alloc(nbytes, arg)
        elif kind == "free":
            arena.free(made.pop(arg, arg) if arg is not None else None, nbytes)
        else:
            block, old = arg
            made[handle] = arena.realloc(made.pop(block, block), old, nbytes)


def template(events):
    """``events`` as a one-iteration template of ``PtmallocArena.compile``, or None where
    one frees a block made before them."""
    index, out, n = {}, [], 0
    for kind, _, nbytes, arg, handle, _ in events:
        if kind == "alloc":
            out.append(("alloc", nbytes, arg))
        elif kind == "free":
            if arg not in index:
                return None
            out.append(("free", nbytes, (0, index.pop(arg))))
            continue
        else:
            block, old = arg
            if block not in index:
                return None
            out.append(("realloc", nbytes, (old, 0, index.pop(block))))
        index[handle] = n
        n += 1
    return out


def fold(events):
    """``events`` without their contiguous, balanced segments of requests the tcache
    serves and takes back (such a segment leaves each tcache bin as it found it)."""
    out, run, opened = [], [], set()
    for event in events:
        kind, _, _, arg, handle, cached = event
        if kind == "realloc" or not cached or (kind == "free" and arg not in opened):
            out.extend(run)
            out.append(event)
            run, opened = [], set()
            continue
        run.append(event)
        if kind == "alloc":
            opened.add(handle)
        else:
            opened.discard(arg)
        if not opened:
            run = []
    out.extend(run)
    return out


def best_replay(arena, program, repeats=5):
    """CPU ms of the compiled replay of ``program`` on a copy of ``arena`` (best of
    ``repeats``)."""
    best = float("inf")
    for _ in range(repeats):
        spare = copy.deepcopy(arena)
        start = time.process_time()
        spare.replay(program, 1, [])
        best = min(best, time.process_time() - start)
    return best * 1e3


def check_step(before, log, exact):
    """The step's requests replayed on ``before`` (a copy of the arena before it), the
    passes' and the sweep's runs compiled and folded; a line per run."""
    runs = []
    for event in log:
        group = GROUP[event[1]]
        if not runs or runs[-1][0] != group:
            runs.append((group, []))
        runs[-1][1].append(event)
    made, lines = {}, []
    for group, events in runs:
        whole = template(events) if group != "own" else None
        if whole is None:
            replay_python(before, events, made)
            continue
        folded = fold(events)
        program = PtmallocArena.compile(whole)
        short = PtmallocArena.compile(template(folded))
        t_whole, t_folded = best_replay(before, program), best_replay(before, short)
        other = copy.deepcopy(before)
        other.replay(program, 1, [])
        before.replay(short, 1, [])
        lines.append(f"{group}: {len(events)} requests, compiled replay {t_whole:.3f} ms; "
                     f"folded {len(folded)}, {t_folded:.3f} ms; same arena "
                     f"{other.state() == before.state()}")
    lines.append(f"the step so replayed ends as exact mode: {before.state() == exact.state()}")
    return lines


def structure(where):
    """Address steps of the chunks the descent and the clone took past the tcache."""
    out = []
    for part in ("unav", "sweep"):
        rows = [r for r in where if r[0] == part and type(r[2]) is int]   # not mmapped
        addrs = [r[2] for r in rows]
        steps = collections.Counter(b - a for a, b in zip(addrs, addrs[1:]))
        sizes = collections.Counter(r[1] for r in rows)
        fast = sum(1 for r in rows if r[3])
        split = sum(1 for r in rows if r[4] and r[2] == r[5])
        out.append(f"{part}: {len(rows)} chunks past the tcache {dict(sizes)}, "
                   f"{fast} from a fastbin, {split} split off the last remainder alone in "
                   f"the unsorted bin; address steps {steps.most_common(3)}")
    return out


def _one_insertion(s, t):
    """The length of what ``t`` inserts into ``s`` at one place, or None."""
    if len(t) < len(s):
        return None
    prefix = 0
    for a, b in zip(s, t):
        if a != b:
            break
        prefix += 1
    suffix = len(s) - prefix
    if s[prefix:] == t[len(t) - suffix:]:
        return len(t) - len(s)
    return None


def change(s, t, widest=32):
    """How the request sequence ``t`` (``(kind, size)`` each) differs from ``s``: ``same``,
    ``insert A`` (one run inserted), ``insert A+B`` (two, the first at most ``widest``
    long), or ``other``."""
    if s == t:
        return "same"
    one = _one_insertion(s, t)
    if one is not None:
        return f"insert {one}"
    prefix = 0
    for a, b in zip(s, t):
        if a != b:
            break
        prefix += 1
    for first in range(1, min(widest, len(t) - len(s)) + 1):
        if t[:prefix] == s[:prefix]:
            rest = _one_insertion(s[prefix:], t[prefix + first:])
            if rest is not None:
                return f"insert {first}+{rest}"
    return "other"


def without_pairs(seq):
    """``seq`` without its adjacent (allocation, free) pairs of one size."""
    out, i = [], 0
    while i < len(seq):
        if (i + 1 < len(seq) and seq[i][0] == "alloc" and seq[i + 1][0] == "free"
                and seq[i][1] == seq[i + 1][1]):
            i += 2
            continue
        out.append(seq[i])
        i += 1
    return tuple(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", help="steps to log, e.g. 100,200,300 or 100-400")
    ap.add_argument("--structure", action="store_true")
    ap.add_argument("--templates", action="store_true",
                    help="how each part's requests differ from the step before's (steps "
                         "logged in a row), summed at the end")
    ap.add_argument("--no-replay", action="store_true",
                    help="only the requests by part (and --structure), no replays")
    a = ap.parse_args()
    steps = set()
    for item in a.steps.split(","):
        first, _, last = item.partition("-")
        steps.update(range(int(first), int(last or first) + 1))
    steps = sorted(steps)
    tag(pass_blocks, "_passes_block_by_block", "walk")
    tag(pass_blocks._BlockPasses, "useful_propagation", "useful")
    tag(pass_blocks._BlockPasses, "unavailable_propagation", "unav")
    tag(graph_mod.GraphCleaner, "cleanup_orphaned_entries", "sweep")
    sim = Simulation(load_profile("linux-x86_64"), fast_forward=False,
                     limits=Limits(max_ops=10 ** 12))
    logged = LoggedArena(sim.heap._arena)
    sim.heap._arena = logged
    body, _ = training_step(sim, "adam", validation_loss=True)

    changes, previous = collections.defaultdict(collections.Counter), {}
    for k in range(1, steps[-1] + 1):
        if k not in steps:
            body()
            continue
        before = None if a.no_replay else copy.deepcopy(logged.arena)
        logged.__dict__.update(log=[], where=[] if a.structure else None)
        body()
        log, where = logged.log, logged.where
        logged.__dict__.update(log=None, where=None)
        counts = collections.Counter()
        for kind, part, *_, cached in log:
            counts[part, kind] += 1
            counts[part, kind + " tcache"] += bool(cached)
        print(f"step {k}: {len(log)} requests")
        for part in ("own", "walk", "unav", "useful", "sweep"):
            print(f"  {part:7s} allocations {counts[part, 'alloc']:6d} (tcache "
                  f"{counts[part, 'alloc tcache']:6d}), frees {counts[part, 'free']:6d} "
                  f"(into the tcache {counts[part, 'free tcache']:6d}), reallocs "
                  f"{counts[part, 'realloc']}")
        if not a.no_replay:
            for line in check_step(before, log, logged.arena):
                print("  " + line)
        if where is not None:
            for line in structure(where):
                print("  " + line)
        if a.templates:
            seqs = {}
            for part in ("own", "walk", "unav", "useful", "sweep"):
                events = [e for e in log if e[1] == part]
                seqs[part] = tuple((e[0], e[2]) for e in events)
                seqs[part + " folded"] = tuple((e[0], e[2]) for e in fold(events))
            seqs["useful without pairs"] = without_pairs(seqs["useful"])
            allocs = [e for e in seqs["sweep"] if e[0] == "alloc"]
            seqs["sweep: all, then freed in order"] = (
                seqs["sweep"] == tuple(allocs) + tuple(("free", n) for _, n in allocs))
            if k - 1 in previous:
                for name, seq in seqs.items():
                    before_seq = previous[k - 1][name]
                    changes[name][change(before_seq, seq) if type(seq) is tuple
                                  else str(seq)] += 1
            previous = {k: seqs}
    for name, counted in changes.items():
        print(f"{name}: " + ", ".join(f"{c} {n}" for c, n in counted.most_common(4)))


if __name__ == "__main__":
    main()
