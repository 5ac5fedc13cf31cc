#!/usr/bin/env python3
"""The sweep-scan probe's `order` rows (the orphan sweep's reads of a chain in its own order
and at its spacing) against what the sweep's TLB model predicts for the same reads from the
random-order `tlbr` curve of the same batch, batch by batch (issue 43).

    .venv/bin/python experiments/calibration/tlb-order.py DIR [--profile amd-epyc-zen4-long]

DIR holds one directory per batch (`tlb-batch.py PROBE DIR/LABEL LABEL --order LAYOUT`:
`tlb.csv`, `tlb.stderr`, `tlbr/`, `order/`). For every `order` row (the chain at P key pages,
its live key at a share f of the hash order): the measured fraction of key reads that miss,
(order4k - orderln) / the batch's `sweep_tlb_read_ns`, and the model's, the batch's `tlbr`
curve read where :meth:`sim.platform.timing.Timing._sweep_reads` reads it for that prefix
(pages touched from the keys' B per page, the table's share, the reads per page), and the
committed profile's curve there. Prints one CSV row per (P, f): the means over the batches.
Nothing is fitted.
"""

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PAGE = 4096


def nodes_table_bytes(n, bucket=32, group=16):
    """hashbrown's block for ``n`` entries of ``bucket`` B (power-of-two buckets, 7/8 load)."""
    buckets = 4
    while n > buckets * 7 // 8:
        buckets *= 2
    return buckets * bucket + buckets + group


def model_point(pages, keys, prefix, entries):
    """(pages read over the TLB's entries, reads per page) of a prefix of ``prefix`` of a
    chain's ``keys`` keys on ``pages`` pages, as Timing._sweep_reads counts them."""
    spacing = pages * PAGE / keys
    span = keys * spacing / PAGE
    k = min(prefix, keys)
    touched = k if span >= keys else span * (1.0 - (1.0 - k / keys) ** (keys / span))
    read = touched * PAGE + (k / keys) * nodes_table_bytes(keys)
    return read / (entries * PAGE), max(1.0, k / touched)


def order_rows(path):
    rows = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["pattern"] == "pattern":
                continue
            key = (int(row["pages"]), float(row["frac"]))
            rows.setdefault(key, {})[row["pattern"]] = row
    return rows


def main(argv=None) -> int:
    from sim.analysis.tlb import read_tlb_dir, read_tlbr_dir
    from sim.engine.profile import load_profile
    from sim.platform.l2_cache import TlbMissCurve

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--profile", default="amd-epyc-zen4-long")
    args = parser.parse_args(argv)
    t = load_profile(args.profile).data["time"]
    committed = TlbMissCurve(t["sweep_tlb_miss_reads"], t["sweep_tlb_miss_reach"], t["sweep_tlb_miss"])
    acc = {}
    batches = []
    for batch in sorted(p for p in Path(args.dir).iterdir() if (p / "order").is_dir()):
        tlb = read_tlb_dir(batch)
        curves = read_tlbr_dir(batch / "tlbr", tlb["entries"], tlb["ns"])
        curve = TlbMissCurve(curves["reads"], curves["reach"], curves["miss"])
        batches.append((batch.name, tlb["ns"]))
        for path in sorted((batch / "order").glob("*.csv")):
            for (pages, frac), pair in order_rows(path).items():
                if "order4k" not in pair or "orderln" not in pair:
                    continue
                o, ln = pair["order4k"], pair["orderln"]
                keys, prefix = int(o["keys"]), int(o["prefix"])
                x, reads = model_point(pages, keys, prefix, tlb["entries"])
                measured = (float(o["ns"]) - float(ln["ns"])) / tlb["ns"]
                acc.setdefault((pages, frac), []).append(
                    (measured, curve(x, reads), committed(x, reads), x, reads, keys, prefix,
                     int(o["touched"]), int(o["table_pages"])))
    for name, ns in batches:
        print(f"# batch {name}: sweep_tlb_read_ns {ns:.3f}", file=sys.stderr)
    out = csv.writer(sys.stdout)
    out.writerow(["pages", "frac", "keys", "prefix", "touched", "table_pages", "model_reach",
                  "model_reads", "measured_miss", "batch_curve_miss", "committed_miss",
                  "measured_sd", "batches"])
    for (pages, frac), got in sorted(acc.items()):
        m = [g[0] for g in got]
        mean = lambda i: statistics.fmean(g[i] for g in got)
        out.writerow([pages, frac, got[0][5], got[0][6], got[0][7], got[0][8],
                      f"{mean(3):.4f}", f"{mean(4):.3f}", f"{statistics.fmean(m):.3f}",
                      f"{mean(1):.3f}", f"{mean(2):.3f}",
                      f"{statistics.stdev(m) if len(m) > 1 else 0.0:.3f}", len(got)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
