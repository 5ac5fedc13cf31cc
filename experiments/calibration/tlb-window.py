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

``--terms`` splits the same mean into the sweep's terms (what ``Timing.sweep_ns`` adds up):
the fixed cost, the locator entries cloned (``sweep_copy_entry_ns``) and visited
(``sweep_visit_ns``), the key reads at ``scan_node_ns``, what the reads that miss the
L1d/L2/L3 add (``sweep_*_read_ns``) and what the reads whose page misses the data TLB add,
each in ms per step and ns per key read (session 59: where the 8,000-step point's ms go).
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
    parser.add_argument("--terms", action="store_true",
                        help="also print the sweep's terms (ms per step, ns per key read)")
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
    if args.terms:
        p = profile.data["time"]
        bare = mean_ms(Timing(SimpleNamespace(charge=lambda ns: None), p, ()))
        sums = [0.0, 0.0]                       # entries (= visits), key reads, per step
        for s in steps:
            n = 4 * s - 3
            sums[0] += n
            sums[1] += n * (n + 1) / 2
        entries, reads = (x / len(steps) for x in sums)
        terms = (("fixed", p["sweep_fixed_ns"] / 1e6),
                 ("entries cloned", entries * p["sweep_copy_entry_ns"] / 1e6),
                 ("entries visited", entries * p["sweep_visit_ns"] / 1e6),
                 ("key reads (scan_node_ns)", reads * p["scan_node_ns"] / 1e6),
                 ("cache levels' misses", without - bare),
                 ("data TLB misses", with_tlb - without))
        for name, ms in terms:
            print(f"  {name:26s} {ms:9.2f} ms per step  {ms * 1e6 / reads:6.3f} ns per key read")
        print(f"  ({reads / 1e6:.1f} M key reads and {entries:,.0f} locator entries a step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
