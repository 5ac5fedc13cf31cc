#!/usr/bin/env python3
"""The sweep-scan probe's `order` rows hold by hold, against real burn's long-run windows
(issue 43, session 60): how far the probe's reads past the TLB's reach move from one short
hold of the timing lock to the next, and what their mean over all the holds gives.

    python3 experiments/calibration/order-holds.py DIR WORKLOAD [--window 6000,8000]

DIR holds the `order-LABEL.csv` files of one layout, one per hold (`tlb-batch.py`'s
`order-hashmap/`, say); WORKLOAD is `ema-balanced` or `p10-ema`. For each file, and for all of
them together, the probe's ns per key read over the window's steps (the chain at step ``s``
holds ``4 s - 3`` keys, the sweep reads ``n (n + 1) / 2`` of them, every 25th step; each file's
rows weighted by the keys read over the live key's places, as `order-vs-burn.py` does): at the
layout's addresses (`order4k`), packed 64 to a page (`orderln`), their difference (what the
TLB adds), and real burn's sweep per key read over the same window (its ms per step less the
committed prediction's part outside the sweep; `order-vs-burn.py`'s table). Nothing fitted.
"""

import argparse
import importlib.util
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "order_vs_burn", Path(__file__).with_name("order-vs-burn.py"))
ovb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ovb)


def per_read(curve, first, last):
    """ns per key read of a probe curve over steps ``first + 1 .. last`` (every 25th)."""
    steps = range(first + 1, last + 1, 25)
    reads = [(4 * s - 3) * (4 * s - 2) / 2 for s in steps]
    return sum(r * ovb.at(curve, 4 * s - 3) for r, s in zip(reads, steps)) / sum(reads)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("order_dir")
    ap.add_argument("workload", choices=sorted(ovb.REAL))
    ap.add_argument("--window", default="6000,8000", help="FIRST,LAST step (FIRST excluded)")
    a = ap.parse_args(argv)
    first, last = (int(x) for x in a.window.split(","))
    files = sorted(Path(a.order_dir).glob("order-*.csv"),
                   key=lambda p: (len(p.stem), p.stem))
    print("hold,order4k_ns,orderln_ns,tlb_ns")
    diffs = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            one = Path(tmp) / path.stem
            one.mkdir()
            shutil.copy(path, one / path.name)
            c = ovb.curves(one)
            v4k, vln = per_read(c["order4k"], first, last), per_read(c["orderln"], first, last)
            diffs.append(v4k - vln)
            print(f"{path.stem[len('order-'):]},{v4k:.3f},{vln:.3f},{v4k - vln:.3f}")
    c = ovb.curves(a.order_dir)
    v4k, vln = per_read(c["order4k"], first, last), per_read(c["orderln"], first, last)
    print(f"mean,{v4k:.3f},{vln:.3f},{v4k - vln:.3f}")
    if len(diffs) > 1:
        print(f"# tlb_ns over the holds: min {min(diffs):.3f}, median "
              f"{statistics.median(diffs):.3f}, max {max(diffs):.3f}")
    if last in ovb.REAL[a.workload] and ovb.WINDOWS[last] == first:
        measured, other = ovb.REAL[a.workload][last]
        steps = range(first + 1, last + 1, 25)
        reads = sum((4 * s - 3) * (4 * s - 2) / 2 for s in steps) / len(steps)
        print(f"# real burn's sweep over steps {first + 1}-{last}: "
              f"{(measured - other) / reads * 1e6:.3f} ns per key read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
