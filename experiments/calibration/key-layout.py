#!/usr/bin/env python3
"""Real burn's own addresses of the EMA graph's node keys, from a malloc-log of the params
probe, and the layout measures of one or more key layouts side by side (issue 43).

    gcc -O2 -DCAP='(6u<<20)' -shared -fPIC -o /tmp/malloc_log.so \\
        experiments/probes/malloc-log/malloc_log.c
    MALLOC_LOG=/tmp/bal.bin LD_PRELOAD=/tmp/malloc_log.so \\
        burn-probes params --variant ema-balanced/6000 --out /tmp/bal.csv
    python3 experiments/calibration/key-layout.py real /tmp/bal.bin OUT.txt [--balanced]
    python3 experiments/calibration/key-layout.py scanned SCAN OUT.txt
    python3 experiments/calibration/key-layout.py compare --keys 8000,16000 A.txt B.txt ...

``real``: the keys are the 24-B blocks (burn-autodiff's ``ArcInner<NodeId>``) still live when
the process ends, in allocation order (the nodes' creation order, the ``nodes`` map's order
in ``sweep-order-layout.py``). With ``--balanced`` (Balanced checkpointing) each step's
1-MiB snapshot is followed by one 24-B block that is not a key (the simulated arena's run
has the same sequence: snapshot, that block, the step's four keys); it is left out. OUT: one
offset a line from the first key, as ``sweep-order-layout.py`` writes (the sweep-scan
probe's ``order`` layouts), so both feed the same probe rows.

``scanned``: the same from a live process's heap (``experiments/probes/tools/heapscan.py``,
which needs no log and so reaches any step): the ArcInner<NodeId>-shaped blocks with strong
count 1-2 (a key held by its graph alone, or the live one mid-sweep) in their ids' order
(the nodes' creation order); a parameter's or a leaf's key held elsewhere has more.

``compare``: for the first N keys of each layout: pages, B of heap per key, span (first to
last page), the share of the span the pages fill, runs of consecutive pages, 16-KiB groups,
page-table lines (8 pages), 2-MiB regions, and the keys-per-page histogram's quartiles.
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

KEY_BYTES = 24
SNAPSHOT_BYTES = 1 << 20
MALLOC, FREE, CALLOC, REALLOC, MEMALIGN = 1, 2, 3, 4, 5


def live_blocks(records):
    """``{pointer: (size, call index)}`` of the blocks live after the last record."""
    live = {}
    for i, (kind, size, _align, ptr, arg, _brk) in enumerate(records):
        if kind in (MALLOC, CALLOC, MEMALIGN):
            live[ptr] = (size, i)
        elif kind == FREE:
            live.pop(arg, None)
        elif kind == REALLOC:
            live.pop(arg, None)
            live[ptr] = (size, i)
    return live


def real_keys(records, balanced):
    """The keys' addresses in allocation order (see the module docstring)."""
    live = live_blocks(records)
    events = sorted((i, size, ptr) for ptr, (size, i) in live.items()
                    if size == KEY_BYTES or (balanced and size == SNAPSHOT_BYTES))
    keys, skip = [], False
    for _i, size, ptr in events:
        if size == SNAPSHOT_BYTES:
            skip = True
        elif skip:
            skip = False
        else:
            keys.append(ptr)
    return keys


def scanned_keys(lines):
    """The keys' addresses in id order from heapscan.py's lines."""
    rows = [tuple(int(v) for v in line.split()) for line in lines if line.strip()]
    return [a for a, strong, weak, _id in sorted(rows, key=lambda r: r[3])
            if strong <= 2 and weak == 1]


def measures(offsets):
    """The layout measures of the module docstring for these key offsets."""
    per_page = {}
    for o in offsets:
        per_page[o // 4096] = per_page.get(o // 4096, 0) + 1
    pages = sorted(per_page)
    runs = 1 + sum(1 for a, b in zip(pages, pages[1:]) if b != a + 1)
    span = pages[-1] - pages[0] + 1
    q = statistics.quantiles(per_page.values(), n=4) if len(pages) > 1 else [1, 1, 1]
    return {
        "keys": len(offsets), "pages": len(pages),
        "B/key": round(4096 * len(pages) / len(offsets), 1),
        "span pages": span, "fill %": round(100 * len(pages) / span, 2),
        "runs": runs, "pages/run": round(len(pages) / runs, 1),
        "16-KiB groups": len({p >> 2 for p in pages}),
        "PTE lines": len({p >> 3 for p in pages}),
        "2-MiB regions": len({p >> 9 for p in pages}),
        "keys/page q1-q3": "/".join(f"{v:g}" for v in q),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("real")
    r.add_argument("log")
    r.add_argument("out")
    r.add_argument("--balanced", action="store_true")
    s = sub.add_parser("scanned")
    s.add_argument("scan")
    s.add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("layouts", nargs="+")
    c.add_argument("--keys", default="", help="comma-separated prefixes (default: all keys)")
    args = ap.parse_args(argv)
    if args.cmd in ("real", "scanned"):
        from experiments.probes.arena_replay import read_log
        source = args.log if args.cmd == "real" else args.scan
        try:
            keys = (real_keys(read_log(source), args.balanced) if args.cmd == "real"
                    else scanned_keys(Path(source).read_text().splitlines()))
        except (OSError, ValueError) as e:
            print(f"error: {source}: {e}", file=sys.stderr)
            return 1
        if not keys:
            print(f"error: no live {KEY_BYTES}-B keys in {source}", file=sys.stderr)
            return 1
        Path(args.out).write_text("".join(f"{k - keys[0]}\n" for k in keys))
        print(f"{len(keys)} keys", file=sys.stderr)
        return 0
    layouts = {p: [int(x) for x in Path(p).read_text().split()] for p in args.layouts}
    prefixes = [int(k) for k in args.keys.split(",") if k] or [None]
    header = None
    for n in prefixes:
        for path, offsets in layouts.items():
            if n is not None and n > len(offsets):
                continue
            m = measures(offsets[:n])
            if header is None:
                header = ["layout", *m]
                print("| " + " | ".join(header) + " |")
                print("|" + "---|" * len(header))
            print(f"| {Path(path).name} | " + " | ".join(str(v) for v in m.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
