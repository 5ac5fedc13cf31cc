"""gpu-train-step: forward, backward and the gradients dropped, three times, for the
pit-infer MLP on a [64,512] input on the profile's GPU behind autodiff: the pool holds
autodiff's saved tensors after the forward and the gradients after the backward.
Replica of ``gpu-probes train-step``."""

from sim.burn.nn import Mlp
from sim.burn.tensor import Tensor

from common import gpu_pool_metrics

EXPERIMENT = "gpu-train-step"
SWEEP = False
VARIANTS = ("mlp-64x512",)
PARAMS = {"steps": 3, "batch": 64, "features": 512}
X_UNITS = {"gpu-train-step": "steps"}


def run(sim, variant, steps, batch, features):
    gpu = sim.device("metal")
    ad = gpu.autodiff()
    model = Mlp(features, features, features, ad)
    x = Tensor.random((batch, features), ad)
    sim.sample(0, "steps", phase="start", **gpu_pool_metrics(gpu))
    for step in range(1, steps + 1):
        loss = model.forward(x.clone()).sum()
        sim.sample(step, "steps", phase="after-forward", **gpu_pool_metrics(gpu))
        grads = loss.backward()
        sim.sample(step, "steps", phase="after-backward", **gpu_pool_metrics(gpu))
        del grads
        sim.sample(step, "steps", phase="after-grads-dropped", **gpu_pool_metrics(gpu))
    yield sim.tick()
