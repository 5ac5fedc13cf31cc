"""Runs of identical dead nodes, as fast-forward creates them.

When a loop body's iterations are identical (:mod:`sim.engine.fastforward.repeat`), the
nodes they leave behind are recorded as one :class:`NodeRun` instead of one
object each: ``count`` nodes with ids ``first, first + stride, ...``, the same
parents, no tensor handle left, and heap blocks that repeat from one iteration to
the next (an iteration may leave several members, each with its own blocks). A run
is either

* ``new_graph=True``: each node is an untracked op's own single-node graph
  (kept by the locator, in its ``live`` graphs, in creation order), or
* ``new_graph=False``: the nodes sit in one existing graph as childless leaves
  (kept by that graph's memory management).

Runs are not part of burn; they are the simulator's compressed form of state
burn would hold node by node, and every bookkeeping pass treats a run exactly as
it would treat its members one by one. Where the allocator places blocks one by one
(a glibc arena), a run also knows where each member's blocks are (``handles``: from the
objects it replaced, or from where fast-forward's replay put them) and its frees name
them, as the members' own frees would.

Iterations that hang live-looking members off one graph (nodes with parents, steps whose
checkpoint actions keep storages: the forwards of an inference loop on a model that
requires grad) are kept as :class:`MemberRuns` of that graph's ``steps`` and ``nodes``
maps (:class:`RunEntries`), built member by member only when something reads one.
"""

from __future__ import annotations

from collections import Counter

from ...platform.vec import RustVec

__all__ = ["NodeRun", "node_blocks", "graph_blocks", "graph_drop_order", "node_handles",
           "dead_graph_handles", "member_handles", "unbuilt_graph_handles", "tree_counts",
           "unexplained_blocks", "MemberRuns", "RunEntries", "built"]


def node_blocks(layout, step, parents) -> tuple:
    """Heap blocks one dead registered node holds, by size, in the order its frees come
    when the node is freed (``_remove`` then the server's ``remove_step``):
    ``HashMap::remove`` drops the key, ``Arc<NodeId>``, then the returned value, the
    ``nodes`` map's copy of the parents; the boxed step drops its fields first,
    ``Arc<Node>`` (its parents ``Vec``, then the ``ArcInner``), then its box. The order
    matters where the allocator places blocks one by one (a glibc arena: which free
    chunks merge, and which is reused first); sizes in bytes."""
    if not parents:
        return (layout.arc_node_id_bytes, layout.arc_node_bytes, step.nbytes)
    return (layout.arc_node_id_bytes, layout.parent_bytes * len(parents),
            layout.parent_bytes * max(4, len(parents)), layout.arc_node_bytes, step.nbytes)


def graph_blocks(layout, server) -> tuple:
    """Heap blocks of a graph apart from its nodes, in the order a drop of the graph frees
    them: the server's steps and actions tables, the memory management's nodes and leaves
    tables, then ``Arc<Graph>``; sizes in bytes."""
    memory = server.memory_management
    return tuple(nbytes for nbytes in (
        server.steps_table.nbytes, server.actions_table.nbytes,
        memory.nodes_table.nbytes, memory.leaves_table.nbytes, layout.graph_arc_bytes)
        if nbytes)


def graph_drop_order(layout, step, server) -> tuple:
    """Heap blocks of a dead single-node graph, node and graph, in the order they are freed
    when the graph goes at once (its last locator entry removed: the server drops its step
    -- the step's ``Arc<Node>`` first, then its box -- and tables, the memory management
    its node's ref count and tables, then ``Arc<Graph>``); sizes in bytes."""
    memory = server.memory_management
    return tuple(nbytes for nbytes in (
        layout.arc_node_bytes, step.nbytes, server.steps_table.nbytes,
        server.actions_table.nbytes, layout.arc_node_id_bytes, memory.nodes_table.nbytes,
        memory.leaves_table.nbytes, layout.graph_arc_bytes) if nbytes)


def node_handles(step, rc, parents) -> tuple:
    """The allocator's handles of :func:`node_blocks`' blocks, in its order (None: one the
    model frees by size); read from the objects before a run takes them over."""
    node = step.node
    if not parents:
        return (rc._block, node._block, step.block)
    return (rc._block, rc.parents_block, node._nbytes[2], node._block, step.block)


def dead_graph_handles(layout, step, rc, server, graph_block=None) -> tuple:
    """``(handles, drop_index)`` of a dead single-node graph: the allocator's handles of
    its blocks in the order of :func:`node_blocks` then :func:`graph_blocks`
    (``graph_block``: its ``Arc<Graph>``'s; None: freed by size), and where each block of
    :func:`graph_drop_order` sits in that order."""
    memory = server.memory_management
    tables = [(name, table) for name, table in (
        ("steps", server.steps_table), ("actions", server.actions_table),
        ("nodes", memory.nodes_table), ("leaves", memory.leaves_table)) if table.nbytes]
    held = ["id", "node", "step"] + [name for name, _ in tables]
    handles = node_handles(step, rc, ()) + tuple(table.block for _, table in tables)
    if layout.graph_arc_bytes:
        held.append("graph")
        handles += (graph_block,)
    sizes = {"id": layout.arc_node_id_bytes, "node": layout.arc_node_bytes, "step": step.nbytes,
             "graph": layout.graph_arc_bytes}
    sizes.update((name, table.nbytes) for name, table in tables)
    dropped = [name for name in ("node", "step", "steps", "actions", "id", "nodes", "leaves",
                                 "graph") if name in held and sizes[name]]
    return handles, tuple(held.index(name) for name in dropped)


def member_handles(heap, layout, step, rc, server, graph_block=None):
    """The handles a run keeps of a dead single-node graph it takes over
    (:func:`dead_graph_handles`), where ``heap``'s allocator places blocks one by one;
    elsewhere None (its frees go by size)."""
    if not heap.orders_frees:
        return None
    return dead_graph_handles(layout, step, rc, server, graph_block)[0]


def unbuilt_graph_handles(heap, layout, step, rc, table_blocks, graph_block):
    """:func:`member_handles` of a single-node graph whose server was never built
    (:class:`~sim.burn.runtime.graph.SingleNodeGraph`): ``table_blocks``, the handles of
    its tables' first blocks in the order they were allocated (``leaves``, ``nodes``,
    ``steps``, ``actions_builder``)."""
    if not heap.orders_frees:
        return None
    leaves, nodes, steps, actions = table_blocks
    handles = node_handles(step, rc, ()) + (steps, actions, nodes, leaves)
    return handles + (graph_block,) if layout.graph_arc_bytes else handles


def tree_counts(locator) -> tuple:
    """Leaves and internal nodes of the locator's two BTreeMaps (zeros without a locator)."""
    if locator is None:
        return (0, 0, 0, 0)
    g, k = locator.graphs_tree, locator.keys_tree
    return (g.leaves, g.internals, k.leaves, k.internals)


def unexplained_blocks(net, blocks, locator, trees_before) -> dict:
    """What is left of a heap change ``net`` (request size -> blocks) once ``blocks`` and
    the BTreeMap nodes the locator's trees gained since ``trees_before``
    (:func:`tree_counts`) are taken out: size -> blocks, zeros dropped."""
    rest = Counter(net)
    rest.subtract(blocks)
    g, k = locator.graphs_tree, locator.keys_tree
    sizes = (g.leaf_bytes, g.internal_bytes, k.leaf_bytes, k.internal_bytes)
    for nbytes, before, after in zip(sizes, trees_before, tree_counts(locator)):
        rest[nbytes] -= after - before
    return {size: n for size, n in rest.items() if n}


class NodeRun:
    """``count`` dead nodes with the same parents, ids ``first, first + stride, ...``.

    Their blocks repeat with a period of ``len(layouts)`` members: member ``m`` holds the
    blocks of ``layouts[m % len(layouts)]`` (one loop iteration that leaves several dead
    single-node graphs, an add, a scale and an exp, is one period; the run's first member
    is the first of a period).

    Where the allocator places blocks one by one (a glibc arena), ``handles[m]`` are
    member ``m``'s blocks' handles in the order ``node_order + graph_order`` (None: a
    block freed by size), and a member's frees name its own blocks as the objects' would
    (burn frees that node's blocks, not the newest of their sizes); ``drop_indices``: per
    member of a period, where each block of its ``drop_order`` sits in that order
    (:func:`dead_graph_handles`). Without ``handles`` the run frees by size."""

    __slots__ = ("first", "stride", "count", "parents", "layouts", "blocks", "new_graph",
                 "graph", "nodes_freed", "serial", "handles", "drop_indices")

    def __init__(self, first, stride, count, parents, node_order, new_graph, graph=None,
                 graph_order=(), drop_order=None, layouts=(), handles=None, drop_indices=()):
        self.first = first
        self.stride = stride
        self.count = count
        self.parents = parents
        #: per member of a period, ``(node_order, graph_order, drop_order)``: the sizes of
        #: the blocks its node holds, in the order they are freed; of the blocks that
        #: belong to its graph (Arc<Graph>, its tables) rather than to its node, in the
        #: order they are freed (a sweep frees the node part when it visits the entry, the
        #: graph part when the entry is removed); and of all its blocks in the order they
        #: go when its single-node graph is dropped at once (:func:`graph_drop_order`).
        #: ``node_order``, ``graph_order`` and ``drop_order`` give a period of one.
        self.layouts = tuple(layouts) or ((node_order, graph_order, node_order + graph_order
                                           if drop_order is None else drop_order),)
        #: ((nbytes, blocks per period), ...): every block a period of members holds
        self.blocks = tuple(sorted(Counter(
            b for node, graph, _ in self.layouts for b in node + graph).items()))
        self.new_graph = new_graph
        self.graph = graph
        self.nodes_freed = False
        #: where the members sit in their graph's ``nodes`` map (insertion order), among
        #: the nodes inserted since the graph took its first run (GraphMemoryManagement)
        self.serial = -1
        self.handles = handles
        self.drop_indices = tuple(drop_indices)

    @property
    def node_order(self) -> tuple:
        return self.layouts[0][0]

    @property
    def graph_order(self) -> tuple:
        return self.layouts[0][1]

    @property
    def ids(self):
        return range(self.first, self.first + self.stride * self.count, self.stride)

    @property
    def last(self):
        return self.first + self.stride * (self.count - 1)

    def alloc(self, heap) -> None:
        periods, rest = divmod(self.count, len(self.layouts))
        extra = Counter(b for node, graph, _ in self.layouts[:rest] for b in node + graph)
        for nbytes, per_period in self.blocks:
            heap.alloc_many(nbytes, per_period * periods + extra[nbytes])

    def _free_member(self, heap, m, part) -> None:
        """Free member ``m``'s blocks of ``part``: "node", "graph", "all" (node then graph)
        or "drop" (:func:`graph_drop_order`), each naming its handle (``handles``)."""
        node, graph, drop = self.layouts[m % len(self.layouts)]
        handles = self.handles[m]
        if part == "node":
            sizes, named = node, handles[:len(node)]
        elif part == "graph":
            sizes, named = graph, handles[len(node):]
        elif part == "all":
            sizes, named = node + graph, handles
        else:
            sizes = drop
            named = [handles[i] for i in self.drop_indices[m % len(self.layouts)]]
        free = heap.free
        for nbytes, block in zip(sizes, named):
            free(nbytes, block)

    def _named(self, heap) -> bool:
        """Whether the members' frees name their blocks (see the class doc)."""
        return self.handles is not None and heap.orders_frees

    def _free_each(self, heap, orders) -> None:
        """Free the blocks of ``orders`` (one order per member of a period), member after
        member."""
        periods, rest = divmod(self.count, len(orders))
        heap.free_each(sum(orders, ()), periods)
        for order in orders[:rest]:
            heap.free_each(order, 1)

    def free(self, heap) -> None:
        """Free what the members still hold, member after member."""
        if self._named(heap):
            part = "graph" if self.nodes_freed else "all"
            for m in range(self.count):
                self._free_member(heap, m, part)
            return
        self._free_each(heap, tuple(graph if self.nodes_freed else node + graph
                                    for node, graph, _ in self.layouts))

    def free_nodes(self, heap) -> None:
        """Free the members' node blocks, member after member (their graphs' blocks stay
        until :meth:`free`)."""
        if self.nodes_freed:
            return
        if self._named(heap):
            for m in range(self.count):
                self._free_member(heap, m, "node")
        else:
            self._free_each(heap, tuple(node for node, _, _ in self.layouts))
        self.nodes_freed = True

    def free_nodes_where_unordered(self, heap) -> None:
        """Before a pass frees the members one by one (:meth:`free_member`): where the
        allocator keeps counts per size the order of frees cannot matter, and the members'
        node blocks go at once here; elsewhere each goes in its place."""
        if not heap.orders_frees:
            self.free_nodes(heap)

    def free_member(self, heap, node_id) -> None:
        """Free one member's node blocks on its own (a pass that frees the members one by
        one), unless :meth:`free_nodes_where_unordered` freed them all."""
        if self.nodes_freed:
            return
        m = (node_id - self.first) // self.stride
        if self._named(heap):
            self._free_member(heap, m, "node")
        else:
            heap.free_each(self.layouts[m % len(self.layouts)][0], 1)

    def drop_graphs(self, heap, untree) -> None:
        """The members' single-node graphs go, their locator entries removed: ``untree(key)``
        takes a member's id (or the ``(first, stride, count)`` span of all) out of the
        locator's maps. Where the allocator places blocks one by one and the members'
        nodes are still there, member by member (keys, then the graph's blocks in their
        drop order: the order of frees places later blocks); elsewhere the span at once."""
        if heap.orders_frees and not self.nodes_freed:
            layouts, period = self.layouts, len(self.layouts)
            named = self.handles is not None
            for m, node_id in enumerate(self.ids):
                untree(node_id)
                if named:
                    self._free_member(heap, m, "drop")
                else:
                    heap.free_each(layouts[m % period][2], 1)
            return
        untree((self.first, self.stride, self.count))
        self.free(heap)

    def free_visited(self, heap, id_bytes, should_remove) -> None:
        """A sweep visits every member's entry and frees its node (``free_unused_roots``: a
        ``deletables`` Vec of one id of ``id_bytes`` around the node's frees, the id pushed
        on the ``should_remove`` Vec); the graphs' blocks stay until the entries go. Where
        the allocator places blocks one by one, member by member; elsewhere the members'
        Vecs as one block around the run's frees, the ids pushed after them."""
        if self.nodes_freed:
            should_remove.push_each(self.count)
            return
        if heap.orders_frees:
            layouts, period = self.layouts, len(self.layouts)
            named = self.handles is not None
            for m in range(self.count):
                deletables = RustVec(heap, id_bytes)
                deletables.push()
                if named:
                    self._free_member(heap, m, "node")
                else:
                    for nbytes in layouts[m % period][0]:
                        heap.free(nbytes)
                should_remove.push_each(1)
                deletables.drop()
            self.nodes_freed = True
            return
        deletables = RustVec(heap, id_bytes)
        deletables.push()
        self.free_nodes(heap)
        should_remove.push_each(self.count)
        nbytes = deletables.capacity * id_bytes
        deletables.drop()
        heap.transient(nbytes, self.count - 1)   # the other members' Vecs

    def __repr__(self):
        kind = "graphs" if self.new_graph else "nodes"
        period = f", period {len(self.layouts)}" if len(self.layouts) > 1 else ""
        return f"NodeRun({self.count} {kind} from {self.first} step {self.stride}{period})"


class MemberRuns:
    """Entries of a graph's maps kept as compressed runs until something reads them.

    Fast-forward applies iterations that hang the same members off one graph (an inference
    forward on a model that requires grad: eight nodes whose checkpoint actions keep the
    activations) without building their objects. Each run is ``(lo, hi, at, build)``:
    the ids ``lo <= id < hi`` it holds, where its entries sit in each map's insertion
    order (``at``, one position per map: how many entries the map held when the run was
    taken), and ``build()``, which registers its members one by one as exact mode did
    (appending them to the maps). The maps (:class:`RunEntries`: the server's ``steps``,
    the memory management's ``nodes``) count the runs' members in their lengths; a read
    that may see a member, an iteration or a removal builds every run first, in place:
    the members take their places among the entries, as if they had always been there.
    The graph's other collections (``leaves``, the locator's entries and keys, the
    tables and BTreeMaps) take the runs' members as they are applied; nothing in burn's
    bookkeeping sees the difference."""

    __slots__ = ("maps", "runs", "count")

    def __init__(self):
        self.maps = ()
        self.runs = []
        #: members held in runs (each one entry of every map)
        self.count = 0

    def add(self, lo, hi, count, build) -> None:
        """A run of ``count`` members with ids in ``[lo, hi)``, built by ``build()``."""
        at = tuple(dict.__len__(m) for m in self.maps)
        self.runs.append((lo, hi, at, build))
        self.count += count

    def holds(self, key) -> bool:
        if type(key) is not int:
            return False          # a representative of a NodeRun, ("run", first)
        for lo, hi, _, _ in self.runs:
            if lo <= key < hi:
                return True
        return False

    def materialise(self) -> None:
        """Build every run's members, each run's in its place in each map's order."""
        runs, self.runs, self.count = self.runs, [], 0
        if not runs:
            return
        real = [list(dict.items(m)) for m in self.maps]
        for m in self.maps:
            dict.clear(m)
        done = [0] * len(self.maps)
        for _, _, at, build in runs:
            for j, m in enumerate(self.maps):
                dict.update(m, real[j][done[j]:at[j]])
                done[j] = at[j]
            build()
        for j, m in enumerate(self.maps):
            dict.update(m, real[j][done[j]:])


def built(entries):
    """``entries`` with every member a :class:`MemberRuns` holds in it built (a plain map
    as it is): before the map's order is told apart from its insertions' (serials)."""
    if isinstance(entries, RunEntries) and entries.members.runs:
        entries.members.materialise()
    return entries


class RunEntries(dict):
    """A map (node id -> entry) some of whose entries are held by :class:`MemberRuns`:
    its length counts them; reading a key of a run, iterating, copying or removing builds
    them first. Reads and inserts of other keys go straight to the map (an exact
    iteration registering its own nodes beside the runs)."""

    __slots__ = ("members",)

    def __init__(self, items, members):
        super().__init__(items)
        self.members = members

    def _built(self):
        if self.members.runs:
            self.members.materialise()
        return self

    def __len__(self):
        return dict.__len__(self) + self.members.count

    def __contains__(self, key):
        if self.members.runs and self.members.holds(key):
            self.members.materialise()
        return dict.__contains__(self, key)

    def __getitem__(self, key):
        if self.members.runs and self.members.holds(key):
            self.members.materialise()
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        if self.members.runs and self.members.holds(key):
            self.members.materialise()
        return dict.get(self, key, default)

    def __setitem__(self, key, value):
        if self.members.runs and self.members.holds(key):
            self.members.materialise()
        dict.__setitem__(self, key, value)

    def __iter__(self):
        return dict.__iter__(self._built())

    def __reversed__(self):
        return dict.__reversed__(self._built())

    def __delitem__(self, key):
        dict.__delitem__(self._built(), key)

    def keys(self):
        return dict.keys(self._built())

    def values(self):
        return dict.values(self._built())

    def items(self):
        return dict.items(self._built())

    def pop(self, *args):
        return dict.pop(self._built(), *args)

    def popitem(self):
        return dict.popitem(self._built())

    def setdefault(self, key, default=None):
        return dict.setdefault(self._built(), key, default)

    def update(self, *args, **kwargs):
        dict.update(self._built(), *args, **kwargs)

    def clear(self):
        dict.clear(self._built())

    def copy(self):
        return dict(dict.items(self._built()))

    def __eq__(self, other):
        return dict.__eq__(self._built(), other)

    __hash__ = None

    def __repr__(self):
        return dict.__repr__(self._built())

    def __reduce__(self):
        return (dict, (dict(dict.items(self._built())),))
