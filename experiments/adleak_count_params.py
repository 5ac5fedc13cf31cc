"""adleak-count-params: the count loop at other op counts, tensor sizes and op mixes (Linux probe `params`).

Protocol of `burn-probes params` (experiments/probes, src/adleak.rs `count_loop`):
every (variant, op count) point is a FRESH process; after setting up the mode's
tensors the counting allocator's snapshot is taken (no warm-up), then `ops`
iterations, then one unrelated backward, then (modes with tracked leaves) one
backward through every tracked leaf. Variants are `<mode>/size=<elements>`, x is
the op count. Modes:

``untracked``        c = a + b, nothing requires grad (adleak flex.autodiff)
``tracked``          c = a + b, a requires grad (adleak a-tracked)
``interleaved``      even iterations a + b (a tracked), odd b + b (untracked)
``independent4``     4 require-grad leaves (4 graphs); iteration i: a[i % 4] + b
``merge-persistent`` a and b both require grad (their graphs merge at the first add)
``merge-fresh``      x = a.detach().require_grad(), y = b.detach().require_grad()
                     (two new graphs), c = x + y merges them; all dropped
``chain-dead``       x = a.detach().require_grad(), then x = x + b per iteration (a chain
                     of ops nodes in one graph), x dropped: no live handle at the
                     backward, so the sweep reads every remaining node twice per visit
                     (maybe_useful, free_unused_roots) and frees one root per visit: a
                     deterministic ~ops^2 node reads (not in the probe's default points:
                     `burn-probes params --variant count/chain-dead/OPS/16`)

Rows per phase (after-loop, after-unrelated-backward, after-backward-through-a):
heap bytes / blocks since the snapshot, allocation calls during the phase,
`ns_per_op` (after-loop) and `backward_ms` (the backward of that phase,
including its orphan sweep).

Each cell (variant) simulates one fresh process per op count (``ops``, comma
separated; ``auto`` = the probe's counts for the variant; with `--quick` the
probe divides every count by 10: ``--set ops=quick``, which ``sim compare`` sets for
rows of ``sim measure --quick``).
"""

from sim.engine.simulation import Simulation
from sim.burn.tensor import Tensor, drop

from common import tiny_backward

EXPERIMENT = "adleak-count-params"
X_UNITS = {"adleak-count-params": "iterations"}
SWEEP = False  # a replica of a Linux probe: run when named, not in the default sweep
MODES = ("untracked", "tracked", "interleaved", "independent4", "merge-persistent",
         "merge-fresh", "chain-dead")
VARIANTS = (
    "untracked/size=16", "tracked/size=16",
    "untracked/size=1024", "tracked/size=1024",
    "untracked/size=65536", "tracked/size=65536",
    "interleaved/size=16", "independent4/size=16", "merge-persistent/size=16",
    "merge-fresh/size=16", "chain-dead/size=16",
)
PARAMS = {"ops": "auto"}
POSITIVE = ()
#: the probe's `--quick` op counts (adleak.rs param_points: every count divided by 10)
QUICK = {"ops": "quick"}

#: the probe's op counts per variant (src/adleak.rs `param_points`)
PROBE_OPS = {
    "untracked/size=16": (1_000, 3_000, 10_000, 30_000, 100_000),
    "tracked/size=16": (1_000, 3_000, 10_000, 30_000, 100_000),
}
MIX_OPS = (10_000, 100_000)
#: chain-dead: two of the op counts of experiments/measured/linux-x86_64/sweep-scan.csv
#: (the simulated sweep reads every node per visit in Python: 10k ops take ~30 s; pass
#: --set ops=... for the others)
CHAIN_OPS = (1_000, 3_000)
SIZE_OPS = (10_000,)


def op_counts(variant, ops):
    """The op counts one cell simulates (each a fresh process): ``auto`` the probe's,
    ``quick`` the probe's under ``--quick`` (each divided by 10), else as listed."""
    if str(ops).strip() == "quick":
        return tuple(n // 10 for n in op_counts(variant, "auto"))
    if str(ops).strip() != "auto":
        try:
            counts = tuple(int(s.replace("_", "")) for s in str(ops).split(",") if s.strip())
        except ValueError:
            from sim.errors import UserError
            raise UserError(f"--set ops={ops}: expected 'auto' or comma-separated integers") from None
        if not counts or min(counts) <= 0:
            from sim.errors import UserError
            raise UserError(f"--set ops={ops}: op counts must be positive integers")
        return counts
    if variant in PROBE_OPS:
        return PROBE_OPS[variant]
    if variant.startswith("chain-dead/"):
        return CHAIN_OPS
    return SIZE_OPS if variant.split("/")[0] in ("untracked", "tracked") else MIX_OPS


def run(sim, variant, ops):
    mode, size = variant.split("/size=")
    for n in op_counts(variant, ops):
        # a fresh process per point, as the probe re-executes itself per point
        sub = Simulation(sim.profile, policy=sim.policy_name, experiment=sim.experiment,
                         variant=sim.variant, limits=sim.limits, fast_forward=sim.fast_forward)
        sub.run(lambda s: count_loop(s, mode, n, int(size)), {})
        sim.rows.extend(sub.rows)
        if sub.panic is not None:
            sim.panic = sub.panic
            return
        yield sim.tick()


def count_loop(sim, mode, n_ops, size):
    """One process: the mode's setup, the loop and the backward phases (rows recorded)."""
    ad = sim.device("flex").autodiff()

    def leaf(value, grad=False):
        t = Tensor.from_floats([value] * size, ad)
        return t.require_grad() if grad else t

    tracked = []
    if mode in ("untracked", "tracked"):
        a, b = leaf(1.0, mode == "tracked"), leaf(2.0)
        if mode == "tracked":
            tracked.append(a)
    elif mode in ("interleaved", "merge-persistent"):
        a = leaf(1.0, True)
        b = leaf(2.0, mode == "merge-persistent")
        tracked = [a, b] if mode == "merge-persistent" else [a]
    elif mode == "independent4":
        tracked = [leaf(1.0 + k, True) for k in range(4)]
        a, b = tracked[0], leaf(2.0)
    elif mode in ("merge-fresh", "chain-dead"):
        a, b = leaf(1.0), leaf(2.0)
    else:
        raise ValueError(mode)
    heap = sim.heap
    bytes0, blocks0 = heap.live_bytes, heap.live_blocks

    def row(phase, calls0, **timed):
        for metric, value in (("heap_bytes_delta", heap.live_bytes - bytes0),
                              ("heap_blocks_delta", heap.live_blocks - blocks0),
                              ("alloc_calls_delta", heap.allocs - calls0),
                              *timed.items()):
            sim.record(n_ops, "iterations", metric, value, phase=phase)

    def add(x, y):
        drop(x.clone() + y.clone())

    calls0, t0 = heap.allocs, sim.now_ns
    if mode == "interleaved":
        def pair():
            add(a, b)
            add(b, b)
        sim.repeat(n_ops // 2, pair)
        if n_ops % 2:
            add(a, b)
    elif mode == "independent4":
        def round4():
            for k in range(4):
                add(tracked[k], b)
        sim.repeat(n_ops // 4, round4)
        for k in range(n_ops % 4):
            add(tracked[k], b)
    elif mode == "merge-fresh":
        def fresh():
            x = a.clone().detach().require_grad()
            y = b.clone().detach().require_grad()
            drop(x + y)
        sim.repeat(n_ops, fresh)
    elif mode == "chain-dead":
        x = a.clone().detach().require_grad()
        for _ in range(n_ops):
            x = x + b.clone()
        del x
    else:
        sim.repeat(n_ops, lambda: add(a, b))
    sim.timing.clock_read()             # each window's one read of the probe's clock
    row("after-loop", calls0, ns_per_op=round((sim.now_ns - t0) / n_ops, 3))
    yield sim.tick()

    calls0, t0 = heap.allocs, sim.now_ns
    tiny_backward(ad, probe=True)
    sim.timing.clock_read()
    row("after-unrelated-backward", calls0, backward_ms=round((sim.now_ns - t0) / 1e6, 6))
    yield sim.tick()

    if tracked:
        calls0, t0 = heap.allocs, sim.now_ns
        loss = tracked[0].clone().sum()
        for x in tracked[1:]:
            loss = loss + x.clone().sum()
        (loss * 2.0).backward()
        del loss
        sim.timing.clock_read()
        row("after-backward-through-a", calls0, backward_ms=round((sim.now_ns - t0) / 1e6, 6))
        yield sim.tick()
