#!/usr/bin/env python3
"""The sweep-scan probe's `order` rows against real burn's long-run steps, directly: no model
(issue 43, session 57).

    .venv/bin/python experiments/calibration/order-vs-burn.py ORDER_DIR WORKLOAD [--clone-ns NS]

ORDER_DIR holds `order-LABEL.csv` files (the `order4k` / `orderln` rows of one layout, any
walk); WORKLOAD is `ema-balanced` or `p10-ema`. For every window of real burn's long runs
(steps 2,001-3,000 ... 6,001-8,000, ms per step from `long-runs/comparison.md`, session
56's table) the probe's sweep over the same steps: at step ``s`` the chain holds
``n = 4 s - 3`` keys and the sweep reads ``n (n + 1) / 2`` of them (n passes, the live key at a
uniform place), each at the probe's ns per key read for a chain of ``n`` keys (the rows'
mean over the batches and over the live key's places, weighted by the keys read; linear in
the keys between rows), every 25th step. Printed: the probe's ms per step in the sweep's
order at the layout's addresses (`order4k`) and packed 64 to a page (`orderln`, no TLB
misses), real burn's sweep (its ms per step less the committed prediction's non-sweep part),
and both per key read. ``--clone-ns NS``: take off each row what the probe's harness adds
to a key read and a real sweep does not (a trial clones all ``n`` entries of the locator for
its ``p`` passes, a real sweep one entry a pass: ``NS (n - p) / (p prefix)``; NS the clone and
drop of one entry, 13.7-14.4 ns in `sweep-levels/sweep-scan.csv`'s `copy` rows at 8k-98k
entries); 0 (the default) for rows taken with ``SWEEP_ORDER_LOCATOR_PASSES``. Nothing fitted.
"""

import argparse
import csv
import statistics
import sys
from pathlib import Path

#: real burn's ms per step (the committed runs' mean) and the committed prediction's part
#: outside the sweep (prediction - its sweep, session 56's table in long-runs/comparison.md)
REAL = {
    "p10-ema": {3000: (70.93, 70.71 - 68.3), 4000: (147.8, 151.1 - 148.5),
                6000: (340.9, 349.4 - 347.7), 8000: (1084.0, 955.2 - 972.2)},
    "ema-balanced": {3000: (75.05, 70.42 - 68.3), 4000: (174.5, 152.8 - 149.9),
                     6000: (465.9, 434.3 - 429.4), 8000: (1099.0, 1399.0 - 1390.7)},
}
WINDOWS = {3000: 2000, 4000: 3000, 6000: 4000, 8000: 6000}


def harness_ns(keys, prefix, clone_ns):
    """ns a key read the probe's whole-locator clone adds beyond a real sweep's."""
    passes = min(max((1 << 20) // prefix, 8), max(keys, 8), keys)
    return clone_ns * (keys - passes) / (passes * prefix)


def curves(directory, clone_ns=0.0):
    """{pattern: [(keys, ns per key read)]}: each page count's rows, the mean over the files
    of the prefix-weighted mean over the live key's places (less ``harness_ns``)."""
    per = {}
    for path in sorted(Path(directory).glob("order-*.csv")):
        rows = {}
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row["pattern"] == "pattern":
                    continue
                keys, prefix = int(row["keys"]), int(row["prefix"])
                rows.setdefault((row["pattern"], keys), []).append(
                    (prefix, float(row["ns"]) - harness_ns(keys, prefix, clone_ns)))
        for key, got in rows.items():
            k = sum(p for p, _ in got)
            per.setdefault(key, []).append(sum(p * ns for p, ns in got) / k)
    out = {}
    for (pattern, keys), values in sorted(per.items()):
        out.setdefault(pattern, []).append((keys, statistics.fmean(values)))
    return out


def at(curve, n):
    if n <= curve[0][0]:
        return curve[0][1]
    for (k0, v0), (k1, v1) in zip(curve, curve[1:]):
        if n <= k1:
            return v0 + (v1 - v0) * (n - k0) / (k1 - k0)
    return curve[-1][1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("order_dir")
    ap.add_argument("workload", choices=sorted(REAL))
    ap.add_argument("--clone-ns", type=float, default=0.0)
    a = ap.parse_args(argv)
    c = curves(a.order_dir, a.clone_ns)
    print("window,probe_order4k_ms,probe_orderln_ms,real_sweep_ms,probe_ns_per_read,"
          "probe_ln_ns_per_read,real_ns_per_read,real_over_probe")
    for last, (measured, other) in REAL[a.workload].items():
        steps = range(WINDOWS[last] + 1, last + 1, 25)
        reads = [(4 * s - 3) * (4 * s - 2) / 2 for s in steps]
        ns = {p: sum(r * at(c[p], 4 * s - 3) for r, s in zip(reads, steps)) / len(steps) / 1e6
              for p in ("order4k", "orderln")}
        per_read = sum(reads) / len(steps)
        real = measured - other
        print(f"{WINDOWS[last] + 1}-{last},{ns['order4k']:.1f},{ns['orderln']:.1f},{real:.1f},"
              f"{ns['order4k'] / per_read * 1e6:.3f},{ns['orderln'] / per_read * 1e6:.3f},"
              f"{real / per_read * 1e6:.3f},{real / ns['order4k']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
