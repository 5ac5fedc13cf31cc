#!/usr/bin/env python3
"""The sweep-scan probe's `order` rows (the orphan sweep's reads of a chain in its own order
and at its spacing) against what the sweep's TLB model predicts for the same reads from the
random-order `tlbr` curve of the same batch, batch by batch (issue 43).

    .venv/bin/python experiments/calibration/tlb-order.py DIR [--profile amd-epyc-zen4-long]

DIR holds the batches of `tlb-batch.py PROBE DIR LABEL --order LAYOUT` appended (`tlb.csv`
one block a batch in the order of `batches.txt`, `tlb.stderr`, `tlbr/rR-LABEL.csv`,
`order/order-LABEL.csv`). For every `order` row (the chain at P key pages,
its live key at a share f of the hash order): the measured fraction of key reads that miss,
(order4k - orderln) / the batch's `sweep_tlb_read_ns`, and the model's, the batch's `tlbr`
curve read where :meth:`sim.platform.timing.Timing._sweep_reads` reads it for that prefix
(pages touched from the keys' B per page, the table's share, the reads per page), and the
committed profile's curve there. Prints one CSV row per (P, f): the means over the batches.
Nothing is fitted.
"""

import argparse
import csv
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PAGE = 4096


def model_point(pages, keys, prefix, entries):
    """(pages read over the TLB's entries, reads per page) of a prefix of ``prefix`` of a
    chain's ``keys`` keys on ``pages`` pages, where the sweep's model reads its curve."""
    from sim.analysis.tlb import _table_bytes
    from sim.platform.l2_cache import sweep_tlb_point
    return sweep_tlb_point(prefix, keys, pages * PAGE / keys, _table_bytes(keys), entries * PAGE)


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
    root = Path(args.dir)
    labels = [line.split()[1] for line in (root / "batches.txt").read_text().splitlines()
              if line.startswith("batch ") and " start " in line]
    blocks = (root / "tlb.csv").read_text().split("pattern,n,ns\n")[1:]
    if len(blocks) != len(labels):
        sys.exit(f"{root}: {len(blocks)} tlb.csv blocks for {len(labels)} batches")
    with tempfile.TemporaryDirectory() as scratch:
        for label, block in zip(labels, blocks):
            one = Path(scratch) / label
            (one / "tlbr").mkdir(parents=True)
            (one / "tlb.csv").write_text("pattern,n,ns\n" + block)
            shutil.copy(root / "tlb.stderr", one / "tlb.stderr")
            shutil.copy(root / "lscpu.txt", one / "lscpu.txt")
            for f in (root / "tlbr").glob(f"r*-{label}.csv"):
                shutil.copy(f, one / "tlbr" / f.name)
            tlb = read_tlb_dir(one)
            curves = read_tlbr_dir(one / "tlbr", tlb["entries"], tlb["ns"])
            curve = TlbMissCurve(curves["reads"], curves["reach"], curves["miss"])
            batches.append((label, tlb["ns"]))
            for (pages, frac), pair in order_rows(root / "order" / f"order-{label}.csv").items():
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
