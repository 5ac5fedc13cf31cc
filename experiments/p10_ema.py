"""p10-ema: an EMA of a Linear's weight kept across 2000 SGD steps (detach vs without_autodiff).

Port of pita-t p10 (seeds/002): Linear(512,512), input [64,512], SGD lr 1e-3,
each step `ema = ema * 0.99 + snapshot(w) * 0.01` after the optimizer step.
Modes: detach (snapshot = w.detach(), kept: a tracked chain), target (the EMA
also enters the loss; the second backward panics), without / target-without
(snapshot = w.without_autodiff()), log (a detached norm read each step, not
kept), ema-only (the update alone). Each printed ms/step is the mean over the
steps since the previous print; rss_delta is relative to the mode's start.
Under the `pytorch` policy the same program gives the experiment p10-ema-pytorch.
"""

from sim.nn import Linear
from sim.optim import GradientsParams, Sgd
from sim.tensor import Tensor

EXPERIMENT = "p10-ema"
MEASURED = ("p10-ema", "p10-ema-pytorch")
VARIANTS = ("detach", "target", "without", "target-without", "log", "ema-only")
PARAMS = {"steps": 2000, "batch": 64, "features": 512, "lr": 1e-3,
          "report_at": "1,50,100,200,500,1000,2000"}
POSITIVE = ("steps", "batch", "features", "lr")

MiB = 1024 * 1024


def run(sim, variant, steps, batch, features, lr, report_at):
    if sim.policy_name == "pytorch":
        sim.experiment = "p10-ema-pytorch"
    reports = sorted({int(s) for s in str(report_at).split(",") if s.strip()} | {steps})
    device = sim.device("flex").autodiff()
    rss0 = sim.rss_bytes()
    model = Linear(features, features, device)
    x = Tensor.random((batch, features), device)
    optim = Sgd()
    uses_detach = variant in ("detach", "target", "log", "ema-only")

    def snapshot():
        w = model.weight.val()
        return w.detach() if uses_detach else w.without_autodiff()

    ema = snapshot()
    last_t, last_step = sim.now_ns, 0
    rss_first = None
    for step in range(1, steps + 1):
        sim.at(step, "step")
        if variant != "ema-only":
            out = model.forward(x.clone())
            if variant.startswith("target"):
                loss = (out - x.clone().matmul(ema.clone())).powi_scalar(2).mean()
            else:
                loss = out.powi_scalar(2).mean()
            del out
            grads = GradientsParams.from_grads(loss.backward(), model)
            del loss
            model = optim.step(lr, model, grads)
            del grads
        if variant == "log":
            snapshot().powi_scalar(2).sum().into_scalar()
        else:
            ema = ema * 0.99 + snapshot() * 0.01
        if rss_first is None:
            rss_first = sim.rss_bytes()
        if step in reports:
            ms = (sim.now_ns - last_t) / (step - last_step) / 1e6
            rss = sim.rss_bytes() - rss0
            if variant == "ema-only":
                # growth per step after the first (which allocates the model and the EMA)
                growth = (sim.rss_bytes() - rss_first) / max(step - 1, 1)
                sim.sample(step, "step", ms_per_step=round(ms, 6),
                           rss_growth_per_step=round(growth / 1e3, 6))
            else:
                sim.sample(step, "step", ms_per_step=round(ms, 6), rss_delta=round(rss / MiB, 6))
            last_t, last_step = sim.now_ns, step
        yield sim.tick()
