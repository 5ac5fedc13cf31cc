"""two-thread-infer: two host threads running inference on one autodiff device.

Each thread runs `forwards` forwards of a `model.valid()` MLP on an autodiff
input (untracked ops: each registers a step, and so takes the locator mutex).
The locator mutex is a SimPy resource, so the threads queue for it. Reported per
thread: mean ms per forward, and time spent waiting for the lock. Under a policy
that does not register untracked ops, nobody waits.
"""

from sim.burn.nn import Mlp
from sim.burn.tensor import Tensor

EXPERIMENT = "two-thread-infer"
X_UNITS = {"two-thread-infer": "forwards"}
VARIANTS = ("two-threads", "one-thread")
PARAMS = {"forwards": 200, "report_every": 50, "batch": 16, "features": 64}


def run(sim, variant, forwards, report_every, batch, features):
    device = sim.device("flex").autodiff()
    model = Mlp(features, features, features, device).valid()

    def worker(name):
        x = Tensor.random((batch, features), device)
        start = sim.env.now
        for i in range(1, forwards + 1):
            model.forward(x.clone()).sum().into_scalar()
            yield sim.tick()
            if i % report_every == 0:
                sim.record(i, "forwards", "ms_per_step",
                           round((sim.env.now - start) / i / 1e6, 6), phase=name)

    threads = 2 if variant == "two-threads" else 1
    procs = [sim.spawn(worker(f"thread-{k}"), f"thread-{k}") for k in range(threads)]
    yield sim.env.all_of(procs)
    sim.sample(forwards, "forwards", phase="end")
