#!/usr/bin/env python3
"""The sweep's TLB model against the sweep-scan probe's ``tlbr`` rows (keys several to a page).

Usage (from the repo root):

    .venv/bin/python experiments/calibration/tlb-spread.py DIR/r10-f1.csv [...] \\
        --profile amd-epyc-zen4-long

``sweep-scan tlbr R FILL P,...`` (experiments/probes/cache-bw) reads ``maybe_useful``'s keys
``R`` to a 4-KiB page on ``P`` pages that fill a share ``FILL`` of the range they span (at
random), in one random order every pass: each page is read ``R`` times a pass at random
places, as a long EMA chain's keys are (~10 to a page in glibc's heap, their pages filling
~63 % of their span: ``long-runs/key-pages/``). ``lines4k``: the same keys packed 64 to a
page (no TLB miss). For every size it prints the probe's ns per read, the model's
(``lines4k`` plus :func:`sim.platform.l2_cache.tlb_read_ns` of the pages read: the keys' and
the table's 32-B slots, ``R`` reads per key page, dispersion ``1 - FILL`` over the key
pages, as :meth:`sim.platform.timing.Timing._sweep_reads` weighs it) and the miss
fraction each implies (``(ns - lines4k) / sweep_tlb_read_ns``). No fit.
"""

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.engine.profile import load_profile  # noqa: E402
from sim.platform.l2_cache import TlbMissCurve, tlb_read_ns  # noqa: E402

PAGE = 4096


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+", type=Path)
    ap.add_argument("--profile", default="amd-epyc-zen4-long")
    ap.add_argument("--lru", action="store_true",
                    help="the miss fraction from the TLB's size and ways, not its curve")
    args = ap.parse_args(argv)
    prof = load_profile(args.profile)
    proc, time = prof.process, prof.time
    entries, ways = proc.dtlb_entries, proc.dtlb_ways
    cost = time["sweep_tlb_read_ns"]
    levels = ((entries * PAGE, ways, cost),)
    keys = ("sweep_tlb_miss_reads", "sweep_tlb_miss_reach", "sweep_tlb_miss")
    curve = (TlbMissCurve(*(time[k] for k in keys))
             if time[keys[0]] and not args.lru else None)
    print(f"profile {args.profile}: data TLB {entries} entries {ways}-way, "
          f"sweep_tlb_read_ns {cost:.3f}, miss fraction "
          f"{'from its measured curve' if curve else 'from its size and ways (LRU)'}")
    print()
    print("| keys/page | fill | key pages | pages read | probe ns/read | model ns/read | "
          "lines4k ns/read | probe miss | model miss |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in args.csv:
        rows = {}
        for r in csv.DictReader(path.open()):
            if r["pattern"] == "pattern":
                continue      # a second run appended to the file: its header
            rows.setdefault((int(r["pages"]), int(r["per_page"]), float(r["fill"])), {}).setdefault(
                r["pattern"], []).append(float(r["ns"]))
        # a point measured in several runs: the mean of the runs
        rows = {k: {p: sum(v) / len(v) for p, v in ns.items()} for k, ns in rows.items()}
        for (pages, per_page, fill), ns in sorted(rows.items()):
            keys = pages * per_page
            table = keys * 32 / PAGE
            total = (pages + table) * PAGE
            extra = tlb_read_ns(total, levels, per_page, curve)
            base = ns["lines4k"]
            print(f"| {per_page} | {fill:g} | {pages} | {pages + table:.0f} | "
                  f"{ns['spread4k']:.2f} | {base + extra:.2f} | {base:.2f} | "
                  f"{(ns['spread4k'] - base) / cost:.2f} | {extra / cost:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
