"""gpu-large-forward: an MLP of Linear(2048,2048) layers on a [1024,2048] input behind
autodiff, three forwards read with ``into_scalar``: 8 MiB activations, past the arena's
first 2 MiB pages, so its pages grow and the old ones are outdated. Then a
``memory_cleanup``, and another once the model and input are dropped. Replica of
``gpu-probes large-forward``."""

from sim.burn.nn import Mlp
from sim.burn.tensor import Tensor

from common import gpu_pool_metrics

EXPERIMENT = "gpu-large-forward"
SWEEP = False
VARIANTS = ("mlp-2048-batch-1024",)
PARAMS = {"forwards": 3, "batch": 1024, "features": 2048}
X_UNITS = {"gpu-large-forward": "forwards"}


def run(sim, variant, forwards, batch, features):
    gpu = sim.device("metal")
    ad = gpu.autodiff()
    model = Mlp(features, features, features, ad)
    x = Tensor.random((batch, features), ad)
    sim.sample(0, "forwards", phase="start", **gpu_pool_metrics(gpu))
    for i in range(1, forwards + 1):
        y = model.forward(x.clone())
        y.sum().into_scalar()
        del y
        sim.sample(i, "forwards", phase="after-forward", **gpu_pool_metrics(gpu))
    gpu.memory_cleanup()
    sim.sample(forwards, "forwards", phase="after-memory-cleanup", **gpu_pool_metrics(gpu))
    del x, model
    gpu.memory_cleanup()
    sim.sample(forwards, "forwards", phase="after-drop-and-cleanup", **gpu_pool_metrics(gpu))
    yield sim.tick()
