"""The process-wide locator and client (burn-autodiff ``runtime/graph.rs``).

:class:`GraphLocator` maps every registered node id to its :class:`Graph`
(``graphs``) and every graph origin to the ids pointing at it (``keys``), both
``BTreeMap`` in burn 0.22.1 (their node blocks are modelled by
:class:`~sim.platform.btree.BTreeNodes`). ``select``/``analyse`` put a node in the
graph of its tracked parents; no parent in any graph starts a new graph (so every
untracked op starts one); parents in several graphs merge them into the one with
the lowest origin.

:class:`GraphMutexClient` is the ``AutodiffClient``: ``register`` takes the
locator mutex to select the graph, then the graph's mutex to register the step;
``backward`` runs the graph's backward, then (through the policy seam)
:meth:`GraphCleaner.cleanup_orphaned_entries`: clone the whole ``graphs`` map and,
for every entry, lock its graph and, if ``maybe_useful()`` finds no live handle, call
``free_unused_roots``; finally remove the freed ids' entries.

The client, locator, cleaner, servers and memory managements are built from the
policy's classes (``sim.policy.GraphLocator``: :mod:`sim.policies.mirror`), so a fix
may replace one of them with a subclass whose method is the patched one.

Each :class:`Graph` is an ``Arc<Graph>`` whose strong count is the number of
locator entries pointing at it: the graph (272 B with its server) and its
tables are freed when the last entry goes.
"""

from __future__ import annotations

from contextlib import contextmanager

from ...platform.btree import BTreeNodes
from ...platform.vec import RustVec
from ..graph.runs import (NodeRun, dead_graph_handles, graph_blocks, graph_drop_order,
                          member_handles, node_blocks, unbuilt_graph_handles)

__all__ = ["Graph", "SingleNodeGraph", "GraphLocator", "GraphMutexClient", "GraphCleaner", "OrphanSweep"]


class Graph:
    """``Arc<Graph>``: an origin node id and a mutex-protected server."""

    __slots__ = ("origin", "server", "entries", "held", "_sim", "_block")

    def __init__(self, sim, origin):
        self.origin = origin
        self._sim = sim
        # the ArcInner's handle (a graph taken into a run of dead nodes leaves its free to
        # the run, which frees it by size)
        self._block = sim.heap.alloc(sim.layout.graph_arc_bytes)
        self.server = sim.policy.AutodiffServer(sim)
        self.entries = 0
        # strong counts held outside the locator: the client's own Arc<Graph> while a
        # backward and its orphan sweep run
        self.held = 0

    def release(self, n=1) -> None:
        """``n`` locator entries stopped pointing here; the last one drops the graph
        (unless the client still holds it: :meth:`unhold` drops it then)."""
        self.entries -= n
        if self.entries == 0 and not self.held:
            self._drop()

    def hold(self) -> None:
        """``GraphMutexClient::backward`` keeps its own ``Arc<Graph>`` (``let graph = ..``)
        until it returns: through the backward and ``cleanup_orphaned_entries``."""
        self.held += 1

    def unhold(self) -> None:
        self.held -= 1
        if self.entries == 0 and not self.held:
            self._drop()

    def _drop(self) -> None:
        self.server.drop()
        self._sim.heap.free(self._sim.layout.graph_arc_bytes, self._block)
        self._sim.client.locator.live.pop(self, None)

    def __repr__(self):
        return f"Graph(origin={self.origin}, nodes={len(self.server.memory_management.nodes)})"


class SingleNodeGraph(Graph):
    """A new graph an untracked op registered its step in, before anything asks for its
    server (exact mode: :attr:`~sim.engine.simulation.Simulation.defer_servers`).

    Its registration made burn's heap events (``Arc<Graph>``, then the first blocks of
    the ``leaves``, ``nodes``, ``steps`` and ``actions_builder`` tables, whose handles it
    keeps) and keeps the node's ref count and step. The server and its memory management
    are built, in the state that registration left them in, the first time ``server`` is
    read (a sweep, a backward, a registration of the id as a root, a drop of the graph);
    a node that loses its last handle before that is compacted from here
    (:meth:`GraphLocator.compact`), so the objects of a single-node graph that dies at
    once are never built. Until then it stands for the memory management as the ref
    count's owner (``referenced``, :meth:`on_last_handle`).
    """

    __slots__ = ("rc", "step", "blocks", "referenced")

    def __init__(self, sim, origin):   # noqa: the server is built later (_build)
        self.origin = origin
        self._sim = sim
        self._block = sim.heap.alloc(sim.layout.graph_arc_bytes)
        self.entries = 0
        self.held = 0
        self.rc = self.step = None
        self.referenced = 0

    def register(self, rc, step) -> None:
        """``AutodiffServer::register`` of the graph's first node, which has no parent: the
        tables' first blocks in its order (``leaves``, ``nodes``, then ``steps`` and
        ``actions_builder``), the ``nodes`` map's Arc of the ref count."""
        self.blocks = self._sim.heap.alloc_row(self._sim.tables.first_graph_blocks)
        rc.acquire()
        rc.owner = self
        if rc.strong > 1:
            self.referenced = 1
        self.rc, self.step = rc, step

    def __getattr__(self, name):
        if name != "server":
            raise AttributeError(name)
        return self._build()

    def _build(self):
        """The server and memory management as ``register`` left them."""
        sim = self._sim
        server = self.server = sim.policy.AutodiffServer(sim)
        memory = server.memory_management
        rc, step = self.rc, self.step
        self.rc = self.step = None
        if rc is None:
            return server
        node_id = rc.id
        leaves, nodes, steps, actions = self.blocks
        memory.leaves.add(node_id)
        memory.leaves_table.took_first(leaves)
        memory.nodes[node_id] = (rc, ())
        memory.nodes_table.took_first(nodes)
        memory.referenced = self.referenced
        if rc.owner is self:
            rc.owner = memory
        server.steps[node_id] = step
        server.steps_table.took_first(steps)
        server.actions_table.took_first(actions)
        return server

    def on_last_handle(self, rc) -> None:
        """:meth:`GraphMemoryManagement.on_last_handle` (burn's policy: nothing to tell):
        exact mode compacts the dead graph (:meth:`GraphLocator.compact`, which takes an
        unbuilt graph as it is: :meth:`GraphLocator.compact_unbuilt`)."""
        self._sim.client.locator.compact_unbuilt(self)


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
        # graphs with at least one entry, in creation order (for per-graph sweeps);
        # fast-forwarded runs of single-node graphs sit here too (sim.burn.graph.runs)
        self.live = {}
        # per origin: ids of fast-forwarded runs counted in keys[origin]
        self.key_runs = {}
        self.run_entries = 0
        # tree removals held back while a sweep removes many entries (see removals())
        self._deferred = None
        # compact(): blocks of a dead single-node graph, by step size and table buckets
        self._run_blocks = {}
        # the handle of the BTreeMap analyse collected several graphs in (select frees it)
        self._analysed = None

    def _untree(self, tree, item) -> None:
        """Remove a key (or a ``(first, stride, count)`` run) from one of the BTreeMaps."""
        if self._deferred is not None:
            self._deferred[tree is self.keys_tree].append(item)
        elif type(item) is tuple:
            tree.remove_run(*item)
        else:
            tree.remove(item)

    def counted_removals(self):
        """:meth:`removals` where the order of the maps' node frees cannot matter to the
        allocator (:meth:`~sim.platform.heap.Heap.unordered`); elsewhere one removal at a
        time, as burn makes them."""
        return self.sim.heap.unordered(self.removals())

    @contextmanager
    def removals(self):
        """Batch the BTreeMap removals of many ``remove_entry``/``remove_run`` calls.

        Nothing is inserted meanwhile, and each map's removals keep their order,
        so the trees end exactly as with one removal at a time (which is what
        happens unless nearly everything goes, where the result is computed).
        """
        self._deferred = ([], [])
        try:
            yield
        finally:
            graphs, keys = self._deferred
            self._deferred = None
            self.graphs_tree.remove_many(graphs)
            self.keys_tree.remove_many(keys)

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
        self._untree(self.graphs_tree, node_id)
        entry = self.keys.get(graph.origin)
        if entry is not None:
            entry.discard(node_id)
            if not entry and not self.key_runs.get(graph.origin):
                self._drop_keys(graph.origin)
        graph.release()

    def entry_count(self) -> int:
        """Entries of ``graphs``, fast-forwarded runs included."""
        return len(self.graphs) + self.run_entries

    def _key_count(self, origin) -> int:
        return len(self.keys.get(origin, ())) + self.key_runs.get(origin, 0)

    def _drop_keys(self, origin) -> None:
        self.key_runs.pop(origin, None)
        del self.keys[origin]
        self._untree(self.keys_tree, origin)
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
                table.fit(len(ids) + self.key_runs.get(origin, 0))
            else:
                # the key is there already (a backward re-selects its root's graph): the
                # insert still reserves a slot, and a full set grows
                self.key_tables[origin].reinsert(len(ids) + self.key_runs.get(origin, 0))

    # -- select --------------------------------------------------------------------------
    def select(self, node_id, parents) -> Graph:
        """The graph ``node_id`` belongs to, given its tracked ``parents`` (merging if needed)."""
        if not parents:
            graph = self.graphs.get(node_id)
            if graph is None:
                return self.new_graph(node_id)  # an untracked op or a new root
            graphs = [graph]
        else:
            graphs = self.analyse(node_id, parents)
        if len(graphs) == 1:
            graph = graphs[0]
            if graph.origin != node_id:
                self._point(node_id, graph)
                self.register_key(graph.origin, node_id)
            return graph
        graph = self.merge(node_id, graphs)
        # analyse's BTreeMap
        self.sim.heap.free(self.sim.layout.graphs_leaf_bytes, self._analysed)
        self._analysed = None
        return graph

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
        # the collected BTreeMap<NodeId, Arc<Graph>> is one transient leaf: a single
        # graph is taken out of it at once; several are merged out of it, and it goes
        # when the merge is done (select frees it)
        heap = self.sim.heap
        leaf = heap.alloc(self.sim.layout.graphs_leaf_bytes)
        if len(found) == 1:
            heap.free(self.sim.layout.graphs_leaf_bytes, leaf)
            return list(found.values())
        self._analysed = leaf
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
        moved_runs = list(merged.server.memory_management.runs)
        main.server.extend(merged.server)
        for run in moved_runs:
            run.graph = main
            main.entries += run.count
            merged.entries -= run.count
        runs_of_merged = self.key_runs.pop(merged.origin, 0)
        if runs_of_merged:
            self.key_runs[main.origin] = self.key_runs.get(main.origin, 0) + runs_of_merged
        merged.entries += 1  # the Arc held by the caller while re-pointing
        self._point(merged.origin, main)
        ids = self.keys.pop(merged.origin, None)
        if ids is not None:
            self.keys_tree.remove(merged.origin)
            table = self.key_tables.pop(merged.origin, None)
            for key in ids:
                self._point(key, main)
            main_ids = self.keys[main.origin]
            if ids or runs_of_merged:
                main_table = self.key_tables.get(main.origin)
                if main_table is None:
                    main_table = self.key_tables[main.origin] = self.sim.tables.key_set()
                n = self._key_count(main.origin) - runs_of_merged
                extra = len(ids) + runs_of_merged
                main_table.reserve(n, extra if n == 0 else (extra + 1) // 2)
                main_ids |= ids
                main_table.fit(self._key_count(main.origin))
            if table is not None:
                table.drop()
        merged.release()

    # -- fast-forwarded runs --------------------------------------------------------------
    def add_run(self, run, replayed=False) -> None:
        """Record a run of dead nodes: its own single-node graphs, or nodes of ``run.graph``.

        ``replayed``: the run's blocks and the BTreeMaps' new nodes were (or will be)
        allocated one iteration at a time by fast-forward's replay (a glibc arena, where
        the order of requests places them); only the bookkeeping is recorded here."""
        alloc = not replayed
        self.graphs_tree.append_run(run.first, run.stride, run.count, alloc)
        self.run_entries += run.count
        if run.new_graph:
            self.keys_tree.append_run(run.first, run.stride, run.count, alloc)
            self.live[run] = None
            if alloc:
                run.alloc(self.sim.heap)
            return
        graph = run.graph
        graph.entries += run.count
        origin = graph.origin
        self.key_runs[origin] = self.key_runs.get(origin, 0) + run.count
        table = self.key_tables.get(origin)
        if table is None:
            table = self.key_tables[origin] = self.sim.tables.key_set()
        table.grow_to(self._key_count(origin))
        if alloc:
            run.alloc(self.sim.heap)
        graph.server.add_run(run)

    def remove_run(self, run) -> None:
        """Forget every entry of a freed run (its nodes' heap is already freed)."""
        self.run_entries -= run.count
        tree = self.graphs_tree
        span = (run.first, run.stride, run.count)
        if run.new_graph:
            # each member's single-node graph goes as remove_entry drops it: its keys, then
            # its blocks (NodeRun.drop_graphs)
            run.drop_graphs(self.sim.heap, lambda key: (self._untree(tree, key),
                                                        self._untree(self.keys_tree, key)))
            self.live.pop(run, None)
            return
        self._untree(tree, span)
        self._release_run_entries(run.graph, run.count)

    def remove_run_member(self, run, node_id) -> None:
        """Forget one member of a run of ``run.graph``'s nodes, freed on its own (its heap
        is already freed; the run itself has left the graph), as :meth:`remove_entry`
        forgets a node."""
        self.run_entries -= 1
        self._untree(self.graphs_tree, node_id)
        self._release_run_entries(run.graph, 1)

    def _release_run_entries(self, graph, n) -> None:
        """``n`` entries of run members of ``graph`` are gone: its origin's key count
        falls (the key set is dropped once empty) and the graph loses ``n`` entries."""
        origin = graph.origin
        left = self.key_runs.get(origin, 0) - n
        if left:
            self.key_runs[origin] = left
        else:
            self.key_runs.pop(origin, None)
            if origin in self.keys and not self.keys[origin]:
                self._drop_keys(origin)
        graph.release(n)

    def compact(self, node_id) -> bool:
        """Keep a dead single-node graph as a record instead of objects (exact mode).

        A graph whose one node has no parent and no tensor handle left can only
        wait for a sweep to free it; burn holds it node by node, the simulator
        may hold it as one more member of a :class:`NodeRun` of dead single-node
        graphs (appended to the previous run when the ids and blocks line up).
        Nothing observable changes: the blocks stay allocated (the run owns them
        now), the BTreeMap keys stay where they are, and every pass treats a run
        member as it treats such a graph. Only the most recently created live
        graph is compacted, so the locator's creation order is kept. Returns
        whether the graph was compacted.
        """
        graph = self.graphs.get(node_id)
        if graph.__class__ is SingleNodeGraph and graph.step is not None:
            cached = self._run_blocks.get((graph.step.nbytes, 4, 4, 4, 4))
            if cached is not None:       # else built, and compacted as any graph
                return self._compact_unbuilt(graph, cached)
        graph = self._compactable(node_id)
        if graph is None:
            return False
        server = graph.server
        memory = server.memory_management
        step = server.steps[node_id]
        key = (step.nbytes, server.steps_table.buckets, server.actions_table.buckets,
               memory.nodes_table.buckets, memory.leaves_table.buckets)
        cached = self._run_blocks.get(key)
        rc = memory.nodes[node_id][0]
        # the run frees the blocks the graph's objects would (sim.burn.graph.runs)
        handles = member_handles(self.sim.heap, self.sim.layout, step, rc, server,
                                 graph._block)
        if cached is None:
            layout = self.sim.layout
            cached = self._run_blocks[key] = (node_blocks(layout, step, ()),
                                              graph_blocks(layout, server),
                                              graph_drop_order(layout, step, server),
                                              dead_graph_handles(layout, step, rc, server)[1])
        # the run owns the blocks from now on: the objects must not free them; and the
        # objects must go now: break the server <-> memory and ref count -> memory cycles
        # (the collector is off while a simulation runs)
        step.node._nbytes = 0
        graph.entries = 0
        rc.owner = None
        memory.nodes = {}
        server.steps = {}
        memory.server = None
        return self._retire(node_id, graph, handles, cached)

    def compact_unbuilt(self, graph) -> bool:
        """:meth:`compact` of ``graph``'s one node, a :class:`SingleNodeGraph` whose server
        was never built (what :meth:`compact` finds first for such a graph's node)."""
        cached = self._run_blocks.get((graph.step.nbytes, 4, 4, 4, 4))
        if cached is not None:
            return self._compact_unbuilt(graph, cached)
        return self.compact(graph.rc.id)

    def _compact_unbuilt(self, graph, cached) -> bool:
        """:meth:`compact` of a :class:`SingleNodeGraph` whose server was never built (its
        tables hold their first blocks: ``cached`` are the blocks of such a graph)."""
        rc, step = graph.rc, graph.step
        node_id = rc.id
        if (graph.entries != 1 or graph.referenced or rc.strong != 1 or rc.extra
                or step.actions is not None or step.node.retro is not None
                or next(reversed(self.live)) is not graph or self.keys.get(node_id)
                or node_id in self.key_tables or node_id in self.key_runs):
            return False
        handles = unbuilt_graph_handles(self.sim.heap, self.sim.layout, step, rc,
                                        graph.blocks, graph._block)
        step.node._nbytes = 0       # the run owns the blocks from now on
        graph.entries = 0
        rc.owner = None
        graph.rc = graph.step = None
        return self._retire(node_id, graph, handles, cached)

    def _retire(self, node_id, graph, handles, cached) -> bool:
        """The last of :meth:`compact`: ``graph`` leaves the maps and its node becomes the
        newest member of the run of dead single-node graphs."""
        del self.graphs[node_id]
        del self.keys[node_id]
        del self.live[graph]
        self.run_entries += 1
        self._append_dead_graph(node_id, handles, *cached)
        return True

    def _compactable(self, node_id):
        """``node_id``'s graph if :meth:`compact` may take it (the newest live graph, its
        one node parentless, without handle, checkpoint or key), else None."""
        graph = self.graphs.get(node_id)
        if graph is None or graph.origin != node_id or graph.entries != 1:
            return None
        if next(reversed(self.live)) is not graph:
            return None
        server = graph.server
        memory = server.memory_management
        if (len(memory.nodes) != 1 or memory.runs or memory.referenced
                or memory.statuses_table is not None):
            return None
        rc, parents = memory.nodes[node_id]
        step = server.steps.get(node_id)
        if (parents or rc.strong != 1 or rc.extra or step is None or step.actions is not None
                or step.node.retro is not None or len(server.steps) != 1
                or self.keys.get(node_id) or node_id in self.key_tables
                or node_id in self.key_runs):
            return None
        return graph

    def _append_dead_graph(self, node_id, handles, node_order, graph_order, drop_order,
                           drop_index) -> None:
        """A compacted graph joins the newest live run of dead single-node graphs where its
        id continues the run's stride and its blocks are the same, else starts one
        (``handles``: its blocks' handles, where the run's frees name them, else None)."""
        live = self.live
        last = next(reversed(live), None)
        # (the run's one layout read as a tuple, not through its properties: hot path)
        if (last.__class__ is NodeRun and last.new_graph and len(last.layouts) == 1
                and last.layouts[0][:2] == (node_order, graph_order)
                and last.drop_indices == (drop_index,) and not last.nodes_freed
                and (type(last.handles) is list) == (handles is not None)):
            end = last.last
            if node_id > end and (last.count == 1 or node_id == end + last.stride):
                if last.count == 1:
                    last.stride = node_id - last.first
                last.count += 1
                if handles is not None:
                    last.handles.append(handles)
                return
        live[NodeRun(node_id, 1, 1, (), node_order, new_graph=True,
                     graph_order=graph_order, drop_order=drop_order,
                     handles=None if handles is None else [handles],
                     drop_indices=(drop_index,))] = None

    def new_graph(self, origin, graph_class=Graph) -> Graph:
        """A new graph whose origin is ``origin``."""
        graph = graph_class(self.sim, origin)
        self.live[graph] = None
        self._point(origin, graph)
        if origin in self.keys:
            self._drop_keys(origin)
        self.keys[origin] = set()
        self.keys_tree.insert(origin)
        self.sim.timing.new_graph()
        return graph


class _Reads:
    """The orphan sweep's node reads: their sum, in the order they are added, and (if
    ``keep``) the terms as ``(key, reads)``, ``key`` the ``id`` of a live graph's memory
    management for its ``maybe_useful`` scans, else None."""

    __slots__ = ("total", "parts", "keep")

    def __init__(self, keep):
        self.total = 0.0
        self.keep = keep
        self.parts = []

    def add(self, key, value) -> None:
        self.total += value
        if self.keep:
            self.parts.append((key, value))


class OrphanSweep:
    """One run of ``cleanup_orphaned_entries``: its ``should_remove`` list and what it
    costs (the clone of the ``graphs`` map, every node read, the time model's records).

    A :class:`~sim.burn.graph.runs.NodeRun` of dead single-node graphs is visited entry
    by entry as burn visits its members; a graph's ``k`` entries are visited ``k`` times
    with their outcome computed once (graphs are independent within a sweep) and the
    work charged per entry.
    """

    def __init__(self, sim, locator, clone=True):
        self.sim = sim
        self.locator = locator
        self.heap = heap = sim.heap
        self.entries = locator.entry_count()
        self.clone = None
        if clone:
            # the clone of the BTreeMap: one block per node, freed when the sweep ends
            self.clone = locator.graphs_tree.clone_nodes(heap, empty=not self.entries)
        self.removals = []
        self.freed = 0
        self.visits = 0
        # should_remove: the freed ids, pushed as free_unused_roots reports them
        self.should_remove = RustVec(heap, sim.layout.node_id_bytes)
        # every node read, summed in visit order; its terms are kept while fast-forward
        # probes an iteration (Timing.log), to recompute the sweep of a longer chain
        self.reads = _Reads(sim.timing.log is not None)

    def collect(self, item) -> None:
        """``free_unused_roots``' callback: ``should_remove.push(id)`` (a run: each member)."""
        self.removals.append(item)
        n = item.count if type(item) is NodeRun else 1
        self.freed += n
        self.should_remove.push_each(n)

    def visit_run(self, run) -> None:
        """Each entry of a run of dead single-node graphs visited, scanned and its node
        freed now (``free_unused_roots``: the deletables ``Vec`` of one id around it, the
        id pushed on ``should_remove``), its graph when the entry is removed."""
        run.free_visited(self.heap, self.sim.layout.node_id_bytes, self.should_remove)
        self.removals.append(run)
        self.freed += run.count
        self.visits += run.count
        # maybe_useful's read and free_unused_roots' (dedup-sweep too: its one visit scans
        # the node once, as burn's does)
        self.reads.add(None, 2 * run.count)
        self.sim.timing.sweep_run(run)  # the time model's record

    def visit_entries(self, graph) -> None:
        """burn's visit of each of ``graph``'s entries: lock, ``maybe_useful``, else
        ``free_unused_roots`` (one more layer each time, until a visit frees nothing)."""
        timing = self.sim.timing
        server = graph.server
        memory = server.memory_management
        passes = graph.entries
        self.visits += passes
        if memory.maybe_useful():
            self.reads.add(id(memory), passes * memory.scan_length())
            timing.sweep_live(memory, passes)  # the time model's record
            return
        for done in range(1, passes + 1):
            before = self.freed
            timing.sweep_dead(memory)  # the time model's record
            self.reads.add(None, memory.node_count())
            self.reads.add(None, server.free_unused_roots(self.collect, self.collect))
            if self.freed == before:
                self.reads.add(None, (passes - done) * 2 * memory.node_count())
                timing.sweep_dead(memory, passes - done)  # the time model's record
                return

    def remove_entries(self) -> None:
        """``for node in should_remove { remove_entry }``: the ``Vec`` goes when the loop
        ends. Approximation: a removed graph goes here, with its entry, where burn drops it
        with the sweep's clone of the map (which holds its last Arc), leaf by leaf of the
        clone after the Vec (see docs/burn-notes/heap-order.md)."""
        locator = self.locator
        self.should_remove.drop()
        with locator.removals():
            for item in self.removals:
                if type(item) is NodeRun:
                    locator.remove_run(item)
                else:
                    locator.remove_entry(item)
        entries = self.entries   # dedup-sweep walks every entry to find the distinct graphs
        if self.clone is not None:
            locator.graphs_tree.drop_clone(self.heap, self.clone)
        self.sim.timing.sweep(entries=entries, visits=self.visits, scanned=self.reads.total,
                              freed=self.freed, parts=self.reads.parts)


class GraphCleaner:
    """``GraphCleaner``: the ``NodeCleaner`` a backward gets (``clean``: remove a freed
    id's locator entry) and the orphan sweep (:meth:`cleanup_orphaned_entries`)."""

    __slots__ = ("locator",)

    def __init__(self, locator):
        self.locator = locator

    def clean(self, node_id) -> None:
        self.locator.remove_entry(node_id)

    def clean_run(self, run) -> None:
        self.locator.remove_run(run)

    def clean_member(self, run, node_id) -> None:
        self.locator.remove_run_member(run, node_id)

    def cleanup_orphaned_entries(self) -> int:
        """The orphan sweep; returns the number of freed node ids.

        burn clones ``graphs`` and visits every ENTRY: a graph with ``k`` entries
        is locked and checked ``k`` times (``maybe_useful`` scans its nodes until
        a live handle), and if dead, ``free_unused_roots`` runs on each visit
        (each frees one more layer of its roots); then it removes the entries of
        the ids ``free_unused_roots`` reported. What the sweep costs (the map's
        clone, the nodes read, the time) and the runs of dead nodes the simulator
        keeps compressed are :class:`OrphanSweep`'s.
        """
        locator = self.locator
        sweep = OrphanSweep(locator.sim, locator)                 # graphs.clone()
        for graph in list(locator.live):                          # for graph in graphs.values()
            if type(graph) is NodeRun:
                sweep.visit_run(graph)           # dead single-node graphs, entry by entry
            elif graph.entries:                  # (one held by the backward only: not in the map)
                sweep.visit_entries(graph)       # maybe_useful, else free_unused_roots
        sweep.remove_entries()                   # for node in should_remove: remove_entry
        return sweep.freed


class GraphMutexClient:
    """The autodiff client: locator mutex plus one mutex per graph.

    The locator is created lazily by the first registration or backward, as
    burn's ``static STATE: Mutex<Option<GraphLocator>>``.
    """

    def __init__(self, sim):
        self.sim = sim
        self.locator = None

    def graph(self, node_id, parents) -> Graph:
        locator = self.locator
        if locator is None:
            locator = self.locator = self.sim.policy.GraphLocator(self.sim)
        return locator.select(node_id, parents)

    def register(self, rc, step) -> None:
        """Register ``step`` for node ``rc``: select its graph, then the graph's server."""
        sim = self.sim
        registered = sim.registered = sim.registered + 1
        if not registered & 4095:
            sim._check_limits()
        # the op boxed its step (Box<dyn Step>) before calling register
        step.block = sim.heap.alloc(step.nbytes)
        parents = step.node.parents
        sim.timing.register(len(parents))
        locator = self.locator
        if (not parents and sim.defer_servers and locator is not None
                and rc.id not in locator.graphs):
            # an untracked op's new graph, its server built if something asks for it
            locator.new_graph(rc.id, SingleNodeGraph).register(rc, step)
        else:
            self.graph(rc.id, parents).server.register(rc, step)
        sim.policy.on_register(self, rc, step)

    def backward(self, root):
        """Backward from ``root``; then the policy's cleanup (burn: the orphan sweep).

        The client holds the root's graph for both: a graph whose last locator entry the
        backward removed is dropped only after the sweep (its ``nodes`` map still holds
        the Arc<NodeId>s it shares with another graph while that graph is checked)."""
        graph = self.graph(root.node.id, ())
        sim = self.sim
        if sim.backwards == 0:
            sim.policy.first_backward()
        graph.hold()
        try:
            sim.in_backward = True
            try:
                grads = graph.server.backward(root, sim.policy.GraphCleaner(self.locator))
            finally:
                sim.in_backward = False
            sim.backwards += 1
            self.sim.policy.after_backward(self)
        finally:
            graph.unhold()
        return grads

    def cleanup_orphaned_entries(self) -> int:
        """``GraphCleaner::cleanup_orphaned_entries`` (the policy's
        :class:`GraphCleaner`); returns the number of freed node ids."""
        if self.locator is None:
            return 0
        return self.sim.policy.GraphCleaner(self.locator).cleanup_orphaned_entries()
