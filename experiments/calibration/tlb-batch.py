#!/usr/bin/env python3
"""Take the sweep-scan probe's data-TLB rows in one batch: the `tlb` rows (one key a page,
the cost of a miss) and the `tlbr` rows at every R of READS (keys R to a page, pages
filling all of their span), into OUT/tlb.csv, OUT/tlb.stderr and OUT/tlbr/rR-LABEL.csv, and
with --order LAYOUT the `order` rows (the orphan sweep's reads of a chain laid out as LAYOUT's
key offsets, in its own order: `sweep-order-layout.py`) into OUT/order/order-LABEL.csv
(and with --bytes the same rows walked a control byte at a time, SWEEP_ORDER_BYTES, into
OUT/order-bytes/: the same minute's control for the table walk; with --hashmap over std's
HashMap scanned by keys().any(), burn's own code, SWEEP_ORDER_HASHMAP, into OUT/order-hashmap/).

Run it inside a hold of the timing lock, on the pinned core:

    flock /work/notes/timing.lock python3 experiments/calibration/tlb-batch.py \
        PROBE OUT LABEL [--reads 1,2,3,4,5,6,7,8,10] [--order LAYOUT]

(PROBE: the sweep-scan binary). It starts a session of its own and raises that session's
autogroup to -15 (with the kernel's autogroups, nice counts only inside a session), then
runs every row under `taskset -c 1 nice -n -15`. Each file gets the UTC time of its run
in OUT/batches.txt. Appends to a file that exists (a second run's header repeated, as
`sim.analysis.tlb.read_tlbr_dir` reads them).
"""
import argparse
import datetime
import os
import subprocess
import sys
from pathlib import Path

from pinned import PIN, own_session

TLBR_PAGES = "1024,2048,2560,2816,3072,3328,3584,3840,4096,4608,5120,6144,8192"
TLB_N = "1024,2048,3072,4096,6144,8192,12288,16384,24576"
#: the `order` rows: the chain's key pages (about 0.33 to 1.5 of a 3,072-entry TLB's reach)
#: and the live key's place in the hash order (the 8 quantiles of a uniform place)
ORDER_PAGES = "1024,1536,2048,2304,2560,2816,3072,3328,3584,3840,4096,4352,4608"
ORDER_FRACS = "0.0625,0.1875,0.3125,0.4375,0.5625,0.6875,0.8125,0.9375"


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("probe")
    ap.add_argument("out")
    ap.add_argument("label")
    ap.add_argument("--reads", default="1,2,3,4,5,6,7,8,10")
    ap.add_argument("--no-tlb", action="store_true", help="only the tlbr rows")
    ap.add_argument("--order", metavar="LAYOUT",
                    help="also the `order` rows (the sweep's own order and spacing) of the "
                         "chain whose key offsets LAYOUT holds, into OUT/order/order-LABEL.csv")
    ap.add_argument("--fracs", default=ORDER_FRACS, help="the live key's shares of the hash order")
    ap.add_argument("--order-pages", default=ORDER_PAGES, help="the chain's key pages")
    ap.add_argument("--bytes", action="store_true",
                    help="with --order, the same rows again with the table walked by a branch per "
                         "control byte (SWEEP_ORDER_BYTES, session 56's walk), into "
                         "OUT/order-bytes/order-LABEL.csv: the same minute's control")
    ap.add_argument("--hashmap", action="store_true",
                    help="with --order, the same rows again over std's HashMap<Arc<NodeId>, Vec> "
                         "scanned by keys().any() (SWEEP_ORDER_HASHMAP, burn's own code), into "
                         "OUT/order-hashmap/order-LABEL.csv")
    a = ap.parse_args()
    out = Path(a.out)
    (out / "tlbr").mkdir(parents=True, exist_ok=True)
    own_session()
    pin = PIN + [a.probe]
    log = open(out / "batches.txt", "a")
    load = open("/proc/loadavg").read().split()[:3]
    log.write(f"batch {a.label} start {now()} UTC load {' '.join(load)}\n")
    jobs = [] if a.no_tlb else [("tlb.csv", "tlb.stderr", ["tlb", TLB_N], None)]
    for r in a.reads.split(","):
        jobs.append((f"tlbr/r{r}-{a.label}.csv", f"tlbr/r{r}-{a.label}.stderr",
                     ["tlbr", r, "1", TLBR_PAGES], None))
    if a.order:
        (out / "order").mkdir(exist_ok=True)
        jobs.append((f"order/order-{a.label}.csv", f"order/order-{a.label}.stderr",
                     ["order", a.order, a.fracs, a.order_pages], None))
        for wanted, sub, var in ((a.bytes, "order-bytes", "SWEEP_ORDER_BYTES"),
                                 (a.hashmap, "order-hashmap", "SWEEP_ORDER_HASHMAP")):
            if wanted:
                (out / sub).mkdir(exist_ok=True)
                jobs.append((f"{sub}/order-{a.label}.csv", f"{sub}/order-{a.label}.stderr",
                             ["order", a.order, a.fracs, a.order_pages], {var: "1"}))
    for csv_name, err_name, args, env in jobs:
        t0 = now()
        with open(out / csv_name, "a") as fo, open(out / err_name, "a") as fe:
            rc = subprocess.call(pin + args, stdout=fo, stderr=fe,
                                 env=dict(os.environ, **env) if env else None)
        tag = "".join(f" {k}={v}" for k, v in (env or {}).items())
        log.write(f"  {' '.join(args[:3])}{tag} -> {csv_name} {t0}-{now()} rc {rc}\n")
        log.flush()
        if rc:
            sys.exit(f"{args}: exit {rc}")
    load = open("/proc/loadavg").read().split()[:3]
    log.write(f"batch {a.label} end {now()} UTC load {' '.join(load)}\n")


if __name__ == "__main__":
    main()
