"""One training step's heap events: real burn's (a malloc log) against the simulator's.

A p10-ema run recorded by ``malloc-log/record.sh`` logs every malloc-family call of the
process. A step of it is cut at gemm's per-call pack buffer, the one ``posix_memalign``
above 100 KB each step makes (the weight gradient's packed rhs, 132,096 B), and a step's
events (kind and size: ``a`` malloc, ``c`` calloc, ``m`` posix_memalign, ``r`` realloc,
``f`` free) are compared with the simulator's for the same workload on the glibc arena
model, cut the same way. ``difflib`` aligns the two sequences; the share of events they
have in common tells how much of a step the simulator makes in burn's order, and the
differing runs show what is missing::

    .venv/bin/python experiments/probes/step_order.py                # p10-ema without, SGD
    .venv/bin/python experiments/probes/step_order.py --log p10-ema-adam-without --show

The step compared is well past the first ones (``--step``, default 80), where both have
settled into the same events every step, and not one the probe program reports at (its
RSS reading allocates).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import arena_replay as R  # noqa: E402

LOGS = ROOT / "experiments" / "measured" / "linux-x86_64" / "malloc-logs"
#: malloc log -> (workload, variant, optimizer)
RUNS = {
    "p10-ema-without": ("p10-ema", "without", "sgd"),
    "p10-ema-adam-without": ("p10-ema", "without", "adam"),
    "p10-ema-adam-target-without": ("p10-ema", "target-without", "adam"),
    "p10-ema-adam-log-no-ema": ("p10-ema", "log-no-ema", "adam"),
}
#: a posix_memalign larger than this starts a step (gemm's pack buffer)
STEP_MARK_BYTES = 100_000


def _label(kind, size, old=None):
    return f"r{old}>{size}" if kind == "r" else f"{kind}{size}"


def real_events(log) -> list:
    """Real burn's events in the malloc log ``log`` (a path): labels such as ``a184``,
    ``m132096``, ``r8>32``, ``f16`` (a free is labelled with its block's size; frees of
    blocks allocated before the log began are left out)."""
    names = {R.MALLOC: "a", R.CALLOC: "c", R.MEMALIGN: "m"}
    sizes, events = {}, []
    for kind, size, _align, ptr, arg, _brk in R.read_log(Path(log)):
        if kind == R.FREE:
            if arg in sizes:
                events.append(_label("f", sizes.pop(arg)))
        elif kind == R.REALLOC:
            events.append(_label("r", size, sizes.pop(arg, None)))
            sizes[ptr] = size
        elif kind in names and ptr:
            sizes[ptr] = size
            events.append(_label(names[kind], size))
    return events


def simulated_events(workload, variant, optimizer, steps) -> list:
    """The simulator's events for ``steps`` steps of ``workload`` on the Linux profile's
    glibc arena (exact mode), labelled as :func:`real_events` does."""
    from sim.platform import ptmalloc
    from sim.platform.ptmalloc import ZEROED
    from sim.engine.runner import run_cell

    arena = ptmalloc.PtmallocArena
    events = []
    alloc, free, realloc = arena.alloc, arena.free, arena.realloc

    def traced_alloc(self, nbytes, align=0):
        kind = "c" if align == ZEROED else "m" if align else "a"
        events.append(_label(kind, nbytes))
        return alloc(self, nbytes, align)

    def traced_free(self, block=None, nbytes=None):
        events.append(_label("f", nbytes))
        return free(self, block, nbytes)

    def traced_realloc(self, block, old, nbytes):
        events.append(_label("r", nbytes, old))
        return realloc(self, block, old, nbytes)

    arena.alloc, arena.free, arena.realloc = traced_alloc, traced_free, traced_realloc
    try:
        run_cell(workload, variant, profile="linux-x86_64", fast_forward=False,
                 sets={"steps": steps, "optimizer": optimizer})
    finally:
        arena.alloc, arena.free, arena.realloc = alloc, free, realloc
    return events


def steps_of(events) -> list:
    """``events`` cut into steps, each starting at a pack buffer (what precedes the first
    is left out)."""
    starts = [i for i, e in enumerate(events)
              if e[0] == "m" and int(e[1:]) > STEP_MARK_BYTES]
    return [events[a:b] for a, b in zip(starts, starts[1:])]


def compare(log="p10-ema-without", step=80) -> tuple:
    """``(share of events in common, real step, simulated step, difflib opcodes)`` for
    step ``step`` of the run ``log`` records."""
    workload, variant, optimizer = RUNS[log]
    real = steps_of(real_events(LOGS / f"{log}.bin.xz"))
    if step >= len(real):
        raise SystemExit(f"step_order: the log holds {len(real)} steps, not {step + 1}")
    simulated = steps_of(simulated_events(workload, variant, optimizer, step + 10))
    a, b = real[step], simulated[step]
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return matcher.ratio(), a, b, matcher.get_opcodes()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", choices=sorted(RUNS), default="p10-ema-without")
    parser.add_argument("--step", type=int, default=80)
    parser.add_argument("--show", action="store_true", help="print the differing runs")
    args = parser.parse_args(argv)
    ratio, real, simulated, opcodes = compare(args.log, args.step)
    print(f"{args.log} step {args.step}: real {len(real)} events, simulated "
          f"{len(simulated)}; {ratio:.1%} in common")
    if args.show:
        for tag, i1, i2, j1, j2 in opcodes:
            if tag != "equal":
                print(f"  at {i1:4d}/{j1:4d} {tag:8s} real {' '.join(real[i1:i2]) or '-'}"
                      f"  |  sim {' '.join(simulated[j1:j2]) or '-'}")


if __name__ == "__main__":
    main()
