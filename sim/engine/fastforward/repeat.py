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
    one or several nodes per iteration, each dead and alone in a new graph (untracked
    ops whose outputs were dropped: an add, or an add, a scale and an exp in a row): a
    :class:`~sim.burn.graph.runs.NodeRun` of single-node graphs whose members' blocks
    repeat with a period of the iteration's graphs; the locator's BTreeMaps take the
    ids in closed form.
``steady``
    the iteration registers and frees (a training step: forward, backward, optimizer,
    sweep) and leaves the bookkeeping exactly as it found it: same heap bytes and
    blocks, same allocator state, same BTreeMap nodes and locator entries. Node
    ids and counters advance; nothing else can tell the iterations apart. On a glibc
    arena, whose placement does not come back (see :mod:`sim.engine.fastforward.tape`),
    the iterations' templates must be equal instead (every heap event in order, each
    free naming the allocation it frees, of this iteration or a few back; the BTreeMap
    operations with keys relative to the iteration): the skipped iterations' events are
    replayed through the arena (:meth:`~sim.platform.ptmalloc.PtmallocArena.replay`:
    placement, top, break, trims and page faults as exact mode gives them) and the
    handles the live objects hold are rebound to the chunks the replay gave them. Each
    exact iteration after a replay is probed again and must have the same template.
``drift``
    like ``steady``, but the allocator does not end where it began: a transient grows
    by the same bytes every iteration (the tape of a chain whose nodes' orders grow,
    one level per step; a bulk count of blocks with it), or the LARGE placement moves.
    The iteration's heap events, recorded in order, must be those of the iteration
    before but for sizes and counts that grew by a constant step, each balanced within
    the iteration. The skipped iterations replay those events through the heap at the
    sizes they reach (placement, high-water marks and page faults as exact mode gives
    them, at a fraction of an iteration's cost), and the orders of the nodes the last
    iteration left move on by as many steps.
``nodes``
    one node per iteration, dead, a childless leaf in a graph that existed before
    the loop, with parents that existed before the loop (a tracked op on a live
    tensor whose output was dropped): a run inside that graph; its tables grow
    by one item per iteration, so a segment ends before any of them must resize.
``chain``
    the iteration adds the same few nodes to one graph that existed before the loop,
    through one node of the iteration before, and a tensor holds the newest (an EMA
    kept across training steps): :mod:`sim.engine.fastforward.chainrun` builds the skipped iterations'
    members, replays their BTreeMap operations and recomputes their sweeps, whose cost
    grows with the chain. Where the members keep storages in their checkpoint actions or
    have retro-forwards (Balanced checkpointing: ema-balanced ``detach`` keeps each
    step's detached weight, a LARGE block), the iteration's heap events are replayed in
    order as a ``leak``'s are and the members built on them; so are members that hang off
    older nodes only and that nothing holds, whose actions keep tensors (a validation
    forward of a model that requires grad), their L2 chunks joining the LRU; those are not
    built at all until something reads one (a run of the graph's maps,
    :class:`~sim.burn.graph.runs.MemberRuns`). On a glibc arena only those unbuilt members
    (an inference forward), their events replayed request by request with the BTreeMap
    operations in their places and the members, when built, holding the blocks the replay
    placed (:func:`sim.engine.fastforward.keptchain.on_arena`); other chains run exactly
    there.
``leak``
    the iteration leaves the bookkeeping as it found it but for new graphs that nothing
    reaches, whose steps may keep tensors (a norm read from a detached weight that still
    requires grad, never backpropagated, under burn-0.20-pre.1; the six dead graphs of a
    forward of ``model.valid()`` on autodiff inputs): :mod:`sim.engine.fastforward.leakrun` replays the
    skipped iterations' heap events in order, builds their graphs and the storages they
    keep, and replays their BTreeMap operations. Tried after the shapes above. Where the
    allocator keeps counts per size only.

The effect is proven, not assumed: the heap bytes and blocks an iteration left
behind must equal the blocks of the node (and of its new graph) read off the
live objects, plus the BTreeMap nodes and table resizes the iteration caused. An
iteration that removes (or adds) locator entries of nodes registered before its loop --
the first iterations of a loop that drops a window of tensors an earlier loop kept --
stands for no other (:class:`_Older`): the iterations after it free the loop's own nodes.
Tests check that fast-forward and exact mode produce the same CSV.

A glibc arena (``glibc-arena``, the Linux profile) places each block where the
requests before it left room, so the ``graphs`` and ``nodes`` shapes cannot hand
it their blocks size by size. There the probe's trace of the iteration's heap events
gives a template (:func:`_arena_template`: allocations, the frees naming which of them
they free, the appends to the locator's BTreeMaps where they came), and the templates of
the agreeing iterations must be equal too. :func:`_apply` replays the template once and traces
that iteration (:mod:`sim.engine.fastforward.arenarun`): when it carved its kept chunks from the top
(or from one bin chunk, the best fit of its requests) and left the bins otherwise
alone, the rest (as far as the chunk goes) is one carve run in closed form, its
chunks entered one by one only if a free reaches them. A loop appending to one BTreeMap
(a tracked op on a live graph) is traced by periods of 7 iterations instead, from
the one that splits the map's leaf: the split leaf takes the chunk ``analyse``'s
temporary leaf parks in the tcache, and the next iteration carves a new one.
Otherwise (the bins serve some requests: after a table resize freed the old table,
or a backward freed nodes into the bins) the template is replayed once per iteration, each BTreeMap append allocating the nodes its
splits make at their place, at the arena's cost per event (16-19 us per adleak
iteration), and traced again after 16, 32, 64, ... replayed iterations, so that
a loop whose requests the bins stop serving returns to closed form. Either way the locator's nodes and keys are recorded in closed form,
and every chunk lands where exact mode puts it (tests compare the arena chunk by
chunk).
"""

from __future__ import annotations

from collections import Counter

from .arenarun import ALLOC as _ALLOC, ALLOC_MANY as _ALLOC_MANY, FREE as _FREE
from .arenarun import FREE_MANY as _FREE_MANY, INSERT as _INSERT, REALLOC as _REALLOC
from .arenarun import RunHandles, advance, handle_key as _handle_key, trace, window
from ...burn.graph.runs import (NodeRun, dead_graph_handles, graph_blocks, graph_drop_order,
                                node_blocks, node_handles, tree_counts, unexplained_blocks)
from ...burn.runtime.graph import Graph, SingleNodeGraph
from .chainrun import (LoggingTree, TreeLog, apply_chain, chain_effect, chain_horizon,
                       note_tables, table_sizes, unwatch, watch_graph, watch_tables)
from .leakrun import apply_leak, l2_contents, l2_signature, leak_effect
from . import seams
from .tape import ArenaTape
from .pystate import moved, note_moved, plain_state
from ...platform.btree import CAPACITY, append_counts
from ...platform.heap import ExcludedHeap, Heap, HeapTap

__all__ = ["repeat", "Effect"]

#: consecutive identical iterations needed before fast-forwarding
AGREE = 3
#: iterations tried before giving up and running iterations exactly; after ``wait`` of
#: them (:data:`MAX_PROBE` at first, twice as many each time) the loop is probed again,
#: :data:`AGREE` + 3 times (a first probe has no iteration before it to compare with), so
#: a warm-up longer than the probes (an L2 model's LRU filling with the storages a chain
#: keeps) does not make the whole loop exact
MAX_PROBE = 12
#: while one of the last :data:`AGREE` probes found an effect (a shape, not yet the same
#: as the iterations' before: a graph's tables still resizing every few iterations), the
#: loop is probed on, up to this many probes in a row, instead of :data:`MAX_PROBE`
MAX_SHAPED_PROBES = 3 * MAX_PROBE
#: a glibc arena's loop whose iterations free blocks ``d`` iterations old is probed
#: ``2 d`` times more: its template holds once ``d + 1`` probed iterations in a row made
#: their blocks in the same order (:class:`~sim.engine.fastforward.tape.ArenaTape`), and
#: the first ``d`` probes after a reset name blocks of iterations not probed
PROBES_PER_BACK = 2
#: probes in a row of a loop's first round that refused for a reason the iterations
#: after them share (:func:`_untraceable`) before the round ends (a later round ends at
#: the first)
LASTING_REFUSALS = AGREE
#: a loop body whose ``repeat`` calls found no repeating iteration this many times in a row
#: runs its next calls without probing: twice as many after each further miss, at most
#: :data:`MAX_SKIPPED_CALLS` (a nested loop is called once per outer iteration, and a probe
#: that fails costs more than the iteration it ran)
MISSES_BEFORE_SKIPPING = 2
MAX_SKIPPED_CALLS = 64
#: the longest cycle of allocator placements a loop of iterations that leave nothing
#: behind may go through and still be fast-forwarded (in iterations)
MAX_PERIOD = 6


class _Recorder(HeapTap):
    """The heap's tap while an iteration is probed: it records every event and passes it
    on to the heap.

    ``events`` counts the net blocks by size; ``trace`` keeps every event in order, on
    every allocator (tree nodes included: the probe's
    :class:`~sim.engine.fastforward.chainrun.TreeLog` names the spans of its BTreeMaps'
    operations), the one record the shapes read: the chain, leak and drift shapes as it
    is, a glibc arena's node runs as a template derived from it (:func:`_arena_template`).
    """

    __slots__ = ()
    events = None
    trees = ()
    #: every event of the iteration in order, tree nodes included, where the allocator
    #: keeps counts per size (:func:`_drift`): ``(kind, nbytes, arg, unfaulted)``; a
    #: free names the position of the alloc it frees (or -1), a realloc ``(old size,
    #: that position)``; ``unfaulted``: made while the allocator's page faults were off;
    #: None once an event cannot be replayed (a free of an earlier iteration's block, an
    #: event the counting allocator does not see)
    trace = None
    trace_at = None     # block -> position of its alloc in ``trace``
    #: on a glibc arena, every heap event of the probed iterations in order (tree nodes
    #: included), for the replay of a ``steady`` loop (:mod:`sim.engine.fastforward.tape`)
    tape = None

    @staticmethod
    def _trace():
        """The trace to add an event to, or None (given up at an uncounted event)."""
        if _Recorder.trace is not None and ExcludedHeap.active:
            _Recorder.trace = None
        return _Recorder.trace

    # alloc and free are the probe's hot path: the heap does the event with its tap off
    # (Heap.untapped without its try: _probe takes the tap off whatever happens)
    def alloc(self, heap, nbytes, align):
        heap.tap = None
        block = heap.alloc(nbytes, align)
        heap.tap = self
        if nbytes <= 0:
            return block
        rec = _Recorder
        rec.events[nbytes] += 1
        trace = rec.trace
        if trace is not None:
            if ExcludedHeap.active:
                rec.trace = None        # given up at an uncounted event (_trace)
            else:
                if block is not None:
                    rec.trace_at[_handle_key(block)] = len(trace)
                trace.append((_ALLOC, nbytes, align, heap.allocator.fault is None))
        tape = rec.tape
        if tape is not None:
            if ExcludedHeap.active:
                tape.invalidate()
            tape.alloc(block, nbytes, align)
        return block

    def free(self, heap, nbytes, block):
        if nbytes > 0:
            rec = _Recorder
            rec.events[nbytes] -= 1
            trace = rec.trace
            if trace is not None and ExcludedHeap.active:
                rec.trace = trace = None    # given up at an uncounted event (_trace)
            if trace is not None:
                at = -1 if block is None else rec.trace_at.pop(_handle_key(block), None)
                if at is None:
                    rec.trace = None     # a block from an earlier iteration
                else:
                    trace.append((_FREE, nbytes, at, False))
            tape = rec.tape
            if tape is not None:
                if ExcludedHeap.active:
                    tape.invalidate()
                tape.free(block, nbytes)
        heap.tap = None
        heap.free(nbytes, block)
        heap.tap = self

    def realloc(self, heap, old_nbytes, nbytes, block):
        # one block of a new size (a Vec growing): counted, but not replayable in order
        # on a glibc arena; where the allocator keeps counts, traced as one event
        if old_nbytes > 0 and nbytes > 0:
            _Recorder.events[old_nbytes] -= 1
            _Recorder.events[nbytes] += 1
            trace = _Recorder._trace()
            if trace is not None:
                at = -1 if block is None else _Recorder.trace_at.pop(_handle_key(block), None)
                if at is None:
                    _Recorder.trace = trace = None     # a block from an earlier iteration
            handle = heap.untapped(heap.realloc, old_nbytes, nbytes, block)
            tape = _Recorder.tape
            if tape is not None:
                if ExcludedHeap.active:
                    tape.invalidate()
                tape.realloc(block, old_nbytes, handle, nbytes)
            if trace is not None:
                if handle is not None:
                    _Recorder.trace_at[_handle_key(handle)] = len(trace)
                trace.append((_REALLOC, nbytes, (old_nbytes, at), False))
            return handle
        if old_nbytes <= 0:
            return heap.alloc(nbytes)       # a first block: an alloc, recorded as one
        if _Recorder.tape is not None:
            _Recorder.tape.invalidate()     # a free in disguise: not replayed
        return heap.untapped(heap.realloc, old_nbytes, nbytes, block)

    def libc_alloc(self, heap, nbytes, zeroed):
        if _Recorder.tape is not None:
            _Recorder.tape.invalidate()
        return heap.untapped(heap.libc_alloc, nbytes, zeroed)

    def libc_free(self, heap, nbytes, block):
        if _Recorder.tape is not None:
            _Recorder.tape.invalidate()
        heap.untapped(heap.libc_free, nbytes, block)

    def alloc_many(self, heap, nbytes, count):
        if count == 1:
            heap.alloc(nbytes)      # what Heap.alloc_many does; recorded there
            return
        if nbytes > 0 and count > 0:
            _Recorder.events[nbytes] += count
            if _Recorder.trace is not None:
                _Recorder.trace.append((_ALLOC_MANY, nbytes, count, False))
            if _Recorder.tape is not None:
                _Recorder.tape.many("alloc_many", nbytes, count)
        heap.untapped(heap.alloc_many, nbytes, count)

    def free_many(self, heap, nbytes, count):
        if nbytes > 0 and count > 0:
            _Recorder.events[nbytes] -= count
            if _Recorder.trace is not None:
                _Recorder.trace.append((_FREE_MANY, nbytes, count, False))
            if _Recorder.tape is not None:
                _Recorder.tape.many("free_many", nbytes, count)
        heap.untapped(heap.free_many, nbytes, count)


class _Older:
    """The net change a probed iteration made to the locator's entries of nodes registered
    before its loop (keys of ``graphs_tree`` below ``floor``: id -> inserts less removals;
    a run ``(first, stride, count)`` removed counts as ``first``). An iteration that
    frees an earlier loop's nodes (a window kept across loops, dropped entry by entry)
    cannot stand for the iterations after it: those free the loop's own."""

    floor = None
    tree = None
    changes = None

    @staticmethod
    def note(tree, key, change) -> None:
        if tree is _Older.tree:
            first = key[0] if type(key) is tuple else key
            if first < _Older.floor:
                _Older.changes[first] += change


class _WatchingTree(LoggingTree):
    """The tap of a locator BTreeMap that logs its operations (:class:`LoggingTree`) and
    notes the removals and inserts of keys from before the loop (:class:`_Older`;
    probing only)."""

    __slots__ = ()

    def insert(self, tree, key):
        added = LoggingTree.insert(self, tree, key)
        if added and _Older.changes is not None:
            _Older.note(tree, key, 1)
        return added

    def remove(self, tree, key):
        removed = LoggingTree.remove(self, tree, key)
        if removed and _Older.changes is not None:
            _Older.note(tree, key, -1)
        return removed

    def remove_many(self, tree, items):
        items = list(items)
        if _Older.changes is not None:
            for item in items:
                _Older.note(tree, item, -1)
        return LoggingTree.remove_many(self, tree, items)


class _RecordingTree(_WatchingTree):
    """The tap of a locator BTreeMap on a glibc arena (probing only): it logs its
    operations as on every allocator (:class:`_WatchingTree`), each insert with whether it
    appended (:attr:`~sim.engine.fastforward.chainrun.TreeLog.appends`), and hands them
    to the steady loops' tape."""

    __slots__ = ()

    def insert(self, tree, key):
        tape = _Recorder.tape
        if tape is not None:
            tape.tree(_Recorder.trees.index(tree), "insert", key - tape.base)
        log = TreeLog.current
        if log is not None:
            top = tree.max_key()
            if top is not None and key > top:
                log.appends.add(len(log.ops))
        return _WatchingTree.insert(self, tree, key)

    def remove(self, tree, key):
        tape = _Recorder.tape
        if tape is not None:
            tape.tree(_Recorder.trees.index(tree), "remove", key - tape.base)
        return _WatchingTree.remove(self, tree, key)

    def remove_many(self, tree, items):
        items = list(items)
        tape = _Recorder.tape
        if tape is not None:
            base = tape.base
            tape.tree(_Recorder.trees.index(tree), "remove_many", tuple(
                k - base if type(k) is int else (k[0] - base,) + tuple(k[1:]) for k in items))
        return _WatchingTree.remove_many(self, tree, items)

    def remove_run(self, tree, first, stride, count):
        tape = _Recorder.tape
        if tape is not None:
            tape.tree(_Recorder.trees.index(tree), "remove_run",
                      (first - tape.base, stride, count))
        if TreeLog.current is not None:
            TreeLog.current.valid = False
        return tree.remove_many([(first, stride, count)])     # the map's remove_run, tapped


_RECORDER = _Recorder()
_RECORDING_TREE = _RecordingTree()
_WATCHING_TREE = _WatchingTree()


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
        self.allocs = sim.heap.allocs
        self.entries = 0 if locator is None else locator.entry_count()
        self.trees = tree_counts(locator)
        self.live_graphs = 0 if locator is None else len(locator.live)
        self.rss_extra = sim.rss_extra_bytes
        self.touched = sim.touched.state()
        self.pools = sim.pool_state()
        self.allocator = sim.allocator.state()
        self.placement = sim.allocator.placement()
        # the allocator's states at the start of the iterations probed right before this
        # one, the latest first
        self.earlier = ()
        self.faults = (sim.fault_bytes, sim.fault_mapped, sim.fault_ps)
        # the time of the arena's trims so far: replayed with the arena's requests (its
        # trim callback), not copied
        self.trim_ps = sim.trim_ps
        # the L2 models' LRUs (a leaking iteration must leave them as it found them)
        self.l2 = l2_signature(sim)
        # and their chunks in LRU order and free lists, for a chain whose kept storages
        # join the LRU every iteration (sim.engine.fastforward.keptchain.l2_growth)
        self.lru = l2_contents(sim)
        self.cluster = sim.allocator.cluster()


class Effect:
    """What one iteration changed, in a form that can be compared and replayed."""

    def __init__(self, shape, stride, registered, times, node_order=(), offset=0, parents=(),
                 graph=None, backwards=0, rss_drift=0, graph_order=(), faults=(0, 0),
                 template=None, drop_order=None, period=1, layouts=(), member_stride=None):
        # the new node's blocks and its new graph's, in free order (sim.burn.graph.runs)
        self.node_order = node_order
        self.graph_order = graph_order
        self.drop_order = drop_order
        # ``graphs`` of several dead graphs an iteration: each one's (node_order,
        # graph_order, drop_order), in id order (NodeRun.layouts), and the step between
        # their ids (``offset``: the first's, relative to the iteration)
        self.layouts = layouts
        self.member_stride = stride if member_stride is None else member_stride
        # iterations after which the allocator's placement repeats ("none" and "steady":
        # more than 1 where blocks of one size rotate through the tcache)
        self.period = period
        # the iteration's heap events in order (a glibc arena: see _Recorder), replayed
        # iteration by iteration in _apply; its allocator then faults and maps by itself
        self.template = template
        if template is not None:
            faults = (0, 0)
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
        self.offset = offset
        self.parents = parents
        self.graph = graph
        #: ``drift``: the iteration's heap events (:attr:`_Recorder.trace`) and the
        #: ``(position, bytes)`` each size there grows by per iteration
        self.trace = None
        self.deltas = ()
        self.masked = None
        self.since = 0
        #: ``drift``: allocations counted without an event (transients the passes only
        #: count; ``none`` and ``steady``: all of the iteration's), and ``(offset,
        #: step)`` of the live nodes whose order grows
        self.allocs = 0
        self.grows = ()
        #: ``drift``: (page faults on, the replay's steps) (:func:`_drift_plan`), made on
        #: first use
        self.plan = None
        #: ``graphs`` and ``nodes`` with a template: per member an iteration leaves, the
        #: index among the iteration's allocations of each of its blocks (-1: freed by
        #: size), and where its drop order's blocks sit (NodeRun.handles, drop_indices)
        self.slots = ()
        self.drop_indices = ()
        #: ``steady`` on a glibc arena whose placement does not repeat: the iteration's
        #: ``(template, BTreeMap operations)`` (:class:`~sim.engine.fastforward.tape.ArenaTape`),
        #: replayed through the arena in _apply; ``program``: its compiled form
        self.tape = None
        self.program = None

    def key(self):
        # exact work in ps; the float accumulators only split it and are not compared
        return (self.shape, self.stride, self.registered, self.times[0], self.node_order,
                self.graph_order, self.drop_order, self.offset,
                self.parents, id(self.graph), self.backwards, self.rss_drift, self.faults,
                self.template, self.period, self.masked, self.deltas, self.allocs,
                self.layouts, self.member_stride, self.slots, self.drop_indices, self.tape)

    @property
    def nodes_left(self) -> int:
        """Dead nodes an iteration of ``graphs`` or ``nodes`` leaves behind."""
        return len(self.layouts) or 1


def _measure(sim, snap, events, template=None, chain=None, record=None, before=None,
             kept_allocs=None, tape=None):
    """The effect of the iteration since ``snap``, or None when it is not batchable
    (``template``: its heap events in order, where the allocator needs them replayed;
    ``chain``: ``(its sweeps, its BTreeMap operations, the effect of the iteration
    before)`` where the allocator keeps counts, for :func:`sim.engine.fastforward.chainrun.chain_effect`;
    ``record`` and ``before``: ``(heap events in order, live nodes' orders)`` of it and of
    the iteration before, for :func:`_drift`; ``kept_allocs``: with ``template``, the
    handle of each block the iteration allocated and kept -> the index of its alloc;
    ``tape``: on a glibc arena, the iteration's ``(template, BTreeMap operations)`` from
    :class:`~sim.engine.fastforward.tape.ArenaTape`, or None)."""
    locator = sim.client.locator
    timing = sim.timing
    stride = sim._next_id - snap.next_id
    registered = sim.registered - snap.registered
    fb, fm, fps = snap.faults
    mapped = sim.fault_mapped - fm
    faults = (sim.fault_bytes - fb - mapped, mapped)
    # page-fault time is replayed from the bytes (Simulation.page_fault), a trim's by the
    # arena that trims again (Simulation.trim), neither copied
    times = (sim.work_ps - snap.work - (sim.fault_ps - fps) - (sim.trim_ps - snap.trim_ps),
             ) + tuple(
        a - b for a, b in zip((timing.compute_ns, timing.bookkeeping_ns, timing.cleanup_ns),
                              snap.timing))
    trace, orders = record[:2] if record is not None else (None, ())
    before_trace, before_orders = before[:2] if before is not None else (None, None)
    grows = _order_steps(before_orders, orders)
    if sim.touched.state() != snap.touched:
        return None   # first execution of a code path or gemm shape: not a repeatable iteration
    if sim.pool_state() != snap.pools:
        # GPU buffers kept (or a pool's high water raised): the closed forms count host
        # blocks only, and a buffer need not have one (a plain device's output)
        return None
    entries = 0 if locator is None else locator.entry_count()
    # the placement repeats after this iteration (period 1), or after this one and the
    # ones before (on a glibc arena, chunks of one size can rotate through the tcache)
    state = sim.allocator.state()
    period = 1 if state == snap.allocator else next(
        (p for p, old in enumerate(snap.earlier, 2) if old == state), None)
    # the bookkeeping as the iteration found it
    unchanged = (registered and entries == snap.entries
                 and (sim.heap.live_bytes, sim.heap.live_blocks) == snap.heap
                 and tree_counts(locator) == snap.trees)
    # on a glibc arena the placement need not repeat: the template must (it is replayed)
    replayed = not period and tape is not None
    if (unchanged and (period or replayed)
            and (grows is None or not any(step for _, step in grows))):
        effect = Effect("steady", stride, registered, times,
                        backwards=sim.backwards - snap.backwards,
                        rss_drift=sim.rss_extra_bytes - snap.rss_extra,
                        faults=(0, 0) if replayed else faults, period=period or 1)
        effect.allocs = sim.heap.allocs - snap.allocs
        if replayed:
            effect.tape = tape
        return effect
    if (unchanged and trace is not None and before_trace is not None and grows is not None
            and sim.allocator.bulk_exact()):
        # the bookkeeping as it was, the allocator not: where the placement moved (LARGE
        # slices) or a high-water mark rose (a transient that grows with the iteration,
        # as the tape of a chain whose nodes' orders grow)
        drift = _drift(before_trace, trace)
        if drift is not None:
            effect = Effect("drift", stride, registered, times,
                            backwards=sim.backwards - snap.backwards,
                            rss_drift=sim.rss_extra_bytes - snap.rss_extra)
            effect.trace = trace
            effect.allocs = _uncounted_allocs(sim, snap, trace)
            effect.deltas, masked = drift
            effect.masked = (masked, effect.allocs, grows)
            effect.grows = tuple((o, step) for o, step in grows if step)
            return effect
    if chain is not None and registered:
        sweeps, trees, previous = chain
        effect = chain_effect(sim, snap, events, sweeps, trees, previous, record,
                              0 if trace is None else _uncounted_allocs(sim, snap, trace))
        if effect is not None:
            return effect
    effect = _node_runs(sim, snap, events, template, locator, entries, period, faults, times,
                        stride, registered, kept_allocs)
    if (effect is None and chain is not None and registered and not unchanged
            and trace is not None):
        # a graph of several nodes left behind, or one the node runs do not take
        effect = leak_effect(sim, snap, chain[1], record, times,
                             _uncounted_allocs(sim, snap, trace))
    return effect


def _uncounted_allocs(sim, snap, trace) -> int:
    """Allocations the iteration since ``snap`` counted without a traced event (transients
    the passes only count): the heap's count less the allocs of ``trace``."""
    kinds = [e[0] for e in trace]
    implied = kinds.count(_ALLOC)
    if _ALLOC_MANY in kinds:
        implied += sum(e[2] for e in trace if e[0] == _ALLOC_MANY)
    return sim.heap.allocs - snap.allocs - implied


def _node_runs(sim, snap, events, template, locator, entries, period, faults, times, stride,
               registered, kept_allocs=None):
    """The ``none``, ``graphs`` or ``nodes`` effect of the iteration, or None (the rest of
    :func:`_measure`)."""
    if sim.backwards != snap.backwards or sim.rss_extra_bytes != snap.rss_extra:
        return None
    new = [] if locator is None else [
        i for i in range(snap.next_id, sim._next_id) if i in locator.graphs]
    if entries - snap.entries != len(new):
        return None  # something older was removed
    if sim.allocator.placement() != snap.placement:
        # a node-leaving iteration is applied as counts of blocks: where its blocks sit
        # (LARGE slices, the cluster the thread runs on) must not move
        return None
    net = {size: n for size, n in events.items() if n}
    if not new:
        # nothing left behind; on a glibc arena the same blocks may still have changed
        # places: the iterations repeat only as often as the placement does
        if net or tree_counts(locator) != snap.trees or not period:
            return None
        effect = Effect("none", stride, registered, times, faults=faults, period=period)
        effect.allocs = sim.heap.allocs - snap.allocs
        return effect
    if len(new) != 1:
        return _dead_graphs(sim, snap, net, template, locator, new, faults, times, stride,
                            registered, kept_allocs)
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
    node_order = node_blocks(layout, step, parents)
    if graph.origin == node_id:
        if parents or len(memory.nodes) != 1 or memory.runs or graph.entries != 1:
            return None
        own = graph_blocks(layout, graph.server)
        drop_order = graph_drop_order(layout, step, graph.server)
        shape = "graphs"
    else:
        if graph.origin >= snap.next_id or node_id not in memory.leaves:
            return None
        shape = "nodes"
        own = ()
        drop_order = None
    if _unexplained(net, Counter(node_order + own), locator, snap):
        return None
    effect = Effect(shape, stride, registered, times, node_order,
                    node_id - snap.next_id, tuple(parents), graph if shape == "nodes" else None,
                    graph_order=own, faults=faults, template=template, drop_order=drop_order)
    if template is not None:
        handles, drop_index = (dead_graph_handles(layout, step, rc, graph.server, graph._block)
                               if shape == "graphs" else (node_handles(step, rc, parents), ()))
        slots = _slots(handles, kept_allocs)
        if slots is None:
            return None
        effect.slots, effect.drop_indices = (slots,), (drop_index,)
    _transient_allocs(sim, snap, effect, len(node_order) + len(own))
    return effect


def _slots(handles, kept_allocs):
    """The index of each block's alloc among the iteration's (-1 for None: freed by size),
    or None when a block was not allocated and kept by the iteration."""
    slots = tuple(-1 if block is None else kept_allocs.get(_handle_key(block))
                  for block in handles)
    return None if None in slots else slots


def _transient_allocs(sim, snap, effect, kept) -> None:
    """``effect.allocs`` of a ``graphs`` or ``nodes`` iteration whose run members hold
    ``kept`` blocks, where the allocator keeps counts: the iteration's allocations less
    those and the BTreeMaps' new nodes, which the run and the trees allocate (transients:
    operands, outputs and shapes freed in the iteration)."""
    if effect.template is None:
        grown = sum(after - before for after, before in
                    zip(tree_counts(sim.client.locator), snap.trees))
        effect.allocs = sim.heap.allocs - snap.allocs - kept - grown


def _dead_graph(sim, locator, node_id):
    """``(node_order, graph_order, drop_order)`` of ``node_id``'s graph if it is a dead
    single-node graph of its own (an untracked op whose output is gone), and its
    blocks' handles with its drop order's place among them (:func:`dead_graph_handles`),
    else None."""
    graph = locator.graphs[node_id]
    if graph.origin != node_id or graph.entries != 1:
        return None
    server = graph.server
    memory = server.memory_management
    entry = memory.nodes.get(node_id)
    step = server.steps.get(node_id)
    if (entry is None or step is None or entry[0].strong != 1 or step.actions is not None
            or entry[1] or len(memory.nodes) != 1 or memory.runs):
        return None
    layout = sim.layout
    return ((node_blocks(layout, step, ()), graph_blocks(layout, server),
             graph_drop_order(layout, step, server)),
            dead_graph_handles(layout, step, entry[0], server, graph._block))


def _dead_graphs(sim, snap, net, template, locator, new, faults, times, stride, registered,
                 kept_allocs=None):
    """The ``graphs`` effect of an iteration that left several dead single-node graphs
    (``new``: their ids), or None: their ids must step evenly and the next iteration's
    continue the step (a run of members whose blocks repeat with a period of
    ``len(new)``), and the heap change must be their blocks."""
    member_stride = new[1] - new[0]
    if (any(b - a != member_stride for a, b in zip(new, new[1:]))
            or member_stride * len(new) != stride):
        return None
    layouts, handles = [], []
    for node_id in new:
        found = _dead_graph(sim, locator, node_id)
        if found is None:
            return None
        layouts.append(found[0])
        handles.append(found[1])
    kept = [b for node, graph, _ in layouts for b in node + graph]
    if _unexplained(net, Counter(kept), locator, snap):
        return None
    effect = Effect("graphs", stride, registered, times, tuple(kept), new[0] - snap.next_id,
                    faults=faults, template=template, layouts=tuple(layouts),
                    member_stride=member_stride)
    if template is not None:
        slots = tuple(_slots(blocks, kept_allocs) for blocks, _ in handles)
        if None in slots:
            return None
        effect.slots = slots
        effect.drop_indices = tuple(index for _, index in handles)
    _transient_allocs(sim, snap, effect, len(kept))
    return effect


def _drift(before, trace):
    """``(deltas, masked trace)`` when ``trace`` (an iteration's heap events) is ``before``
    (the iteration before's) but for numbers that grew, so that the iteration ``k`` later
    makes the same events with each of them ``k`` steps further: ``deltas`` holds
    ``(position, field, step)``, field 1 the size of a block allocated and freed within
    the iteration, field 2 the count of a bulk alloc or free of one size (a tape one level
    deeper: one more Vec per level); both balance, so the heap ends each iteration as it
    began. None otherwise (another difference, or one that would leave blocks behind)."""
    if len(before) != len(trace):
        return None
    deltas = []
    growing = {}              # (size, step) -> growing allocs not yet freed
    bulk = {}                 # size -> allocs minus frees the bulk counts add per iteration
    for i, (a, b) in enumerate(zip(before, trace)):
        if a == b:
            continue
        kind = b[0]
        if a[0] != kind or a[3] != b[3]:
            return None
        if kind in (_ALLOC_MANY, _FREE_MANY):
            if a[1] != b[1]:
                return None
            d = b[2] - a[2]
            deltas.append((i, 2, d))
            bulk[b[1]] = bulk.get(b[1], 0) + (d if kind == _ALLOC_MANY else -d)
            continue
        if kind not in (_ALLOC, _FREE) or a[2] != b[2]:
            return None
        d = b[1] - a[1]
        deltas.append((i, 1, d))
        if kind == _ALLOC:
            growing[b[1], d] = growing.get((b[1], d), 0) + 1
            continue
        if not growing.get((b[1], d)) or (b[2] >= 0 and (b[2], 1, d) not in deltas):
            return None       # a free grows only with a growing alloc of the iteration's
        growing[b[1], d] -= 1
    if any(growing.values()) or any(bulk.values()):
        return None           # blocks a later iteration would keep: the heap would grow
    at = {i: field for i, field, _ in deltas}
    masked = tuple(e[:at[i]] + (None,) + e[at[i] + 1:] if i in at else e
                   for i, e in enumerate(trace))
    return tuple(deltas), masked


def _replay_drift(sim, effect, k, times=1):
    """The heap events of the iteration ``k`` after ``effect``'s (a ``drift``), through
    the heap and its allocator: placement, high-water marks and page faults as exact mode
    gives them.

    Runs of events that repeat unchanged and stay in size classes the allocator keeps
    counts for are applied as one step each (:func:`_drift_plan`): their net change of
    live bytes, blocks and each zone's bytes, with the highest point each reached inside
    the run, which is all a counting zone's high-water mark and its page faults depend on
    (fault time is charged on cumulative bytes, so one fault for the run's top costs what
    the faults on the way up did). Growing events, blocks placed one by one (LARGE) and
    reallocs go through the heap one at a time. Returns the blocks the iteration keeps,
    by the position of their alloc.

    ``times`` other than 1: that many iterations of ``k`` at once (:func:`_replay_many`),
    where each is one run of such events that leaves the heap and every zone with as many
    bytes or more; returns None, having done nothing, where they are not (``times=0``
    only asks)."""
    heap = sim.heap
    allocator = heap.allocator
    trace = effect.trace
    faults = allocator.fault is not None
    plan = _plan(heap, effect)
    if times != 1:
        return _replay_many(heap, plan, times)
    # the heap itself takes the events, past a tap (an outer loop's probe records none)
    return heap.untapped(_replay_plan, heap, plan, trace, effect, k, faults)


def _replay_plan(heap, plan, trace, effect, k, faults):
    """:func:`_replay_drift`'s events of one iteration at ``k`` steps of growth; returns
    the blocks allocated by position."""
    allocator = heap.allocator
    grown = {i: (field, trace[i][field] + k * d) for i, field, d in effect.deltas}
    handles = {}
    alloc, free = Heap.alloc, Heap.free
    zone_live, zone_high, zone_mark = allocator.live, allocator.high, allocator.mark
    for step in plan:
        if type(step) is tuple:
            nbytes, nblocks, nallocs, top, zones = step
            live = heap.live_bytes
            if live + top > heap.peak_bytes:
                heap.peak_bytes = live + top
            heap.live_bytes = live + nbytes
            heap.live_blocks += nblocks
            heap.allocs += nallocs
            for zi, delta, zone_top in zones:
                base = zone_live[zi]
                high = base + zone_top
                if high > zone_high[zi]:
                    zone_high[zi] = high
                    if high > zone_mark[zi]:
                        allocator.fault_to(zi, high)
                zone_live[zi] = base + delta
            continue
        i = step
        kind, nbytes, arg, unfaulted = trace[i]
        if i in grown:
            field, value = grown[i]
            if field == 1:
                nbytes = value
            else:
                arg = value
        if kind == _ALLOC:
            if unfaulted and faults:
                fault, allocator.fault = allocator.fault, None
                handles[i] = alloc(heap, nbytes, arg)
                allocator.fault = fault
            else:
                handles[i] = alloc(heap, nbytes, arg)
        elif kind == _FREE:
            free(heap, nbytes, None if arg < 0 else handles.pop(arg))
        elif kind == _ALLOC_MANY:
            Heap.alloc_many(heap, nbytes, arg)
        elif kind == _FREE_MANY:
            Heap.free_many(heap, nbytes, arg)
        else:
            old, at = arg
            handles[i] = Heap.realloc(heap, old, nbytes, None if at < 0 else handles.pop(at))
    return handles


def _replay_many(heap, plan, times):
    """``times`` iterations of a :func:`_drift_plan` whose steps are all runs: their sums
    (live bytes, blocks, allocations, each zone's bytes) ``times`` over, the heap's peak and
    each zone's high-water mark (and its page faults, charged on cumulative bytes) where
    the last iteration's highest point puts them, which is where they go when no iteration
    leaves fewer bytes than it found. None (nothing done) where a step is an event of its
    own or an iteration leaves fewer bytes in the heap or a zone."""
    if any(type(step) is not tuple for step in plan):
        return None
    nbytes = nblocks = nallocs = top = 0
    zones = {}
    for b, n, a, t, parts in plan:
        top = max(top, nbytes + t)
        nbytes, nblocks, nallocs = nbytes + b, nblocks + n, nallocs + a
        for zi, delta, zone_top in parts:
            z = zones.setdefault(zi, [0, 0])
            z[1] = max(z[1], z[0] + zone_top)
            z[0] += delta
    if nbytes < 0 or any(z[0] < 0 for z in zones.values()):
        return None
    if times <= 0:
        return {}
    allocator = heap.allocator
    before = times - 1
    live = heap.live_bytes
    if live + before * nbytes + top > heap.peak_bytes:
        heap.peak_bytes = live + before * nbytes + top
    heap.live_bytes = live + times * nbytes
    heap.live_blocks += times * nblocks
    heap.allocs += times * nallocs
    zone_live, zone_high, zone_mark = allocator.live, allocator.high, allocator.mark
    for zi, (delta, zone_top) in sorted(zones.items()):
        high = zone_live[zi] + before * delta + zone_top
        if high > zone_high[zi]:
            zone_high[zi] = high
            if high > zone_mark[zi]:
                allocator.fault_to(zi, high)
        zone_live[zi] += times * delta
    return {}


def _plan(heap, effect) -> tuple:
    """``effect``'s replay plan (:func:`_drift_plan`) for the heap's fault state, made
    where it has none, or one for the other state."""
    faults = heap.allocator.fault is not None
    if effect.plan is None or effect.plan[0] != faults:
        effect.plan = (faults, _drift_plan(heap, effect, faults))
    return effect.plan[1]


def _drift_plan(heap, effect, faults) -> tuple:
    """:func:`_replay_drift`'s steps for ``effect``'s trace: the position of each event
    replayed on its own, and for each run of the others ``(live bytes, live blocks,
    allocations, highest live bytes reached above the start, ((zone, its bytes' change,
    its highest point above the start), ...))``. An event joins a run when its size and
    count do not grow, it was not made with page faults off while they are on now
    (``faults``), and its size is one the heap hands straight to a counting zone (so it
    has no handle a later event names); so does a realloc between two such sizes whose
    old block has no handle (off a glibc arena: a new block, then the old one freed)."""
    small = heap._small
    growing = {i for i, _, _ in effect.deltas}
    plan = []
    run = None

    def close():
        if run is not None and run[3]:
            zones = tuple((zi, z[0], z[1]) for zi, z in sorted(run[4].items()))
            plan.append((run[0], run[1], run[2], run[5], zones))

    for i, (kind, nbytes, arg, unfaulted) in enumerate(effect.trace):
        hit = small.get(nbytes)
        count = 1 if kind in (_ALLOC, _FREE) else arg if kind in (_ALLOC_MANY, _FREE_MANY) else 0
        old = None
        if kind == _REALLOC and heap._arena is None and arg[1] < 0:
            # a Vec grown by a new block and the old one freed, both counted by size
            old = small.get(arg[0])
            count = 1 if old is not None else 0
        if (hit is None or i in growing or (unfaulted and faults) or not count
                or kind not in (_ALLOC, _FREE, _ALLOC_MANY, _FREE_MANY, _REALLOC)):
            close()
            run = None
            plan.append(i)
            continue
        if run is None:
            # bytes, blocks, allocations, events, zones {zi: [bytes, top]}, top, running
            run = [0, 0, 0, 0, {}, 0, 0]
        zi, size = hit
        zone = run[4].setdefault(zi, [0, 0])
        run[3] += 1
        if kind == _REALLOC:
            run[0] += nbytes
            zone[0] += size
            zone[1] = max(zone[1], zone[0])
            run[5] = max(run[5], run[0])
            run[0] -= arg[0]
            zone = run[4].setdefault(old[0], [0, 0])
            zone[0] -= old[1]
        elif kind in (_ALLOC, _ALLOC_MANY):
            run[0] += nbytes * count
            run[1] += count
            run[2] += count
            zone[0] += size * count
            zone[1] = max(zone[1], zone[0])
            run[5] = max(run[5], run[0])
        else:
            run[0] -= nbytes * count
            run[1] -= count
            zone[0] -= size * count
    close()
    return tuple(plan)


def _unexplained(net, blocks, locator, snap):
    """Whether the heap change is more than the node's blocks, BTreeMap nodes and resizes."""
    left = unexplained_blocks(net, blocks, locator, snap.trees)
    # what is left may only be hash-table resizes: one new block replacing one old
    return sum(left.values()) != 0 or len(left) > 2


def _horizon(sim, effect):
    """Iterations that can be applied in closed form before anything could differ (the
    policy's own state aside: :func:`sim.engine.fastforward.seams.horizon`)."""
    limit = float("inf")
    if effect.shape == "chain":
        if (effect.trace is not None and effect.arena is None and effect.plan is None
                and sim.allocator.bulk_exact()):
            # the replay plan, which the batch's table crossings read, before the first
            # replay makes it
            _plan(sim.heap, effect)
        return min(limit, chain_horizon(sim, effect))
    if effect.node_order and not sim.allocator.bulk_exact():
        if effect.template is None:
            return 0   # a glibc arena, and an iteration whose events cannot be replayed
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


def _apply(sim, effect, count, tape=None):
    """``count`` iterations of ``effect`` in closed form (a glibc arena's replay may stop
    earlier, at the memory budget); returns the iterations applied (None, nothing done:
    a template the arena cannot replay). ``tape``: the loop's
    :class:`~sim.engine.fastforward.tape.ArenaTape`, for a ``steady`` effect with one."""
    first_id = sim._next_id      # the first id of the first iteration applied
    if effect.shape == "chain":
        applied = apply_chain(sim, effect, count, _replay_drift)
        seams.advance(sim, effect, applied, first_id)
        return applied
    if effect.shape == "leak":
        applied = apply_leak(sim, effect, count, _replay_drift)
        seams.advance(sim, effect, applied, first_id)
        return applied
    if effect.tape is not None and effect.program is None:
        try:
            effect.program = sim.allocator.arena.compile(effect.tape[0])
        except ValueError:
            return None       # a template the arena cannot replay: nothing applied
    last = sim._next_id - effect.stride      # the first id of the iteration just run
    timing = sim.timing
    first = sim._next_id + effect.offset
    run = None
    if effect.shape not in ("none", "steady", "drift"):
        locator = sim.client.locator
        handles = None
        if effect.template is not None:
            # the members' blocks, where the arena put them (their frees name them)
            handles = RunHandles(effect.slots)
            count, check = _place_on_arena(sim, effect, count, handles)
        run = NodeRun(first, effect.member_stride, count * effect.nodes_left,
                      effect.parents, effect.node_order, new_graph=effect.shape == "graphs",
                      graph=effect.graph, graph_order=effect.graph_order,
                      drop_order=effect.drop_order, layouts=effect.layouts,
                      handles=handles, drop_indices=effect.drop_indices)
        if effect.template is None:
            locator.add_run(run)
        else:
            locator.add_run(run, replayed=True)
            check()
    seams.advance(sim, effect, count, first_id, run)
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
    if effect.shape in ("none", "steady") or (run is not None and effect.template is None):
        # the allocations of iterations that leave nothing behind, or the transients of
        # those that leave a run's member (the heap's counter)
        sim.heap.allocs += effect.allocs * count
    if effect.tape is not None:
        # the arena's requests again, iteration by iteration (their faults and trims come
        # with them); the live objects' handles then name the last iterations' chunks
        arena = sim.allocator.arena
        for done in range(0, count, REPLAY_BATCH):
            k = min(REPLAY_BATCH, count - done)
            tape.apply(arena, effect.program, k)
            sim.ff_progress = (done + k, count)
            sim._check_limits()
        sim.ff_progress = None
        sim.arena_replayed += count
    grown, mapped = effect.faults
    if grown:
        sim.page_fault(grown * count)
    if mapped:
        sim.page_fault(mapped * count, True)
    if effect.shape == "drift":
        # the heap events again, iteration by iteration (their faults come with them);
        # ``since``: the iterations run since the probed one (repeat counts the exact ones)
        for k in range(effect.since + 1, effect.since + count + 1):
            _replay_drift(sim, effect, k)
            sim.heap.allocs += effect.allocs
            if not k & 1023:
                sim.ff_progress = (k - effect.since, count)
                sim._check_limits()
        sim.ff_progress = None
        effect.since += count
        sim.drift_applied += count
        # the nodes the last iteration left take the orders the skipped ones reached
        graphs = sim.client.locator.graphs
        for offset, step in effect.grows:
            node_id = last + offset
            graphs[node_id].server.steps[node_id].node.order += step * count
    sim._check_limits()
    return count


#: iterations of a ``steady`` loop a glibc arena replays between checks of the limits
REPLAY_BATCH = 1024

#: iterations replayed after a trace that did not qualify, before the next trace (doubling)
RETRACE_AFTER = 16


def _place_on_arena(sim, effect, count, handles):
    """The heap events of ``count`` iterations of a node-leaving loop on a glibc arena.

    An iteration is replayed and traced (:func:`sim.engine.fastforward.arenarun.trace`). When it qualifies,
    the rest are applied in closed form (:func:`sim.engine.fastforward.arenarun.advance`). Otherwise
    iterations are replayed one by one -- :data:`RETRACE_AFTER` of them, then twice as
    many after each trace that fails again (the bins may serve a loop's requests for a
    while: a freed hash table, the holes a backward left) -- up to the memory budget.
    Returns the iterations placed and a function that checks, once the locator's
    closed-form append has counted the BTreeMap nodes, that the arena got the same.
    ``handles`` (:class:`~sim.engine.fastforward.arenarun.RunHandles`) learns where each
    iteration put its blocks."""
    heap = sim.heap
    locator = sim.client.locator
    trees = (locator.graphs_tree, locator.keys_tree)
    template = effect.template
    fills = [tree.fills() for tree in trees]
    counts = [(tree.leaves, tree.internals) for tree in trees]
    arena = sim.allocator.arena
    chunks = arena.chunk_budget  # the memory budget (Limits.arena_chunks), set by Simulation
    nodes = Counter()            # BTreeMap nodes placed, by request size
    placed, batch = 0, RETRACE_AFTER
    # the one tree a loop appends to once per iteration, if so: its leaves split every
    # LEAF_PERIOD iterations, a period of iterations may qualify where one does not
    appended = [i for i in range(len(trees)) if (_INSERT, i, 0) in template]
    periodic = (len(appended) == 1 and
                sum(1 for e in template if e[0] == _INSERT) == 1 and
                len(fills[appended[0]]) > 1)
    while placed < count:
        blocks = []
        pattern, made = trace(heap, arena, template, fills, trees, allocated=blocks)
        handles.replayed(blocks)
        nodes.update(made)
        placed += 1
        rest = count - placed
        n = _carve(sim, pattern, trees, fills, nodes, rest, handles) if rest else 0
        if n:
            placed += n
            batch = RETRACE_AFTER
            continue            # (a bin chunk may end before the loop: trace again)
        sim.arena_replayed += 1
        if periodic and count - placed > 3 * LEAF_PERIOD:
            placed += _by_periods(sim, template, trees, count - placed, fills, nodes,
                                  appended[0], handles)
            rest = count - placed
            if not rest:
                break
        k = min(batch, rest)
        if chunks is not None:
            # the replay keeps every chunk: stop where the memory budget would be passed
            # (the next exact iterations then report it)
            k = min(k, max(0, (chunks - len(arena.inuse)) // (1 + len(template))))
            if not k:
                break
        _replay(heap, template, k, trees, fills, nodes, handles)
        sim.arena_replayed += k
        placed += k
        batch *= 2
    return placed, lambda: _check_nodes(trees, counts, nodes, fills)


#: appends between the leaf splits of a BTreeMap growing at its right end
LEAF_PERIOD = 7


def _by_periods(sim, template, trees, count, fills, nodes, t, handles):
    """Up to ``count`` iterations of a loop appending once per iteration to tree ``t``,
    by periods of :data:`LEAF_PERIOD` iterations starting with the one whose append
    splits the leaf: iterations are replayed up to such a start, one period is traced
    (:func:`sim.engine.fastforward.arenarun.trace` with ``leaves=True``: the split leaf may take a chunk an
    earlier allocation of the iteration parked in the tcache, which the next iteration
    then carves again) and, when it qualifies, the remaining whole periods are applied in
    closed form. Returns the iterations placed (``fills``, ``nodes`` and ``handles``
    updated)."""
    heap = sim.heap
    placed = 0
    while fills[t][0] != CAPACITY and placed < LEAF_PERIOD:
        _replay(heap, template, 1, trees, fills, nodes, handles)
        placed += 1
    if fills[t][0] != CAPACITY:
        sim.arena_replayed += placed
        return placed
    blocks = []
    pattern, made = trace(heap, sim.allocator.arena, window(template, LEAF_PERIOD), fills,
                          trees, leaves=True, allocated=blocks)
    per = len(blocks) // LEAF_PERIOD
    for i in range(LEAF_PERIOD):
        handles.replayed(blocks[i * per:(i + 1) * per])
    nodes.update(made)
    placed += LEAF_PERIOD
    sim.arena_replayed += placed
    periods = (count - placed) // LEAF_PERIOD
    return placed + (_carve(sim, pattern, trees, fills, nodes, periods, handles, LEAF_PERIOD)
                     if periods else 0)


def _carve(sim, pattern, trees, fills, nodes, n, handles, period=1):
    """Up to ``n`` repetitions of ``pattern`` (one iteration, or ``period`` of them) in
    closed form (:func:`sim.engine.fastforward.arenarun.advance`), right after the one :func:`trace`
    took it from: the heap's counters, the trees' ``fills`` and the BTreeMap ``nodes``
    placed follow. Returns the iterations applied (0: none, the pattern does not
    qualify or its wiring does not resolve)."""
    if pattern is None or not pattern.carves:
        return 0
    done = advance(sim.allocator.arena, pattern, trees, fills, n)
    if done is None:
        return 0
    n, run_nodes, closed = done
    handles.carved(closed, n, period)
    _count(sim.heap, pattern, run_nodes, n)
    nodes.update(run_nodes)
    # the leaves a period's own allocations split off (trace with leaves=True)
    nodes.update({s: k * n for s, k in Counter(pattern.leaves).items()})
    for f, m in zip(fills, pattern.inserts):
        append_counts(f, n * m)
    sim.arena_carved += n * period
    return n * period


def _count(heap, pattern, nodes, n):
    """The heap's counters after ``n`` iterations of ``pattern`` in closed form, whose
    appends made the BTreeMap nodes ``nodes`` (request size -> count)."""
    node_bytes = sum(s * k for s, k in nodes.items())
    node_blocks = sum(nodes.values())
    heap.live_bytes += n * pattern.kept_bytes + node_bytes
    heap.live_blocks += n * pattern.kept_blocks + node_blocks
    heap.allocs += n * pattern.allocs + node_blocks
    if heap.live_bytes > heap.peak_bytes:
        # below the next exact iteration's own peak: each iteration leaves its kept
        # bytes behind, so none of these reached higher than that one will
        heap.peak_bytes = heap.live_bytes


def _check_nodes(trees, counts, nodes, fills):
    """The BTreeMap nodes the arena got (``nodes``, request size -> count) and the trees'
    rightmost fills after them (``fills``) must be what the trees' closed-form append
    counted (``counts``: their node counts before it)."""
    expected = Counter()
    for tree, (leaves, internals) in zip(trees, counts):
        expected[tree.leaf_bytes] += tree.leaves - leaves
        expected[tree.internal_bytes] += tree.internals - internals
    if +expected != +nodes or fills != [tree.fills() for tree in trees]:
        raise AssertionError("the BTreeMap nodes placed on the arena differ from the "
                             "closed-form append's")


def _replay(heap, template, count, trees, fills, nodes, handles):
    """The heap events of ``count`` iterations, one iteration after the other, in the
    order ``template`` recorded them: a glibc arena places each request where the
    previous ones left room, as in exact mode. Each append to a BTreeMap allocates the
    nodes its splits make (:meth:`~sim.platform.btree.BTreeNodes.append_allocs`); the
    bookkeeping of the nodes and keys is then recorded in closed form by the caller.
    ``fills``: the trees' rightmost fills, updated in place; ``nodes`` (a Counter)
    counts the nodes' request sizes; ``handles`` learns each iteration's blocks."""
    alloc, free = heap.alloc, heap.free
    for _ in range(count):
        blocks = []
        handles.replayed(blocks)
        for kind, nbytes, arg in template:
            if kind == _ALLOC:
                blocks.append(alloc(nbytes, arg))
            elif kind == _FREE:
                free(nbytes, blocks[arg] if arg >= 0 else None)
            elif kind == _INSERT:
                nodes.update(trees[nbytes].append_allocs(fills[nbytes], alloc))
            elif kind == _ALLOC_MANY:
                heap.alloc_many(nbytes, arg)
            else:
                heap.free_many(nbytes, arg)


def _probe(sim, body, snap, replay, previous=None, before=None, tape=None, floor=None,
           graph=None):
    """Run one iteration exactly, recording its heap events; returns its effect and its
    record (its heap events in order and its live nodes' orders; ``previous``: the effect
    of the iteration before, if it was probed; ``before``: its record; ``tape``: on a
    glibc arena, the :class:`~sim.engine.fastforward.tape.ArenaTape` of the loop's probes;
    ``floor``: the loop's first node id, :class:`_Older`; ``graph``: the graph an earlier
    probe of the loop found a chain growing in, whose tables' growth the probe notes,
    :func:`sim.engine.fastforward.chainrun.table_sizes`)."""
    heap = sim.heap
    _Recorder.events = Counter()
    # a probe inside a probed iteration (a loop in the loop) leaves the outer one
    # without a trace
    # every heap event in order, on every allocator (on a glibc arena besides the replay
    # template below)
    _Recorder.trace = [] if sim.allocator.bulk_exact() or replay else None
    _Recorder.trace_at = {}
    trees = ()
    locator = sim.client.locator
    log = None
    if replay:
        _Recorder.trees = (locator.graphs_tree, locator.keys_tree)
    outer = TreeLog.current, sim.timing.log
    if outer[0] is not None:
        # a loop inside a probed iteration: the outer iteration is no chain of its own
        # (what this loop applies in closed form is not in its records)
        outer[0].valid = False
    if locator is not None:
        # a chain may grow (sim.engine.fastforward.chainrun): its sweeps and BTreeMap operations are recorded
        trees = (locator.graphs_tree, locator.keys_tree)
        log = TreeLog(trees, _Recorder.trace)
        log.sizes = table_sizes(sim, graph)
        TreeLog.current = log
        sim.timing.log = []
        for tree in trees:
            tree.tap = _RECORDING_TREE if replay else _WATCHING_TREE
    outer_older = _Older.floor, _Older.tree, _Older.changes
    watched = locator is not None
    if watched:
        _Older.floor = snap.next_id if floor is None else floor
        _Older.tree, _Older.changes = locator.graphs_tree, Counter()
    outer_tape = _Recorder.tape
    if replay and tape is not None and outer_tape is None:
        _Recorder.tape = tape
        tape.begin(snap.next_id)
    heap.tap = _RECORDER
    # the policy's own state; its seam calls only after an iteration that moved a counter
    counted = previous is not None and getattr(previous, "seams", None) is not None \
        and previous.seams.counters
    policy_probe = seams.begin(sim, snap.next_id if floor is None else floor, counted)
    try:
        body()
    finally:
        policy_record = seams.end(sim, policy_probe)
        heap.tap = None
        _Recorder.tape = outer_tape
        for tree in trees:
            tree.tap = _WATCHING_TREE if outer[0] is not None else None
        sweeps = sim.timing.log
        TreeLog.current, sim.timing.log = outer
        changes = _Older.changes if watched else None
        _Older.floor, _Older.tree, _Older.changes = outer_older
        if changes and _Older.changes is not None:
            # the outer probe's iteration made them too
            for key, change in changes.items():
                _Older.note(_Older.tree, key, change)
    older = bool(changes and any(changes.values()))
    _Recorder.trees = ()
    trace = None if _Recorder.trace is None else tuple(_Recorder.trace)
    # the blocks the iteration allocated and kept, by handle: position of the alloc
    kept = _Recorder.trace_at if trace is not None else None
    template = kept_allocs = None
    if replay and trace is not None:
        template, kept_allocs = _arena_template(trace, log, kept)
    _Recorder.trace = _Recorder.trace_at = None
    record = (trace, _orders(sim, snap), kept)
    chain = None if log is None else (sweeps, log, previous)
    taped = tape.end() if tape is not None and outer_tape is None else None
    effect = None if older else _measure(sim, snap, _Recorder.events, template, chain, record,
                                         before, kept_allocs, taped)
    if effect is not None and policy_record is not None:
        # what the iteration did to the policy's own state, and the seam calls it made;
        # a change no other iteration can repeat makes it stand for none
        effect.seams = policy_record
        if policy_record.unreplayable:
            effect = None
    return effect, record


def _arena_template(trace, log, kept):
    """``(template, kept allocations)`` of a probed iteration on a glibc arena, read off its
    ``trace`` and BTreeMap ``log``, or ``(None, None)``. The template is the iteration's
    events in order without those of its BTreeMaps' operations, each append to one of the
    locator's maps marked ``(INSERT, tree, 0)`` where it came (its nodes' allocations depend
    on the map, not on the iteration: the replay makes them), a free naming the index of
    the alloc it frees among the template's (-1: the newest block of its size); kept
    allocations: handle key -> that index, for the blocks the iteration kept (``kept``:
    handle key -> trace position). An operation other than an append, a realloc, or a free
    of a block of an operation's, has no template."""
    if log.ran or any(kind != "insert" or i not in log.appends
                      for i, (_, kind, _) in enumerate(log.ops)):
        return None, None
    inside = set()
    for start, end in log.spans:
        inside.update(range(start, end))
    inserts = {}
    for (tree, _, _), at in zip(log.ops, log.at):
        inserts.setdefault(at, []).append((_INSERT, tree, 0))
    template, index = [], {}
    for i, (kind, nbytes, arg, _) in enumerate(trace):
        template.extend(inserts.pop(i, ()))
        if i in inside:
            continue
        if kind == _ALLOC:
            index[i] = len(index)
            template.append((_ALLOC, nbytes, arg))
        elif kind == _FREE:
            if arg >= 0 and arg not in index:
                return None, None
            template.append((_FREE, nbytes, index[arg] if arg >= 0 else -1))
        elif kind == _REALLOC:
            return None, None
        else:
            template.append((kind, nbytes, arg))
    for ops in inserts.values():
        template.extend(ops)
    return tuple(template), {key: index[at] for key, at in kept.items() if at in index}


def _key(effect):
    """What must be equal in agreeing iterations: the effect's key and the change of the
    policy's own state (:class:`~sim.engine.fastforward.seams.SeamRecord`)."""
    record = getattr(effect, "seams", None)
    return effect.key(), None if record is None else record.key


def _orders(sim, snap) -> tuple:
    """``(offset, order)`` of the nodes the iteration registered that are still there (ids
    relative to its first): a live node's order is state the next iteration builds on
    (a chain kept across iterations deepens the tape every time)."""
    locator = sim.client.locator
    if locator is None:
        return ()
    out = []
    graphs = locator.graphs
    for i in range(snap.next_id, sim._next_id):
        graph = graphs.get(i)
        if graph is not None:
            step = graph.server.steps.get(i)
            if step is not None:
                out.append((i - snap.next_id, step.node.order))
    return tuple(out)


def _order_steps(before, orders):
    """How much each live node's order grows from one iteration to the next
    (``(offset, step)``), or None when the two iterations left different nodes."""
    if before is None or [o for o, _ in before] != [o for o, _ in orders]:
        return None
    return tuple((o, b - a) for (o, a), (_, b) in zip(before, orders))


def repeat(sim, n, body):
    """Run ``body()`` ``n`` times, fast-forwarding identical iterations (see module doc)."""
    if n <= 0:
        return
    key = _body_key(body)
    misses, skip = sim.ff_misses.get(key, (0, 0))
    # a loop inside an iteration whose heap events are being taped runs exactly: the tape
    # is replayed event by event
    taped = _Recorder.tape is not None and _Recorder.tape.events is not None
    if not sim.fast_forward or sim.contended or n < AGREE + 2 or skip or taped:
        if skip and not taped:
            sim.ff_misses[key] = (misses, skip - 1)
        for i in range(n):
            sim.loop_index = i
            body()
        return
    found = _repeat(sim, n, body)
    misses = 0 if found else misses + 1
    skip = min(MAX_SKIPPED_CALLS, 2 ** (misses - MISSES_BEFORE_SKIPPING)) \
        if misses >= MISSES_BEFORE_SKIPPING else 0
    sim.ff_misses[key] = (misses, skip)


#: iterations in a row a chain's effect may find no room to apply before the loop is
#: probed afresh (twice as many each time)
STALE_CHAIN = 8

#: live graphs up to which a probe before any chain was found watches the largest one's
#: tables (:func:`_largest_graph`)
WATCHED_GRAPHS = 64


def _untraceable(sim, snap, measured, record, replay) -> bool:
    """Whether a probe on a glibc arena (``replay``) refused for reasons the iterations
    after it share: its events could not be traced (it freed a block an earlier
    iteration made: the RootSteps of the parameters the step before trained), so no
    chain or leak is replayed from them, and it ran a backward and left the locator
    with other entries, so no steady template or node run stands for it. A loop summing
    a tracked value across training steps does that every step; later iterations are
    probed again all the same (a window that stops growing once full)."""
    locator = sim.client.locator
    return (replay and measured is None and record[0] is None and locator is not None
            and sim.backwards != snap.backwards and locator.entry_count() != snap.entries)


def _exactly(sim, body, start, stop, watch) -> bool:
    """Iterations ``start`` to ``stop`` run exactly; returns, with ``watch``, whether each
    ran a backward and left the locator with other entries (else False)."""
    locator = sim.client.locator
    for i in range(start, stop):
        sim.loop_index = i
        if watch:
            backwards, entries = sim.backwards, locator.entry_count()
        body()
        if watch:
            watch = sim.backwards != backwards and locator.entry_count() != entries
    return watch


def _largest_graph(sim):
    """The live graph with the most steps, which a loop's probes watch before one of them
    found a chain (its tables may grow in every early iteration), or None (no locator,
    or more than :data:`WATCHED_GRAPHS` live graphs)."""
    locator = sim.client.locator
    if locator is None or len(locator.live) > WATCHED_GRAPHS:
        return None
    # a graph whose server is not built yet (one untracked op's) is read as it is, not
    # built by the reading
    return max((g for g in locator.live if type(g) is not SingleNodeGraph
                and isinstance(g, Graph)), key=lambda g: len(g.server.steps), default=None)


def _body_key(body) -> tuple:
    """What tells one loop from another in :func:`repeat`'s record of misses: the body's
    code and the objects its closure holds (one lambda over another model is another
    loop)."""
    code = getattr(body, "__code__", None)
    if code is None:
        return (id(body),)
    held = []
    for cell in body.__closure__ or ():
        try:
            held.append(id(cell.cell_contents))
        except ValueError:          # a cell not yet filled
            held.append(None)
    return (code, *held)


def _repeat(sim, n, body) -> bool:
    """:func:`repeat` with fast-forward on; returns whether some iterations repeated."""
    found = False
    done = 0
    effects = []
    effect = None
    # a glibc arena: the heap events of a node-leaving iteration are replayed in order
    replay = not sim.allocator.bulk_exact()
    tape = ArenaTape() if replay else None
    earlier = ()
    record = None
    probes, wait = MAX_PROBE, MAX_PROBE
    floor = sim._next_id         # the loop's first node id (_Older)
    chained = None               # the graph a probe found a chain growing in
    idle, stale = 0, STALE_CHAIN  # iterations a chain effect could not apply, in a row
    # per probe, the names of the body's plain Python values it changed (pystate)
    moves = []
    # probes in a row that refused for a reason the iterations after them share
    # (:func:`_untraceable`); a round of probes ends at LASTING_REFUSALS of them, the
    # first one a later round's
    lasting, enough = 0, LASTING_REFUSALS
    while done < n:
        if effect is None:
            snap = _Snapshot(sim)
            snap.earlier = earlier
            earlier = ((snap.allocator,) + earlier)[:MAX_PERIOD - 1]
            sim.loop_index = done
            watched = watch_graph(sim, chained)
            try:
                state = plain_state(body)
                measured, record = _probe(sim, body, snap,
                                          replay and sim.client.locator is not None,
                                          effects[-1] if effects else None, record, tape,
                                          floor, chained or _largest_graph(sim))
                moves.append(moved(state, plain_state(body)))
                done += 1
                if measured is not None and measured.shape == "chain":
                    if watched is not None and measured.graph is chained:
                        # a probed iteration shows the tables' room as an exact one run
                        # while the effect holds does (note_tables), for probes that agree
                        before = effects[-1] if effects else None
                        if before is not None and _key(before) == _key(measured):
                            measured.room = before.room
                        note_tables(sim, measured, watched)
                    chained = measured.graph
            finally:
                # the tables' and the timing's taps come off whatever the body raised
                unwatch(watched)
            effects.append(measured)
            lasting = lasting + 1 if _untraceable(sim, snap, measured, record, replay) else 0
            last = effects[-AGREE:]
            if (len(last) == AGREE and last[0] is not None
                    and all(e is not None and _key(e) == _key(last[0]) for e in last)):
                changed = [name for names in moves[-AGREE:] for name in names]
                if changed:
                    # the body's own Python state moves every iteration (a counter it
                    # branches on): skipped iterations would not move it
                    note_moved(body, changed)
                    for i in range(done, n):
                        sim.loop_index = i
                        body()
                    return found
                effect = measured
                found = True
            elif lasting >= enough or (
                    len(effects) >= probes + (PROBES_PER_BACK * tape.reach if tape is not None
                                              else 0)
                    and (all(e is None for e in effects[-AGREE:])
                         or len(effects) >= MAX_SHAPED_PROBES)):
                # a round that ended at lasting refusals is not followed by another while
                # every iteration run exactly in between still ran a backward and changed
                # the locator's entries (what made them lasting, less the trace)
                shaped = lasting >= enough
                while True:
                    stop = min(n, done + wait)
                    shaped = _exactly(sim, body, done, stop, shaped)
                    done, wait = stop, 2 * wait
                    if not shaped or done >= n:
                        break
                # probed afresh: the effects and records of the probes before do not
                # describe the iterations just before the next one
                effects, earlier, record = [], (), None
                tape = ArenaTape() if replay else None
                probes = AGREE + 3
                lasting, enough = 0, 1
            continue
        horizon = _horizon(sim, effect)
        count = min(n - done - 1, horizon)
        if effect.shape == "chain":
            # a chain found while the loop's first iterations still differed (its probes
            # may take iterations in which the chain's tables grow) can describe them
            # and none after: probed afresh after ``stale`` iterations it could not apply
            idle = 0 if horizon > 0 else idle + 1
            if idle >= stale:
                effect, effects, earlier, record = None, [], (), None
                idle, stale = 0, 2 * stale
                continue
        # the policy's own state: the iteration where it would act runs exactly, and the
        # loop is probed afresh after it
        count, acts = seams.horizon(sim, effect, count)
        count -= count % effect.period
        if sim.limits.max_ops is not None and effect.registered:
            count = min(count, max(0, (sim.limits.max_ops - sim.registered) // effect.registered))
        if count > 0:
            applied = _apply(sim, effect, count, tape)
            if applied is None:
                # the arena cannot replay the iteration's template (it names a block its
                # carried iterations did not make): the rest runs exactly
                for i in range(done, n):
                    sim.loop_index = i
                    body()
                return found
            sim.ff_applied[effect.shape] += applied
            done += applied
        sim.loop_index = done
        if getattr(effect, "tape", None) is not None:
            # the next iteration is probed: its blocks are the ones the next replay
            # starts from, and it must have the same template
            snap = _Snapshot(sim)
            state = plain_state(body)
            measured, record = _probe(sim, body, snap, True, effect, record, tape, floor)
            moves.append(moved(state, plain_state(body)))
            done += 1
            if measured is None or _key(measured) != _key(effect):
                effect, effects, earlier = None, [measured], (snap.allocator,)
            continue
        watched = watch_tables(sim, effect)
        try:
            body()
            note_tables(sim, effect, watched)
        finally:
            unwatch(watched)
        done += 1
        effect.since += 1
        if acts:
            effect, effects, earlier, record = None, [], (), None
            tape = ArenaTape() if replay else None
    return found
