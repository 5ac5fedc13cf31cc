"""adleak-rss: RSS of `c = a.clone() + b.clone(); drop(c)` on 16-element tensors, every 100k iterations.

Port of the seed program pb-adleak (seeds/000, "没有任何 require_grad"): two
16-element tensors a and b; 4 rounds of `iterations` dropped adds; process RSS
printed before the first round and after each. Each variant is its own process.
"""

from common import adleak_operands, rss_bytes_paged, tiny_backward
from sim.burn.tensor import drop

EXPERIMENT = "adleak-rss"
X_UNITS = {"adleak-rss": "k_iterations"}
VARIANTS = ("flex", "flex.autodiff", "a-tracked", "autodiff-backward-each-round",
            "without_autodiff")
PARAMS = {"iterations": 100_000, "rounds": 4, "elements": 16}
#: the probe's `--quick` round (adleak.rs rss_variant)
QUICK = {"iterations": 10_000}


def run(sim, variant, iterations, rounds, elements):
    flex = sim.device("flex")
    device = flex if variant == "flex" else flex.autodiff()
    a, b = adleak_operands(device, elements, tracked=variant == "a-tracked")
    if variant == "without_autodiff":
        a, b = a.without_autodiff(), b.without_autodiff()
    def add_and_drop():
        c = a.clone() + b.clone()
        drop(c)

    for step in range(rounds + 1):
        if step > 0:
            sim.repeat(iterations, add_and_drop)
            if variant == "autodiff-backward-each-round":
                tiny_backward(device)
        k = step * iterations // 1000
        yield sim.sample(k, "k_iterations", rss=round(sim.rss_bytes() / 1e6, 3),
                         rss_bytes=rss_bytes_paged(sim),
                         text_rss_delta=sim.touched.text_bytes() / 1024)
