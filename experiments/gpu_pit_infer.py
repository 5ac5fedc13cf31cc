"""gpu-pit-infer: the seed's pit-infer (groups A, B, C) on the profile's GPU, every pool figure.

Replica of ``gpu-probes pit-infer`` (experiments/probes/gpu-probes), which runs it on
burn's wgpu backend (lavapipe here): Linear(512,512) -> Relu -> Linear(512,512),
weights lazily initialised, input [256,512] made at each group's start; each forward
reads ``y.sum().into_scalar()``. After forwards 1, 2, 3, 50 and 100 of each group:
bytes in use, reserved, padding and each pool's pages (:func:`common.gpu_pool_metrics`);
after group C, a ``memory_cleanup``.
"""

from sim.burn.nn import Mlp
from sim.burn.tensor import Tensor

from common import gpu_pool_metrics, pit_groups

EXPERIMENT = "gpu-pit-infer"
SWEEP = False
VARIANTS = ("build", "A-model-and-input-autodiff", "B-valid-model-input-autodiff",
            "C-valid-model-input-plain")
PARAMS = {"forwards": 100, "batch": 256, "features": 512}
X_UNITS = {"gpu-pit-infer": "forwards"}
#: the forwards after which the probe reports
REPORTS = (1, 2, 3, 50, 100)


def run(sim, variant, forwards, batch, features):
    gpu = sim.device("metal")
    ad = gpu.autodiff()
    model = Mlp(features, features, features, ad)
    if variant == "build":
        sim.sample(0, "forwards", phase="after-build", **gpu_pool_metrics(gpu))
        yield sim.tick()
        return

    def infer(group, net, input_device):
        x = Tensor.random((batch, features), input_device)
        if group == variant:
            sim.sample(0, "forwards", phase="start", **gpu_pool_metrics(gpu))
        for i in range(1, forwards + 1):
            y = net.forward(x.clone())
            y.sum().into_scalar()
            del y
            if group == variant and (i in REPORTS[:3] or i % 50 == 0):
                sim.sample(i, "forwards", phase="after-forward", **gpu_pool_metrics(gpu))
        del x
        yield sim.tick()

    valid = yield from pit_groups(infer, model, ad, gpu, variant)
    if valid is None:
        return
    gpu.memory_cleanup()   # the valid model still alive, as in the probe
    sim.sample(forwards, "forwards", phase="after-memory-cleanup", **gpu_pool_metrics(gpu))
    yield sim.tick()
