"""ema-balanced-params: ema-balanced's `detach` loop at other run lengths (Linux probe `params`).

Protocol of `burn-probes params --variant ema-balanced/<steps>` (src/adleak.rs, src/ema.rs):
the p10-ema detach program on `Device::flex().autodiff().gradient_checkpointing()`
(Balanced checkpointing; the simulator's experiments/ema_balanced.py), one fresh process
per run length, `ms_per_step` (mean since the previous row) at steps 1, 50, 100, 200, 500,
1000, 2000, 3000, 4000, 6000, 8000 (those <= the run length) and at the last step.
Variants encode the run length, `detach/steps=N`.
"""

import ema_balanced
import p10_ema

EXPERIMENT = "ema-balanced-params"
SWEEP = False  # a replica of a Linux probe: run when named, not in the default sweep
MEASURED = ("ema-balanced-params",)
X_UNITS = {"ema-balanced-params": "step"}
VARIANTS = ("detach/steps=500", "detach/steps=4000", "detach/steps=8000")
PARAMS = {"batch": 64, "features": 512,
          "report_at": "1,50,100,200,500,1000,2000,3000,4000,6000,8000"}
POSITIVE = ("batch", "features")


def run(sim, variant, batch, features, report_at):
    mode, steps = variant.split("/steps=")
    steps = int(steps)
    reports = p10_ema.report_steps(report_at, steps, clip=True)
    # the probe records only ms_per_step here; the process's RSS (rss_bytes) is read from
    # outside (/proc/PID/status, /usr/bin/time: long-runs/README.md); the other metrics
    # are dropped
    start = len(sim.rows)
    yield from ema_balanced.run(sim, mode, steps=steps, report_every=steps, batch=batch,
                                features=features, checkpointing="balanced",
                                report_steps=reports, rss_bytes=True)
    sim.rows[start:] = [r for r in sim.rows[start:] if r["metric"] in ("ms_per_step", "rss_bytes")]
