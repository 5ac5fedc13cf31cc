"""Fast-forward of a loop that grows a chain: an EMA, a running sum, any value kept
across iterations and updated from tracked tensors.

``ema = ema * 0.99 + w.detach() * 0.01`` after every training step adds the same few
nodes to one graph each iteration (burn keeps them all: the kept ``ema`` reaches them),
while the training step itself leaves the bookkeeping as it found it. No iteration is
identical to the one before: the chain is longer, the orphan sweep after each backward
visits every one of its locator entries and scans the graph up to its live node, so the
sweep costs more every step (the quadratic growth of p10-ema ``detach``). What does
repeat is the iteration's *structure*. :func:`chain_effect` proves that from three
consecutive iterations (:mod:`sim.engine.fastforward.repeat`), and :func:`apply_chain` then applies
``count`` more in a fraction of the time:

* the members (the nodes each iteration leaves in the chain's graph ``G``) are built as
  the iteration built them -- ``Arc<Node>``, ``Arc<NodeId>``, the boxed step, their
  ``nodes`` / ``steps`` / ``leaves`` / key-set entries and table growth, each heap block
  through the heap -- with the ids, parents and orders the skipped iterations would have
  given them;
* the locator's two BTreeMaps get the iteration's own sequence of inserts and removals
  (the training step's new parameters, the transient graph ``detach`` starts, the
  members), with the ids shifted: the maps' nodes split and merge exactly as in exact mode;
* what the iteration keeps besides the chain -- the graphs of the new parameters, one
  node each -- keeps its objects (the module's tensors hold them) and takes the ids of
  the last skipped iteration; the chain's live node (held by the ``ema`` tensor) swaps
  places with the last member built, so the tensor holds the newest member;
* time: the iteration's work minus its sweeps and its backwards' passes is the same
  every time (checked to the picosecond); each sweep is recomputed by
  :meth:`Timing.sweep_ns` from the iteration's recorded sweep with ``G``'s entries, nodes
  and scan replaced by their values at that iteration (checked: the recorded terms are
  the model's own), and each backward's ``free_unavailable_nodes`` by
  :meth:`Timing.free_unavailable` at the nodes its passes visit then (a backward through
  ``G`` visits more every iteration: the training step of a loop that sums its
  validation loss, whose running total keeps every step's validation forward in the
  parameters' graph).

The members may also be the RootSteps of parameters an optimizer made in the iteration,
held by the module and merged into ``G`` by the forward that reads them: several held
members, each swapped with the newest iteration's (:func:`_swap_tips`); the graph that
merged the other parameters' graphs before it was merged into ``G`` keeps their entries
and no node (:func:`emptied_graph`), and takes the newest iteration's ids
(:func:`sim.engine.fastforward.replay.relabel_emptied`); the next iteration's backward
consumes those RootSteps (their nodes stay in ``G``) and its sweep removes some of their
entries, which each skipped iteration undoes for the one before
(:func:`sim.engine.fastforward.keptchain.build_members`).

A chain whose members keep storages in their checkpoint actions, or have retro-forwards
(Balanced checkpointing: ema-balanced ``detach`` keeps each step's detached weight, a
LARGE block, so every step moves the LARGE placement), is applied as :mod:`sim.engine.fastforward.leakrun`
applies a leak: the iteration's heap events, recorded in order without the BTreeMaps'
own and the orphan sweeps' clones of the map (whose size grows with the chain), are
replayed through the heap; the members are built on a heap that only counts, their
actions holding new storages of the replayed blocks; the storage a module holds and the
L2 model's chunks go to the members exact mode has them in (:func:`sim.engine.fastforward.leakrun.hand_over`).
The same builder takes members that hang off older nodes only, which no tensor holds and
whose actions keep tensors (a validation forward of a model that requires grad adds
eight such nodes to the parameters' graph every batch): their storages' chunks join the
L2 model's LRU every iteration, which :func:`sim.engine.fastforward.keptchain.l2_growth` describes and each
skipped iteration applies, up to where the LRU would evict.

On allocators that keep counts per size class; on a glibc arena, whose chunk placement
depends on every event, only a chain of members that stay unbuilt (an inference forward:
:func:`sim.engine.fastforward.keptchain.on_arena`), its events replayed request by request
with the BTreeMap operations where the iteration made them, and the members built on the
chunks the replay placed (other chains run exactly there). The policy's own state (a
policy's index of node ids included) is replayed by :mod:`sim.engine.fastforward.seams`
after the members are built, and only up to the next resize of one of ``G``'s tables (the
iteration that resizes runs exactly). Transient peaks inside the skipped iterations are
re-reached by the next exact one (everything they hold grows), so high-water marks, RSS
and page faults end where exact mode puts them; tests compare the CSVs.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import NamedTuple

import numpy as np

from ...burn.graph.runs import node_blocks, unexplained_blocks
from ...platform.btree import TreeTap
from ...platform.hashbrown import TableTap, buckets_for, capacity_of
from .arenarun import ALLOC, FREE
from ...platform.timing import PassesRecord
from .replay import (group_inserts, relabel_emptied, relabel_rotating, relative_tree_ops,
                     replay_tree_ops, rotating_graph)
from .keptchain import (advance_l2, build_members, build_replayed, compare_before,
                        defer_members, deferrable, kept_chain, on_arena,
                        kept_slots, l2_ready, l2_rotates, old_nodes, repoint_members)
from .leakrun import _Refuse, _resident, actions_template, hand_over, swap_tip

__all__ = ["ChainEffect", "chain_effect", "chain_horizon", "apply_chain", "TreeLog",
           "watch_tables", "watch_graph", "unwatch", "TableWatch", "note_tables"]


# -- what a probe records -----------------------------------------------------------------

class TreeLog:
    """The inserts and removals of the locator's two BTreeMaps during one probed iteration
    (``ops``: ``(tree index, kind, key or keys)``); ``valid`` is False once an operation
    that cannot be replayed by shifting ids happened (a removal of a fast-forwarded run)."""

    current = None

    def __init__(self, trees, trace=None):
        self.trees = trees
        self.ops = []
        self.valid = True
        #: the probe's heap-event trace (a list, or None) and the ``(start, end)``
        #: positions in it of the events each operation made (its nodes' allocations and
        #: frees): fast-forward of a leak (:mod:`sim.engine.fastforward.leakrun`) leaves them to the
        #: replayed operations
        self.trace = trace
        self.spans = []
        #: the same for the clones of the map an orphan sweep makes and drops: their
        #: number of nodes grows with a chain, so a chain that replays its iteration's
        #: events (:func:`apply_chain` with a trace) leaves them out
        self.clones = []
        #: allocation calls the operations and the clones made (the heap's counter), and
        #: for each clone ``(operations before it, tree index, whether it allocated
        #: nodes)``: the
        #: skipped iterations' clones are counted from the map as it is at that point
        self.allocs = 0
        self.clone_at = []
        #: for each operation, the position in the trace of the first event it made or
        #: would have made (None without a trace): where a glibc arena's replay makes it
        self.at = []
        #: the inserts (indices into ``ops``) that appended to their map, where the tap
        #: tells (a glibc arena's probe: the node runs' template marks them); and whether
        #: a run was appended in closed form (no operation of ``ops`` stands for it)
        self.appends = set()
        self.ran = False
        #: the chain's graph's tables and their blocks' sizes before the iteration
        #: (:func:`table_sizes`), and the spans of the trace in which one of them grew
        #: (:func:`_growth_spans`): left out of the replayed events as the BTreeMaps' are
        self.sizes = ()
        self.grown = []


class LoggingTree(TreeTap):
    """The tap of a locator BTreeMap that logs its operations in :attr:`TreeLog.current`
    (probing)."""

    __slots__ = ()

    @staticmethod
    def _log(tree, kind, key, call, arg):
        log = TreeLog.current
        if log is None:
            return tree.untapped(call, arg)
        log.ops.append((log.trees.index(tree), kind, key))
        trace = log.trace
        start = len(trace) if trace is not None else 0
        log.at.append(start if trace is not None else None)
        allocs = tree.heap.allocs
        result = tree.untapped(call, arg)
        log.allocs += tree.heap.allocs - allocs
        if trace is not None and len(trace) > start:
            log.spans.append((start, len(trace)))
        return result

    @staticmethod
    def _span(tree, call, *args):
        log = TreeLog.current
        trace = None if log is None else log.trace
        if trace is None:
            return tree.untapped(call, *args)
        start = len(trace)
        result = tree.untapped(call, *args)
        if len(trace) > start:
            log.clones.append((start, len(trace)))
        return result

    def clone_nodes(self, tree, heap, empty):
        log = TreeLog.current
        if log is None:
            return tree.untapped(tree.clone_nodes, heap, empty)
        allocs = heap.allocs
        result = self._span(tree, tree.clone_nodes, heap, empty)
        made = heap.allocs - allocs
        log.allocs += made
        log.clone_at.append((len(log.ops), log.trees.index(tree), made > 0))
        return result

    def drop_clone(self, tree, heap, clone):
        return self._span(tree, tree.drop_clone, heap, clone)

    def insert(self, tree, key):
        if (tree.appends_in_closed_form and key > tree.max_key()
                and TreeLog.current is not None):
            TreeLog.current.valid = False       # the map's insert is an append_run
        return self._log(tree, "insert", key, tree.insert, key)

    def remove(self, tree, key):
        return self._log(tree, "remove", key, tree.remove, key)

    def remove_many(self, tree, items):
        items = list(items)
        if any(type(item) is tuple for item in items) and TreeLog.current is not None:
            TreeLog.current.valid = False
        return self._log(tree, "remove_many", tuple(items), tree.remove_many, items)

    def remove_run(self, tree, first, stride, count):
        if TreeLog.current is not None:
            TreeLog.current.valid = False
        return tree.remove_many([(first, stride, count)])     # the map's remove_run, tapped

    def append_run(self, tree, first, stride, count, alloc):
        if TreeLog.current is not None:
            TreeLog.current.valid = False
            TreeLog.current.ran = True
        return tree.untapped(tree.append_run, first, stride, count, alloc)


# -- the effect ---------------------------------------------------------------------------

class Member(NamedTuple):
    """One node an iteration leaves in the chain's graph, relative to its iteration.

    ``offset``: id minus the iteration's first id. ``parents``: the node's ``(id,
    is_leaf)`` parents as ``(ref, is_leaf)`` and ``step_parents`` the step's parent
    nodes (None: an untracked input), each ``ref`` ``("cur", offset)``, ``("prev",
    offset)`` (the iteration before) or ``("old", id)`` (a node from before the loop).
    ``order``: ``("const", order)``, or ``("chain", order - the order of the previous
    iteration's member the chain goes through)``. ``keyed``: in the key set of ``G``'s
    origin. ``tip``: held by one tensor handle (the chain's live end)."""

    offset: int
    kind: str
    op: object
    nbytes: int
    shapes: tuple
    requirement: int
    memory_bound: bool
    parents: tuple
    step_parents: tuple
    order: tuple
    keyed: bool
    tip: bool
    #: a chain that replays its iteration's events: the step's checkpoint actions
    #: (:class:`sim.engine.fastforward.leakrun.ActionsTemplate`, node offsets relative to the iteration's
    #: first id, storages by index into the iteration's kept ones) and whether the node
    #: has a retro-forward (Balanced checkpointing)
    actions: object = None
    retro: bool = False
    #: the index among the iteration's emptied graphs (:func:`emptied_graph`) of the one
    #: the member's locator entry points at (None: ``G``)
    emptied: object = None


class GraphState(NamedTuple):
    """``G``'s locator entries, nodes and leaves at the end of an iteration."""
    entries: int
    nodes: int
    leaves: int = 0


class SweepTemplate(NamedTuple):
    """One orphan sweep of the iteration: the graphs it read (``sets``) and the terms of
    its node reads (``parts``) with ``G``'s marked :data:`G_KEY`, its counts as this
    iteration had them, and how each count changes from one iteration to the next
    (``d_*``: against the iteration before; None where that one was not probed).
    ``passes``, ``nodes``, ``referenced``: ``G``'s record (0 where the sweep did not
    scan ``G``: a graph with a live handle under ``dedup-sweep``)."""
    sets: tuple
    parts: tuple
    entries: int
    visits: int
    freed: int
    passes: int
    nodes: int
    referenced: int
    deltas: object        # (d_entries, d_visits, d_passes, d_nodes) or None
    #: B of heap per key of ``G`` as the probed sweep read it (the TLB model's spacing,
    #: :meth:`sim.platform.timing.Timing.sweep_live`): the chain keeps the same blocks per
    #: node every iteration, so it holds for the iterations built after
    spacing: float = 0.0

    def shape(self):
        """What every iteration's sweep shares (compared between iterations)."""
        return (self.sets, self.parts, self.freed, self.referenced, self.deltas)


G_KEY = "G"


class PassesTemplate(NamedTuple):
    """One ``free_unavailable_nodes`` of the iteration (a backward's passes over a graph
    the chain grows): its nodes visited and control-group reads as this iteration had
    them, and how the visits change from one iteration to the next (``d_visited``: None
    where the iteration before was not probed, or its reads were others); ``ns`` and
    ``ps``: what this iteration charged."""
    visited: int
    pop_groups: float
    d_visited: object
    ns: float
    ps: int

    def shape(self):
        return (self.pop_groups, self.d_visited)


def _passes_templates(records, before):
    """The iteration's :class:`~sim.platform.timing.PassesRecord` s as
    :class:`PassesTemplate` s, or None where there are not as many as the iteration
    before had."""
    old = before.passes if before is not None else None
    if old is not None and len(old) != len(records):
        return None
    out = []
    for i, r in enumerate(records):
        d = None
        if old is not None and old[i].pop_groups == r.pop_groups:
            d = r.visited - old[i].visited
        out.append(PassesTemplate(r.visited, r.pop_groups, d, r.ns, r.ps))
    return tuple(out)


class ChainEffect:
    """What one chain-growing iteration did (see the module doc)."""

    shape = "chain"
    period = 1
    since = 0
    rss_drift = 0
    template = None
    node_order = ()
    graph_order = ()
    drop_order = None
    parents = ()
    offset = 0
    #: a chain whose members keep storages or whose iteration moves LARGE blocks: its heap
    #: events without the BTreeMaps' (``trace``, replayed as
    #: :func:`sim.engine.fastforward.repeat._replay_drift` replays a drift's), the storages each
    #: iteration keeps (:class:`sim.engine.fastforward.leakrun.Kept`) and their backends, the small blocks the
    #: members' builder must count, and the allocations counted without an event
    trace = None
    plan = None
    deltas = ()
    kept = ()
    backends = ()
    blocks = ()
    allocs = 0
    checked = False
    #: the L2 models' LRUs: ``()`` as the iteration found them, else how they grow
    #: (:func:`sim.engine.fastforward.keptchain.l2_growth`); and how many leaves ``G`` gains an iteration
    #: (None: unknown)
    l2 = ()
    leaf_growth = 0
    #: allocation calls of the iteration besides its BTreeMap operations and clones (the
    #: members' blocks and the transients: operands, outputs, shapes), where its events
    #: are not replayed; and its orphan sweeps' clones of the map (:attr:`TreeLog.clone_at`)
    outside = 0
    clone_at = ()
    #: on a glibc arena, what its replay needs besides the trace
    #: (:class:`sim.engine.fastforward.keptchain.ArenaPlan`); None elsewhere
    arena = None
    #: on a glibc arena, the windows of its iterations replayed and recorded, by program
    #: and the sizes of their free structures (:mod:`sim.engine.fastforward.arenawindow`)
    windows = None
    #: the graphs made in the iteration and emptied by a merge into ``G``
    #: (``(origin offset, entries' offsets)``, :func:`emptied_graph`), and the offsets of
    #: the iteration before's members whose entries in ``G`` the iteration removed
    emptied = ()
    dropped = ()
    #: offsets of the members whose steps the next iteration consumes (a backward
    #: through the parameters' RootSteps), leaving their nodes in ``G``
    consumed = ()
    #: the iteration's backwards' ``free_unavailable_nodes`` (:class:`PassesTemplate`),
    #: charged again at the nodes each skipped iteration's passes visit
    passes = ()
    #: ``(first id, iterations)``: the iterations :func:`chain_horizon`'s margins keep
    #: :data:`CROSSED` from growing in, from the state whose next id is the first
    margins = None
    #: ``G``'s tables' growth an iteration and the most an iteration's counts rise above
    #: its first, by table, as the exact iterations run while the effect holds showed them
    #: (:func:`note_tables`; False: not the same every iteration)
    room = None
    #: how ``G``'s index of settled nodes (:mod:`sim.burn.graph.settled`) stands after
    #: every iteration, as the exact ones showed it: the ids of its tops relative to the
    #: iteration's first id, every node settled but the iteration's members
    #: (:func:`_settle_pattern`); None: not seen yet, False: not so
    settles = None
    #: what :func:`sim.engine.fastforward.keptchain.build_members` reads of each member,
    #: made on first use
    build_plan = None
    #: how :func:`_replay_tree_ops` replays the BTreeMap operations (:func:`_tree_plan`),
    #: made on first use
    tree_plan = None

    def __init__(self, stride, registered, backwards, times, faults, origin, members,
                 rotating, tree_ops, sweeps, growth, state, tip_ids, graph, first_id):
        #: the first id of the probed iteration: sweeps of later iterations are
        #: extrapolated from it (:func:`_sweep`)
        self.first_id = first_id
        self.stride = stride
        self.registered = registered
        self.backwards = backwards
        #: (steady work ps, compute ns, bookkeeping ns, cleanup ns): the iteration's work
        #: without its sweeps (and without page faults, replayed from the bytes)
        self.times = times
        self.faults = faults
        self.origin = origin
        self.members = members
        self.rotating = rotating
        self.tree_ops = tree_ops
        self.sweeps = sweeps
        #: (entries, nodes) ``G`` gained against the iteration before (None: not known)
        self.growth = growth
        self.state = state
        self.tip_ids = tip_ids
        self.graph = graph
        #: offset of the member a tensor holds, and the reference through which the chain
        #: goes back to the iteration before (``("prev", offset)``)
        self.via = next((r for m in members for r, _ in m.parents if r[0] == "prev"), None)
        #: offsets of the members tensors hold; of them, the chain's end (the member the
        #: next iteration goes through), or None
        self.tip_offsets = tuple(m.offset for m in members if m.tip)
        self.tip_offset = (None if self.via is None else
                           next((o for o in self.tip_offsets if o == self.via[1]), None))

    def key(self):
        return ("chain", self.stride, self.registered, self.backwards, self.times[0],
                self.faults, self.origin, self.members, self.rotating, self.tree_ops,
                tuple(t.shape() for t in self.sweeps), self.growth, self.trace, self.kept,
                self.blocks, self.allocs, self.l2, self.leaf_growth, self.outside,
                self.clone_at, self.emptied, self.dropped, self.consumed,
                tuple(t.shape() for t in self.passes))


def _scan_length(n, r):
    """:meth:`GraphMemoryManagement.scan_length` of a graph of ``n`` nodes, ``r`` of them
    referenced."""
    return n if r == 0 else (n + 1) / (r + 1)


def _explained(locator, snap, events, blocks) -> bool:
    """Whether the iteration's net heap change (``events``, blocks by size) is the
    members' ``blocks``, the BTreeMaps' new nodes and table resizes (each one block of a
    new size for one of an old size; several tables may resize in one iteration), and
    nothing else."""
    left = unexplained_blocks(events, blocks, locator, snap.trees).values()
    return sum(left) == 0 and all(abs(n) == 1 for n in left)


def chain_effect(sim, snap, events, sweeps, trees, previous, record=None, allocs=0):
    """The :class:`ChainEffect` of the iteration just probed, or None when it does not
    grow one chain (``snap``: the state before it; ``events``: its net heap blocks by
    size; ``sweeps``: its :class:`~sim.platform.timing.SweepRecord` s; ``trees``: its
    :class:`TreeLog`; ``previous``: the effect of the iteration before, if probed;
    ``record``: its heap events in order, live nodes' orders and kept blocks, and
    ``allocs`` its allocations counted without an event, for a chain whose members keep
    storages or whose iteration moves LARGE blocks: its events are replayed)."""
    locator = sim.client.locator
    if (locator is None or not trees.valid
            or sim.rss_extra_bytes != snap.rss_extra or locator.run_entries
            or len(locator.live) != snap.live_graphs):
        return None
    passes = [r for r in sweeps if type(r) is PassesRecord]
    sweeps = [r for r in sweeps if type(r) is not PassesRecord]
    trace, _, kept_at = record if record is not None else (None, None, None)
    # the iteration's events can be replayed in order (placement, LARGE slices, high-water
    # marks as exact mode has them) where they were recorded and the thread's cluster is
    # the one the iteration began on (the L2 model's LRU: checked below)
    replayable = (trace is not None and kept_at is not None and trees.trace is not None
                  and sim.allocator.cluster() == snap.cluster)
    # a glibc arena places every block where the requests before left room: its events are
    # always replayed, and the members built on the blocks the replay placed
    arena = sim.heap.orders_frees
    replay = arena or sim.allocator.placement() != snap.placement
    if replay and not replayable:
        return None
    w0, w1 = snap.next_id, sim._next_id
    stride = w1 - w0
    removed = _removed_before(trees.ops, w0 - stride, w0)
    found = _chain_graph(locator, w0, w1, snap.entries, len(removed))
    if found is None:
        return None
    graph, in_map, rotating, emptied = found
    collected = _collect_members(sim, locator, graph, in_map, w0, stride, replayable,
                                 emptied)
    if collected is None:
        return None
    dropped = _dropped(removed, collected.members, rotating, emptied)
    consumed = _consumed(graph.server, collected.members, w0 - stride)
    if dropped is None or consumed is None:
        return None
    if consumed:
        # the iteration consumed the steps of those members of the iteration before (a
        # backward through them: the RootSteps of the parameters it trained), whose boxes
        # it freed; its own are consumed by the next one
        blocks = Counter(collected.blocks)
        for m in collected.members:
            if m.offset in consumed:
                blocks[m.nbytes] -= 1
        collected = collected._replace(blocks=list(blocks.elements()))
    # members that keep storages or have retro-forwards are built with the replayed
    # events (leakrun's builder), not block by block
    replay = replay or any(m.actions is not None or m.retro for m in collected.members)
    ends = _chain_ends(locator, collected, graph, replay)
    if ends is None:
        return None
    tip_ids, via, via_order = ends
    members = tuple(m._replace(order=("chain", m.order - via_order)
                               if m.offset + w0 in collected.chain_dep
                               else ("const", m.order))
                    for m in collected.members)
    if replay:
        # G's tables grown in the iteration: their pairs of events are left out of the
        # replayed ones (a batch grows the tables itself, chain_horizon)
        grown = _growth_spans(trace, trees.sizes if trees.sizes and
                              trees.sizes[0][0] is graph.server.steps_table else ())
        if grown is None:
            return None
        trees.grown = grown
        kept = kept_chain(sim, snap, trees, trace, kept_at, members, collected.tensors,
                          collected.blocks, collected.shared, collected.prev_chunks)
        if kept is None:
            return None
        kept, positions = kept[:4], kept[4]
    elif not _explained(locator, snap, events, collected.blocks):
        return None
    memory = graph.server.memory_management
    state = GraphState(graph.entries, memory.node_count(),
                       len(memory.leaves) + memory.run_nodes)
    before = previous if (isinstance(previous, ChainEffect) and previous.graph is graph
                          and (via in previous.tip_ids if via is not None
                               else not previous.tip_ids)
                          and len(previous.sweeps) == len(sweeps)) else None
    templates = _sweep_templates(sweeps, id(memory), before)
    if templates is None:
        return None
    passes = _passes_templates(passes, before)
    if passes is None:
        return None
    growth = leaf_growth = None
    if before is not None:
        growth = (state.entries - before.state.entries, state.nodes - before.state.nodes)
        leaf_growth = state.leaves - before.state.leaves
    timing = sim.timing
    _, fm, fps = snap.faults
    work = (sim.work_ps - snap.work - (sim.fault_ps - fps) - (sim.trim_ps - snap.trim_ps)
            - sum(record.ps for record in sweeps) - sum(t.ps for t in passes))
    times = (work, timing.compute_ns - snap.timing[0],
             timing.bookkeeping_ns - snap.timing[1] - sum(t.ns for t in passes), 0.0)
    effect = ChainEffect(stride, sim.registered - snap.registered,
                         sim.backwards - snap.backwards, times,
                         (0, 0 if replay else sim.fault_mapped - fm), graph.origin, members,
                         rotating, relative_tree_ops(trees.ops, w0, w0 - stride),
                         templates, growth, state, tip_ids, graph, w0)
    effect.leaf_growth = leaf_growth
    effect.clone_at = tuple(trees.clone_at)
    effect.emptied, effect.dropped, effect.consumed = emptied, dropped, consumed
    effect.passes = passes
    if not replay:
        effect.outside = sim.heap.allocs - snap.allocs - trees.allocs
    if replay:
        effect.trace, effect.kept, effect.blocks, effect.l2 = kept
        effect.backends = tuple(None if type(k) is tuple else prim._free.__self__
                                for k, prim in zip(effect.kept, collected.tensors))
        effect.allocs = allocs
    if arena and not on_arena(sim, effect, graph, trees, positions):
        return None
    return effect


def _removed_before(ops, prev_lo, w0) -> list:
    """Offsets (relative to the iteration before's first id) of the entries of the
    iteration before that the logged BTreeMap operations ``ops`` removed from the
    locator's ``graphs`` map."""
    out = []
    for tree, kind, key in ops:
        if tree == 0 and kind != "insert":
            for k in key if kind == "remove_many" else (key,):
                if type(k) is int and prev_lo <= k < w0:
                    out.append(k - prev_lo)
    return sorted(out)


def _dropped(removed, members, rotating, emptied):
    """Of the iteration before's entries the iteration removed (``removed``, offsets),
    the members' entries in ``G`` (the closed form removes them from the locator's map for
    each skipped iteration); the others must be the rotating and emptied graphs' (which
    the closed form relabels). None where an entry removed is neither."""
    in_g = {m.offset for m in members if m.emptied is None}
    others = set(rotating)
    for _, ids in emptied:
        others.update(ids)
    dropped = tuple(o for o in removed if o in in_g)
    if any(o not in in_g and o not in others for o in removed):
        return None
    return dropped


def _consumed(server, members, prev_lo):
    """Offsets of the members whose steps the iteration consumed in the iteration before
    (their nodes stay in ``G``), or None where a member of the iteration before is no
    longer in ``G``'s nodes."""
    nodes = server.memory_management.nodes
    out = []
    for m in members:
        node_id = prev_lo + m.offset
        if node_id not in nodes:
            return None
        if node_id not in server.steps:
            out.append(m.offset)
    return tuple(out)


def _chain_graph(locator, w0, w1, entries_before, removed=0):
    """``(G, members' ids in G's map order, rotating graphs' offsets, emptied graphs)`` of
    an iteration that made the node ids ``w0 .. w1 - 1``, or None: exactly one graph from
    before the iteration gained nodes (its members, the last nodes of its map), and every
    other new entry is a graph made in the iteration, of one node (a new parameter's
    RootStep, replacing the one the iteration before made) or emptied (:func:`emptied_graph`:
    a graph a merge moved into ``G`` that keeps the entries of the origins merged into it,
    whose nodes are members too). The locator gained one entry per member and per
    one-node graph, less the ``removed`` entries of the iteration before."""
    by_graph = {}
    for i in range(w0, w1):
        g = locator.graphs.get(i)
        if g is not None:
            by_graph.setdefault(g, []).append(i)
    old = [g for g in by_graph if g.origin < w0]
    if len(old) != 1:
        return None
    graph = old[0]
    memory = graph.server.memory_management
    if memory.runs or memory.serials is not None:
        return None
    member_ids = set(by_graph[graph])
    rotating, emptied = [], []
    for g, ids in by_graph.items():
        if g is graph:
            continue
        if rotating_graph(locator, g, ids):
            rotating.append(g.origin - w0)
        elif emptied_graph(locator, g, ids, w0, w1):
            emptied.append((g.origin - w0, tuple(i - w0 for i in ids)))
            member_ids.update(ids)
        else:
            return None
    m = len(member_ids)
    if locator.entry_count() - entries_before != m + len(rotating) - removed:
        return None
    in_map = list(itertools.islice(reversed(memory.nodes), m))[::-1]
    if sorted(in_map) != sorted(member_ids):
        return None
    return graph, in_map, tuple(rotating), tuple(emptied)


def emptied_graph(locator, g, ids, w0, w1) -> bool:
    """Whether ``g``, made in the iteration (its origin one of its ids ``w0 .. w1 - 1``),
    holds no node and only entries of the iteration's ``ids`` (not its origin's), with no
    key set: a graph that merged others (their origins point at it, burn's ``merge`` does
    not move them into its key set) and was then merged into an older one. The closed
    forms keep its object and give its entries the newest iteration's ids
    (:func:`sim.engine.fastforward.replay.relabel_emptied`)."""
    memory = g.server.memory_management
    return (w0 <= g.origin < w1 and g.origin not in ids and g.entries == len(ids)
            and not memory.nodes and not memory.runs and not g.server.steps
            and g.origin not in locator.keys and g.origin not in locator.key_tables
            and g.origin not in locator.key_runs and not g.held)


class _Members(NamedTuple):
    """What :func:`_collect_members` read off an iteration's members."""

    #: each member's :class:`Member`, its order still absolute
    members: list
    #: heap block sizes the members account for
    blocks: list
    #: ids of the members a tensor holds
    tips: list
    #: ids of the members that depend on the iteration before's chain
    chain_dep: set
    #: the ids of the iteration before that members name
    via: list
    #: the storages the members' actions keep; of them, the ones from before the
    #: iteration; the L2 chunks of the iteration before's, by its storage
    tensors: list
    shared: set
    prev_chunks: dict


def _collect_members(sim, locator, graph, in_map, w0, stride, replayable, emptied=()):
    """The :class:`_Members` of the iteration's members ``in_map`` (ids ``w0`` ..
    ``w0 + stride - 1``), or None where one is not something :func:`apply_chain` builds:
    a step that is not its node's, extra references, more than one handle, a parent it
    cannot name again, or kept storages without a replayable trace."""
    server = graph.server
    memory = server.memory_management
    member_ids = set(in_map)
    w1, prev_lo = w0 + stride, w0 - stride
    keys = locator.keys.get(graph.origin, ())
    entry_of = {w0 + o: k for k, (_, ids) in enumerate(emptied) for o in ids}
    out = _Members([], [], [], set(), [], [], set(), {})
    index = {}

    def ref(pid):
        if w0 <= pid < w1:
            return ("cur", pid - w0) if pid in member_ids else None
        if prev_lo <= pid < w0:
            out.via.append(pid)
            return ("prev", pid - prev_lo)
        # a node from before the loop, found again through its graph's steps
        g = locator.graphs.get(pid)
        return ("old", pid) if g is not None and pid in g.server.steps else None

    for node_id in in_map:
        rc, parents = memory.nodes[node_id]
        step = server.steps.get(node_id)
        if step is None or step.node.id != node_id or rc.extra:
            return None
        node = step.node
        actions = None
        if step.actions is not None or node.retro is not None:
            # kept storages and retro-forwards: built from the replayed events
            if not replayable or step.cost is not None:
                return None
            if step.actions is not None:
                try:
                    # a node the actions name: G's, or one from before the iteration
                    # before (a model input's, which need not be registered anywhere)
                    actions = actions_template(
                        step.actions, w0, lambda i: i in memory.nodes or i < prev_lo,
                        out.tensors, index, sim.heap.orders_frees)
                except _Refuse:
                    return None
                actions = old_nodes(actions, w0, prev_lo)
                compare_before(step, server.steps.get(node_id - stride), index, out.shared,
                               out.prev_chunks)
        if rc.strong == 2:
            out.tips.append(node_id)
        elif rc.strong != 1:
            return None
        refs = tuple((ref(pid), is_leaf) for pid, is_leaf in parents)
        step_refs = tuple(None if p is None else ref(p.id) for p in step.parent_nodes)
        if any(r is None for r, _ in refs) or any(
                r is None or (r[0] == "old" and locator.graphs[r[1]].server.steps[r[1]].node
                              is not p)
                for r, p in zip(step_refs, step.parent_nodes) if p is not None):
            return None
        if any(r[0] == "prev" or (r[0] == "cur" and r[1] + w0 in out.chain_dep)
               for r, _ in refs):
            out.chain_dep.add(node_id)
        out.members.append(Member(node_id - w0, step.kind, step.op, step.nbytes, step.shapes,
                                  node.requirement, node.memory_bound, refs, step_refs,
                                  node.order, node_id in keys, rc.strong == 2, actions,
                                  node.retro is not None, entry_of.get(node_id)))
        blocks = out.blocks
        blocks.extend(node_blocks(sim.layout, step, parents))
        if node.retro is not None:
            blocks.append(sim.layout.retro_arc_bytes)
        if actions is not None:
            for _, _, sizes in actions.explicit + actions.backup:
                blocks.extend(sizes)
            blocks.extend(cap * vec.elem for (_, cap), vec in zip(actions.vecs,
                                                                  step.actions._vecs) if cap)
    return out


def _chain_ends(locator, collected, graph, replay):
    """``(tip ids, via id, via's order)``: the chain goes through one node of the
    iteration before, which no handle holds now, and ends in nodes tensors hold (the
    running value's newest node; with it, the RootSteps of parameters an optimizer made
    in the iteration, which the members hang off); or ``((), None, None)``: the members
    hang off nodes from before the loop only and nothing holds them (a validation forward
    of a model that requires grad: its graph keeps them until a backward), which only the
    replayed form builds. None otherwise (nodes without kept storages and no chain: the
    node runs of :mod:`sim.engine.fastforward.repeat`)."""
    tips, via = collected.tips, collected.via
    if not tips and not via:
        return ((), None, None) if replay else None
    if not tips or len(set(via)) != 1:
        return None
    via = via[0]
    memory = graph.server.memory_management
    entry = memory.nodes.get(via)
    if locator.graphs.get(via) is not graph or entry is None or entry[0].strong != 1:
        return None
    # one tip is the chain's end (its node depends on the iteration before); the others
    # are RootSteps, which depend on nothing
    ends = [t for t in tips if t in collected.chain_dep]
    if len(ends) != 1 or any(memory.nodes[t][1] for t in tips if t not in ends):
        return None
    return tuple(tips), via, graph.server.steps[via].node.order


def _sweep_templates(sweeps, gkey, before):
    """The iteration's sweeps as :class:`SweepTemplate` s (``before``: the iteration
    before's effect, if it grew the same chain), or None if one is not ``G``'s sweep."""
    templates = []
    for i, record in enumerate(sweeps):
        template = _sweep_template(record, gkey, before.sweeps[i] if before else None)
        if template is None:
            return None
        templates.append(template)
    return tuple(templates)


def _sweep_template(record, gkey, before):
    """The :class:`SweepTemplate` of one recorded sweep (``gkey``: ``id`` of ``G``'s memory
    management; ``before``: the same sweep's template one iteration earlier, or None);
    None when ``G``'s part is not the model's one live record and scan."""
    canon = {}

    def canonical(key):
        return canon.setdefault(key, len(canon))
    g_sets = [x for x in record.sets if x[5] == gkey]
    g_parts = [x for x in record.parts if x[0] == gkey]
    sets = tuple(G_KEY if x[5] == gkey
                 else (x[0], x[1], x[2], x[3], x[4], canonical(x[5]), x[6], x[7])
                 for x in record.sets)
    parts = tuple(G_KEY if x[0] == gkey else (None, x[1]) for x in record.parts)
    passes = nodes = referenced = 0
    spacing = 0.0
    if g_sets or g_parts:
        if len(g_sets) != 1 or len(g_parts) != 1:
            return None
        kind, passes, nodes, referenced, _, _, per_node, spacing = g_sets[0]
        if (kind != 0 or per_node != 1 or referenced < 1
                or g_parts[0][1] != passes * _scan_length(nodes, referenced)):
            return None
    deltas = None
    if before is not None:
        deltas = (record.entries - before.entries, record.visits - before.visits,
                  passes - before.passes, nodes - before.nodes)
    return SweepTemplate(sets, parts, record.entries, record.visits, record.freed, passes,
                         nodes, referenced, deltas, spacing)


# -- applying it --------------------------------------------------------------------------

def chain_horizon(sim, effect) -> int:
    """Iterations of ``effect`` that can be built before one of ``G``'s tables (steps,
    actions, nodes, the origin's key set) would resize, with a margin of one iteration
    (the merge of an iteration reserves before it inserts); 0 when the probes did not
    show how the iteration's sweeps change from one to the next. Members that hang off
    older nodes only add leaves every iteration (``G``'s leaves table must not resize
    either), and kept storages whose chunks join an L2 model's LRU must not make it
    evict, unless all it evicts is dead (:func:`sim.engine.fastforward.keptchain.l2_rotates`)."""
    m = len(effect.members)
    # each member gains an entry in G, but those whose entries an emptied graph holds,
    # less the iteration before's entries the sweep removed
    entries = sum(1 for member in effect.members if member.emptied is None)
    if (effect.growth != (entries - len(effect.dropped), m) or effect.tree_ops is None
            or effect.leaf_growth is None
            or any(t.deltas is None for t in effect.sweeps)
            or any(t.d_visited is None for t in effect.passes)):
        return 0
    locator = sim.client.locator
    graph = effect.graph
    last = sim._next_id - effect.stride
    tip = effect.tip_offset
    if locator is None or (tip is not None and (
            locator.graphs.get(last + tip) is not graph
            or last + tip not in graph.server.memory_management.leaves)):
        return 0
    server = graph.server
    memory = server.memory_management
    keyed = sum(member.keyed for member in effect.members)
    steps = len(server.steps) + memory.run_nodes
    # the steps grow by the members less the steps of the iteration before's the
    # iteration consumed; a margin of one iteration's members (as the nodes' below)
    grown = m - len(effect.consumed)
    room = _room(sim, effect)
    nodes = max((memory.nodes_table.cap - memory.node_count()) // m - 1, room["nodes"])
    # the tables a batch may grow (_crossings), or else must not
    crossed = [max((server.steps_table.cap - steps - m) // grown, room["steps"]),
               max((server.actions_table.cap - steps - m) // grown, room["actions"])]
    slack = []
    (crossed if "nodes" in _crossed(effect) else slack).append(nodes)
    if effect.passes and memory.statuses_table is not None:
        # the passes' statuses table takes every node a backward reaches: at most G's
        # nodes then (those of the iterations before, m more each) and the iteration's
        # own that are not members; it must not grow in a skipped iteration (an insert
        # reserves a slot first: a table holding ``cap`` items grows)
        crossed.append(max((memory.statuses_table.cap - 1 - memory.node_count()
                            - (effect.stride - m)) // m + 1, room["statuses"]))
    counts = getattr(memory, "child_counts", None)     # drop-release's children table
    if counts is not None:
        slack.append((memory.children_table.cap - len(counts)) // m - 1)
    if keyed:
        table = locator.key_tables.get(graph.origin)
        if table is None:
            return 0
        crossed.append(max((table.cap - locator._key_count(graph.origin)) // keyed - 1,
                           room["keys"]))
    peak = _leaves_peak(effect, memory)
    if peak > memory.leaves_table.cap:
        return 0
    if effect.leaf_growth:
        slack.append((memory.leaves_table.cap - peak) // effect.leaf_growth)
    for kind, tail, free, _, nbytes, _ in effect.l2:
        if nbytes and not l2_rotates(sim, kind, tail, free, nbytes):
            cache = sim._backends[kind].cache
            slack.append((cache.capacity - cache.resident) // nbytes - 1)
    # (no table outside the crossings: as many as the crossings allow)
    fixed = max(0, min(slack, default=1 << 30))
    # the iterations the margins keep every table of CROSSED from growing in
    effect.margins = (sim._next_id, max(0, min(crossed)))
    cross = _crossings(sim, effect, fixed)
    return min(fixed, effect.margins[1] if cross is None else cross[0])


# -- the tables' room, as the exact iterations between batches showed it ----------------

def table_sizes(sim, graph) -> tuple:
    """``(table, block bytes)`` of the tables of ``graph`` (a chain's ``G``, or None: none)
    that a chain iteration may grow (:func:`_tables`)."""
    if graph is None or getattr(graph, "server", None) is None:
        return ()
    return tuple((table, table.nbytes) for _, table, _ in _tables(sim, graph))


def _growth_spans(trace, sizes):
    """The spans of ``trace`` in which the tables of ``sizes`` (:func:`table_sizes` before
    the iteration) grew by one doubling each: a new block then the old one freed, next to
    each other (:class:`~sim.platform.hashbrown.RawTable`); None where a table grew
    otherwise, or its pair of events is not found exactly once."""
    spans = []
    pairs = None
    for table, old in sizes:
        if table.nbytes == old:
            continue
        if not old or table.nbytes != table.layout.block_bytes(table.buckets) or (
                old != table.layout.block_bytes(table.buckets // 2)):
            return None
        if pairs is None:
            # every alloc followed by a free, by their sizes (one pass for all tables)
            pairs = {}
            for i, (a, b) in enumerate(zip(trace, trace[1:])):
                if a[0] == ALLOC and b[0] == FREE:
                    pairs.setdefault((a[1], b[1]), []).append(i)
        at = pairs.get((table.nbytes, old), ())
        if len(at) != 1:
            return None
        spans.append((at[0], at[0] + 2))
    return spans


def _tables(sim, graph) -> list:
    """The tables of ``graph`` (a chain's ``G``) a skipped iteration must not grow, each
    ``(name, table, count)``: ``count`` is what the iteration's growth of the table is
    measured against (the ``statuses`` table, which a backward fills with the nodes it
    reaches, against ``G``'s nodes)."""
    server = graph.server
    memory = server.memory_management
    steps = len(server.steps) + memory.run_nodes
    nodes = memory.node_count()
    out = [("steps", server.steps_table, steps), ("actions", server.actions_table, steps),
           ("nodes", memory.nodes_table, nodes)]
    if memory.statuses_table is not None:
        out.append(("statuses", memory.statuses_table, nodes))
    locator = sim.client.locator
    table = locator.key_tables.get(graph.origin)
    if table is not None:
        out.append(("keys", table, locator._key_count(graph.origin)))
    return out


def watch_tables(sim, effect):
    """What :func:`note_tables` compares after an exact iteration run while ``effect``
    holds (None: not a chain)."""
    if effect.shape != "chain":
        return None
    return watch_graph(sim, effect.graph)


def watch_graph(sim, graph):
    """:func:`watch_tables` of a chain's graph ``G`` before an effect holds (a probed
    iteration: what it shows counts once the probes agree on a chain growing ``G``).
    ``G``'s tables and the orphan sweeps are tapped (:class:`TableWatch`) until
    :func:`note_tables` or :func:`unwatch`."""
    if graph is None or getattr(graph, "server", None) is None:
        return None
    nodes = graph.server.memory_management.nodes_table
    rows = [(name, table, table.cap, count) for name, table, count in _tables(sim, graph)]
    watch = TableWatch(sim.timing, [table for _, table, _, _ in rows], nodes)
    return rows, (nodes.nbytes, sim._next_id,
                  _settled_state(graph.server.memory_management)), watch


def unwatch(watched) -> None:
    """Untap what :func:`watch_graph` tapped (``watched``: what it returned, or None)."""
    if watched is not None:
        watched[2].close()


class TableWatch(TableTap):
    """Fast-forward's tap on ``G``'s tables (:attr:`~sim.platform.hashbrown.RawTable.tap`)
    and on the orphan sweeps (:attr:`~sim.platform.timing.Timing.tap`) while it watches an
    iteration: the most items each table was asked room for (``high``: table -> items),
    the sweeps charged (``sweeps``), the graphs the latest one read (``sets``) and how
    high the ``nodes`` table's count had gone before it (``at_sweep``). A tap set before
    (a loop inside the watched iteration's loop) is told everything too, and set back by
    :meth:`close`."""

    __slots__ = ("high", "nodes", "sweeps", "sets", "at_sweep", "_outer", "_timing",
                 "_timing_outer")

    def __init__(self, timing, tables, nodes):
        self.high = {}
        self.nodes = nodes
        self.sweeps = 0
        self.sets = ()
        self.at_sweep = 0
        self._outer = {}
        for table in tables:
            if table not in self._outer:
                self._outer[table] = table.tap
                table.tap = self
        self._timing, self._timing_outer = timing, timing.tap
        timing.tap = self

    def asked(self, table, items) -> None:
        if items > self.high.get(table, 0):
            self.high[table] = items
        outer = self._outer.get(table)
        if outer is not None:
            outer.asked(table, items)

    def swept(self, sets) -> None:
        self.sweeps += 1
        self.sets = sets
        self.at_sweep = self.high.get(self.nodes, 0)
        if self._timing_outer is not None:
            self._timing_outer.swept(sets)

    def close(self) -> None:
        """Set back the taps this one replaced (once)."""
        if self._timing is None:
            return
        for table, outer in self._outer.items():
            if table.tap is self:
                table.tap = outer
        if self._timing.tap is self:
            self._timing.tap = self._timing_outer
        self._timing = None


def _settled_state(memory):
    """What :func:`_settle_pattern` reads of ``memory``'s index of settled nodes (None:
    no index)."""
    settled = memory.settled
    if settled is None or type(memory.nodes) is not dict:
        return None
    return (list(settled.outside), set(settled.tops), len(settled.ids),
            frozenset(settled.filtered), len(memory.nodes))


def _settle_pattern(state, first_id, effect):
    """``(tops, filtered)`` where ``G``'s index of settled nodes (``state``:
    :func:`_settled_state`) holds every node but the members of the iteration whose
    first id is ``first_id``, which are its outside nodes in the order they were
    registered, its tops given relative to ``first_id`` (within one iteration of it);
    None otherwise."""
    if state is None:
        return None
    outside, tops, settled, filtered, nodes = state
    ids = [first_id + m.offset for m in effect.members]
    stride = effect.stride
    if outside != ids or settled + len(ids) != nodes:
        return None
    rel = tuple(sorted(t - first_id for t in tops))
    if any(not -stride <= r < stride for r in rel):
        return None
    return rel, filtered


def note_tables(sim, effect, before) -> None:
    """After an exact iteration run while ``effect`` holds (``before``:
    :func:`watch_tables` from before it): how high each of ``G``'s tables' count rose
    above its first in the iteration (what its calls asked room for, :class:`TableWatch`,
    checked against whether the table grew: a table that did not grow held every count
    the iteration reached). The iterations repeat, so that rise, and the count's growth,
    hold for every later one (:func:`_room`, :func:`_crossings`); a table whose growth
    or rise differed from one iteration to another is not read again. Per table
    ``[growth, most, least, whether each growth was one doubling]``, the most and least
    rise being the one seen (None: not seen yet)."""
    if before is None:
        return
    before, mark, watch = before
    watch.close()
    room = dict(effect.room or {})
    after = {name: (table, count) for name, table, count in _tables(sim, effect.graph)}
    _note_sweep(effect, before, mark[0], watch, room)
    _note_settled(sim, effect, mark[1], mark[2])
    for name, table, cap, count in before:
        now = after.get(name)
        known = room.get(name)
        if now is None or now[0] is not table or known is False or (
                known is not None and known[0] != now[1] - count):
            room[name] = False
            continue
        most, least, doubles = (None, None, True) if known is None else known[1:]
        # the count at its highest (what its calls asked room for: TableWatch): both bounds
        rise = watch.high.get(table, 0) - count
        if (table.cap == cap) != (rise <= cap - count):
            # grown otherwise than by its highest count (dropped and made again)
            room[name] = False
            continue
        if (most is not None and most != rise) or (least is not None and least != rise):
            room[name] = False       # the iterations rise differently: not read again
            continue
        most = least = rise
        if table.cap != cap:
            doubles = doubles and table.cap == capacity_of(buckets_for(cap + 1))
        room[name] = (now[1] - count, most, least, doubles)
    effect.room = room


def _note_settled(sim, effect, next_id, state) -> None:
    """:func:`note_tables` of ``G``'s index of settled nodes: the iteration found it and
    left it as :func:`_settle_pattern` describes, the same relative to the iteration
    before and to itself (``next_id``, ``state``: the first id and the index before the
    iteration), so each skipped iteration settles the members of the one before as
    exact mode's backward does (:func:`_settle_batch`)."""
    if effect.settles is False:
        return
    stride = effect.stride
    before = _settle_pattern(state, next_id - stride, effect)
    after = _settle_pattern(_settled_state(effect.graph.server.memory_management),
                            sim._next_id - stride, effect)
    if before is None or before != after or (
            effect.settles is not None and effect.settles != after):
        effect.settles = False
        return
    effect.settles = after


def _settle_batch(memory, effect, last, count) -> None:
    """``G``'s index of settled nodes after ``count`` skipped iterations, as their
    backwards leave it (:attr:`ChainEffect.settles`; at the batch's start the index had the
    pattern relative to ``last``, the first id of the last exact iteration): every member settled but the newest iteration's, which are its
    outside nodes, and its tops moved on by the batch's ids. The next exact backward then
    walks only the newest iteration's members, as after an exact iteration."""
    settled = memory.settled
    newest = last + count * effect.stride
    keep = [newest + m.offset for m in effect.members]
    if settled is None or len(settled.outside) != (count + 1) * len(keep):
        raise AssertionError("chain fast-forward: G's index of settled nodes changed in "
                             "a batch")
    kept = set(keep)
    outside = settled.outside
    settled.ids.update(outside.keys() - kept)
    settled.outside = {k: None for k in outside if k in kept}
    settled.tops = {newest + r for r in effect.settles[0]}
    if list(settled.outside) != keep:
        raise AssertionError("chain fast-forward: the newest members registered in "
                             "another order")


def _note_sweep(effect, before, nbytes, watch, room) -> None:
    """:func:`note_tables` of where ``G``'s ``nodes`` table grew against the iteration's one
    sweep (``mark``: the sweeps charged and the table's bytes before the iteration): the
    sweep read the table's old size where the iteration's highest count before it
    stayed within the room the table had, the new one where it passed it (``nbytes``:
    the table's bytes before the iteration; ``watch``: its :class:`TableWatch`). That
    count's rise above the iteration's first, the same in every iteration noted:
    ``room["nodes_pre"] = rise`` (False: not one sweep reading ``G``, or a rise that
    varies)."""
    known = room.get("nodes_pre")
    if known is False:
        return
    high = watch.at_sweep
    memory = effect.graph.server.memory_management
    at_sweep = [rec[4] for rec in watch.sets if rec[0] == 0 and rec[5] == id(memory)]
    row = [(cap, count) for name, _, cap, count in before if name == "nodes"]
    if watch.sweeps != 1 or len(at_sweep) != 1 or not row or not nbytes:
        room["nodes_pre"] = False
        return
    cap, count = row[0]
    # the table's count at its highest before the sweep (TableWatch.at_sweep)
    rise = high - count
    if (at_sweep[0] == nbytes) != (rise <= cap - count):
        # grown otherwise than by its highest count (dropped and made again): not read
        room["nodes_pre"] = False
        return
    if known is not None and known != rise:
        room["nodes_pre"] = False
        return
    room["nodes_pre"] = rise


#: ``G``'s tables a batch may grow in a skipped iteration (:func:`_crossings`): only heap
#: blocks change (the time model reads none of them; the ``nodes`` table's size is a term
#: of every sweep, the ``leaves`` table's of every backward's passes); the ``nodes``
#: table too where the iteration has one sweep and where the table grows against it is
#: known (:func:`_crossed`)
CROSSED = ("steps", "actions", "statuses", "keys")


def _crossed(effect) -> tuple:
    """The tables of ``G`` a batch of ``effect`` may grow: :data:`CROSSED`, and ``nodes``
    where the iteration's one sweep reads ``G`` and the exact iterations bounded the
    count the table reaches before it (:func:`_note_sweep`; the batch's sweeps then read
    the size it has then, :func:`apply_chain`)."""
    pre = (effect.room or {}).get("nodes_pre")
    if (len(effect.sweeps) == 1 and effect.sweeps[0].referenced
            and G_KEY in effect.sweeps[0].sets and type(pre) is int):
        return CROSSED + ("nodes",)
    return CROSSED


def _heap_growth(effect):
    """``(bytes, {zone: bytes})`` the heap and each counting zone gain an iteration of a
    replayed chain whose events are all runs of counted sizes (no block placed on its
    own: a LARGE one), read off its replay plan; None otherwise (or before its first
    replay)."""
    if effect.trace is None or effect.arena is not None or effect.plan is None:
        return None
    plan = effect.plan[1]
    if any(type(step) is not tuple for step in plan):
        return None
    total, zones = 0, Counter()
    for nbytes, _, _, _, parts in plan:
        total += nbytes
        for zone, delta, _ in parts:
            zones[zone] += delta
    return total, zones


def _crossings(sim, effect, count):
    """``(iterations, {iteration: tables})``: how many of the next ``count`` iterations a
    batch may build while the tables of :data:`CROSSED` grow in some of them, and in
    which (1 = the first skipped) each grows, by one doubling, as exact mode grows it;
    None where the bounds are not known yet, or the chain is not replayed from events
    counted by size (the margins of :func:`chain_horizon` then keep every table as it is).

    A table grows in iteration ``i`` when its count then, ``count + (i - 1) * growth``,
    plus the most the iteration rises above it passes ``cap`` (:func:`note_tables`: the
    rise each exact iteration read off the table's highest count); where the rise is not
    known yet the batch ends before. The growth is a new block and the old
    one freed (:class:`~sim.platform.hashbrown.RawTable`), made at the iteration's start
    instead of at the insert that asked for it: every other event of the iteration is
    counted by size (:func:`_heap_growth`), so only the heap's peak and the zones'
    high-water marks could tell, and they cannot when the iterations after it in the run
    (the batch's and the exact one after it) gain at least the old block's bytes, in the
    heap and in its zone, before they reach their own highest point, which is then above
    both orders' (the batch ends before a growth too close to its end)."""
    room = effect.room or {}
    growth = _heap_growth(effect)
    crossed = _crossed(effect)
    tables = [(name, table, c) for name, table, c in _tables(sim, effect.graph)
              if name in crossed]
    if growth is None or not tables or deferrable(sim, effect, effect.graph):
        return None
    # the margins of chain_horizon keep them from growing in the first iterations
    at, safe = effect.margins or (None, 0)
    safe = safe if at == sim._next_id else 0
    limit, grows, before_sweep = count, {}, {}
    for name, table, c in tables:
        known = room.get(name)
        if not known or known[1] is None or not known[3]:
            return None
        grown, most, least, _ = known
        least = max(grown, least or 0)
        cap, buckets = table.cap, table.buckets
        i = 1
        while i <= limit:
            if grown <= 0:
                if c + most > cap:
                    limit = i - 1
                break
            # the first iteration that may not fit
            i = max(i, safe + 1, (cap - c - most) // grown + 2)
            if i > limit:
                break
            start = c + (i - 1) * grown
            doubled = buckets_for(cap + 1)
            if start + least <= cap or start + most > capacity_of(doubled):
                limit = i - 1       # open, or more than one doubling
                break
            if name == "nodes":
                # which size the iteration's sweep reads: the new one where the count
                # before it passes the room
                before_sweep[i] = start + room["nodes_pre"] > cap
            grows.setdefault(i, []).append((name, table, table.layout.block_bytes(buckets),
                                            table.layout.block_bytes(doubled)))
            cap, buckets = capacity_of(doubled), doubled
            i += 1
    limit = max(limit, min(safe, count))
    # the peak: the iterations after a growth must gain its old blocks' bytes
    total, zones = growth
    small = sim.heap._small
    for i in sorted(grows):
        if i > limit:
            break
        after = limit - i + 1
        old, new = Counter(), set()
        for _, _, nbytes, grown_bytes in grows[i]:
            hit = small.get(nbytes)
            if hit is not None:
                old[hit[0]] += hit[1]
            hit = small.get(grown_bytes)
            if hit is not None:
                new.add(hit[0])
        need = sum(grow[2] for grow in grows[i])
        if (after * total < need or any(after * zones[z] < b for z, b in old.items())
                or any(zones[z] < 0 for z in new)):
            limit = i - 1
            break
    return (limit, {i: [grow[:2] for grow in v] for i, v in grows.items() if i <= limit},
            before_sweep)


def _grown_caps(sim, effect, grows) -> list:
    """``(table, cap)`` of each of :data:`CROSSED` after a batch that grows them where
    ``grows`` says (:func:`_crossings`), once each time."""
    times = Counter(id(table) for tables in grows.values() for _, table in tables)
    out = []
    crossed = _crossed(effect)
    for name, table, _ in _tables(sim, effect.graph):
        if name in crossed:
            cap = table.cap
            for _ in range(times[id(table)]):
                cap = capacity_of(buckets_for(cap + 1))
            out.append((table, cap))
    return out


def _room(sim, effect) -> dict:
    """Skipped iterations each of ``G``'s tables has room for, by what the exact
    iterations showed (:func:`note_tables`): iteration ``i`` from now starts at ``count +
    i * grown`` and reaches at most ``bound`` more, which must stay within ``cap``; 0
    where nothing is known (the margins of :func:`chain_horizon` then decide)."""
    room = effect.room or {}
    out = dict.fromkeys(("steps", "actions", "nodes", "statuses", "keys"), 0)
    for name, table, count in _tables(sim, effect.graph):
        known = room.get(name)
        if not known or known[1] is None:
            continue
        grown, bound = known[:2]
        left = table.cap - count - bound
        if left < 0:
            continue
        out[name] = left // grown + 1 if grown > 0 else float("inf")
    return out


def _leaves_peak(effect, memory) -> int:
    """The most leaves ``G`` holds while one iteration's members are registered one by one
    (:func:`sim.engine.fastforward.keptchain.build_members`): each takes its parents out of the leaves (the chain's node of the
    iteration before is one; a parent from before the loop counts as none, which can only
    overestimate) and goes in itself."""
    count = len(memory.leaves) + memory.run_nodes
    leaves = {effect.via}
    peak = count
    for member in effect.members:
        for ref, _ in member.parents:
            if ref in leaves:
                leaves.discard(ref)
                count -= 1
        leaves.add(("cur", member.offset))
        count += 1
        peak = max(peak, count)
    return peak


def apply_chain(sim, effect, count, replay=None) -> int:
    """``count`` iterations of ``effect``, right after an iteration like it; returns the
    iterations applied (0 when the state no longer matches the effect). ``replay``:
    :func:`sim.engine.fastforward.repeat._replay_drift`, for a chain whose events are replayed (its
    members keep storages), which places an iteration's heap events and returns the kept
    blocks by position. Where the members need not be objects yet
    (:func:`sim.engine.fastforward.keptchain.deferrable`: members that hang off older nodes
    and keep storages in an L2 model's LRU, the forwards of an inference loop), they stay
    a run of ``G``'s maps (:func:`sim.engine.fastforward.keptchain.defer_members`)."""
    locator = sim.client.locator
    graph = effect.graph
    stride = effect.stride
    last = sim._next_id - stride          # the first id of the iteration just run
    if count <= 0 or not _rotating_ok(sim, effect, last):
        return 0
    server = graph.server
    if any(last + m.offset not in server.steps for m in effect.members):
        # the iteration just run did not leave the probed one's members as steps of G: a
        # nested loop inside it was fast-forwarded this time as a run of nodes (held
        # outside G's maps), where it ran exactly when the chain was probed
        return 0
    memory = server.memory_management
    replayed = effect.trace is not None
    if replayed:
        slots = kept_slots(effect, graph, last)
        if not slots:
            return 0
        if effect.l2:
            # the LRUs grow by the kept chunks; a full one evicts dead chunks only
            if not l2_ready(sim, effect):
                return 0
            depth = -1
        else:
            depth = max((j for j, b in enumerate(slots) if _resident(b)), default=-1)
            if depth >= len(slots) - 1:
                return 0    # an older member's storages may still be in the L2 model's LRU
        tips = [i for i, k in enumerate(effect.kept) if type(k) is not tuple and k.tip]
        if any(slots[0][t].holders <= effect.kept[t].refs for t in tips):
            return 0
        if len(tips) > 1 and not effect.l2:
            return 0
        clones = []
    trees = (locator.graphs_tree, locator.keys_tree)
    timing = sim.timing
    heap = sim.heap
    prev = {m.offset: server.steps[last + m.offset].node for m in effect.members}
    tip_nodes = {o: prev[o] for o in effect.tip_offsets}
    via_offset = None if effect.via is None else effect.via[1]
    built = []
    work_ps, compute, book, _ = effect.times
    # members left unbuilt in a run of G's maps, past a first iteration that checks the
    # builder against the iteration's blocks
    deferred = replayed and deferrable(sim, effect, graph)
    # G's tables that grow in the batch, and where (none where _crossings cannot tell)
    cross = _crossings(sim, effect, count)
    grows, before_sweep = {}, {}
    if cross is not None:
        count, grows, before_sweep = cross
        if count <= 0:
            return 0
    expected = _grown_caps(sim, effect, grows)
    # G's settled nodes as an exact iteration leaves them: the batch settles its members
    settles = (effect.settles and not deferred
               and _settle_pattern(_settled_state(memory), last, effect) == effect.settles)
    # the batch's sweeps, each iteration's in the template's order
    first_j = (last + stride - effect.first_id) // stride
    sizes = _nodes_sizes(memory.nodes_table, grows, before_sweep, count)
    sweeps = list(zip(*[_sweeps_ns(sim, template, first_j, count, sizes)
                        for template in effect.sweeps])) or [()] * count
    built_count = count
    if deferred:
        built_count = 0 if effect.checked else 1
    # the LRUs advanced over the built iterations at once (advance_l2: the horizon let
    # them evict dead chunks only, l2_rotates), each new storage given its chunk after
    l2_from = ([None if b is None else b.chunk for b in slots[0]]
               if replayed and effect.l2 and built_count else None)
    for i in range(1, built_count + 1):
        start = last + i * stride
        j = (start - effect.first_id) // stride
        for _, table in grows.get(i, ()):
            table.grow_to(table.cap + 1)       # a new block, the old one freed
            sim.chain_grown += 1
        for ns in sweeps[i - 1]:
            timing.cleanup_ns += ns
            sim.charge(ns)
        for template in effect.passes:
            timing.free_unavailable(template.visited + j * template.d_visited,
                                    template.pop_groups)
        if replayed:
            prev = build_replayed(sim, effect, graph, start, prev, via_offset, built,
                                  replay, clones, slots[0], l2_from is None)
        else:
            allocs = heap.allocs
            prev = build_members(sim, effect, graph, start, prev, via_offset, built)
            # the iteration's transients, which the members' build does not make
            heap.allocs += effect.outside - (heap.allocs - allocs)
        if effect.arena is None:     # on an arena the replay made them among its events
            _replay_tree_ops(trees, effect, start, heap)
        sim.current.pending_ps += work_ps
        sim.work_ps += work_ps
        if not i & 1023:
            sim.ff_progress = (i, count)
            sim._check_limits()      # a long batch builds many nodes: the budget holds
    sim.ff_progress = None
    if l2_from is not None:
        for buffers, chunks in zip(clones, advance_l2(sim, effect, l2_from, built_count)):
            for at, chunk in chunks:
                buffers[at].chunk = chunk
    if expected != [(t, t.cap) for t, _ in expected]:
        raise AssertionError("chain fast-forward: one of G's tables grew where the batch "
                             "did not grow it")
    if count > built_count:
        first = last + built_count * stride
        defer_members(sim, effect, graph, first, count - built_count, replay,
                      clones[-1] if clones else slots[0], trees)
        sim.current.pending_ps += work_ps * (count - built_count)
        sim.work_ps += work_ps * (count - built_count)
    timing.compute_ns += compute * count
    timing.bookkeeping_ns += book * count
    if replayed:
        def repoint(old, new, newest):
            base = last + count * stride if newest else last
            repoint_members(effect, server, base, old, new)
        if not effect.l2:
            hand_over(slots, clones, depth, tips[0] if tips else None, repoint)
        else:
            # a storage a module holds is the newest iteration's: its object takes the
            # newest block and chunk (each skipped iteration gave its own storage its chunk)
            for tip in tips:
                held, newest_kept = slots[0][tip], clones[-1][tip]
                swap_tip(held, newest_kept, repoint)
                held.chunk, newest_kept.chunk = newest_kept.chunk, held.chunk
    relabel_rotating(locator, effect, last, last + count * stride)
    relabel_emptied(locator, effect, last, last + count * stride)
    if tip_nodes:
        # the steps that name a tip or its newest counterpart as a parent: the first
        # skipped iteration's (through the chain), and the last exact and newest
        # iterations' own (a parameter's RootStep and the members that hang off it)
        near = built[:len(effect.members)] + built[-len(effect.members):]
        near += [server.steps[last + m.offset] for m in effect.members
                 if last + m.offset in server.steps]
        _swap_tips(server, memory, [(tip_nodes[o], prev[o]) for o in effect.tip_offsets],
                   near)
    if settles:
        _settle_batch(memory, effect, last, count)
    sim._next_id += stride * count
    sim.registered += effect.registered * count
    sim.backwards += effect.backwards * count
    if effect.faults[1]:
        sim.page_fault(effect.faults[1] * count, True)
    sim.chain_applied += count
    sim._check_limits()
    return count


def _replay_tree_ops(trees, effect, start, heap) -> None:
    """The BTreeMap operations of the iteration whose first id is ``start``, and the
    allocation calls of its orphan sweeps' clones of the map between them: one per node of
    the map as the operations before the clone left it (the clone's blocks are a
    transient the closed forms do not place). A map that is one root leaf and holds the
    iteration's keys without overflowing takes its inserts and removals on its keys alone
    (:meth:`~sim.platform.btree.BTreeNodes.churn_root_leaf`: no node or heap event, so
    the other map's operations stay in their order); the other map's are replayed."""
    plan = effect.tree_plan
    if plan is None:
        plan = effect.tree_plan = _tree_plan(effect)
    segments = plan[0]
    for tree, changes, without in plan[1]:
        if trees[tree].churn_root_leaf(changes, start):
            segments = without
            break
    for ops, clone in segments:
        replay_tree_ops(trees, ops, start)
        if clone is not None:
            heap.allocs += trees[clone].leaves + trees[clone].internals


def _tree_plan(effect) -> tuple:
    """How :func:`_replay_tree_ops` replays ``effect``'s BTreeMap operations: ``(segments,
    churns)``; a segment is ``(operations, the map cloned after them or None)``, split at
    the clones that allocate, each run of inserts into one map as one operation
    (:func:`~sim.engine.fastforward.replay.group_inserts`); a churn ``(map, its
    (inserted, key) pairs, the segments without its operations)`` for each map whose
    operations are inserts and removals of single keys (its empty ``remove_many`` s
    aside: they change nothing)."""
    ops = effect.tree_ops

    def split(keep):
        segments, part, done = [], [], 0
        for at, tree, made in effect.clone_at:
            part.extend(op for op in ops[done:at] if keep(op))
            done = at
            if made:
                segments.append((group_inserts(part), tree))
                part = []
        part.extend(op for op in ops[done:] if keep(op))
        segments.append((group_inserts(part), None))
        return tuple(segments)

    churns = []
    for tree in sorted({op[0] for op in ops}):
        mine = [op for op in ops if op[0] == tree]
        if any(kind == "remove_many" and key for _, kind, key in mine):
            continue
        changes = tuple((kind == "insert", key) for _, kind, key in mine
                        if kind != "remove_many")
        churns.append((tree, changes, split(lambda op, tree=tree: op[0] != tree)))
    return split(lambda op: True), tuple(churns)


def _rotating_ok(sim, effect, last) -> bool:
    """The iteration just run left the same one-node graphs as the probed one."""
    locator = sim.client.locator
    for offset in effect.rotating:
        g = locator.graphs.get(last + offset)
        if (g is None or g.origin != last + offset or g.entries != 1
                or len(g.server.memory_management.nodes) != 1):
            return False
    return True


def _nodes_sizes(table, grows, before_sweep, count):
    """The bytes of ``G``'s ``nodes`` table (``table``) each of the batch's ``count``
    iterations' sweep reads: its size now, and after each growth the batch makes
    (``grows``, by iteration) from that iteration's sweep where it came before it
    (``before_sweep``), else from the next one's (:func:`_crossings`)."""
    layout = table.layout
    buckets = table.buckets
    size = layout.block_bytes(buckets) if buckets else 0
    changes = sorted(i for i, tables in grows.items()
                     if any(t is table for _, t in tables))
    if not changes:
        return size
    sizes = np.empty(count, dtype=np.int64)
    at = 0
    for i in changes:
        switch = i - 1 if before_sweep[i] else i     # index of the first sweep after it
        sizes[at:switch] = size
        at = switch
        buckets = buckets_for(capacity_of(buckets) + 1)
        size = layout.block_bytes(buckets)
    sizes[at:] = size
    return sizes


def _sweeps_ns(sim, template, first, count, table_bytes) -> list:
    """ns of the sweeps of ``count`` iterations, the first ``first`` iterations after the
    probed one: the template's counts advanced by ``j`` times their change per iteration,
    ``G``'s record and scan at its passes and nodes then, its ``nodes`` table's bytes
    ``table_bytes`` (one number, or one per iteration: :func:`_nodes_sizes`). All at once
    (:meth:`~sim.platform.timing.Timing.sweep_ns_many`, each equal to the one sweep's
    :meth:`~sim.platform.timing.Timing.sweep_ns`), or one by one where the model reads
    the data TLB."""
    timing = sim.timing
    d_entries, d_visits, d_passes, d_nodes = template.deltas
    js = np.arange(first, first + count, dtype=np.int64)
    entries = template.entries + js * d_entries
    visits = template.visits + js * d_visits
    sets, parts = template.sets, template.parts
    if template.referenced:
        passes = template.passes + js * d_passes
        n = template.nodes + js * d_nodes
        r = template.referenced
        g_set = (0, passes, n, r, table_bytes, G_KEY, 1, template.spacing)
        sets = [g_set if x == G_KEY else x for x in sets]
        # passes * _scan_length(n, r), r > 0
        parts = [(G_KEY, passes * ((n + 1) / (r + 1))) if x == G_KEY else x for x in parts]
    scanned = 0.0
    for _, value in parts:
        scanned = scanned + value
    scanned = np.broadcast_to(np.asarray(scanned, dtype=float), (count,))
    out = timing.sweep_ns_many(entries, visits, scanned, template.freed, list(sets))
    if out is not None:
        return out
    out = []
    for i in range(count):
        one = [tuple(f[i].item() if isinstance(f, np.ndarray) else f for f in x) for x in sets]
        out.append(timing.sweep_ns(int(entries[i]), int(visits[i]), float(scanned[i]),
                                   template.freed, one))
    return out


_NODE_FIELDS = ("id", "parents", "order", "requirement", "memory_bound", "retro", "_nbytes",
                "_block")


def _swap_tips(server, memory, pairs, steps) -> None:
    """Each of the chain's nodes a tensor holds (``(tip, newest)`` in ``pairs``: the last
    exact iteration's node and the newest member in its place) becomes the newest member,
    and the object built for the newest member takes the tip's old place; ``steps`` (those
    that may name either as a parent) name them in their new places."""
    swapped = {}
    for tip, newest in pairs:
        old_id, new_id = tip.id, newest.id
        for field in _NODE_FIELDS:
            a, b = getattr(tip, field), getattr(newest, field)
            setattr(tip, field, b)
            setattr(newest, field, a)
        old_rc, old_parents = memory.nodes[old_id]
        new_rc, new_parents = memory.nodes[new_id]
        old_rc.id, new_rc.id = new_id, old_id
        memory.nodes[old_id] = (new_rc, old_parents)
        memory.nodes[new_id] = (old_rc, new_parents)
        server.sim.timing.keys_moved(memory)
        for node_id, node in ((old_id, newest), (new_id, tip)):
            step = server.steps.get(node_id)
            if step is not None:
                step.node = node
        swapped[id(tip)], swapped[id(newest)] = newest, tip
    seen = set()
    for step in steps:
        if id(step) in seen or step.parent_nodes is None:
            continue
        seen.add(id(step))
        if any(p is not None and id(p) in swapped for p in step.parent_nodes):
            step.parent_nodes = tuple(p if p is None else swapped.get(id(p), p)
                                      for p in step.parent_nodes)
