#!/usr/bin/env python3
"""The simulated glibc arena's addresses of the EMA graph's node keys, for the sweep-scan
probe's `order` rows (issue 43): at the first orphan sweep whose live graph holds
``--nodes`` or more nodes, the address of every key's block (burn-autodiff's
``ArcInner<NodeId>``) in the ``nodes`` map's order (the nodes' creation order), less the
first one's, one a line, to OUT:

    .venv/bin/python experiments/calibration/sweep-order-layout.py \\
        experiments/ema_balanced_params.py detach/steps=1200 --nodes 4000 \\
        --profile amd-epyc-zen4-long OUT

The exact simulation costs time quadratic in the steps (ema-balanced detach: ~10 CPU-s to
step 1,500, ~7 CPU-min to step 8,000 on the AMD EPYC), so ``--tile N`` writes the first
run's offsets N times, each copy shifted by the run's span (first to last key, rounded up to
a page, plus a page): a chain N times as long with the run's own layout repeated (its keys'
pages, their gaps and the share of their span they fill). ``--from FILE`` tiles a layout
written before instead of simulating. Nothing is fitted.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def tiled(offsets, copies):
    """``offsets`` written ``copies`` times, each copy shifted by their span (first to last,
    rounded up to a 4-KiB page, plus a page)."""
    lo = min(offsets)
    span = -(-(max(offsets) - lo + 4096) // 4096) * 4096
    return [o + t * span for t in range(copies) for o in offsets]


def main(argv=None) -> int:
    from sim.commands.cli import main as sim_main
    from sim.platform import timing

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("variant")
    parser.add_argument("out")
    parser.add_argument("--nodes", type=int, default=4000)
    parser.add_argument("--profile", default="amd-epyc-zen4-long")
    parser.add_argument("--tile", type=int, default=1, help="copies of the layout, end to end")
    parser.add_argument("--from", dest="source", help="tile this layout file (no simulation)")
    args = parser.parse_args(argv)
    if args.source:
        offsets = [int(line) for line in Path(args.source).read_text().split()]
        Path(args.out).write_text("".join(f"{o}\n" for o in tiled(offsets, args.tile)))
        return 0
    original = timing.Timing.sweep_live
    done = {}

    def sweep_live(self, memory, passes):
        n = memory.node_count()
        if n >= args.nodes and not done:
            blocks = [rc._block for rc, _ in memory.nodes.values() if type(rc._block) is int]
            done["blocks"] = blocks
            first = blocks[0]
            offsets = tiled([b - first for b in blocks], args.tile)
            Path(args.out).write_text("".join(f"{o}\n" for o in offsets))
            pages = len({b // self.PAGE_BYTES for b in blocks})
            print(f"{n} nodes, {len(blocks)} keys placed, {pages} pages, "
                  f"{4096 * pages / len(blocks):.1f} B per key", file=sys.stderr)
            raise SystemExit(0)
        return original(self, memory, passes)

    timing.Timing.sweep_live = sweep_live
    try:
        sim_main(["run", args.workload, "-v", args.variant, "--profile", args.profile,
                  "--format", "csv", "--out", "/dev/null", "--exact"])
    except SystemExit:
        pass
    if not done:
        print(f"no sweep reached {args.nodes} nodes", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
