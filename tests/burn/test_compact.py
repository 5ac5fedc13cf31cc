"""Exact mode's compaction of dead single-node graphs (GraphLocator.compact) changes
nothing observable: random programs give the same heap, allocator high-water marks,
simulated time and locator counts with and without it, under every policy; on glibc's
arena, the same chunks, bins, tcache and fastbins (a run frees its members one after
the other, as the graphs would be freed)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.burn.graph.traversal import TapeConsumed
from sim.engine.simulation import Simulation
from sim.policies import POLICIES
from sim.engine.profile import load_profile
from sim.burn.tensor import BurnPanic, Tensor, drop

from arenastate import arena_state

PROFILE = load_profile("m2max-macos")
LINUX = load_profile("linux-x86_64")

ACTION = st.tuples(st.sampled_from(["leaf", "grad-leaf", "plain", "clone", "add", "mul",
                                    "scale", "drop", "drop", "drop", "backward", "unrelated"]),
                   st.integers(0, 1000), st.integers(0, 1000))


def _trace(policy, actions, compact, profile=PROFILE):
    sim = Simulation(profile, policy=policy, fast_forward=False, compact=compact)
    dev = sim.device("flex").autodiff()
    plain = sim.device("flex")
    pool = []
    trace = []
    for kind, i, j in actions:
        pick = (lambda k: pool[k % len(pool)]) if pool else None
        try:
            if kind == "leaf":
                pool.append(Tensor.zeros((4,), dev))
            elif kind == "grad-leaf":
                pool.append(Tensor.zeros((4,), dev).require_grad())
            elif kind == "plain":
                pool.append(Tensor.zeros((4,), plain))
            elif pick and kind == "clone":
                pool.append(pick(i).clone())
            elif pick and kind in ("add", "mul"):
                a, b = pick(i), pick(j)
                pool.append(a + b if kind == "add" else a * b)
            elif pick and kind == "scale":
                pool.append(pick(i) * 0.5)
            elif pick and kind == "drop":
                drop(pool.pop(i % len(pool)))
            elif pick and kind == "backward":
                t = pick(i)
                if t.is_tracked():
                    t.sum().backward()
            elif pick and kind.startswith("leak"):   # a loop leaving dead graphs behind
                a, b = pick(i), pick(j)
                for _ in range(i % 300):
                    drop(a.clone().exp() if kind == "leak-exp" else a.clone() + b.clone())
            elif kind == "unrelated":
                (Tensor.zeros((1,), dev).require_grad() * 2.0).sum().backward()
        except (BurnPanic, TapeConsumed):
            pass
        locator = sim.client.locator
        trace.append((sim.heap.live_bytes, sim.heap.live_blocks, tuple(sim.allocator.live),
                      tuple(sim.allocator.high), sim.work_ps, sim.live_graphs(), sim.live_nodes(),
                      0 if locator is None else locator.entry_count(),
                      0 if locator is None else locator.graphs_tree.nbytes
                      + locator.keys_tree.nbytes, arena_state(sim.allocator.arena)))
    sim.heap.close()
    return trace


@pytest.mark.parametrize("policy", list(POLICIES))
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(actions=st.lists(ACTION, max_size=60))
def test_compaction_is_invisible(policy, actions):
    assert _trace(policy, actions, True) == _trace(policy, actions, False)


LEAKY = st.tuples(st.sampled_from(["leaf", "grad-leaf", "clone", "add", "mul", "scale",
                                   "drop", "backward", "unrelated", "leak", "leak-exp"]),
                  st.integers(0, 1000), st.integers(0, 1000))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(actions=st.lists(LEAKY, max_size=40))
def test_compaction_is_invisible_on_the_glibc_arena(actions):
    assert (_trace("burn-0.22.1", actions, True, LINUX)
            == _trace("burn-0.22.1", actions, False, LINUX))


def test_compaction_happens():
    sim = Simulation(PROFILE, fast_forward=False)
    dev = sim.device("flex").autodiff()
    a, b = Tensor.zeros((4,), dev), Tensor.zeros((4,), dev)
    for _ in range(100):
        drop(a + b)
    assert len(sim.client.locator.graphs) == 0 and sim.client.locator.entry_count() == 100


def test_compacted_graphs_are_freed_with_the_collector_off():
    """A simulation runs with Python's cycle collector off: compaction must leave no
    reference cycle behind, or the objects it replaces would stay (1.6 KB per op)."""
    import gc
    import tracemalloc
    gc.disable()
    try:
        tracemalloc.start()
        sim = Simulation(PROFILE, fast_forward=False)
        dev = sim.device("flex").autodiff()
        a, b = Tensor.zeros((16,), dev), Tensor.zeros((16,), dev)
        drop(a.clone() + b.clone())
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(5000):
            drop(a.clone() + b.clone())
        per_op = (tracemalloc.get_traced_memory()[0] - base) / 5000
        tracemalloc.stop()
    finally:
        gc.enable()
    assert per_op < 300, per_op


def test_sim_run_exact_gives_the_fast_forward_csv(tmp_path):
    import subprocess
    import sys
    args = ["run", "adleak-rss", "--variant", "flex.autodiff", "--set", "iterations=3000",
            "--format", "csv"]
    out = {}
    for flag in ((), ("--exact",)):
        path = tmp_path / f"out{len(flag)}.csv"
        subprocess.run([sys.executable, "-m", "sim.commands.cli", *args, *flag, "--out", str(path)],
                       check=True, capture_output=True)
        out[flag] = path.read_bytes()
    assert out[()] == out[("--exact",)] and b",rss," in out[()]
