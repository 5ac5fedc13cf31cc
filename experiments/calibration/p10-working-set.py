#!/usr/bin/env python3
"""The orphan sweep's working set of p10-ema detach against the caches and the data TLB.

Usage (from the repo root):

    .venv/bin/python experiments/calibration/p10-working-set.py --profile amd-epyc-zen4-long \\
        --spacing 420 --steps 4000,5000,6000,7000,7168,7169,8000

For each step ``s`` the EMA graph holds ``n = 4 s`` nodes, one of them with a live handle
(``ema``), and the locator ``4 s`` entries pointing at it (DESIGN.md: four nodes and four
entries a step). Each entry's visit reads the keys in hash order up to the live one (the
scan prefix ``k``, uniform in 0..n). It prints, from the profile's layouts and the model's
formulas (:mod:`sim.platform.timing`), for a whole-graph prefix (``k = n``): the working
set in the caches (a 64-B line per key plus the ``nodes`` table, ``hashbrown`` buckets for
``n`` keys at 7/8 load, ``nodes_slot_bytes`` a slot) against the L2 and L3, the pages read
(``--spacing`` B of heap per key, the key-page census's 420 for p10-ema) against the data
TLB's reach, the miss fractions of each; and the model's mean ns per key read over the
prefix's distribution (``scan_node_ns`` plus the cache and TLB terms), with the reads a
step (``n`` passes of a mean prefix ``(n + 1) / 2``). Nothing is fitted or simulated.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.engine.profile import load_profile  # noqa: E402
from sim.platform.hashbrown import TableLayout, buckets_for  # noqa: E402
from sim.platform.l2_cache import set_miss_fraction  # noqa: E402
from sim.platform.timing import Timing  # noqa: E402


class _Sim:
    def __init__(self):
        self.charged = 0.0

    def charge(self, ns, *args):
        self.charged += ns


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="amd-epyc-zen4-long")
    ap.add_argument("--spacing", type=float, default=420.0, help="B of heap per key")
    ap.add_argument("--steps", default="4000,5000,6000,7000,7168,7169,8000")
    args = ap.parse_args(argv)
    prof = load_profile(args.profile)
    proc, time = prof.process, prof.time
    layout = TableLayout(prof.layout.nodes_slot_bytes, 8, prof.layout.group_width)
    caches = Timing.caches(proc)
    reach = proc.dtlb_entries * Timing.PAGE_BYTES
    print(f"profile {args.profile}: L2 {proc.l2_bytes >> 10} KiB {proc.l2_ways}-way, L3 "
          f"{proc.l3_bytes >> 20} MiB {proc.l3_ways}-way, data TLB {proc.dtlb_entries} entries "
          f"({reach >> 20} MiB reach); scan_node_ns {time['scan_node_ns']:.3f}, "
          f"key spacing {args.spacing:g} B")
    print()
    print("| step | keys n | table buckets | table MiB | W (k = n) MiB | W / L2 | W / L3 | "
          "L2 miss | L3 miss | pages read / reach | TLB miss (k = n) | model ns a read "
          "(mean over k) | of it TLB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for step in (int(s) for s in args.steps.split(",")):
        n = 4 * step
        buckets = buckets_for(n)
        table = layout.block_bytes(buckets)
        w = n * Timing.LINE_BYTES + table
        l2 = set_miss_fraction(w, proc.l2_bytes, proc.l2_ways)
        l3 = set_miss_fraction(w, proc.l3_bytes, proc.l3_ways)
        pages = n * args.spacing + table
        sets = [(0, n, n, 1, table, 1, 1, args.spacing)]
        timing = Timing(_Sim(), time, caches)
        no_tlb = Timing(_Sim(), time, caches[:3])
        scanned = n * (n + 1) / 2
        ns = timing.sweep_ns(0, 0, scanned, 0, sets) - time["sweep_fixed_ns"]
        ns_no_tlb = no_tlb.sweep_ns(0, 0, scanned, 0, sets) - time["sweep_fixed_ns"]
        curve = timing.tlb_curve
        full = curve(pages / reach, n / (n * args.spacing / Timing.PAGE_BYTES)) if curve else 0.0
        print(f"| {step:,} | {n:,} | {buckets:,} | {table / 2**20:.2f} | {w / 2**20:.2f} | "
              f"{w / proc.l2_bytes:.2f} | {w / proc.l3_bytes:.3f} | {l2:.2f} | {l3:.4f} | "
              f"{pages / reach:.2f} | {full:.3f} | {ns / scanned:.3f} | "
              f"{(ns - ns_no_tlb) / scanned:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
