#!/usr/bin/env python3
"""The simulated glibc arena's addresses of the EMA graph's node keys, for the sweep-scan
probe's `order` rows (issue 43): at the first orphan sweep whose live graph holds
``--nodes`` or more nodes, the address of every key's block (burn-autodiff's
``ArcInner<NodeId>``) in the ``nodes`` map's order (the nodes' creation order), less the
first one's, one a line, to OUT:

    .venv/bin/python experiments/calibration/sweep-order-layout.py \\
        experiments/ema_balanced_params.py detach/steps=1200 --nodes 4000 \\
        --profile amd-epyc-zen4-long OUT

The probe tiles the offsets past the last one (the layout of a long chain is periodic: each
step adds its four nodes' blocks and its step's between the keys), so a few thousand keys
give it any page count. Nothing is fitted.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv=None) -> int:
    from sim.commands.cli import main as sim_main
    from sim.platform import timing

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("variant")
    parser.add_argument("out")
    parser.add_argument("--nodes", type=int, default=4000)
    parser.add_argument("--profile", default="amd-epyc-zen4-long")
    args = parser.parse_args(argv)
    original = timing.Timing.sweep_live
    done = {}

    def sweep_live(self, memory, passes):
        n = memory.node_count()
        if n >= args.nodes and not done:
            blocks = [rc._block for rc, _ in memory.nodes.values() if type(rc._block) is int]
            done["blocks"] = blocks
            first = blocks[0]
            Path(args.out).write_text("".join(f"{b - first}\n" for b in blocks))
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
