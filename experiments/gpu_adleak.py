"""gpu-adleak: the adleak loop (``c = a.clone() + b.clone(); drop(c)``, 16 floats) on the
profile's GPU behind autodiff, nothing requiring grad: the pool after iterations 1, 10,
500 and 1000. Replica of ``gpu-probes adleak``."""

from sim.burn.tensor import Tensor

from common import gpu_pool_metrics

EXPERIMENT = "gpu-adleak"
SWEEP = False
VARIANTS = ("autodiff-no-grad",)
PARAMS = {"iterations": 1000, "elements": 16}
X_UNITS = {"gpu-adleak": "iterations"}


def run(sim, variant, iterations, elements):
    gpu = sim.device("metal")
    ad = gpu.autodiff()
    a = Tensor.random((elements,), ad)
    b = Tensor.random((elements,), ad)
    sim.sample(0, "iterations", phase="start", **gpu_pool_metrics(gpu))
    for i in range(1, iterations + 1):
        c = a.clone() + b.clone()
        del c
        if i in (1, 10) or i % 500 == 0:
            sim.sample(i, "iterations", phase="after-loop", **gpu_pool_metrics(gpu))
    yield sim.tick()
