"""Inference forwards on an autodiff device whose members fast-forward keeps as runs of
the parameters' graph's maps (sim.burn.graph.runs.MemberRuns): the heap, its peak and
allocation calls, page faults, simulated time, the locator, the L2 model's LRU and, once
something reads them, every member node and step are exact mode's, on both profiles."""

import pytest

from sim.burn.graph.runs import RunEntries
from sim.burn.nn import Mlp
from sim.burn.tensor import Tensor
from sim.engine.profile import load_profile
from sim.engine.simulation import Limits, Simulation

PROFILES = ("m2max-macos", "linux-x86_64")


def _forwards(profile, n, features, batch, fast_forward, backward=False):
    sim = Simulation(load_profile(profile), fast_forward=fast_forward,
                     limits=Limits(max_ops=10 ** 9))
    dev = sim.device("flex").autodiff()
    model = Mlp(features, features, features, dev)
    x = Tensor.random((batch, features), dev)
    sim.repeat(n, lambda: model.forward(x.clone()).sum().into_scalar())
    state = [_state(sim)]
    if backward:
        # a backward through the parameters' graph reads every member
        model.forward(x.clone()).sum().backward()
        state.append(_state(sim))
    return sim, state


def _state(sim):
    heap, allocator = sim.heap, sim.allocator
    locator = sim.client.locator
    cache = sim._backends["flex"].cache
    graphs = []
    for graph in locator.live:
        if hasattr(graph, "server"):
            server = graph.server
            memory = server.memory_management
            graphs.append((graph.origin, graph.entries, len(server.steps), len(memory.nodes),
                           sorted(memory.leaves), memory.referenced,
                           server.steps_table.cap, memory.nodes_table.cap,
                           memory.leaves_table.cap))
    return (heap.live_bytes, heap.live_blocks, heap.peak_bytes, heap.allocs,
            tuple(allocator.live), tuple(allocator.high), sim.fault_bytes, sim.work_ps,
            sim.registered, sim._next_id, locator.entry_count(), graphs,
            locator.graphs_tree.leaves, locator.graphs_tree.internals,
            [c.nbytes for c in cache.lru], cache.resident,
            sorted((n, len(v)) for n, v in cache.free.items()))


def _members(sim):
    """Every node of the graphs, in their maps' order: id, order, parents, its step's op
    and the sizes and L2 chunk positions of the storages its actions keep."""
    lru = {id(c): i for i, c in enumerate(sim._backends["flex"].cache.lru)}
    out = []
    for graph in sim.client.locator.live:
        if not hasattr(graph, "server"):
            continue
        server = graph.server
        memory = server.memory_management
        for node_id, step in server.steps.items():
            kept = []
            if step.actions is not None:
                for _, buf, blocks in step.actions.explicit + step.actions.backup:
                    kept.append((None if buf is None else
                                 (buf.nbytes, buf.holders,
                                  buf.chunk and lru.get(id(buf.chunk)))
                                 , tuple(n for n, _ in blocks)))
            out.append((node_id, step.op, step.node.order, step.node.parents, tuple(kept)))
        out.append(list(memory.nodes))
    return out


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("n,features,batch", [(40, 64, 8), (300, 64, 8), (150, 512, 32)])
def test_inference_forwards_equal_exact_mode(profile, n, features, batch):
    fast, fast_state = _forwards(profile, n, features, batch, True)
    exact, exact_state = _forwards(profile, n, features, batch, False)
    assert fast_state == exact_state
    if profile == "m2max-macos" and n > 100:
        assert fast.ff_applied["chain"] > n // 2
        graph = next(g for g in fast.client.locator.live if hasattr(g, "server")
                     and isinstance(g.server.steps, RunEntries))
        assert graph.server.steps.members.runs      # nothing read the members yet
    assert _members(fast) == _members(exact)


@pytest.mark.parametrize("profile", PROFILES)
def test_a_backward_after_the_forwards_reads_the_members(profile):
    fast, fast_state = _forwards(profile, 300, 64, 8, True, backward=True)
    exact, exact_state = _forwards(profile, 300, 64, 8, False, backward=True)
    assert fast_state == exact_state
    assert _members(fast) == _members(exact)
