"""The index of settled nodes (sim.burn.graph.settled) changes nothing observable:
random programs that grow a kept chain off a parameter's graph, train through it, drop
or backward the chain and replace the parameter give the same heap, allocator state,
simulated time and locator counts with the index as with every backward walking every
node, under every policy and on glibc's arena; the summed validation loss of
experiments/loops/vloss.py gives the same rows with and without the index and with and
without fast-forward, and its backwards walk only what each step added. On glibc's arena
the recursion from a settled node is replayed from the tape the backward before kept
(sim.burn.runtime.pass_blocks.Tape), and gives what walking it gives."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import paths
from sim.burn.graph import settled
from sim.burn.graph.traversal import TapeConsumed
from sim.burn.runtime import memory_management, pass_blocks
from sim.burn.tensor import BurnPanic, Tensor
from sim.engine.profile import load_profile
from sim.engine.runner import run_cell
from sim.engine.simulation import Simulation
from sim.engine.workloads import load_workload
from sim.policies import POLICIES

from arenastate import arena_state

PROFILES = {name: load_profile(name) for name in ("m2max-macos", "linux-x86_64")}
VLOSS = paths.ROOT / "experiments" / "loops" / "vloss.py"

ACTIONS = st.lists(st.sampled_from(["train", "train", "keep", "keep", "keep", "new-param",
                                    "drop-kept", "backward-kept", "hold", "release",
                                    "side"]), max_size=50)


@pytest.fixture
def without_index(monkeypatch):
    """Every backward walks every node (the passes as they were before the index)."""
    def walk_all(self, graph, leaves, runs):
        return (*memory_management._statuses(graph, leaves, runs), None)

    def use(enabled):
        if enabled:
            monkeypatch.undo()
        else:
            monkeypatch.setattr(memory_management.GraphMemoryManagement, "_statuses",
                                walk_all)
    return use


def _trace(policy, actions, profile):
    sim = Simulation(PROFILES[profile], policy=policy, fast_forward=False)
    dev = sim.device("flex").autodiff()
    param = Tensor.from_floats([1.0] * 4, dev).require_grad()
    const = Tensor.from_floats([2.0] * 4, dev)
    state = {"kept": Tensor.zeros((4,), dev), "held": []}
    trace = []
    for kind in actions:
        try:
            if kind == "train":
                (param.clone() * const.clone()).sum().backward()
            elif kind == "keep":           # the chain grows off the parameter's graph
                state["kept"] = state["kept"] + (param.clone() * const.clone()).mul_scalar(0.5)
            elif kind == "new-param":      # an optimizer step: a new leaf
                param = param.detach().mul_scalar(0.9).require_grad()
            elif kind == "drop-kept":      # the chain loses its handle
                state["kept"] = Tensor.zeros((4,), dev)
            elif kind == "backward-kept":  # the chain is consumed
                state["kept"].sum().backward()
            elif kind == "hold":
                state["held"].append(state["kept"])
            elif kind == "release" and state["held"]:
                state["held"].pop(0)
            elif kind == "side":           # a node of the chain's graph nobody keeps
                (state["kept"] * param.clone()).mul_scalar(2.0)
        except (BurnPanic, TapeConsumed):
            pass
        locator = sim.client.locator
        trace.append((sim.heap.live_bytes, sim.heap.live_blocks, tuple(sim.allocator.live),
                      tuple(sim.allocator.high), sim.work_ps, sim.live_graphs(),
                      sim.live_nodes(), 0 if locator is None else locator.entry_count(),
                      arena_state(sim.allocator.arena)))
    sim.heap.close()
    return trace


@pytest.mark.parametrize("policy", list(POLICIES))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(actions=ACTIONS)
def test_the_index_is_invisible(without_index, policy, actions):
    with_index = _trace(policy, actions, "m2max-macos")
    without_index(False)
    assert _trace(policy, actions, "m2max-macos") == with_index
    without_index(True)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(actions=ACTIONS)
def test_the_index_is_invisible_on_the_glibc_arena(without_index, actions):
    with_index = _trace("burn-0.22.1", actions, "linux-x86_64")
    without_index(False)
    assert _trace("burn-0.22.1", actions, "linux-x86_64") == with_index
    without_index(True)


@pytest.fixture
def without_tapes(monkeypatch):
    """Every backward walks the settled nodes' recursion on glibc's arena (the index kept)."""
    def use(enabled):
        if enabled:
            monkeypatch.undo()
        else:
            monkeypatch.setattr(pass_blocks._BlockPasses, "_replayed", lambda self, tape: False)
    return use


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(actions=ACTIONS)
def test_tapes_are_invisible_on_the_glibc_arena(without_tapes, actions):
    with_tapes = _trace("burn-0.22.1", actions, "linux-x86_64")
    without_tapes(False)
    assert _trace("burn-0.22.1", actions, "linux-x86_64") == with_tapes
    without_tapes(True)


def test_summed_validation_loss_replays_the_chain_on_the_arena(without_tapes, monkeypatch):
    """From its third backward on, each backward of the loop replays the recursion down
    the running totals that the backward before walked or replayed, and the run ends as
    one that walks it every time (heap, peak, allocation calls, time, the arena chunk for
    chunk)."""
    replayed = []
    replay = pass_blocks._BlockPasses._replayed

    def counting(self, tape):
        replayed.append(replay(self, tape))
        return replayed[-1]

    def run():
        sim = Simulation(PROFILES["linux-x86_64"], fast_forward=False)
        list(load_workload(str(VLOSS)).run(sim, "default", steps=40))
        heap = sim.heap
        return (heap.live_bytes, heap.live_blocks, heap.peak_bytes, heap.allocs,
                sim.work_ps, sim.fault_bytes, arena_state(sim.allocator.arena))

    monkeypatch.setattr(pass_blocks._BlockPasses, "_replayed", counting)
    with_tapes = run()
    assert len(replayed) == 37 and all(replayed)
    without_tapes(False)
    assert run() == with_tapes
    without_tapes(True)


@pytest.mark.parametrize("profile", list(PROFILES))
def test_summed_validation_loss_rows_unchanged(without_index, profile):
    workload = load_workload(str(VLOSS))
    rows = run_cell(workload, "default", profile=profile, sets={"steps": 12})
    assert run_cell(workload, "default", profile=profile, sets={"steps": 12},
                    fast_forward=False) == rows
    without_index(False)
    assert run_cell(workload, "default", profile=profile, sets={"steps": 12},
                    fast_forward=False) == rows


def test_summed_validation_loss_walks_only_the_new_nodes(monkeypatch):
    """After the first backwards, each one finds its settled nodes reached and useful and
    walks only the nodes the step added (15 in this MLP's step), not the whole chain."""
    walked = []
    statuses = settled.SettledNodes.statuses

    def counting(self, graph, leaves):
        found = statuses(self, graph, leaves)
        walked.append(None if found is None else len(found[0].extra))
        return found
    monkeypatch.setattr(settled.SettledNodes, "statuses", counting)
    run_cell(load_workload(str(VLOSS)), "default", profile="m2max-macos",
             sets={"steps": 40}, fast_forward=False)
    assert len(walked) == 37 and None not in walked
    assert max(walked) == min(walked) < 20


def test_summed_validation_loss_tapes_shortcuts_are_invisible(monkeypatch):
    """The useful tapes' nodes useful through ``_BlockPasses.value`` (no status rewritten
    where a tape is replayed) and the unavailable tapes' statuses copied as a dict: every
    walk ends with the statuses, and the run with the heap, time and arena (chunk for
    chunk), of walks that rebuild the statuses from the ids and walk the useful pass."""
    def run():
        walks = []
        monkeypatch.setattr(pass_blocks, "WALK_OBSERVER",
                            lambda status, useful: walks.append(dict(status)))
        sim = Simulation(PROFILES["linux-x86_64"], fast_forward=False)
        list(load_workload(str(VLOSS)).run(sim, "default", steps=30))
        heap = sim.heap
        return (heap.live_bytes, heap.live_blocks, heap.peak_bytes, heap.allocs,
                sim.work_ps, sim.fault_bytes, arena_state(sim.allocator.arena)), walks

    replayed = []
    useful_replayed = pass_blocks._UsefulTaping.replayed

    def counting(self, node_id):
        found = useful_replayed(self, node_id)
        replayed.append(found)
        return found
    monkeypatch.setattr(pass_blocks._UsefulTaping, "replayed", counting)
    state, walks = run()
    assert sum(replayed) >= 27 and len(walks) == 30

    class Plain(pass_blocks.Tape):
        __slots__ = ()

        def __init__(self, leaf, events, nodes, unchecked=None, statuses=None):
            super().__init__(leaf, events, nodes, unchecked)
    monkeypatch.setattr(pass_blocks, "Tape", Plain)
    monkeypatch.setattr(pass_blocks._UsefulTaping, "replayed", lambda self, node_id: False)
    assert run() == (state, walks)
