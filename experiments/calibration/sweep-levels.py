#!/usr/bin/env python3
"""The orphan sweep's read cost at each cache level, read off the sweep-scan probe.

Usage (from the repo root):

    .venv/bin/python experiments/calibration/sweep-levels.py \\
        experiments/measured/linux-x86_64/sweep-levels/sweep-scan.csv --profile amd-epyc-zen4

The probe (experiments/probes/cache-bw, binary ``sweep-scan``) runs burn-autodiff's
``maybe_useful`` loop over ``nodes`` tables of n keys, one 64-B line per key, and times
the reads (ns per key). The working set of a scan of n keys is what the simulator counts
(sim.platform.timing, ``Timing._sweep_reads``): n lines plus the table's block (the profile's
``nodes_slot_bytes`` and ``group_width``, hashbrown's bucket count for n items). Each
level's cost is a difference of plateaus (medians of the probe's points whose working set
sits well inside one level: at most 3/4 of the L1d; 2x the L1d to half the L2; 2x the L2
to a quarter of the L3; over 4x the L3):

    sweep_l2_read_ns   = L2 plateau   - L1d plateau   (a read that misses the L1d)
    sweep_l3_read_ns   = L3 plateau   - L2 plateau    (... that misses the L2)
    sweep_dram_read_ns = DRAM plateau - L3 plateau    (... that misses the L3)

No fit: three subtractions. It prints them, the probe's per-entry costs (``copy``, ``visit``:
``sweep_copy_entry_ns``, ``sweep_visit_ns``), the fixed cost per call (``call`` at n = 1
less one entry's copy and visit: ``sweep_fixed_ns``), and the model's ns per read against
the probe's at every size (the L1d plateau plus sim.platform.l2_cache.hierarchy_read_ns).

On the CSV of ``sweep-scan tlb`` (rows ``pages4k``, ``pages2m``, ``lines4k``) it prints the
data TLB's cost instead: the same key reads with every key on a 4-KiB page of its own
(``pages4k``) less the same lines packed 64 to a page (``lines4k``: no TLB miss), median
over the points whose pages are 2x to 32x the TLB's entries (``[process] dtlb_entries``):

    sweep_tlb_read_ns  = median(pages4k - lines4k)   (a read whose page misses the TLB)

and the model's ns per read at every size: ``lines4k`` plus the TLB's miss fraction
(sim.platform.l2_cache.page_set_miss_fraction of the pages read, the keys' and the table's,
against the TLB's reach) times that cost.
"""

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.platform.l2_cache import hierarchy_read_ns, page_set_miss_fraction, set_miss_fraction  # noqa: E402
from sim.platform.hashbrown import TableLayout, buckets_for  # noqa: E402
from sim.engine.profile import load_profile  # noqa: E402
from sim.analysis.tlb import tlb_read_cost  # noqa: E402

LINE = 64


def working_set(n, layout) -> int:
    """B a full scan of n keys reads: n key lines and the nodes table's block."""
    return n * LINE + layout.block_bytes(buckets_for(n))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="the sweep-scan probe's CSV (pattern,n,ns)")
    parser.add_argument("--profile", default="amd-epyc-zen4",
                        help="profile whose [process] caches and [layout] are the host's")
    args = parser.parse_args(argv)
    profile = load_profile(args.profile)
    proc, lay = profile.process, profile.layout
    layout = TableLayout(lay.nodes_slot_bytes, 8, lay.group_width)
    rows = {}
    with open(args.csv, newline="") as f:
        for r in csv.DictReader(f):
            rows.setdefault(r["pattern"], {})[int(r["n"])] = float(r["ns"])
    if "pages4k" in rows:
        return tlb(rows, proc, args.profile)
    scan = {n: ns for n, ns in rows["scan"].items() if n >= 64}
    l1, l2, l3 = proc.l1d_bytes, proc.l2_bytes, proc.l3_bytes

    def plateau(lo, hi):
        values = [ns for n, ns in scan.items() if lo <= working_set(n, layout) <= hi]
        return statistics.median(values) if values else float("nan"), len(values)

    p1, k1 = plateau(0, 0.75 * l1)
    p2, k2 = plateau(2 * l1, l2 / 2)
    p3, k3 = plateau(2 * l2, l3 / 4)
    p4, k4 = plateau(4 * l3, float("inf"))
    costs = (p2 - p1, p3 - p2, p4 - p3)
    print(f"host profile {args.profile}: L1d {l1} B {proc.l1d_ways}-way, L2 {l2} B "
          f"{proc.l2_ways}-way, L3 {l3} B {proc.l3_ways}-way")
    print(f"plateaus (ns per key read, median of n points): L1d {p1:.3f} ({k1}), "
          f"L2 {p2:.3f} ({k2}), L3 {p3:.3f} ({k3}), DRAM {p4:.3f} ({k4})")
    for key, value in zip(("sweep_l2_read_ns", "sweep_l3_read_ns", "sweep_dram_read_ns"),
                          costs):
        print(f"{key} = {value:.3f}")
    per_entry = {}
    for pattern in ("copy", "visit"):
        values = [ns for n, ns in rows.get(pattern, {}).items() if n >= 1024]
        if values:
            per_entry[pattern] = statistics.median(values)
    if per_entry:
        print(f"sweep_copy_entry_ns = {per_entry.get('copy', float('nan')):.3f}  "
              f"(median of copy, n >= 1024)")
        print(f"sweep_visit_ns = {per_entry.get('visit', float('nan')):.3f}  "
              f"(median of visit, n >= 1024)")
    if 1 in rows.get("call", {}) and len(per_entry) == 2:
        fixed = rows["call"][1] - per_entry["copy"] - per_entry["visit"]
        print(f"sweep_fixed_ns = {fixed:.3f}  (call at n = 1: {rows['call'][1]:.3f}, less one "
              f"entry's copy and visit)")
    levels = ((l1, proc.l1d_ways, costs[0]), (l2, proc.l2_ways, costs[1]),
              (l3, proc.l3_ways, costs[2]))
    print()
    print("| keys | working set (KiB) | L2 miss fraction | probe ns/read | model ns/read | "
          "chase ns/hop |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in sorted(scan):
        w = working_set(n, layout)
        model = p1 + hierarchy_read_ns(w, levels)
        chase = rows.get("chase", {}).get(n)
        print(f"| {n} | {w / 1024:.0f} | {set_miss_fraction(w, l2, proc.l2_ways):.2f} | "
              f"{scan[n]:.2f} | {model:.2f} | {'' if chase is None else f'{chase:.1f}'} |")
    return 0


def tlb(rows, proc, profile) -> int:
    """The data TLB's cost per read from the ``sweep-scan tlb`` rows, and the model against
    the probe at every size."""
    entries, ways = proc.dtlb_entries, proc.dtlb_ways
    if not (entries and ways):
        print(f"profile {profile}: no data TLB ([process] dtlb_entries = 0)")
        return 1
    pages4k, lines4k = rows["pages4k"], rows.get("lines4k", {})
    cost, n_sizes = tlb_read_cost(rows, entries)
    print(f"host profile {profile}: data TLB {entries} entries {ways}-way (4-KiB pages)")
    print(f"sweep_tlb_read_ns = {cost:.3f}  (median of pages4k - lines4k over {n_sizes} "
          f"sizes, {2 * entries}-{32 * entries} pages)")
    print()
    print("| keys | pages read | TLB miss fraction | pages4k ns/read | model ns/read | "
          "pages2m ns/read | lines4k ns/read |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    page = 4096
    for n in sorted(pages4k):
        # the keys' pages and the table's 32-B slots (``tlb`` mode's table)
        read = n + n * 32 / page
        frac = page_set_miss_fraction(read * page, entries * page, ways)
        base = lines4k.get(n, float("nan"))
        print(f"| {n} | {read:.0f} | {frac:.2f} | {pages4k[n]:.2f} | {base + frac * cost:.2f} | "
              f"{rows.get('pages2m', {}).get(n, float('nan')):.2f} | {base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
