"""Fast-forward: loops of identical iterations applied in closed form.

``sim.repeat(n, body)`` runs ``body()`` ``n`` times. With fast-forward on
(the default), the first iterations run exactly while the engine records what
each one changed. Once three consecutive iterations had the same effect, and
that effect is one of the shapes below, the remaining iterations are applied in
closed form; iterations where something could differ (a hash table reaching its
capacity, a policy event, the last iteration) still run exactly, so transient
peaks and resize steps are the real ones. Anything else runs exactly.

Effect shapes:

``none``
    nothing persistent: no node stays registered and the heap returns to where
    it was (plain backends, ``without_autodiff``, policies that free on drop).
    Only time and counters advance.
``graphs``
    one node per iteration, dead, alone in a new graph (an untracked op whose
    output was dropped): a :class:`~sim.autodiff.runs.NodeRun` of single-node
    graphs; the locator's BTreeMaps take the ids in closed form.
``steady``
    the iteration registers and frees (a training step: forward, backward, optimizer,
    sweep) and leaves the bookkeeping exactly as it found it: same heap bytes and
    blocks, same allocator state, same BTreeMap nodes and locator entries. Node
    ids and counters advance; nothing else can tell the iterations apart.
``nodes``
    one node per iteration, dead, a childless leaf in a graph that existed before
    the loop, with parents that existed before the loop (a tracked op on a live
    tensor whose output was dropped): a run inside that graph; its tables grow
    by one item per iteration, so a segment ends before any of them must resize.

The effect is proven, not assumed: the heap bytes and blocks an iteration left
behind must equal the blocks of the node (and of its new graph) read off the
live objects, plus the BTreeMap nodes and table resizes the iteration caused.
Tests check that fast-forward and exact mode produce the same CSV.
"""

from __future__ import annotations

from collections import Counter

from .autodiff.runs import NodeRun, graph_blocks, node_blocks
from .costs.heap import Heap

__all__ = ["repeat", "Effect"]

#: consecutive identical iterations needed before fast-forwarding
AGREE = 3
#: iterations tried before giving up and running the loop exactly
MAX_PROBE = 12


class _Recorder(Heap):
    """A heap that also records every event (only while probing an iteration)."""

    __slots__ = ()
    events = None

    def alloc(self, nbytes, align=0):
        if nbytes > 0:
            _Recorder.events[nbytes] += 1
        return Heap.alloc(self, nbytes, align)

    def free(self, nbytes, block=None):
        if nbytes > 0:
            _Recorder.events[nbytes] -= 1
        Heap.free(self, nbytes, block)

    def alloc_many(self, nbytes, count):
        if nbytes > 0 and count > 0:
            _Recorder.events[nbytes] += count
        Heap.alloc_many(self, nbytes, count)

    def free_many(self, nbytes, count):
        if nbytes > 0 and count > 0:
            _Recorder.events[nbytes] -= count
        Heap.free_many(self, nbytes, count)


class _Snapshot:
    def __init__(self, sim):
        timing = sim.timing
        locator = sim.client.locator
        self.next_id = sim._next_id
        self.registered = sim.registered
        self.backwards = sim.backwards
        self.work = sim.work_ps
        self.timing = (timing.compute_ns, timing.bookkeeping_ns, timing.cleanup_ns)
        self.heap = (sim.heap.live_bytes, sim.heap.live_blocks)
        self.entries = 0 if locator is None else locator.entry_count()
        self.trees = _tree_counts(locator)
        self.rss_extra = sim.rss_extra_bytes
        self.touched = sim.touched.state()
        self.allocator = sim.allocator.state()
        self.faults = (sim.fault_bytes, sim.fault_mapped, sim.fault_ps)


def _tree_counts(locator):
    if locator is None:
        return (0, 0, 0, 0)
    g, k = locator.graphs_tree, locator.keys_tree
    return (g.leaves, g.internals, k.leaves, k.internals)


class Effect:
    """What one iteration changed, in a form that can be compared and replayed."""

    def __init__(self, shape, stride, registered, times, blocks=(), offset=0, parents=(),
                 graph=None, backwards=0, rss_drift=0, graph_blocks=(), faults=(0, 0)):
        self.graph_blocks = graph_blocks
        # (bytes made resident by growth, bytes of blocks mapped) per iteration: their
        # time is not in ``times``; _apply faults them again (growth of a run's blocks
        # happens by itself when the run allocates them)
        self.faults = faults if shape in ("none", "steady") else (0, faults[1])
        self.backwards = backwards
        self.rss_drift = rss_drift
        self.shape = shape
        self.stride = stride
        self.registered = registered
        self.times = times
        self.blocks = blocks
        self.offset = offset
        self.parents = parents
        self.graph = graph

    def key(self):
        # exact work in ps; the float accumulators only split it and are not compared
        return (self.shape, self.stride, self.registered, self.times[0], self.blocks, self.offset,
                self.parents, id(self.graph), self.backwards, self.rss_drift, self.faults)


def _measure(sim, snap, events):
    """The effect of the iteration since ``snap``, or None when it is not batchable."""
    locator = sim.client.locator
    timing = sim.timing
    stride = sim._next_id - snap.next_id
    registered = sim.registered - snap.registered
    fb, fm, fps = snap.faults
    mapped = sim.fault_mapped - fm
    faults = (sim.fault_bytes - fb - mapped, mapped)
    # page-fault time is replayed from the bytes (Simulation.page_fault), not copied
    times = (sim.work_ps - snap.work - (sim.fault_ps - fps),) + tuple(
        a - b for a, b in zip((timing.compute_ns, timing.bookkeeping_ns, timing.cleanup_ns),
                              snap.timing))
    if sim.touched.state() != snap.touched:
        return None   # first execution of a code path or gemm shape: not a repeatable iteration
    entries = 0 if locator is None else locator.entry_count()
    if (registered and entries == snap.entries and sim.allocator.state() == snap.allocator
            and (sim.heap.live_bytes, sim.heap.live_blocks) == snap.heap
            and _tree_counts(locator) == snap.trees):
        return Effect("steady", stride, registered, times,
                      backwards=sim.backwards - snap.backwards,
                      rss_drift=sim.rss_extra_bytes - snap.rss_extra, faults=faults)
    if sim.backwards != snap.backwards or sim.rss_extra_bytes != snap.rss_extra:
        return None
    new = [] if locator is None else [
        i for i in range(snap.next_id, sim._next_id) if i in locator.graphs]
    if entries - snap.entries != len(new):
        return None  # something older was removed
    net = {size: n for size, n in events.items() if n}
    if not new:
        if net or _tree_counts(locator) != snap.trees:
            return None
        return Effect("none", stride, registered, times, faults=faults)
    if len(new) != 1:
        return None
    node_id = new[0]
    graph = locator.graphs[node_id]
    memory = graph.server.memory_management
    entry = memory.nodes.get(node_id)
    step = graph.server.steps.get(node_id)
    if entry is None or step is None or entry[0].strong != 1 or step.actions is not None:
        return None
    rc, parents = entry
    if node_id in memory.leaves and any(p[0] >= snap.next_id for p in parents):
        return None
    layout = sim.layout
    blocks = node_blocks(layout, step, parents)
    if graph.origin == node_id:
        if parents or len(memory.nodes) != 1 or memory.runs or graph.entries != 1:
            return None
        own = graph_blocks(layout, graph.server)
        blocks.update(own)
        own = tuple(sorted(own.items()))
        shape = "graphs"
    else:
        if graph.origin >= snap.next_id or node_id not in memory.leaves:
            return None
        shape = "nodes"
        own = ()
    if _unexplained(net, blocks, locator, snap):
        return None
    return Effect(shape, stride, registered, times, tuple(sorted(blocks.items())),
                  node_id - snap.next_id, tuple(parents), graph if shape == "nodes" else None,
                  graph_blocks=own, faults=faults)


def _unexplained(net, blocks, locator, snap):
    """Whether the heap change is more than the node's blocks, BTreeMap nodes and resizes."""
    rest = Counter(net)
    rest.subtract(blocks)
    g, k = locator.graphs_tree, locator.keys_tree
    d = [a - b for a, b in zip(_tree_counts(locator), snap.trees)]
    rest[g.leaf_bytes] -= d[0]
    rest[g.internal_bytes] -= d[1]
    rest[k.leaf_bytes] -= d[2]
    rest[k.internal_bytes] -= d[3]
    left = {size: n for size, n in rest.items() if n}
    # what is left may only be hash-table resizes: one new block replacing one old
    return sum(left.values()) != 0 or len(left) > 2


def _horizon(sim, effect):
    """Iterations that can be applied in closed form before anything could differ."""
    limit = sim.policy.ff_horizon(effect)
    if effect.blocks and not sim.allocator.bulk_exact():
        return 0   # a glibc arena: where each block lands depends on the order of events
    if effect.shape != "nodes":
        return limit
    graph = effect.graph
    server = graph.server
    memory = server.memory_management
    locator = sim.client.locator
    steps = len(server.steps) + memory.run_nodes
    slack = [server.steps_table.cap - steps, server.actions_table.cap - steps,
             memory.nodes_table.cap - (len(memory.nodes) + memory.run_nodes),
             memory.leaves_table.cap - (len(memory.leaves) + memory.run_nodes)]
    table = locator.key_tables.get(graph.origin)
    if table is not None:
        slack.append(table.cap - locator._key_count(graph.origin))
    return min(limit, min(slack))


def _apply(sim, effect, count):
    """``count`` iterations of ``effect`` in closed form."""
    timing = sim.timing
    first = sim._next_id + effect.offset
    if effect.shape not in ("none", "steady"):
        run = NodeRun(first, effect.stride, count, effect.parents, effect.blocks,
                      new_graph=effect.shape == "graphs", graph=effect.graph,
                      graph_blocks=effect.graph_blocks)
        sim.client.locator.add_run(run)
        sim.policy.ff_apply(run)
    sim._next_id += effect.stride * count
    sim.registered += effect.registered * count
    sim.backwards += effect.backwards * count
    sim.rss_extra_bytes += effect.rss_drift * count
    work_ps, compute, book, cleanup = effect.times
    timing.compute_ns += compute * count
    timing.bookkeeping_ns += book * count
    timing.cleanup_ns += cleanup * count
    sim.current.pending_ps += work_ps * count
    sim.work_ps += work_ps * count
    grown, mapped = effect.faults
    if grown:
        sim.page_fault(grown * count)
    if mapped:
        sim.page_fault(mapped * count, True)
    sim._check_limits()


def repeat(sim, n, body):
    """Run ``body()`` ``n`` times, fast-forwarding identical iterations (see module doc)."""
    if n <= 0:
        return
    if not sim.fast_forward or sim.contended or n < AGREE + 2:
        for i in range(n):
            sim.loop_index = i
            body()
        return
    done = 0
    effects = []
    effect = None
    heap = sim.heap
    while done < n:
        if effect is None:
            snap = _Snapshot(sim)
            _Recorder.events = Counter()
            heap.__class__ = _Recorder
            sim.loop_index = done
            try:
                body()
            finally:
                heap.__class__ = Heap
            done += 1
            measured = _measure(sim, snap, _Recorder.events)
            effects.append(measured)
            last = effects[-AGREE:]
            if (len(last) == AGREE and last[0] is not None
                    and all(e is not None and e.key() == last[0].key() for e in last)):
                effect = measured
            elif len(effects) >= MAX_PROBE:
                for i in range(done, n):
                    sim.loop_index = i
                    body()
                return
            continue
        count = min(n - done - 1, _horizon(sim, effect))
        if sim.limits.max_ops is not None and effect.registered:
            count = min(count, max(0, (sim.limits.max_ops - sim.registered) // effect.registered))
        if count > 0:
            _apply(sim, effect, count)
            done += count
        sim.loop_index = done
        body()
        done += 1
