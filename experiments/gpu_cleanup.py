"""gpu-cleanup: one [256,512] tensor on the plain GPU device, its sum read once, then
``memory_cleanup`` before and after the tensor is dropped. Replica of
``gpu-probes cleanup``."""

from sim.burn.tensor import Tensor

from common import gpu_pool_metrics

EXPERIMENT = "gpu-cleanup"
SWEEP = False
VARIANTS = ("plain",)
PARAMS = {"rows": 256, "cols": 512}
X_UNITS = {"gpu-cleanup": "reads"}


def run(sim, variant, rows, cols):
    gpu = sim.device("metal")
    x = Tensor.random((rows, cols), gpu)
    sim.sample(0, "reads", phase="start", **gpu_pool_metrics(gpu))
    x.clone().sum().into_scalar()
    sim.sample(1, "reads", phase="after-read", **gpu_pool_metrics(gpu))
    gpu.memory_cleanup()
    sim.sample(1, "reads", phase="after-memory-cleanup", **gpu_pool_metrics(gpu))
    del x
    gpu.memory_cleanup()
    sim.sample(1, "reads", phase="after-drop-and-cleanup", **gpu_pool_metrics(gpu))
    yield sim.tick()
