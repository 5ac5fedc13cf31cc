"""p10-ema-adam: the p10-ema program trained with burn's Adam instead of SGD (Linux probe `p10-ema-adam`).

Protocol of `burn-probes p10-ema-adam` (src/ema.rs): p10-ema's Linear(512,512),
input [64,512], 2000 steps at lr 1e-3 and its EMA update, with the optimizer
`AdamConfig::new().init()` (beta 0.9 / 0.999, epsilon 1e-5): two moment tensors
per parameter kept between steps, six elementwise ops more per parameter and
step. One fresh process per variant. Measured on Linux only; nothing in the
simulator's Adam (sim/burn/optim.py) is fitted to it: every point is a prediction.
"""

import p10_ema

EXPERIMENT = "p10-ema-adam"
SWEEP = False  # a replica of a Linux probe: run when named, not in the default sweep
MEASURED = ("p10-ema-adam",)
X_UNITS = {"p10-ema-adam": "step"}
VARIANTS = ("detach", "without", "target-without", "log-no-ema")
PARAMS = {k: v for k, v in p10_ema.PARAMS.items() if k != "optimizer"}
POSITIVE = p10_ema.POSITIVE
CHOICES = {"sink": p10_ema.CHOICES["sink"]}
check = p10_ema.check
QUICK = p10_ema.QUICK


def run(sim, variant, steps, batch, features, lr, report_at, sink="auto"):
    yield from p10_ema.run(sim, variant, steps=steps, batch=batch, features=features, lr=lr,
                           report_at=report_at, optimizer="adam", sink=sink)
