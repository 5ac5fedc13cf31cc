"""When a p10-ema run's glibc heap trims: per step, from a malloc log or the simulator.

A step starts at gemm's per-call pack buffer (``step_order.STEP_MARK_BYTES``). For each
step: the program break after it relative to the process's first break (B), and the trims
so far (a call after which the break is lower than before it). Real runs differ from one
another (burn's hash-seeded frees place the blocks), the simulator gives one run::

    .venv/bin/python experiments/probes/trims.py LOG.bin[.xz] ...         # real runs
    .venv/bin/python experiments/probes/trims.py --simulate without --steps 600
    .venv/bin/python experiments/probes/trims.py LOG... --csv OUT.csv     # the summary

The summary CSV (``run, step, brk_delta_bytes, trims``) of three runs of SGD ``without``
(600 steps, 2026-12-01) is ``experiments/measured/linux-x86_64/diagnostics/p10-ema-sgd-trims.csv``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import arena_replay as R  # noqa: E402
from step_order import STEP_MARK_BYTES  # noqa: E402

PACK = 132_096      # the weight gradient's packed rhs: one per step


def real_steps(log) -> list:
    """``[(brk_delta_bytes, trims so far), ...]`` at the start of each step of ``log``."""
    base = previous = None
    trims, steps = 0, []
    for kind, size, _align, _ptr, _arg, brk in R.read_log(Path(log)):
        if brk:
            if base is None:
                base = brk
            if previous is not None and brk < previous:
                trims += 1
            previous = brk
        if kind == R.MEMALIGN and size == PACK:
            steps.append((brk - base, trims))
    return steps


def simulated_steps(variant, steps, optimizer="sgd", profile="linux-x86_64") -> list:
    """The same for the simulator's run on ``profile`` (its break relative to its
    first step's, plus the logged runs' 0.355 MiB of start-up: ``brk_delta_bytes`` is
    comparable from step 1 on)."""
    from sim.platform import ptmalloc
    from sim.engine.runner import run_cell

    arena = ptmalloc.PtmallocArena
    alloc, out = arena.alloc, []

    def traced(self, nbytes, align=0):
        if align and nbytes == PACK and nbytes > STEP_MARK_BYTES:
            out.append((self.brk, self.trims))
        return alloc(self, nbytes, align)

    arena.alloc = traced
    try:
        run_cell("p10-ema", variant, profile=profile, fast_forward=False,
                 sets={"steps": steps, "optimizer": optimizer})
    finally:
        arena.alloc = alloc
    start = 372_736          # the logged runs' break at their first step (0.355 MiB)
    return [(brk - out[0][0] + start, trims) for brk, trims in out]


def per_hundred(steps) -> list:
    """Trims in each block of 100 steps."""
    counts, last = [], 0
    for i in range(99, len(steps), 100):
        counts.append(steps[i][1] - last)
        last = steps[i][1]
    return counts


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="*", help="malloc logs (malloc-log/record.sh)")
    parser.add_argument("--simulate", metavar="VARIANT", help="a simulated run of p10-ema")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--profile", default="linux-x86_64", help="the simulated run's profile")
    parser.add_argument("--csv", type=Path, help="write run, step, brk_delta_bytes, trims")
    args = parser.parse_args(argv)
    runs = [(Path(log).name.split(".")[0], real_steps(log)) for log in args.logs]
    if args.simulate:
        runs.append((f"simulated-{args.simulate}",
                      simulated_steps(args.simulate, args.steps, args.optimizer,
                                      args.profile)))
    if not runs:
        parser.error("give malloc logs or --simulate VARIANT")
    for name, steps in runs:
        print(f"{name}: {len(steps)} steps, {steps[-1][1] if steps else 0} trims; per 100 "
              f"steps {per_hundred(steps)}; break at steps 50/300/600: "
              + " / ".join(f"{steps[i - 1][0] / 2**20:.3f}" for i in (50, 300, 600)
                           if i <= len(steps)) + " MiB")
    if args.csv:
        tmp = args.csv.with_suffix(".tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["run", "step", "brk_delta_bytes", "trims"])
            for name, steps in runs:
                for i, (brk, trims) in enumerate(steps, 1):
                    writer.writerow([name, i, brk, trims])
        tmp.replace(args.csv)


if __name__ == "__main__":
    main()
