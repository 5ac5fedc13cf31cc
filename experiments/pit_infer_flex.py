"""pit-infer-flex: the pit-infer MLP (groups A, B, C) on Flex instead of Metal, as the Linux probe runs it.

Protocol of `burn-probes pit-infer` (experiments/probes, src/pit.rs): the same
program as pit-infer (experiments/pit_infer.py) with `Device::flex()` in place of
Metal: there is no GPU pool, tensor data (weights, activations saved by group A's
never-backwarded graph) is host heap. Rows after 50 and 100 forwards: host heap
growth (KiB) and blocks since the group's start, RSS (MB and bytes) and the mean
time per forward since the previous row; the `build` row is the host heap of
building the model (weights lazily initialised). `sink`: `probe` keeps the rows in
memory as the probe does (`experiments/common.py` `ProbeSink`; `auto`: on a Linux
profile), `print` keeps nothing.
"""

import pit_infer
from common import ProbeSink

EXPERIMENT = "pit-infer-flex"
X_UNITS = {"pit-infer-flex": "forwards"}
SWEEP = False  # a replica of a Linux probe: run when named, not in the default sweep
VARIANTS = pit_infer.VARIANTS
PARAMS = {**pit_infer.PARAMS, "device": "flex", "sink": "auto"}
POSITIVE = ("forwards", "report_every", "batch", "features")
CHOICES = {"sink": ProbeSink.CHOICES}
#: the probe's `--quick` run (pit.rs run: 10 forwards, a row every n / 2)
QUICK = {"forwards": 10, "report_every": 5}


def run(sim, variant, **params):
    yield from pit_infer.run(sim, variant, **params)
