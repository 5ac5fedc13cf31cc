"""Carve runs (sim.engine.fastforward.arenarun): random leak loops on glibc's arena, fast-forward against exact.

Each example runs a loop that leaves a node behind per iteration (tensors of a random
size, an untracked op or a tracked one, with or without a clone), then a few frees by
size of the loop's kept block sizes, then a second loop, on the Linux profile; the arena
(every chunk, bins, tcache, fastbins, break, top, resident end, live lists) and the
heap's counters and time must equal exact mode's. Fast-forward takes a carve run where
the iteration qualifies and replays otherwise: both must be exact.
"""

from hypothesis import given, settings
from hypothesis import strategies as st

import sys

from common import adleak_operands, tiny_backward
from sim.engine.simulation import Simulation
from sim.engine.profile import load_profile
from sim.burn.tensor import drop

OPS = {
    "add": lambda a, b: a.clone() + b.clone(),
    "mul": lambda a, b: a.clone() * b,
    "exp": lambda a, b: a.clone().exp(),
    "add-moved": lambda a, b: a.clone() + b.clone().mul_scalar(2.0),
}

KEPT = (104, 24, 192)


def _run(fast_forward, elements, op, tracked, n, frees, n2, backward=False):
    sim = Simulation(load_profile("linux-x86_64"), fast_forward=fast_forward)
    dev = sim.device("flex").autodiff()
    a, b = adleak_operands(dev, elements, tracked)
    body = OPS[op]
    sim.repeat(n, lambda: drop(body(a, b)))
    arena = sim.allocator.arena
    # frees by size (the newest block of that size) of blocks every loop here keeps:
    # nodes, their Arc<NodeId>, the locator's 192-B leaves
    if backward:                        # frees the loop's nodes: their chunks to the bins
        frees = []                      # (and needs the locator's leaves it counts)
        tiny_backward(dev)
    for i in frees:
        sim.heap.free(KEPT[i % len(KEPT)])
    sim.repeat(n2, lambda: drop(body(a, b)))
    carved = sim.arena_carved
    arena.materialize()
    state = (dict(arena.inuse), dict(arena.free_at),
            {k: list(v) for k, v in arena.tcache.items()},
            {k: list(v) for k, v in arena.fast.items()},
            arena.brk, arena.top, arena.resident_end, arena.trims, arena.mapped,
            {k: list(v) for k, v in arena.live.items()},
            sim.heap.live_bytes, sim.heap.live_blocks, sim.heap.peak_bytes, sim.heap.allocs,
            sim.work_ps, sim.fault_ps, sim.registered)
    for i in frees:     # as many blocks back, for the teardown's frees of those sizes
        sim.heap.alloc(KEPT[i % len(KEPT)])
    return state, carved


@settings(max_examples=25, deadline=None)
@given(elements=st.sampled_from([1, 16, 100, 700, 3000]),
       op=st.sampled_from(sorted(OPS)), tracked=st.booleans(),
       n=st.integers(60, 1500), frees=st.lists(st.integers(0, 50), max_size=6),
       n2=st.integers(0, 1500), backward=st.booleans())
def test_fast_forward_on_the_arena_equals_exact_mode(elements, op, tracked, n, frees, n2,
                                                      backward):
    # with a backward, its sweep frees the loop's dead graphs: a fast-forwarded run frees
    # its members one after the other, as exact mode frees them graph by graph
    fast, _ = _run(True, elements, op, tracked, n, frees, n2, backward)
    exact, _ = _run(False, elements, op, tracked, n, frees, n2, backward)
    assert fast == exact


def test_leak_loops_are_carved():
    """The examples above include carve runs: the untracked loop is one; the tracked loop
    is carved by periods of 7 iterations between its table resizes; a loop after a
    backward carves from the bin chunk the backward's frees left."""
    _, carved = _run(True, 16, "add", False, 1000, [], 0)
    assert carved > 990
    _, carved = _run(True, 16, "add", True, 20_000, [], 0)
    assert carved > 15_000
    # after a backward freed them, the next loop carves from the chunk they left
    _, carved = _run(True, 16, "add", False, 3000, [], 3000, backward=True)
    assert carved > 5000


def test_the_end_of_a_run_leaves_carve_runs_alone():
    """Once the program ends, the frees of the simulated objects Python collects change
    nothing: a carve run of 10^8 iterations is not entered chunk by chunk to free it."""
    import gc

    from sim.engine.simulation import Limits
    from sim.engine.workloads import load_workload
    sim = Simulation(load_profile("linux-x86_64"), limits=Limits(max_ops=10 ** 10))
    workload = load_workload("adleak-rss")
    params = workload.resolve("flex.autodiff", {"iterations": 25_000_000})
    rows = sim.run(lambda s, **p: workload.run(s, "flex.autodiff", **p), params)
    arena = sim.allocator.arena
    gc.collect()
    assert sim.heap.closed
    assert len(arena.runs) == 4 and len(arena.inuse) < 1000
    assert [r["value"] for r in rows if r["metric"] == "rss"][-1] > 1.2e5    # MB


def test_entering_a_carve_run_past_the_memory_budget_is_one_clear_error():
    """A free that reaches a block inside a carve run enters its chunks one by one; past
    the memory budget that is the budget's error, not the machine's memory."""
    import pytest

    from sim.platform.ptmalloc import ArenaBudgetExceeded
    from sim.engine.simulation import Limits
    sim = Simulation(load_profile("linux-x86_64"), limits=Limits(max_ops=10 ** 12,
                                                                 max_live_nodes=10_000))
    a, b = adleak_operands(sim.device("flex").autodiff())
    sim.repeat(10 ** 8, lambda: drop(a.clone() + b.clone()))
    with pytest.raises(ArenaBudgetExceeded, match="more than 40000 glibc arena chunks"):
        sim.heap.free_many(104, 100)          # more frees by size than a run's end serves
    sim.heap.close()


def test_a_script_that_ends_with_a_huge_carve_run_alive_exits_cleanly(tmp_path):
    """A script driving a Simulation directly (no sim.run) ends with a 10^9-iteration
    tracked loop's carve run alive: at exit its heap is closed before Python frees the
    objects, so nothing enters the run (no budget error in __del__, no minutes spent)."""
    import subprocess

    script = tmp_path / "script.py"
    script.write_text(
        "from sim.engine.simulation import Limits, Simulation\n"
        "from sim.engine.profile import load_profile\n"
        "from sim.burn.tensor import Tensor, drop\n"
        "sim = Simulation(load_profile('linux-x86_64'), limits=Limits(max_ops=10 ** 12))\n"
        "dev = sim.device('flex').autodiff()\n"
        "a = Tensor.from_floats([1.0] * 16, dev).require_grad()\n"
        "b = Tensor.from_floats([2.0] * 16, dev)\n"
        "sim.repeat(10 ** 9, lambda: drop(a.clone() + b.clone()))\n"
        "print(sim.heap.live_blocks)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stderr == ""
    # 5.17 blocks per tracked op, kept; 3 of the set-up's are burn's device settings
    assert int(done.stdout) == 5_166_666_690
