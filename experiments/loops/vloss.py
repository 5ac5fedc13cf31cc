"""A user's training loop that sums its validation loss across steps (issue 39): a
2-layer MLP trained with Adam, and after each step a validation forward whose mean is
added to a running total that is never backwarded. The total keeps every step's
validation graph, which hangs off the new parameters, so the parameters' graph grows
every step and each training backward's passes walk all of it (quadratic in burn).

Not a built-in workload (it sits below ``experiments/``): run it as
``sim run experiments/loops/vloss.py --set steps=2000``."""

from sim.tensor import Tensor
from sim.nn import Mlp
from sim.optim import Adam, GradientsParams

PARAMS = {"steps": 400}


def run(sim, variant, steps):
    ad = sim.device("flex").autodiff()
    model = Mlp(64, 64, 10, ad)
    opt = Adam()
    x = Tensor.random([32, 64], ad)
    xv = Tensor.random([32, 64], ad)
    state = {"model": model, "vloss": Tensor.zeros([1], ad)}

    def step():
        m = state["model"]
        loss = m.forward(x.clone()).mean()
        grads = GradientsParams.from_grads(loss.backward(), m)
        m = opt.step(1e-3, m, grads)
        state["model"] = m
        state["vloss"] = state["vloss"] + m.forward(xv.clone()).mean()
    sim.repeat(steps, step)
    yield sim.sample(steps, "steps", rss=sim.rss_bytes() / 1e6)
