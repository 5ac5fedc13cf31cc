"""adleak-count-fresh: the count loop as the Linux probe runs it: each variant in a fresh process, no warm-up.

Protocol of `burn-probes adleak-count` (experiments/probes, src/adleak.rs): a and b
created (a requires grad in a-tracked), the counting allocator's snapshot taken,
then `iterations` dropped adds `c = a.clone() + b.clone()` with NO warm-up
iteration before the snapshot; rows after the loop, after an unrelated backward
(`(x*2).sum().backward()` of a fresh 1-element require-grad x) and (a-tracked)
after the backward of `(a.sum()*2)`, all relative to the snapshot. One process
per variant. The seed's `adleak-count` (experiments/adleak_count.py) differs: its
three variants share one process and take the reference after one warm-up add.
"""

from adleak_count import VARIANTS, program

EXPERIMENT = "adleak-count-fresh"
X_UNITS = {"adleak-count-fresh": "iterations"}
SWEEP = False  # a replica of a Linux probe: run when named, not in the default sweep
PARAMS = {"iterations": 10_000, "elements": 16}
#: the probe's `--quick` loop count (adleak.rs count_variant_exp)
QUICK = {"iterations": 1_000}


def probe_backward_through_a(a, b):
    """burn-probes: `(a.sum() * 2).backward()` (a single tracked leaf)."""
    (a.clone().sum() * 2.0).backward()


def run(sim, variant, iterations, elements):
    yield from program(sim, variant, iterations, elements, groups=(variant,), warmup=0,
                       backward_through_a=probe_backward_through_a)
