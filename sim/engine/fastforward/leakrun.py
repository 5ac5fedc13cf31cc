"""Fast-forward of a loop that leaks graphs every iteration.

burn-0.20-pre.1 never sweeps an abandoned tracked graph. p10-ema's ``log`` mode reads
the norm of ``w.detach()`` after every training step: ``powi``, ``sum`` and ``sqrt`` of
a tensor that still requires grad make a new 4-node graph no backward ever reaches, and
its ``powi`` step keeps the weight it squared (1 MiB, a LARGE block) in its checkpoint
actions, so the next SGD step writes the new weight into a fresh buffer. The iteration
leaves the bookkeeping as it found it but for that graph, and no two iterations are the
same allocator state (each leaked weight takes slices of the LARGE zone between the
step's transient buffers). A forward of ``model.valid()`` on autodiff inputs under
burn-0.22.1 leaves six dead single-node graphs an iteration until the next backward's
sweep (train-validate's validation, pit-infer's group B). What repeats is the
iteration's *events*. :func:`leak_effect`
proves that from three consecutive iterations (:mod:`sim.engine.fastforward.repeat`), and
:func:`apply_leak` applies ``count`` more:

* the heap events of the iteration, recorded in order (the BTreeMaps' own node
  allocations left out), are replayed through the heap as the ``drift`` shape replays
  its own (:func:`sim.engine.fastforward.repeat._replay_drift`): every block lands where exact mode
  puts it, LARGE slices included, with the high-water marks and page faults it makes;
* the leaked graphs are built again with the skipped iteration's ids -- ``Arc<Graph>``
  with its server and tables, each node, ref count, boxed step and checkpoint actions,
  the locator's entries and key set -- while the heap only counts (its blocks came with
  the replayed events; the builder's own count is checked against them once per batch);
  the tensors its actions keep are new :class:`~sim.burn.backend.Buffer` s holding the
  replayed blocks;
* the locator's two BTreeMaps get the iteration's own sequence of inserts and removals,
  ids shifted (their nodes split and merge as in exact mode);
* what the iteration keeps besides -- the new parameters' one-node graphs -- keeps its
  objects and takes the ids of the last skipped iteration (as in :mod:`sim.engine.fastforward.chainrun`);
  the tensor a module still holds (the weight the last leaked graph saved) becomes the
  newest iteration's: its object takes the newest block, the graph the last exact
  iteration left gets a new object for the old one;
* the L2 model's chunks: the leaked tensors of the last iterations are still in the LRU
  (a 16-MiB L2 holds about twelve leaked weights); their chunks move to the graphs of the
  iterations exact mode would have them in, so the LRU is the one exact mode leaves;
* time: the iteration's work, checked to the picosecond across the probed iterations.

Only where the allocator keeps counts per size (not a glibc arena), for graphs whose
nodes no tensor holds, with no Balanced checkpointing (retro-forwards); the policy's own
state is replayed by :mod:`sim.engine.fastforward.seams`. Tests compare the CSVs with
exact mode.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from .arenarun import ALLOC, ALLOC_MANY, FREE, FREE_MANY, REALLOC, handle_key
from ...burn.checkpoint import CheckpointerBuilder
from ...burn.runtime.graph import Graph
from ...burn.graph.node import Node, NodeRefCount
from ...burn.graph.runs import graph_blocks, node_blocks
from ...burn.graph.step import Step
from ...burn.backend import _TAKEN, Backend, Buffer
from ...platform.l2_cache import Chunk
from ...platform.heap import HeapTap
from .replay import relabel_rotating, relative_tree_ops, replay_tree_ops, rotating_graph

__all__ = ["LeakEffect", "leak_effect", "apply_leak", "l2_signature", "l2_contents"]

#: leaked graphs of earlier iterations looked at for chunks still in the L2 model's LRU
MAX_RESIDENT = 64


class LeakMember(NamedTuple):
    """One node of the leaked graph, relative to its iteration's first id: ``parents``
    ``((offset, is_leaf), ...)``, ``step_parents`` ``(offset or None, ...)``, ``keyed``:
    in the origin's key set; ``actions``: an :class:`ActionsTemplate` or None."""
    offset: int
    kind: str
    op: object
    nbytes: int
    shapes: tuple
    requirement: int
    memory_bound: bool
    parents: tuple
    step_parents: tuple
    order: int
    keyed: bool
    actions: object


class ActionsTemplate(NamedTuple):
    """A step's checkpoint actions: ``explicit`` and ``backup`` as ``(node offset or None,
    tensor index or None, block sizes)``, the operand indices, the two Vecs' (len, cap)."""
    explicit: tuple
    backup: tuple
    inputs: tuple
    vecs: tuple


class Kept(NamedTuple):
    """A tensor storage the leaked graph's actions keep: its bytes, the size and replayed
    position of its data block (None: a small block, no handle), whether its ``Arc`` was
    taken, its strides' bytes, how many actions hold it, whether a module holds it too
    (the tip: at most one), and whether it has an L2 chunk."""
    nbytes: int
    size: int
    position: object
    taken: bool
    strides: int
    refs: int
    tip: bool
    chunk: bool
    #: on a glibc arena, the replayed positions of the blocks of its ``Box`` and ``Arc``
    #: and of its strides (None: none, or freed by size); elsewhere ``()``
    handles: tuple = ()


def l2_signature(sim) -> tuple:
    """What the L2 models' LRUs hold, by size and order, and their free chunks per size:
    a leaking iteration must leave it as it found it."""
    out = []
    for kind, backend in sim._backends.items():
        cache = backend.cache
        if cache is not None:
            out.append((kind, cache.resident, tuple(c.nbytes for c in cache.lru),
                        tuple(sorted((n, len(v)) for n, v in cache.free.items()))))
    return tuple(out)


def l2_contents(sim) -> tuple:
    """Each L2 model's chunks in LRU order and its free lists (by size, most recent last):
    ``((kind, chunks, {nbytes: chunks}), ...)``."""
    return tuple((kind, list(backend.cache.lru),
                  {n: list(v) for n, v in backend.cache.free.items() if v})
                 for kind, backend in sim._backends.items() if backend.cache is not None)


class LeakGraph(NamedTuple):
    """One graph an iteration leaks: its origin's offset, members, kept storages (indices
    in its members' actions are into ``kept``) and table sizes."""
    origin: int
    members: tuple
    kept: tuple
    tables: tuple


class LeakEffect:
    """What one leaking iteration did (see the module doc)."""

    shape = "leak"
    period = 1
    since = 0
    rss_drift = 0
    template = None
    node_order = ()
    graph_order = ()
    drop_order = None
    parents = ()
    offset = 0
    deltas = ()

    def __init__(self, stride, registered, backwards, times, graphs, rotating, tree_ops,
                 trace, blocks, allocs, order, backends):
        self.stride = stride
        self.registered = registered
        self.backwards = backwards
        #: (work ps without page faults, compute ns, bookkeeping ns, cleanup ns)
        self.times = times
        #: the leaked graphs (:class:`LeakGraph`), in creation order
        self.graphs = graphs
        #: every kept storage of the iteration, graph after graph (a *slot*)
        self.kept = tuple(k for g in graphs for k in g.kept)
        self.rotating = rotating
        self.tree_ops = tree_ops
        #: the iteration's heap events without the BTreeMaps' nodes (replayed)
        self.trace = trace
        self.plan = None
        #: the small blocks the builder must count (size -> blocks), and the allocations
        #: counted without an event
        self.blocks = blocks
        self.allocs = allocs
        #: the iteration's new graphs in creation order (``("L", i)``: leaked graph ``i``,
        #: ``("R", offset)``: a rotating one), and the backends of the kept storages
        self.order = order
        self.backends = backends
        self.checked = False

    def key(self):
        return ("leak", self.stride, self.registered, self.backwards, self.times[0],
                self.graphs, self.rotating, self.tree_ops, self.trace, self.allocs,
                self.order, self.blocks)


# -- detection ----------------------------------------------------------------------------

class _Refuse(Exception):
    pass


def _rotating(locator, g, ids) -> bool:
    """A one-node graph created in the iteration whose node a tensor holds (a module's
    new parameter): one :func:`sim.engine.fastforward.chainrun.chain_effect` lets rotate."""
    return (rotating_graph(locator, g, ids)
            and g.server.memory_management.nodes[g.origin][0].strong > 1)


def _tables(graph, locator):
    server = graph.server
    memory = server.memory_management
    key_table = locator.key_tables.get(graph.origin)
    return (server.steps_table.buckets, server.actions_table.buckets,
            memory.nodes_table.buckets, memory.leaves_table.buckets,
            None if key_table is None else key_table.buckets)


def actions_template(actions, first, nodes, tensors, index, handles=False) -> ActionsTemplate:
    """The :class:`ActionsTemplate` of a step's checkpoint actions, node ids relative to
    ``first``; the storages they hold are appended to ``tensors`` (``index``: ``id`` ->
    position there). Raises :class:`_Refuse` where an action names a node not in
    ``nodes`` (a container, or a predicate on ids), a block has a handle, or the actions
    were moved or hold a Vec's block (``handles``: blocks may have handles, a glibc
    arena's, which the builder takes from the replay)."""
    if actions.moved is not None or (
            not handles and any(v.block is not None for v in actions._vecs)):
        raise _Refuse
    known = nodes if callable(nodes) else nodes.__contains__

    def entry(item):
        node_id, prim, blocks = item
        if node_id is not None and not known(node_id):
            raise _Refuse
        if not handles and any(handle is not None for _, handle in blocks):
            raise _Refuse
        at = None
        if prim is not None:
            at = index.get(id(prim))
            if at is None:
                at = index[id(prim)] = len(tensors)
                tensors.append(prim)
        return (None if node_id is None else node_id - first, at,
                tuple(nbytes for nbytes, _ in blocks))

    return ActionsTemplate(tuple(map(entry, actions.explicit)),
                           tuple(map(entry, actions.backup)), tuple(actions.inputs),
                           tuple((v.len, v.capacity) for v in actions._vecs))


def kept_storages(tensors, refs, kept_pos, small_tip=False, most_tips=1) -> tuple:
    """The :class:`Kept` template of each storage ``tensors`` lists (``refs``: how many
    actions hold each, by index; ``kept_pos``: handle key -> replayed position of the
    blocks the iteration allocated and kept, or None). Raises :class:`_Refuse` for a
    storage this module cannot build again: not a plain host buffer, a block from before
    the iteration, an Arc not taken, or more than one held from outside the actions; or a
    storage held from outside whose data is a small block (it has no position that shows
    it is the iteration's), unless ``small_tip`` (the caller checks it otherwise);
    ``most_tips``: how many may be held from outside (None: any number, each handed to
    the newest iteration's member by the caller)."""
    kept = []
    tips = 0

    def position_of(block):
        if block is None or block is _TAKEN or kept_pos is None:
            return None
        at = kept_pos.get(handle_key(block))
        if at is None:
            raise _Refuse          # a block from before the iteration
        return at

    for at, prim in enumerate(tensors):
        token = prim._token
        if (type(prim) is not Buffer or type(token) is not tuple or len(token) != 4
                or prim.device_box_block is not None
                or getattr(prim._free, "__func__", None) is not Backend._free_cpu):
            raise _Refuse
        size, block, box, arc = token
        position = position_of(block)
        handles = ()
        if box is not None or prim.strides_block is not None or (
                arc is not None and arc is not _TAKEN):
            # the allocator's handles of the rest (a glibc arena): the iteration's blocks
            if kept_pos is None:
                raise _Refuse
            handles = (position_of(box), position_of(arc), position_of(prim.strides_block))
        tip = prim.holders > refs[at]
        if prim.holders < refs[at] or (tip and block is None and kept_pos is not None
                                       and not small_tip):
            raise _Refuse
        tips += tip
        kept.append(Kept(prim.nbytes, size, position, arc is _TAKEN, prim.strides,
                         refs[at], tip, prim.chunk is not None, handles))
    if most_tips is not None and tips > most_tips:
        raise _Refuse
    return tuple(kept)


def _template(locator, graph, first, kept_pos=None):
    """``(members, kept tensors' templates, the tensors)`` of a leaked graph whose
    iteration's first id is ``first``; ``kept_pos``: handle key -> replayed position of
    the blocks the iteration allocated and kept (None: positions not wanted, as for the
    graphs of earlier iterations). Raises :class:`_Refuse` where the graph is not one
    this module can build."""
    server = graph.server
    memory = server.memory_management
    if (memory.runs or memory.serials is not None or memory.referenced or graph.held
            or locator.key_runs.get(graph.origin)):
        raise _Refuse
    keys = locator.keys.get(graph.origin)
    if keys is None:
        raise _Refuse
    nodes = memory.nodes
    members, tensors, index = [], [], {}
    for node_id, (rc, parents) in nodes.items():
        step = server.steps.get(node_id)
        if step is None or step.node.id != node_id or rc.strong != 1 or rc.extra:
            raise _Refuse
        node = step.node
        if node.retro is not None or step.cost is not None or node_id < first:
            raise _Refuse
        if any(pid not in nodes for pid, _ in parents):
            raise _Refuse
        step_parents = []
        for p in step.parent_nodes:
            if p is None:
                step_parents.append(None)
            elif p.id in nodes and server.steps[p.id].node is p:
                step_parents.append(p.id - first)
            else:
                raise _Refuse
        actions = None
        if step.actions is not None:
            actions = actions_template(step.actions, first, nodes, tensors, index)
        members.append(LeakMember(
            node_id - first, step.kind, step.op, step.nbytes, step.shapes, node.requirement,
            node.memory_bound, tuple((pid - first, leaf) for pid, leaf in parents),
            tuple(step_parents), node.order, node_id in keys, actions))
    if not keys <= set(nodes) or graph.origin not in nodes or graph.entries != len(nodes):
        raise _Refuse
    refs = Counter()
    for m in members:
        if m.actions is not None:
            for _, at, _ in m.actions.explicit + m.actions.backup:
                if at is not None:
                    refs[at] += 1
    kept = kept_storages(tensors, refs, kept_pos)
    return tuple(members), tuple(kept), tensors


def _strip(trace, spans, kept):
    """The trace without the events the BTreeMaps' operations made (``spans``), frees and
    reallocs re-pointed at the new positions; and ``kept`` (handle key -> position)
    mapped likewise (the blocks the operations keep left out). None where an event outside
    the spans names one inside."""
    inside = set()
    for start, end in spans:
        inside.update(range(start, end))
    new_at = {}
    out = []
    for i, event in enumerate(trace):
        if i in inside:
            continue
        kind, nbytes, arg, unfaulted = event
        if kind == FREE and arg >= 0:
            if arg not in new_at:
                return None
            event = (kind, nbytes, new_at[arg], unfaulted)
        elif kind == REALLOC:
            old, at = arg
            if at >= 0:
                if at not in new_at:
                    return None
                event = (kind, nbytes, (old, new_at[at]), unfaulted)
        new_at[i] = len(out)
        out.append(event)
    positions = {}
    for key, at in kept.items():
        if at in inside:
            continue        # a BTreeMap's node (a glibc arena's handle): the operations'
        positions[key] = new_at[at]
    return tuple(out), positions


def leak_effect(sim, snap, trees, record, times, allocs):
    """The :class:`LeakEffect` of the iteration just probed, or None when it does not leak
    graphs this module can build (``snap``: the state before it; ``trees``: its
    :class:`~sim.engine.fastforward.chainrun.TreeLog`; ``record``: its heap events, live nodes' orders and
    kept blocks; ``times``: its work without page faults and its time split, as
    :func:`sim.engine.fastforward.repeat._measure` measured them; ``allocs``: its allocations counted
    without an event (the BTreeMaps' own come with their replayed operations))."""
    locator = sim.client.locator
    trace, _, kept_at = record
    if (locator is None or trace is None or kept_at is None or not trees.valid
            or trees.trace is None or not sim.allocator.bulk_exact()
            or sim.rss_extra_bytes != snap.rss_extra or locator.run_entries
            or len(locator.live) <= snap.live_graphs or l2_signature(sim) != snap.l2
            or sim.allocator.cluster() != snap.cluster):
        return None
    w0, w1 = snap.next_id, sim._next_id
    stride = w1 - w0
    by_graph = {}
    for i in range(w0, w1):
        g = locator.graphs.get(i)
        if g is not None:
            by_graph.setdefault(g, []).append(i)
    rotating, leaked = [], []
    for g, ids in by_graph.items():
        if g.origin < w0:
            return None           # the iteration added to an older graph
        if _rotating(locator, g, ids):
            rotating.append(g.origin - w0)
        else:
            leaked.append(g)
    leaked.sort(key=lambda g: g.origin)
    if (not leaked or len(locator.live) != snap.live_graphs + len(leaked)
            or locator.entry_count() - snap.entries
            != sum(len(g.server.memory_management.nodes) for g in leaked)):
        return None
    stripped = _strip(trace, trees.spans, kept_at)
    if stripped is None:
        return None
    trace, positions = stripped
    specs, tensors = [], []
    try:
        for g in leaked:
            members, kept, mine = _template(locator, g, w0, positions)
            specs.append(LeakGraph(g.origin - w0, members, kept, _tables(g, locator)))
            tensors += mine
    except _Refuse:
        return None
    if sum(k.tip for spec in specs for k in spec.kept) > 1:
        return None
    tree_ops = relative_tree_ops(trees.ops, w0, w0 - stride)
    if tree_ops is None:
        return None
    # the blocks the iteration kept, less its tensors' own (they come with the replayed
    # events): what the builder must allocate, small blocks only
    blocks = builder_blocks(sim, trace, tensors)
    if blocks is None:
        return None
    # and they must be the graphs' own, read off their objects (the builder makes those)
    own = Counter()
    for g in leaked:
        own.update(_graph_blocks(sim, g, locator))
    if blocks != {n: c for n, c in sorted(own.items()) if c}:
        return None
    # the order the iteration's new graphs sit in among the live ones (creation order)
    tail = list(locator.live)[-len(by_graph):]
    if set(tail) != set(by_graph):
        return None
    order = tuple(("L", leaked.index(g)) if g in leaked else ("R", g.origin - w0)
                  for g in tail)
    return LeakEffect(stride, sim.registered - snap.registered, sim.backwards - snap.backwards,
                      times, tuple(specs), tuple(rotating), tree_ops, trace,
                      tuple(blocks.items()), allocs, order,
                      tuple(prim._free.__self__ for prim in tensors))


def builder_blocks(sim, trace, tensors):
    """The blocks an iteration's heap events (``trace``) leave allocated less its kept
    storages' own (``tensors``: their data, box, Arc and strides come with the replayed
    events): what a builder of its kept objects must allocate, ``{size: blocks}`` in size
    order; None where that is not small blocks only."""
    blocks = _net(trace)
    for prim in tensors:
        backend = prim._free.__self__
        size, block, _, arc = prim._token
        blocks[size] -= 1
        if backend.bytes_box_bytes:
            blocks[backend.bytes_box_bytes] -= 1
        if arc is not _TAKEN and backend.bytes_arc_bytes:
            blocks[backend.bytes_arc_bytes] -= 1
        if prim.strides:
            blocks[prim.strides] -= 1
    # the builder counts its blocks into the allocator's size classes; on a glibc arena
    # it takes the replayed blocks' handles instead (sim.engine.fastforward.keptchain)
    small = sim.heap._small
    if any(n < 0 or (n and nbytes not in small and not sim.heap.orders_frees)
           for nbytes, n in blocks.items()):
        return None
    return {nbytes: n for nbytes, n in sorted(blocks.items()) if n}


def _graph_blocks(sim, graph, locator) -> Counter:
    """Heap blocks a leaked graph holds apart from its kept storages, by size: the graph's
    (``Arc<Graph>``, its tables, the origin's key set), each node's (ref count, parents,
    ``Arc<Node>``, boxed step) and each step's checkpoint actions (their blocks, their
    two Vecs)."""
    layout = sim.layout
    server = graph.server
    out = Counter(graph_blocks(layout, server))
    table = locator.key_tables.get(graph.origin)
    if table is not None and table.nbytes:
        out[table.nbytes] += 1
    for node_id, (rc, parents) in server.memory_management.nodes.items():
        step = server.steps[node_id]
        out.update(node_blocks(layout, step, parents))
        actions = step.actions
        if actions is not None:
            for _, _, blocks in actions.explicit + actions.backup:
                out.update(nbytes for nbytes, _ in blocks)
            for vec in actions._vecs:
                if vec.capacity:
                    out[vec.capacity * vec.elem] += 1
    return out


def _net(trace) -> Counter:
    """Blocks by size an iteration's heap events leave allocated."""
    net = Counter()
    for kind, nbytes, arg, _ in trace:
        if kind == ALLOC:
            net[nbytes] += 1
        elif kind == FREE:
            net[nbytes] -= 1
        elif kind == ALLOC_MANY:
            net[nbytes] += arg
        elif kind == FREE_MANY:
            net[nbytes] -= arg
        else:
            net[arg[0]] -= 1
            net[nbytes] += 1
    return net


# -- applying it --------------------------------------------------------------------------

class _Counting(HeapTap):
    """The heap's tap while a leaked graph is built: it counts the blocks the builder
    allocates and frees (by size, in :attr:`counts`) and changes nothing else; the
    replayed events placed them. The objects built keep the heap itself, so their later
    frees are real."""

    __slots__ = ()
    counts = None

    def alloc(self, heap, nbytes, align):
        if nbytes > 0:
            _Counting.counts[nbytes] += 1
        return None

    def free(self, heap, nbytes, block):
        if nbytes > 0:
            _Counting.counts[nbytes] -= 1

    def realloc(self, heap, old_nbytes, nbytes, block):
        if old_nbytes > 0:
            _Counting.counts[old_nbytes] -= 1
        if nbytes > 0:
            _Counting.counts[nbytes] += 1
        return None

    def alloc_many(self, heap, nbytes, count):
        if nbytes > 0 and count > 0:
            _Counting.counts[nbytes] += count

    def free_many(self, heap, nbytes, count):
        if nbytes > 0 and count > 0:
            _Counting.counts[nbytes] -= count


_COUNTING = _Counting()


def _buffer(kept, backend, handles):
    """A new storage like a kept tensor's, holding the block the replay placed for it."""
    block = None if kept.position is None else handles[kept.position]
    box = arc = strides = None
    if kept.handles:
        box, arc, strides = (None if at is None else handles[at] for at in kept.handles)
    token = (kept.size, block, box, _TAKEN if kept.taken else arc)
    chunk = Chunk(kept.nbytes, backend.cache) if kept.chunk else None
    return Buffer(kept.nbytes, backend._free_cpu, token, chunk, kept.strides, strides)


def member_actions(sim, template, start, buffers, check=True):
    """A step's checkpoint actions as the template has them (their blocks allocated): a
    node ``offset`` is relative to ``start``, or ``("old", id)`` for a node from before
    the loop. ``check``: compare the action vectors' lengths and capacities with the
    template's (a builder checked once builds the same every time)."""
    actions = CheckpointerBuilder(sim)
    heap = sim.heap
    for which, entries in ((0, template.explicit), (1, template.backup)):
        for offset, at, sizes in entries:
            blocks = tuple((nbytes, heap.alloc(nbytes)) for nbytes in sizes)
            buf = None
            if at is not None:
                buf = buffers[at]
                buf.holders += 1
            node_id = (None if offset is None else offset[1] if type(offset) is tuple
                       else start + offset)
            actions._push(which, (node_id, buf, blocks))
    actions.inputs = list(template.inputs)
    if check and tuple((v.len, v.capacity) for v in actions._vecs) != template.vecs:
        raise AssertionError("leak fast-forward: checkpoint actions built differently")
    return actions


def _build(sim, spec, backends, start, handles, built):
    """The leaked graph ``spec`` of the iteration whose first id is ``start``:
    ``Arc<Graph>`` and its server, each member's node, ref count, boxed step and actions,
    the locator's entries and the origin's key set (the BTreeMaps are left to the replayed
    operations). Returns the graph and its kept storages."""
    locator = sim.client.locator
    origin = start + spec.origin
    graph = Graph(sim, origin)
    locator.live[graph] = None
    ids = locator.keys[origin] = set()
    server = graph.server
    buffers = [_buffer(k, b, handles) for k, b in zip(spec.kept, backends)]
    nodes = {}
    for m in spec.members:
        node_id = start + m.offset
        node = Node(sim, node_id, tuple((start + o, leaf) for o, leaf in m.parents), m.order,
                    m.requirement, m.memory_bound)
        rc = NodeRefCount(sim, node_id)
        actions = None if m.actions is None else member_actions(sim, m.actions, start, buffers)
        step_parents = tuple(None if o is None else nodes[start + o] for o in m.step_parents)
        step = Step(m.kind, m.op, node, step_parents, m.nbytes, actions, m.shapes)
        sim.heap.alloc(m.nbytes)           # the boxed step (GraphMutexClient::register)
        node._block = None
        server.register(rc, step)
        built.append((rc, step))
        locator.graphs[node_id] = graph
        graph.entries += 1
        if m.keyed:
            ids.add(node_id)
            table = locator.key_tables.get(origin)
            if table is None:
                table = locator.key_tables[origin] = sim.tables.key_set()
            table.fit(len(ids))
        nodes[node_id] = node
    return graph, buffers


def _build_all(sim, effect, start, handles, built):
    """Every leaked graph of the iteration whose first id is ``start``: the graphs, and
    their kept storages graph after graph (the iteration's slot)."""
    graphs, slot = [], []
    at = 0
    for spec in effect.graphs:
        n = len(spec.kept)
        graph, buffers = _build(sim, spec, effect.backends[at:at + n], start, handles, built)
        at += n
        graphs.append(graph)
        slot += buffers
    return graphs, slot


def _slots(locator, effect, first, stride):
    """The kept storages of the leaked graphs of the iteration whose first id is ``first``
    and of the ones before (newest first, graph after graph), while they are built like
    ``effect``'s, up to :data:`MAX_RESIDENT` + 2 iterations."""
    slots = []
    for j in range(MAX_RESIDENT + 2):
        base = first - j * stride
        slot = []
        for spec in effect.graphs:
            g = locator.graphs.get(base + spec.origin)
            if g is None or g.origin != base + spec.origin:
                return slots
            try:
                members, _, tensors = _template(locator, g, base)
            except _Refuse:
                return slots
            if members != spec.members:
                return slots
            slot += tensors
        slots.append(slot)
    return slots


def _resident(buffers) -> bool:
    return any(b.chunk is not None and b.chunk in b.chunk.cache.lru for b in buffers)


def apply_leak(sim, effect, count, replay) -> int:
    """``count`` iterations of ``effect`` right after an iteration like it (``replay``:
    :func:`sim.engine.fastforward.repeat._replay_drift`, which places an iteration's heap events and
    returns the kept blocks by position); returns the iterations applied (0 when the
    state no longer matches the effect)."""
    locator = sim.client.locator
    stride = effect.stride
    last = sim._next_id - stride          # the first id of the iteration just run
    if count <= 0 or locator is None:
        return 0
    for offset in effect.rotating:
        g = locator.graphs.get(last + offset)
        if g is None or g.origin != last + offset or g.entries != 1:
            return 0
    slots = _slots(locator, effect, last, stride)
    resident = [_resident(buffers) for buffers in slots]
    depth = max((j for j, r in enumerate(resident) if r), default=-1)
    if not slots or depth >= len(slots) - 1:
        return 0            # an older graph's storages may still be in the L2 model's LRU
    tips = [i for i, k in enumerate(effect.kept) if k.tip]
    tip_buffer = slots[0][tips[0]] if tips else None
    if tip_buffer is not None and tip_buffer.holders <= effect.kept[tips[0]].refs:
        return 0
    heap = sim.heap
    trees = (locator.graphs_tree, locator.keys_tree)
    built, clones = [], []
    work_ps, compute, book, cleanup = effect.times
    newest = None
    for i in range(1, count + 1):
        start = last + i * stride
        handles = replay(sim, effect, 0)
        heap.allocs += effect.allocs
        _Counting.counts = Counter()
        heap.tap = _COUNTING
        try:
            newest, buffers = _build_all(sim, effect, start, handles, built)
        finally:
            heap.tap = None
        if not effect.checked:
            counts = {n: c for n, c in sorted(_Counting.counts.items()) if c}
            if (tuple(counts.items()) != effect.blocks
                    or [_tables(g, locator) for g in newest]
                    != [spec.tables for spec in effect.graphs]):
                raise AssertionError("leak fast-forward: the graphs built hold other blocks "
                                     "than the iteration kept")
            effect.checked = True
        clones.append(buffers)
        replay_tree_ops(trees, effect.tree_ops, start)
        sim.current.pending_ps += work_ps
        sim.work_ps += work_ps
        if not i & 1023:
            sim.ff_progress = (i, count)
            sim._check_limits()
    sim.ff_progress = None
    _Counting.counts = None
    timing = sim.timing
    timing.compute_ns += compute * count
    timing.bookkeeping_ns += book * count
    timing.cleanup_ns += cleanup * count
    def repoint(old, new, newest):
        origin = _origin_of(effect, tips[0])
        _repoint(old, new, locator, (last + count * stride if newest else last) + origin)

    hand_over(slots, clones, depth, tips[0] if tips else None, repoint)
    _relabel(locator, effect, last, last + count * stride, newest)
    sim._next_id += stride * count
    sim.registered += effect.registered * count
    sim.backwards += effect.backwards * count
    sim.leak_applied += count
    sim._check_limits()
    return count


def hand_over(slots, clones, depth, tip, repoint) -> None:
    """After a batch: the storages built for the skipped iterations (``clones``, oldest
    first) take their places among the ones exact mode left (``slots``, the last exact
    iteration's first; the LRU of the L2 model holds chunks of ``slots[:depth + 1]``).

    * the storage a module holds (slot index ``tip``, or None) is the newest iteration's:
      its object takes the newest block and goes to the newest iteration's actions, the
      last exact iteration's get the object built for the newest, with the old block
      (``repoint(old, new, newest)`` makes the actions of the newest iteration, or of the
      last exact one, hold ``new`` where they held ``old``);
    * the L2 model's chunks still in the LRU go to the storages of the iterations exact
      mode would have them in, the newest ones."""
    sequence = slots[depth::-1] + clones         # oldest first
    chunks = [[b.chunk for b in buffers] for buffers in sequence]
    if tip is not None:
        tip_buffer, built_tip = slots[0][tip], clones[-1][tip]
        swap_tip(tip_buffer, built_tip, repoint)
        slots[0][tip], clones[-1][tip] = built_tip, tip_buffer   # (the lists in sequence)
    rotated = chunks[depth + 1:] + chunks[:depth + 1]
    for buffers, mine in zip(sequence, rotated):
        for b, chunk in zip(buffers, mine):
            b.chunk = chunk


def swap_tip(held, built, repoint) -> None:
    """The storage a module holds (``held``, a kept storage of the last exact iteration)
    becomes the newest iteration's: it takes the block of ``built`` (the one made for the
    newest) and the newest iteration's actions, and ``built`` takes its place and block in
    the last exact iteration's (``repoint(old, new, newest)``, as for :func:`hand_over`)."""
    held._token, built._token = built._token, held._token
    repoint(held, built, False)
    repoint(built, held, True)


def replace_storage(actions, old, new) -> None:
    """Checkpoint ``actions`` hold ``new`` wherever they held ``old``."""
    for entries in (actions.explicit, actions.backup):
        for i, (node_id, buf, blocks) in enumerate(entries):
            if buf is old:
                entries[i] = (node_id, new, blocks)


def _origin_of(effect, at) -> int:
    """The origin offset of the leaked graph that keeps the slot's storage ``at``."""
    for spec in effect.graphs:
        if at < len(spec.kept):
            return spec.origin
        at -= len(spec.kept)
    raise IndexError(at)


def _repoint(old, new, locator, origin) -> None:
    """The actions of the leaked graph at ``origin`` hold ``new`` where they held ``old``."""
    for step in locator.graphs[origin].server.steps.values():
        if step.actions is not None:
            replace_storage(step.actions, old, new)


def _relabel(locator, effect, last, newest_first, newest) -> dict:
    """The one-node graphs the last exact iteration left take the ids of the newest
    iteration's, and their place among the live graphs: the iteration's creation order
    (``effect.order``) against the newest leaked graphs."""
    renamed = relabel_rotating(locator, effect, last, newest_first)
    live = locator.live
    tail = [newest[value] if kind == "L" else locator.graphs[newest_first + value]
            for kind, value in effect.order]
    for g in tail:
        live.pop(g, None)
    for g in tail:
        live[g] = None
    return renamed
