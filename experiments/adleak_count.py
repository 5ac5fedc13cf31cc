"""adleak-count: live heap bytes and blocks after 10,000 dropped adds, under a counting allocator.

Port of pb-adleak's `count` binary (seeds/000): the three groups run in sequence
in one process (flex, flex.autodiff, a-tracked), each reporting live bytes and
blocks relative to a reference point taken after one warm-up iteration: after the loop, after an unrelated backward,
and (a-tracked) after a backward through a. Running variant V runs the groups
before it too, as the real process did, and records V's rows.
"""

from common import adleak_operands, tiny_backward
from sim.burn.tensor import drop

EXPERIMENT = "adleak-count"
X_UNITS = {"adleak-count": "iterations"}
VARIANTS = ("flex", "flex.autodiff", "a-tracked")
PARAMS = {"iterations": 10_000, "elements": 16}
#: the probe's `--quick` loop count (adleak.rs count_variant_exp)
QUICK = {"iterations": 1_000}


def run(sim, variant, iterations, elements):
    yield from program(sim, variant, iterations, elements)


def seed_backward_through_a(a, b):
    """The seed's backward through a (its program is not published)."""
    (a.clone() + b.clone()).sum().backward()


def program(sim, variant, iterations, elements, groups=VARIANTS, warmup=1,
            backward_through_a=seed_backward_through_a):
    """The count loop, shared with the Linux probe's protocols (adleak_count_fresh.py,
    adleak_count_sequential.py): the ``groups`` run in this order in one process,
    each with ``warmup`` dropped adds before its reference point; ``variant``'s rows
    are recorded and the run stops after its group."""
    autodiff = sim.device("flex").autodiff()
    for group in groups:
        device = sim.device("flex") if group == "flex" else autodiff
        record = group == variant
        a, b = adleak_operands(device, elements, tracked=group == "a-tracked")
        for _ in range(warmup):
            drop(a.clone() + b.clone())  # warm-up iterations before the reference point
        bytes0, blocks0 = sim.heap.live_bytes, sim.heap.live_blocks

        def report(phase):
            if record:
                sim.sample(iterations, "iterations", phase=phase,
                           heap_bytes_delta=sim.heap.live_bytes - bytes0,
                           heap_blocks_delta=sim.heap.live_blocks - blocks0)

        def add_and_drop():
            c = a.clone() + b.clone()
            drop(c)

        sim.repeat(iterations, add_and_drop)
        report("after-loop")
        tiny_backward(autodiff)
        report("after-unrelated-backward")
        if group == "a-tracked":
            backward_through_a(a, b)
            report("after-backward-through-a")
        del a, b
        yield sim.tick()
        if record:
            return
