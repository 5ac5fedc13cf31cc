#!/usr/bin/env python3
"""The sweep-scan probe's `order` rows over two or more key layouts in turn, in one hold of
the timing lock: burn's own table and scan (SWEEP_ORDER_HASHMAP) and a real sweep's share of
the locator's clone (SWEEP_ORDER_LOCATOR_PASSES), each layout's rows into
OUT/NAME/order-hashmap/order-rROUND.csv (the files `order-vs-burn.py` reads), the layouts
alternating round by round so each pair shares its minute (issue 43, session 58).

    flock /work/notes/timing.lock python3 experiments/calibration/order-pair.py \\
        PROBE OUT --layout real=REAL.txt --layout sim=SIM.txt --rounds 4 \\
        --pages 1024,1536,2048,2304,2560,2816

(`--populated NAME`: that layout's rows with every page of their region written first, as
real burn's heap has the pages between its keys in use.)
PROBE: the sweep-scan binary. As `tlb-batch.py`, it starts a session of its own, raises that
session's autogroup to -15 and runs every row under `taskset -c 1 nice -n -15`; the UTC time
and load of each run go to OUT/runs.txt. Nothing fitted.
"""
import argparse
import datetime
import os
import subprocess
import sys
from pathlib import Path

from pinned import PIN, own_session

FRACS = "0.0625,0.1875,0.3125,0.4375,0.5625,0.6875,0.8125,0.9375"


def stamp():
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    return f"{datetime.datetime.now(datetime.timezone.utc):%H:%M:%S} UTC load {load}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probe")
    ap.add_argument("out")
    ap.add_argument("--layout", action="append", required=True, metavar="NAME=FILE")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--pages", required=True, help="the chain's key pages, comma-separated")
    ap.add_argument("--fracs", default=FRACS, help="the live key's shares of the hash order")
    ap.add_argument("--populated", action="append", default=[], metavar="NAME",
                    help="the named layout's rows in one region whose every page is written "
                         "first (SWEEP_ORDER_POPULATE; give --pages longest first)")
    a = ap.parse_args()
    layouts = []
    for item in a.layout:
        name, sep, path = item.partition("=")
        if not sep or not Path(path).is_file():
            print(f"error: --layout {item!r}: want NAME=FILE with FILE a layout", file=sys.stderr)
            return 2
        layouts.append((name, path))
    out = Path(a.out)
    own_session()
    env = dict(os.environ, SWEEP_ORDER_HASHMAP="1", SWEEP_ORDER_LOCATOR_PASSES="1")
    pin = PIN + [a.probe, "order"]
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "runs.txt", "a")
    for r in range(1, a.rounds + 1):
        # alternate which layout goes first, so neither always has the fresher minute
        for name, path in (layouts if r % 2 else layouts[::-1]):
            d = out / name / "order-hashmap"
            d.mkdir(parents=True, exist_ok=True)
            start = stamp()
            run_env = dict(env, SWEEP_ORDER_POPULATE="1") if name in a.populated else env
            with open(d / f"order-r{r}.csv", "a") as fo, open(d / f"order-r{r}.stderr", "a") as fe:
                rc = subprocess.call(pin + [path, a.fracs, a.pages], stdout=fo, stderr=fe,
                                     env=run_env)
            log.write(f"round {r} {name} {path}: {start} -> {stamp()} rc {rc}\n")
            log.flush()
            if rc:
                print(f"error: {name}: the probe exited {rc}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
