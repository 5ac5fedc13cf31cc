"""p10-ema-params: the p10-ema `detach` mode at other run lengths (Linux probe `params`).

Protocol of `burn-probes params` (`ema/<steps>` points, src/adleak.rs and
src/ema.rs): the p10-ema program (experiments/p10_ema.py) in `detach` mode, one
fresh process per run length, `ms_per_step` at steps 1, 50, 100, 200, 500, 1000,
2000, 3000, 4000, 6000, 8000 (those <= the run length) and at the last step. Variants
encode the run length, `detach/steps=N`: N = 200, 1000, 4000 (the probe's full run),
20, 100, 400 (its `--quick` run) and 8000 (`--variant ema/8000`, run on its own: the
long run of experiments/measured/linux-x86_64/long-runs/).
"""

import p10_ema

EXPERIMENT = "p10-ema-params"
SWEEP = False  # a replica of a Linux probe: run when named, not in the default sweep
MEASURED = ("p10-ema-params",)
X_UNITS = {"p10-ema-params": "step"}
VARIANTS = ("detach/steps=200", "detach/steps=1000", "detach/steps=4000",
            "detach/steps=20", "detach/steps=100", "detach/steps=400", "detach/steps=500",
            "detach/steps=8000")
PARAMS = {"batch": 64, "features": 512, "lr": 1e-3,
          "report_at": "1,50,100,200,500,1000,2000,3000,4000,6000,8000"}
POSITIVE = ("batch", "features", "lr")


def run(sim, variant, batch, features, lr, report_at):
    mode, steps = variant.split("/steps=")
    steps = int(steps)
    # the probe's schedule: the steps <= the run length (p10_ema.report_steps checks the rest)
    report_at = ",".join(map(str, p10_ema.report_steps(report_at, steps, clip=True)))
    # the probe records only ms_per_step here; the process's RSS (rss_bytes) is read from
    # outside (/proc/PID/status, /usr/bin/time: long-runs/README.md); the other metrics
    # are dropped
    start = len(sim.rows)
    yield from p10_ema.run(sim, mode, steps=steps, batch=batch, features=features, lr=lr,
                           report_at=report_at)
    sim.rows[start:] = [r for r in sim.rows[start:] if r["metric"] in ("ms_per_step", "rss_bytes", "panic")]
