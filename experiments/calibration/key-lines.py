#!/usr/bin/env python3
"""How many 64-B lines the EMA graph's keys occupy: the live 24-B blocks (ArcInner<NodeId>,
burn-autodiff's node keys; 4 per p10-ema detach step) at the end of every 100th step of a
traced run, and the distinct cache lines their first bytes (the strong count that
``maybe_useful`` reads) sit on.

Input: the stderr of ``PROBE_TRACE=1-N burn-probes p10-ema --variant detach --steps N``
(experiments/probes/README.md, ``PROBE_TRACE``: every alloc/free with size and address;
the trace buffer holds ~1M events, about 950 steps). Output CSV on stdout:
``step,live_24b_blocks,distinct_lines,blocks_per_line``. Nothing is fitted.

    .venv/bin/python experiments/calibration/key-lines.py trace.stderr
"""

import sys


def main(path) -> int:
    live, snaps, step = {}, {}, 0
    for line in open(path):
        parts = line.split()
        if not parts or parts[0] != "TRACE":
            continue
        if parts[1] == "step":
            if step and step % 100 == 0:
                snaps[step] = dict(live)
            step = int(parts[2])
            continue
        if parts[1] == "overflow":
            break       # the buffer filled during this step: its snapshot is incomplete
        if len(parts) < 5:
            continue
        kind, size, ptr = parts[1], int(parts[2]), int(parts[4], 16)
        if kind == "Alloc":
            live[ptr] = size
        elif kind == "Free":
            live.pop(ptr, None)
        elif kind == "Realloc":
            live.pop(int(parts[6], 16), None)
            live[ptr] = size
    print("step,live_24b_blocks,distinct_lines,blocks_per_line")
    for s in sorted(snaps):
        blocks = [a for a, size in snaps[s].items() if size == 24]
        lines = {a >> 6 for a in blocks}
        print(f"{s},{len(blocks)},{len(lines)},{len(blocks) / max(1, len(lines)):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
