#!/usr/bin/env python3
"""How many 4-KiB pages the EMA graph's node keys lie on: real burn against the simulator.

Real burn: the counting allocator's key-page census (``PROBE_CENSUS=N``, burn-probes'
``alloc::census_print``): at the end of every Nth step, the live 24-B blocks (burn-autodiff's
``ArcInner<NodeId>`` keys, and under Balanced checkpointing one more 24-B block a step), the
pages holding one or more, and the live small blocks by request size. Per census row this
prints the blocks, the pages, the heap's bytes per block (pages x 4096 / blocks) overall and
since the previous row, and the live small blocks' requested and chunk bytes (glibc's
``request2size``) per block since the previous row.

    .venv/bin/python experiments/calibration/key-pages.py CENSUS_FILE

With ``--simulate WORKLOAD VARIANT`` it runs that cell instead (``--profile``, ``--set``) and
prints, at every sweep whose live graph crossed another ``--every`` nodes, the graph's nodes
and the pages its keys' blocks lie on in the simulated glibc arena (what
``Timing._key_spacing`` reads), and, where fast-forward charges the chain's sweeps in
closed form, a row ``ff`` each time the B per key it charges them with changes (the probed
sweep's spacing, ``chainrun.SweepTemplate.spacing``) with the node count then, e.g.

    .venv/bin/python experiments/calibration/key-pages.py --simulate \\
        experiments/p10_ema_params.py detach/steps=500 --profile amd-epyc-zen4-long \\
        --set report_at=1,500

Nothing is fitted.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def chunk(nbytes):
    """glibc's chunk for a request of ``nbytes`` (the top of the 8-B size class counted)."""
    return max(32, (nbytes + 8 + 15) & ~15)


def census(path) -> int:
    rows, sizes = {}, {}
    for line in open(path):
        p = line.split()
        if p and p[0] == "CENSUS":
            rows[int(p[1])] = (int(p[3]), int(p[5]))
        elif p and p[0] == "CENSUS_SIZES":
            sizes[int(p[1])] = {int(a): int(b) for a, b in (x.split(":") for x in p[2:])}
    print("step,blocks,pages,bytes_per_block,d_bytes_per_block,d_request_per_block,"
          "d_chunk_per_block")
    prev = None
    for step in sorted(rows):
        blocks, pages = rows[step]
        sz = sizes.get(step, {})
        req = sum(c * k for c, k in sz.items())
        ch = sum(chunk(c) * k for c, k in sz.items())
        d = ("", "", "")
        if prev is not None:
            db = blocks - prev[0]
            if db > 0:
                d = (f"{4096 * (pages - prev[1]) / db:.1f}", f"{(req - prev[2]) / db:.1f}",
                     f"{(ch - prev[3]) / db:.1f}")
        print(f"{step},{blocks},{pages},{4096 * pages / max(1, blocks):.1f},{','.join(d)}")
        prev = (blocks, pages, req, ch)
    return 0


def simulate(workload, variant, profile, sets, every) -> int:
    from sim.engine.fastforward import chainrun
    from sim.platform import timing
    from sim.commands.cli import main

    original = timing.Timing.sweep_live
    original_ff = chainrun._sweep
    seen = {"next": every, "spacing": None}

    def sweep_live(self, memory, passes):
        n = memory.node_count()
        if n >= seen["next"]:
            pages = {rc._block // self.PAGE_BYTES for rc, _ in memory.nodes.values()
                     if type(rc._block) is int}
            print(f"exact,{n},{len(pages)},{4096 * len(pages) / max(1, n):.1f}", flush=True)
            seen["next"] = (n // every + 1) * every
        return original(self, memory, passes)

    def ff_sweep(sim, template, j, graph):
        if template.referenced and template.spacing != seen["spacing"]:
            seen["spacing"] = template.spacing
            n = template.nodes + j * template.deltas[3]
            print(f"ff,{n},,{template.spacing:.1f}", flush=True)
        return original_ff(sim, template, j, graph)

    timing.Timing.sweep_live = sweep_live
    chainrun._sweep = ff_sweep
    print("sweep,nodes,pages,bytes_per_node")
    args = ["run", workload, "-v", variant, "--profile", profile, "--format", "csv",
            "--out", "/dev/null"]
    for item in sets:
        args += ["--set", item]
    try:
        main(args)
    except SystemExit as exc:
        return exc.code or 0
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("census", nargs="?", help="stderr (or its CENSUS lines) of a census run")
    parser.add_argument("--simulate", nargs=2, metavar=("WORKLOAD", "VARIANT"))
    parser.add_argument("--profile", default="amd-epyc-zen4-long")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--every", type=int, default=1000, help="nodes between printed rows")
    args = parser.parse_args(argv)
    if args.simulate:
        return simulate(*args.simulate, args.profile, args.sets, args.every)
    if not args.census:
        parser.error("give a census file or --simulate WORKLOAD VARIANT")
    return census(args.census)


if __name__ == "__main__":
    sys.exit(main())
