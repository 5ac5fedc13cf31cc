#!/usr/bin/env python3
"""The orphan sweep's mean ms per step over a window of EMA steps, from the time model alone.

The EMA chain's sweep at step ``s`` reads one live graph of ``n = 4 s - 3`` nodes (one with
a live handle) once per locator entry (``n`` passes; the record the simulator's p10-ema
detach and ema-balanced detach runs make, e.g. step 200: 797 entries, 797 passes, 797
nodes, 1 live). This prints the model's sweep ms per step averaged over the window's steps
(every 25th) for a key spacing (what ``Timing._key_spacing`` computes from the simulated
arena; ``key-pages.py --simulate`` prints it), and the same without the data TLB:

    .venv/bin/python experiments/calibration/tlb-window.py --profile amd-epyc-zen4-long \\
        --spacing 420 --window 6000,8000

An estimate of what the TLB adds to a long run's step, without running it (the sweep
dominates those steps; the rest of a step does not depend on the TLB). Nothing is fitted.
"""

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def nodes_table_bytes(n, bucket=32, group=16):
    """hashbrown's block for ``n`` entries of ``bucket`` B (power-of-two buckets, 7/8 load)."""
    buckets = 4
    while n > buckets * 7 // 8:
        buckets *= 2
    return buckets * bucket + buckets + group


def main(argv=None) -> int:
    from sim.engine.profile import load_profile
    from sim.platform.timing import Timing

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="amd-epyc-zen4-long")
    parser.add_argument("--spacing", type=float, required=True, help="B of heap per key")
    parser.add_argument("--window", required=True, help="FIRST,LAST step (FIRST excluded)")
    parser.add_argument("--stride", type=int, default=25)
    args = parser.parse_args(argv)
    profile = load_profile(args.profile)
    process = SimpleNamespace(**profile.data["process"])
    timings = {tlb: Timing(SimpleNamespace(charge=lambda ns: None), profile.data["time"],
                           Timing.caches(process)[:4 if tlb else 3]) for tlb in (True, False)}
    first, last = (int(x) for x in args.window.split(","))
    steps = range(first + 1, last + 1, args.stride)

    def mean_ms(timing):
        total = 0.0
        for s in steps:
            n = 4 * s - 3
            sets = [(0, n, n, 1, nodes_table_bytes(n), 1, 1, args.spacing)]
            total += timing.sweep_ns(n, n, n * (n + 1) / 2, 0, sets)
        return total / len(steps) / 1e6

    with_tlb, without = mean_ms(timings[True]), mean_ms(timings[False])
    print(f"steps {first + 1}-{last}, {args.spacing:g} B per key, {args.profile}: "
          f"sweep {with_tlb:.1f} ms per step, {without:.1f} without the data TLB "
          f"({with_tlb - without:+.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
