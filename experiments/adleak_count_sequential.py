"""adleak-count-sequential: the Linux probe's replay of the seed order: three variants in ONE process, no warm-up.

Protocol of `burn-probes adleak-count --variant sequential` (experiments/probes,
src/adleak.rs): the variants flex, flex.autodiff, a-tracked run in this order in
one process; each takes its counting-allocator snapshot right after creating a
and b (no warm-up add), then the loop, the unrelated backward and (a-tracked) the
backward of `(a.sum()*2)`. Running variant V runs the variants before it too and
records V's rows. The seed's `adleak-count` has the same order but one warm-up
add before each reference point.
"""

from adleak_count import VARIANTS, program
from adleak_count_fresh import probe_backward_through_a

EXPERIMENT = "adleak-count-sequential"
X_UNITS = {"adleak-count-sequential": "iterations"}
SWEEP = False  # a replica of a Linux probe: run when named, not in the default sweep
PARAMS = {"iterations": 10_000, "elements": 16}
#: the probe's `--quick` loop count (adleak.rs count_variant_exp)
QUICK = {"iterations": 1_000}


def run(sim, variant, iterations, elements):
    yield from program(sim, variant, iterations, elements, groups=VARIANTS, warmup=0,
                       backward_through_a=probe_backward_through_a)
