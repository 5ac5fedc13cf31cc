#!/usr/bin/env python3
"""Real burn's sweep in the hold (cpu.txt: the run's utime+stime at its census lines, pinned to
core 1 at nice -15) against the sweep-scan probe's faithful `order` rows of the same hold
(pairs/hold-start, pairs/hold-end: real burn's own layout at that moment, and the simulated
one), over the same steps: at step s the chain holds 4 s - 3 keys and the sweep reads
(4 s - 3)(4 s - 2) / 2 of them (`order-vs-burn.py`'s mapping); real burn's sweep = its CPU
ms per step less the committed prediction's part outside the sweep (4.9 ms at step 6,000)."""
import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location(
    "ovb", HERE.parents[5] / "experiments" / "calibration" / "order-vs-burn.py")
ovb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ovb)
OTHER = 4.9
rows = [line.split() for line in (HERE / "cpu.txt").read_text().splitlines()]
ticks = [(int(r[4]), int(r[1]) + int(r[2])) for r in rows]   # (census step, utime + stime)
wins = {(a + 1, b): (tb - ta) * 10 / (b - a) for (a, ta), (b, tb) in zip(ticks, ticks[1:])
        if a >= 5000}
for label in ("hold-start", "hold-end"):
    for name in ("real", "sim"):
        c = ovb.curves(HERE / "pairs" / label / name / "order-hashmap")
        for (a, b), ms in wins.items():
            steps = range(a, b + 1)
            reads = [(4 * s - 3) * (4 * s - 2) / 2 for s in steps]
            per = sum(reads) / len(steps)
            probe = {p: sum(r * ovb.at(c[p], 4 * s - 3) for r, s in zip(reads, steps))
                     / len(steps) / 1e6 for p in ("order4k", "orderln")}
            print(f"{label} {name} layout, steps {a}-{b}: probe {probe['order4k'] / per * 1e6:.3f} "
                  f"ns a read (packed {probe['orderln'] / per * 1e6:.3f}); real burn {ms:.1f} ms a "
                  f"step, {(ms - OTHER) / per * 1e6:.3f} ns a read; real / probe "
                  f"{(ms - OTHER) / probe['order4k']:.3f} (rows to {c['order4k'][-1][0]} keys)")
