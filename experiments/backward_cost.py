"""backward-cost: time per step of building a chain of tracked ops, and of its backward (Linux probe `backward-cost`).

The program of `burn-probes backward-cost` (experiments/probes, src/bwcost.rs): per
variant (an op kind), `rounds` rounds, each from a fresh leaf x = [1, 128] requiring
grad: a chain of `chain` ops `y = op(y)` (add of a constant [1, 128], mul_scalar, relu,
matmul by a constant [128, 128]), then `y.sum().backward()`. Per round, `ms_per_step`
at phase `forward` (the chain's build time per op) and `backward` (the backward's time
per chain op: tape build, every step's backward, the orphan sweep after it).
"""

from sim.burn.tensor import Tensor

EXPERIMENT = "backward-cost"
X_UNITS = {"backward-cost": "round"}
SWEEP = False  # a replica of a Linux probe: run when named, not in the default sweep
VARIANTS = ("add", "mul_scalar", "relu", "matmul")
PARAMS = {"chain": 2_000, "rounds": 3, "features": 128}
#: the probe's `--quick` chain (bwcost.rs run_variant)
QUICK = {"chain": 200}

_STEP = {
    "add": lambda y, c, w: y + c.clone(),
    "mul_scalar": lambda y, c, w: y.mul_scalar(1.0001),
    "relu": lambda y, c, w: y.relu(),
    "matmul": lambda y, c, w: y.matmul(w.clone()),
}


def run(sim, variant, chain, rounds, features):
    device = sim.device("flex").autodiff()
    c = Tensor.random((1, features), device)
    w = Tensor.random((features, features), device)
    step = _STEP[variant]
    for r in range(1, rounds + 1):
        x = Tensor.random((1, features), device).require_grad()
        start = sim.now_ns
        y = x.clone()
        for _ in range(chain):
            y = step(y, c, w)
        sim.timing.clock_read()         # each window's one read of the probe's clock
        forward = (sim.now_ns - start) / chain / 1e6
        start = sim.now_ns
        grads = y.sum().backward()
        sim.timing.clock_read()
        backward = (sim.now_ns - start) / chain / 1e6
        del grads, x, y
        sim.sample(r, "round", phase="forward", ms_per_step=round(forward, 9))
        sim.sample(r, "round", phase="backward", ms_per_step=round(backward, 9))
        yield sim.tick()
