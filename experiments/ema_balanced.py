"""ema-balanced: the p10-ema detach loop on a device with Balanced checkpointing.

Same program as p10-ema's `detach` mode (and `without` for comparison), with
`Device::flex().autodiff()` replaced by the Balanced gradient-checkpointing
strategy: memory-bound ops keep a retro-forward and record backup checkpoints of
their tracked parents, so the EMA chain pins more memory per step than under the
default strategy, and the `skip-untracked` policy still registers untracked ops
(a memory-bound child may need them).
"""

from sim.burn.checkpoint import BALANCED, DISABLED
from sim.burn.nn import Linear
from sim.burn.optim import GradientsParams, Sgd
from sim.burn.tensor import Tensor

from common import event_steps, rss_bytes_paged

EXPERIMENT = "ema-balanced"
X_UNITS = {"ema-balanced": "step"}
VARIANTS = ("detach", "without")
PARAMS = {"steps": 500, "report_every": 100, "batch": 64, "features": 512,
          "checkpointing": "balanced"}
POSITIVE = ("steps", "report_every", "batch", "features")
CHOICES = {"checkpointing": (BALANCED, DISABLED)}

MiB = 1024 * 1024


def run(sim, variant, steps, report_every, batch, features, checkpointing, report_steps=None,
        rss_bytes=False):
    """``report_steps``: the steps to report at, ascending, the last one ``steps`` (default:
    every ``report_every`` steps and the last; experiments/ema_balanced_params.py passes the
    Linux probe's schedule). ``rss_bytes``: each report also samples the process's RSS as
    the OS reports it (whole pages; the long runs' measured RSS is the process's)."""
    device = sim.device("flex").autodiff(checkpointing=checkpointing)
    rss0 = sim.rss_bytes()
    heap0 = sim.heap.live_bytes
    model = Linear(features, features, device)
    x = Tensor.random((batch, features), device)
    optim = Sgd(sim)

    def snapshot():
        w = model.weight.val()
        return w.detach() if variant == "detach" else w.without_autodiff()

    state = {"ema": snapshot(), "base": 0}

    def train_step():
        sim.at(state["base"] + sim.loop_index + 1, "step")
        loss = model.forward(x.clone()).powi_scalar(2).mean()
        grads = GradientsParams.from_grads(loss.backward(), model)
        del loss
        optim.step(1e-3, model, grads)
        state["ema"] = state["ema"] * 0.99 + snapshot() * 0.01

    last_t, last_step = sim.now_ns, 0
    if report_steps is None:
        report_steps = event_steps(steps, report_every)
    for step in report_steps:
        state["base"] = last_step
        sim.repeat(step - last_step, train_step)
        sim.timing.clock_read()     # the window's one read of the probe's clock
        ms = (sim.now_ns - last_t) / (step - last_step) / 1e6
        extra = {"rss_bytes": rss_bytes_paged(sim)} if rss_bytes else {}
        sim.sample(step, "step", ms_per_step=round(ms, 6),
                   rss_delta=round((sim.rss_bytes() - rss0) / MiB, 6),
                   host_heap_delta=round((sim.heap.live_bytes - heap0) / 1024, 3), **extra)
        last_t, last_step = sim.now_ns, step
        sim.timing.report_wake()    # what the report leaves the next window (ema.rs)
        yield sim.tick()
