"""The process-wide locator and client (burn-autodiff ``runtime/graph.rs``).

:class:`GraphLocator` maps every registered node id to its :class:`Graph`
(``graphs``) and every graph origin to the ids pointing at it (``keys``), both
``BTreeMap`` in burn 0.22.1 (their node blocks are modelled by
:class:`~sim.costs.btree.BTreeNodes`). ``select``/``analyse`` put a node in the
graph of its tracked parents; no parent in any graph starts a new graph (so every
untracked op starts one); parents in several graphs merge them into the one with
the lowest origin.

:class:`GraphMutexClient` is the ``AutodiffClient``: ``register`` takes the
locator mutex to select the graph, then the graph's mutex to register the step;
``backward`` runs the graph's backward, then (through the policy seam)
``cleanup_orphaned_entries``: clone the whole ``graphs`` map and, for every
entry, lock its graph and, if ``maybe_useful()`` finds no live handle, call
``free_unused_roots``; finally remove the freed ids' entries.

Each :class:`Graph` is an ``Arc<Graph>`` whose strong count is the number of
locator entries pointing at it: the graph (272 B with its server) and its
tables are freed when the last entry goes.
"""

from __future__ import annotations

from ..costs.btree import BTreeNodes
from .server import AutodiffServer

__all__ = ["Graph", "GraphLocator", "GraphMutexClient", "GraphCleaner"]


class Graph:
    """``Arc<Graph>``: an origin node id and a mutex-protected server."""

    __slots__ = ("origin", "server", "entries", "_sim")

    def __init__(self, sim, origin):
        self.origin = origin
        self._sim = sim
        sim.heap.alloc(sim.layout.graph_arc_bytes)
        self.server = AutodiffServer(sim)
        self.entries = 0

    def release(self) -> None:
        """One locator entry stopped pointing here; the last one drops the graph."""
        self.entries -= 1
        if self.entries == 0:
            self.server.drop()
            self._sim.heap.free(self._sim.layout.graph_arc_bytes)
            self._sim.client.locator.live.pop(self, None)

    def __repr__(self):
        return f"Graph(origin={self.origin}, nodes={len(self.server.memory_management.nodes)})"


class GraphLocator:
    """``graphs`` (node id -> graph) and ``keys`` (origin -> ids), with their heap."""

    def __init__(self, sim):
        self.sim = sim
        layout = sim.layout
        self.graphs = {}
        self.keys = {}
        self.key_tables = {}
        self.graphs_tree = BTreeNodes(sim.heap, layout.graphs_leaf_bytes, layout.graphs_internal_bytes)
        self.keys_tree = BTreeNodes(sim.heap, layout.keys_leaf_bytes, layout.keys_internal_bytes)
        # graphs with at least one entry, in creation order (for per-graph sweeps)
        self.live = {}

    # -- entries -------------------------------------------------------------------
    def _point(self, node_id, graph) -> None:
        """``graphs.insert(node_id, graph)``."""
        old = self.graphs.get(node_id)
        if old is graph:
            return
        self.graphs[node_id] = graph
        graph.entries += 1
        if old is None:
            self.graphs_tree.insert(node_id)
        else:
            old.release()

    def remove_entry(self, node_id) -> None:
        """Forget ``node_id``; drop its origin's key set once empty."""
        graph = self.graphs.pop(node_id, None)
        if graph is None:
            return
        self.graphs_tree.remove(node_id)
        entry = self.keys.get(graph.origin)
        if entry is not None:
            entry.discard(node_id)
            if not entry:
                self._drop_keys(graph.origin)
        graph.release()

    def _drop_keys(self, origin) -> None:
        del self.keys[origin]
        self.keys_tree.remove(origin)
        table = self.key_tables.pop(origin, None)
        if table is not None:
            table.drop()

    def register_key(self, origin, key) -> None:
        """``keys[origin]`` gets ``key`` (created empty first if needed)."""
        if origin not in self.keys:
            self.keys[origin] = set()
            self.keys_tree.insert(origin)
        if origin != key:
            ids = self.keys[origin]
            if key not in ids:
                ids.add(key)
                table = self.key_tables.get(origin)
                if table is None:
                    # an empty HashSet owns no block until its first insert
                    table = self.key_tables[origin] = self.sim.tables.key_set()
                table.fit(len(ids))

    # -- select --------------------------------------------------------------------------
    def select(self, node_id, parents) -> Graph:
        """The graph ``node_id`` belongs to, given its tracked ``parents`` (merging if needed)."""
        graphs = self.analyse(node_id, parents)
        if len(graphs) == 1:
            graph = graphs[0]
            if graph.origin != node_id:
                self._point(node_id, graph)
                self.register_key(graph.origin, node_id)
            return graph
        return self.merge(node_id, graphs)

    def analyse(self, node_id, parents) -> list:
        """Graphs of the node and its parents, by ascending origin (a new graph if none)."""
        graphs = self.graphs
        if not parents:
            graph = graphs.get(node_id)
            return [graph if graph is not None else self.new_graph(node_id)]
        found = {}
        graph = graphs.get(node_id)
        if graph is not None:
            found[graph.origin] = graph
        for pid, _ in parents:
            graph = graphs.get(pid)
            if graph is not None:
                found[graph.origin] = graph
        if not found:
            graph = graphs.get(node_id)
            return [graph if graph is not None else self.new_graph(node_id)]
        # the collected BTreeMap<NodeId, Arc<Graph>> is one transient leaf
        heap = self.sim.heap
        heap.alloc(self.sim.layout.graphs_leaf_bytes)
        heap.free(self.sim.layout.graphs_leaf_bytes)
        if len(found) == 1:
            return list(found.values())
        return [found[origin] for origin in sorted(found)]

    def merge(self, node_id, graphs) -> Graph:
        """Merge ``graphs`` (ascending origin) into the first; point ``node_id`` at it."""
        main = graphs[0]
        self.register_key(main.origin, node_id)
        for merged in graphs[1:]:
            self.merge_two(main, merged)
        self._point(main.origin, main)
        self._point(node_id, main)
        self.sim.timing.merge(len(graphs) - 1)
        return main

    def merge_two(self, main: Graph, merged: Graph) -> None:
        """Move ``merged``'s server into ``main`` and re-point all its ids."""
        main.server.extend(merged.server)
        merged.entries += 1  # the Arc held by the caller while re-pointing
        self._point(merged.origin, main)
        ids = self.keys.pop(merged.origin, None)
        if ids is not None:
            self.keys_tree.remove(merged.origin)
            table = self.key_tables.pop(merged.origin, None)
            for key in ids:
                self._point(key, main)
            main_ids = self.keys[main.origin]
            if ids:
                main_table = self.key_tables.get(main.origin)
                if main_table is None:
                    main_table = self.key_tables[main.origin] = self.sim.tables.key_set()
                n = len(main_ids)
                main_table.reserve(n, len(ids) if n == 0 else (len(ids) + 1) // 2)
                main_ids |= ids
                main_table.fit(len(main_ids))
            if table is not None:
                table.drop()
        merged.release()

    def new_graph(self, origin) -> Graph:
        """A new graph whose origin is ``origin``."""
        graph = Graph(self.sim, origin)
        self.live[graph] = None
        self._point(origin, graph)
        if origin in self.keys:
            self._drop_keys(origin)
        self.keys[origin] = set()
        self.keys_tree.insert(origin)
        self.sim.timing.new_graph()
        return graph


class GraphCleaner:
    """``NodeCleaner``: removes locator entries of freed ids (``clean``)."""

    __slots__ = ("locator",)

    def __init__(self, locator):
        self.locator = locator

    def clean(self, node_id) -> None:
        self.locator.remove_entry(node_id)


class GraphMutexClient:
    """The autodiff client: locator mutex plus one mutex per graph.

    The locator is created lazily by the first registration or backward, as
    burn's ``static STATE: Mutex<Option<GraphLocator>>``.
    """

    def __init__(self, sim):
        self.sim = sim
        self.locator = None

    def graph(self, node_id, parents) -> Graph:
        if self.locator is None:
            self.locator = GraphLocator(self.sim)
        return self.locator.select(node_id, parents)

    def register(self, rc, step) -> None:
        """Register ``step`` for node ``rc``: select its graph, then the graph's server."""
        sim = self.sim
        sim.registered += 1
        if not sim.registered & 4095:
            sim._check_limits()
        sim.timing.register(len(step.node.parents))
        graph = self.graph(rc.id, step.node.parents)
        graph.server.register(rc, step)
        sim.policy.on_register(self, rc, step)

    def backward(self, root):
        """Backward from ``root``; then the policy's cleanup (burn: the orphan sweep)."""
        graph = self.graph(root.node.id, ())
        sim = self.sim
        if sim.backwards == 0:
            sim.policy.first_backward()
        sim.in_backward = True
        try:
            grads = graph.server.backward(root, GraphCleaner(self.locator))
        finally:
            sim.in_backward = False
        sim.backwards += 1
        self.sim.policy.after_backward(self)
        return grads

    def cleanup_orphaned_entries(self, visit_each_entry=True) -> int:
        """The orphan sweep; returns the number of freed node ids.

        burn clones ``graphs`` and visits every ENTRY: a graph with ``k`` entries
        is locked and checked ``k`` times, and if dead, ``free_unused_roots`` runs
        on each visit (each frees one more layer of its roots). The result is
        computed per graph (graphs are independent within a sweep), the work is
        charged per entry. ``visit_each_entry=False`` visits each graph once
        (the ``dedup-sweep`` policy).
        """
        locator = self.locator
        if locator is None:
            return 0
        timing = self.sim.timing
        heap = self.sim.heap
        entries = len(locator.graphs)
        tree = locator.graphs_tree
        clone = (tree.leaves, tree.internals)
        # the clone of the BTreeMap: one block per node, freed when the sweep ends
        for _ in range(clone[0]):
            heap.alloc(tree.leaf_bytes)
        for _ in range(clone[1]):
            heap.alloc(tree.internal_bytes)
        should_remove = []
        scanned = 0.0
        visits = 0
        for graph in list(locator.live):
            server = graph.server
            passes = graph.entries if visit_each_entry else 1
            visits += passes
            if server.maybe_useful():
                scanned += passes * server.memory_management.scan_length()
                continue
            for _ in range(passes):
                scanned += len(server.memory_management.nodes)
                before = len(should_remove)
                server.free_unused_roots(should_remove.append)
                if len(should_remove) == before and visit_each_entry:
                    scanned += (passes - 1) * len(server.memory_management.nodes)
                    break
        # Vec<NodeId> of freed ids, grown by doubling
        _vec_growth(heap, len(should_remove), 8)
        for node_id in should_remove:
            locator.remove_entry(node_id)
        for _ in range(clone[0]):
            heap.free(tree.leaf_bytes)
        for _ in range(clone[1]):
            heap.free(tree.internal_bytes)
        timing.sweep(entries=entries, visits=visits, scanned=scanned, freed=len(should_remove))
        return len(should_remove)


def _vec_growth(heap, n, elem_bytes) -> None:
    """Transient ``Vec`` of ``n`` elements pushed one by one: its allocations, then its free."""
    cap = 0
    while cap < n:
        new = max(4, 2 * cap)
        heap.alloc(new * elem_bytes)
        if cap:
            heap.free(cap * elem_bytes)
        cap = new
    if cap:
        heap.free(cap * elem_bytes)
