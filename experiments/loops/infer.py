"""A user's inference loop on an autodiff device (issue 39): a 2-layer MLP whose
parameters require grad, forwards of an input that does not, each output read and
dropped, no backward. Every forward hangs its nodes off the parameters' graph, whose
actions keep the activations: burn keeps them all, and their buffers push the older ones
out of the core's L2 once it is full (``batch`` x ``features`` floats per activation).

Not a built-in workload (it sits below ``experiments/``): run it as
``sim run experiments/loops/infer.py --set forwards=5000``."""

from sim.tensor import Tensor
from sim.nn import Mlp

PARAMS = {"forwards": 1000, "features": 64, "batch": 8}


def run(sim, variant, forwards, features, batch):
    ad = sim.device("flex").autodiff()
    model = Mlp(features, features, features, ad)
    x = Tensor.random([batch, features], ad)
    sim.repeat(forwards, lambda: model.forward(x.clone()).sum().into_scalar())
    yield sim.sample(forwards, "forwards", rss=sim.rss_bytes() / 1e6)
