"""op-cost: wall time of one small op on plain flex, untracked and tracked autodiff (Linux probe `op-cost`).

The program of `burn-probes op-cost` (experiments/probes, src/opcost.rs): each
variant `<mode>/<op>` runs `drop(op(x.clone(), ...))` on x = [1, 128] (w = [128, 128]
for matmul, y = [1, 128] for add): `warmup` iterations, then `blocks` blocks of
`iterations / blocks`, each block's mean time per iteration one `ms_per_step` row at
x = iterations since the warm-up. Modes: `plain` (no autodiff), `untracked` (autodiff
device, nothing requires grad: each op registers an untracked step in a graph of its
own), `tracked` (x requires grad: each op's step joins x's graph, which keeps it) and
`chain` (plain, but the iteration is `y = op(y)`: the operand is moved, not cloned, and
an elementwise op writes in place into its uniquely owned buffer; add adds a clone of
the constant, matmul multiplies by a clone of w, reshape swaps [1, n] and [n, 1]; no sum).
These are the ops a single-sample MLP forward is made of (train-validate's
generations): the split of an op's time between the backend's kernel and
burn-autodiff's bookkeeping.
"""

from sim.errors import UserError
from sim.burn.tensor import Tensor, drop

EXPERIMENT = "op-cost"
X_UNITS = {"op-cost": "iterations"}
SWEEP = False  # a replica of a Linux probe: run when named, not in the default sweep
MODES = ("plain", "untracked", "tracked", "chain")
OPS = ("add", "mul_scalar", "matmul", "relu", "reshape", "sum")
CHAIN_OPS = ("add", "mul_scalar", "matmul", "relu", "reshape")
VARIANTS = tuple(f"{mode}/{op}" for mode in MODES
                 for op in (CHAIN_OPS if mode == "chain" else OPS))
PARAMS = {"iterations": 20_000, "warmup": 1_000, "blocks": 4, "features": 128}
#: the probe's `--quick` loop count (opcost.rs run_variant)
QUICK = {"iterations": 2_000}
POSITIVE = ("iterations", "blocks", "features")

_APPLY = {
    "add": lambda x, y, w: x.clone() + y.clone(),
    "mul_scalar": lambda x, y, w: x.clone().mul_scalar(2.0),
    "matmul": lambda x, y, w: x.clone().matmul(w.clone()),
    "relu": lambda x, y, w: x.clone().relu(),
    "reshape": lambda x, y, w: x.clone().reshape((x.shape[1], 1)),
    "sum": lambda x, y, w: x.clone().sum(),
}

#: the chain mode's step: the op on the moved tensor ``z``
_STEP = {
    "add": lambda z, y, w: z + y.clone(),
    "mul_scalar": lambda z, y, w: z.mul_scalar(1.0001),
    "matmul": lambda z, y, w: z.matmul(w.clone()),
    "relu": lambda z, y, w: z.relu(),
    "reshape": lambda z, y, w: z.reshape((z.shape[1], z.shape[0])),
}


def run(sim, variant, iterations, warmup, blocks, features):
    if iterations < blocks:
        raise UserError(f"iterations={iterations} is fewer than blocks={blocks}")
    mode, op = variant.split("/")
    flex = sim.device("flex")
    device = flex if mode in ("plain", "chain") else flex.autodiff()
    x = Tensor.random((1, features), device)
    if mode == "tracked":
        x = x.require_grad()
    y = Tensor.random((1, features), device)
    w = Tensor.random((features, features), device)
    if mode == "chain":
        step, state = _STEP[op], {"z": x.clone()}

        def body():
            state["z"] = step(state.pop("z"), y, w)
    else:
        apply = _APPLY[op]

        def body():
            drop(apply(x, y, w))

    sim.repeat(warmup, body)
    block = iterations // blocks
    for b in range(1, blocks + 1):
        start = sim.now_ns
        sim.repeat(block, body)
        sim.timing.clock_read()         # the block's one read of the probe's clock
        sim.sample(b * block, "iterations",
                   ms_per_step=round((sim.now_ns - start) / block / 1e6, 9))
        yield sim.tick()
