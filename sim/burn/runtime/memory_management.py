"""Node liveness of one graph (burn-autodiff ``runtime/memory_management.rs``).

:class:`GraphMemoryManagement` keeps, like burn's struct of the same name:

``nodes``
    node id -> (its :class:`~sim.burn.graph.node.NodeRefCount`, its parents).
    Holding the ref count here is what makes ``strong == 1`` mean "no tensor
    handle left".
``leaves``
    ids of nodes that no registered node has as a parent.
``statuses``
    scratch map filled by :meth:`free_unavailable_nodes` and cleared after it
    (its table keeps its capacity, as a cleared hashbrown table does).

The three passes of ``free_unavailable_nodes`` are computed as reachability sets
over this graph's edges child -> parent (absent leaf parents dropped as burn's
filters drop them; each node's kept parents read once per call). The set
formulation below equals burn's worklist algorithm:

* **unavailable**: reached from a leaf and able to reach, through parents, a
  parent id that is no longer in ``nodes`` (a consumed intermediate);
* **useful**: an available, still referenced node reached from a leaf, and every
  ancestor of one;
* **deletable**: reached from a leaf through nodes that are not useful; the
  useful nodes where that walk stops are the new leaves.

``free_unused_roots`` (the orphan sweep) removes only nodes that are not
referenced and have no parent left in ``nodes``: one layer per sweep.
"""

from __future__ import annotations

import heapq
import itertools

from ...platform.vec import RustVec
from ..graph.runs import built
from ..graph.settled import SettledNodes, ancestors, reachable
from .pass_blocks import charge_passes, members_in_order

__all__ = ["GraphMemoryManagement"]


class GraphMemoryManagement:
    """``nodes``, ``leaves`` and ``statuses`` of one graph, with their tables' heap."""

    __slots__ = ("server", "nodes", "leaves", "nodes_table", "leaves_table", "statuses_table",
                 "referenced", "runs", "run_nodes", "serials", "inserted", "settled")

    def __init__(self, server):
        sim = server.sim
        self.server = server
        self.nodes = {}
        self.leaves = set()
        self.nodes_table = sim.tables.nodes()
        self.leaves_table = sim.tables.leaves()
        self.statuses_table = None  # created by the first backward on this graph
        # number of registered nodes whose ref count is > 1 (a tensor handle is alive)
        self.referenced = 0
        # fast-forwarded dead childless nodes (sim.burn.graph.runs), counted in nodes and leaves
        self.runs = []
        self.run_nodes = 0
        # where runs sit among the nodes in the map's insertion order, which is the order
        # passes free nodes in: from the first run on, every run and every newly inserted
        # node gets the next serial (node id -> serial; None: no run yet, and nodes without
        # a serial were inserted before any run)
        self.serials = None
        self.inserted = 0
        # the nodes the last backward found useful, if it was not this graph's first
        # (sim.burn.graph.settled): the next backward walks only the others
        self.settled = None

    @classmethod
    def layout_of(cls, layout):
        """The struct sizes of ``layout`` (a profile's ``[layout]``) with this struct's fields:
        burn 0.22.1's (``nodes``, ``leaves``, ``statuses``) are in ``graph_arc_bytes``
        already (``Arc<Graph>`` holds the server, which holds this). A fix that adds a field
        returns the sizes with it."""
        return layout

    # -- registration -----------------------------------------------------------
    def register(self, rc, parents) -> None:
        """Record ``rc``'s node with its ``parents``; it becomes a leaf, its parents stop being leaves."""
        leaves = self.leaves
        for pid, _ in parents:
            leaves.discard(pid)
        if rc.id in leaves:
            # inserting a present key still reserves a slot (sim.platform.hashbrown)
            self.leaves_table.reinsert(len(leaves) + self.run_nodes)
        else:
            leaves.add(rc.id)
            self.leaves_table.fit(len(leaves) + self.run_nodes)
        # nodes.insert
        nodes = self.nodes
        old = nodes.get(rc.id)
        if old is not None:
            # HashMap::insert of a present key keeps the old key (its Arc<NodeId>) and drops
            # the new one: the strong count is unchanged, only the parents Vec is replaced
            # (a second RootStep for the same id: require_grad on another handle of the
            # leaf); the insert reserves a slot first, so a full table grows all the same
            sim = self.server.sim
            block = sim.heap.alloc(sim.layout.parent_bytes * len(parents)) if parents else None
            self.nodes_table.reinsert(len(nodes) + self.run_nodes)
            if old[1]:
                sim.heap.free(sim.layout.parent_bytes * len(old[1]), old[0].parents_block)
            old[0].parents_block = block
            nodes[rc.id] = (old[0], parents)
            if self.settled is not None and not self.settled.replaced(rc.id):
                self.settled = None
            return
        if parents:
            # parents.to_vec(): an exact-size Vec<Parent>, built before the insert
            rc.parents_block = self.server.sim.heap.alloc(
                self.server.sim.layout.parent_bytes * len(parents))
        rc.acquire()
        rc.hold(self)
        if rc.strong > 1:
            self.referenced += 1
        nodes[rc.id] = (rc, parents)
        if self.settled is not None and not self.settled.inserted(rc.id):
            self.settled = None
        if self.serials is not None:
            self.serials[rc.id] = self.inserted
            self.inserted += 1
        self.nodes_table.fit(len(nodes) + self.run_nodes)

    def _remove(self, node_id) -> None:
        entry = self.nodes.pop(node_id, None)
        if entry is None:
            return
        if self.serials:
            self.serials.pop(node_id, None)
        if self.settled is not None and not self.settled.removed(node_id):
            self.settled = None
        rc, parents = entry
        sim = self.server.sim
        # HashMap::remove drops the key (the Arc<NodeId>) and returns the value (the
        # parents Vec), dropped after it
        if rc.strong > 1:
            self.referenced -= 1
        rc.unhold(self)
        rc.release()
        if parents:
            sim.heap.free(sim.layout.parent_bytes * len(parents), rc.parents_block)
            rc.parents_block = None
        sim.policy.on_node_removed(self, node_id, parents)

    def extend(self, other: "GraphMemoryManagement") -> None:
        """Move every node of ``other`` into this graph (a merge): its nodes, its leaves,
        its runs; its statuses map is empty between backwards, its tables go."""
        self._extend_nodes(other)
        mine, theirs = len(self.leaves) + self.run_nodes, len(other.leaves) + other.run_nodes
        self.leaves_table.reserve(mine, _extend_reserve(mine, theirs))
        for leaf in other.leaves:
            self.leaves.add(leaf)
            self.leaves_table.fit(len(self.leaves) + self.run_nodes)
        for run in other.runs:
            self.add_run(run, placed=True)
        other.nodes = {}
        other.leaves = set()
        other.referenced = 0
        other._drop_runs_and_tables()

    def _extend_nodes(self, other) -> None:
        """``nodes.extend(other.nodes)``: each entry inserted in ``other``'s map order, its
        runs taking their places among them (serials in this map's order)."""
        if other.runs:
            built(self.nodes)
        mine, theirs = len(self.nodes) + self.run_nodes, len(other.nodes) + other.run_nodes
        self.nodes_table.reserve(mine, _extend_reserve(mine, theirs))
        if other.runs and self.serials is None:
            self.serials = {}
        theirs_at = other.serials or {}
        runs = sorted(other.runs, key=lambda r: r.serial)
        placed = 0
        dropped = []
        for node_id, (rc, parents) in other.nodes.items():
            while placed < len(runs) and runs[placed].serial < theirs_at.get(node_id, -1):
                runs[placed].serial = self._next_serial()
                placed += 1
            if not self._insert_moved(other, node_id, rc, parents):
                dropped.append(rc)
        for run in runs[placed:]:
            run.serial = self._next_serial()
        self.referenced += other.referenced
        for rc in dropped:
            # counted by both graphs while both held it (strong >= 2); the drop is silent
            # (burn has no hook on it): a count falling to 1 here is left to the sweep
            self.referenced -= 1
            rc.unhold(other)
            rc.strong -= 1
            if rc.strong == 1:
                self.referenced -= 1

    def _next_serial(self) -> int:
        serial = self.inserted
        self.inserted += 1
        return serial

    def _insert_moved(self, other, node_id, rc, parents) -> bool:
        """One entry of ``other``'s ``nodes`` inserted here; False where both graphs held
        the id (a RootStep re-registered after a consumed backward): ``HashMap::extend``
        keeps the present key, takes the incoming parents and drops the incoming
        ``Arc<NodeId>`` (the caller's)."""
        old = self.nodes.get(node_id)
        if old is not None:
            if old[1]:
                sim = self.server.sim
                sim.heap.free(sim.layout.parent_bytes * len(old[1]), old[0].parents_block)
            old[0].parents_block = rc.parents_block if parents else None
            self.nodes[node_id] = (old[0], parents)
            if self.settled is not None and not self.settled.replaced(node_id):
                self.settled = None
            return False
        rc.move(other, self)
        self.nodes[node_id] = (rc, parents)
        if self.settled is not None and not self.settled.inserted(node_id):
            self.settled = None
        if self.serials is not None:
            self.serials[node_id] = self._next_serial()
        self.nodes_table.fit(len(self.nodes) + self.run_nodes)
        return True

    def drop(self) -> None:
        """The graph is dropped: release every node and free the tables."""
        heap = self.server.sim.heap
        for node_id, run in self._in_map_order(list(self.nodes), self.runs):
            if run is None:
                self._remove(node_id)
            else:
                run.free(heap)
        self._drop_runs_and_tables()

    def _drop_runs_and_tables(self) -> None:
        """The graph holds no run and no index any more; its three tables' heap is freed."""
        self.runs = []
        self.run_nodes = 0
        self.settled = None
        for table in (self.nodes_table, self.leaves_table, self.statuses_table):
            if table is not None:
                table.drop()

    # -- queries ------------------------------------------------------------------
    def add_run(self, run, placed=False) -> None:
        """Take ``run``'s nodes (dead childless leaves) into this graph; tables grow.
        The members sit after every node inserted so far (``placed``: a merge has set
        :attr:`~sim.burn.graph.runs.NodeRun.serial` already)."""
        built(self.nodes)
        if not placed:
            if self.serials is None:
                self.serials = {}
            run.serial = self.inserted
            self.inserted += 1
        self.runs.append(run)
        self.run_nodes += run.count
        self.leaves_table.grow_to(len(self.leaves) + self.run_nodes)
        self.nodes_table.grow_to(len(self.nodes) + self.run_nodes)

    def node_count(self) -> int:
        return len(self.nodes) + self.run_nodes

    def is_referenced(self, node_id) -> bool:
        return self.nodes[node_id][0].strong > 1

    def maybe_useful(self) -> bool:
        """True if some node of this graph still has a live tensor handle."""
        return self.referenced > 0

    def scan_length(self) -> float:
        """Expected number of keys ``maybe_useful`` reads before it answers.

        ``nodes.keys().any(..)`` stops at the first referenced key; with ``r``
        referenced keys among ``n`` in hash order the first sits at
        ``(n + 1) / (r + 1)`` on average; a dead graph is read in full.
        """
        n = len(self.nodes) + self.run_nodes
        r = self.referenced
        return n if r == 0 else (n + 1) / (r + 1)

    def on_last_handle(self, rc) -> None:
        """A registered node lost its last tensor handle: burn is not told (the policy's
        seam ``on_last_handle``; ``drop-release`` overrides this method); in exact mode a dead single-node graph is then kept as a record
        (:meth:`~sim.burn.runtime.graph.GraphLocator.compact`)."""
        sim = self.server.sim
        sim.policy.on_last_handle(self.server, rc)
        if sim.compact:
            sim.client.locator.compact(rc.id)

    # -- backward -------------------------------------------------------------------
    def consume_node(self, node_id) -> None:
        """A backward consumed this node's step: forget it unless a tensor still holds it."""
        entry = self.nodes.get(node_id)
        if entry is not None and entry[0].strong <= 1:
            self.leaves.discard(node_id)
            self._remove(node_id)

    def free_unavailable_nodes(self, on_free, on_free_run=None, on_free_member=None) -> int:
        """Free every node whose backward became impossible or useless; returns nodes visited.

        ``on_free(node_id)`` is called for each freed id (the server drops its
        step and the locator its entry), ``on_free_run(run)`` for each freed run
        (a run's members are leaves like any other, represented by one node).
        Nodes go in the order of burn's ``identify_leaves_and_deletables``: leaf by
        leaf (ascending ids; burn's own order is its ``HashSet``'s, random per
        process), each leaf followed by its depth-first walk through non-useful
        parents (:func:`_deletion_order`), then the unused roots. Where
        ``on_free_member(run, node_id)`` is given, a run's members go one by one in that
        order too, each followed by ``on_free_member``
        (:func:`~sim.burn.runtime.pass_blocks.members_in_order`: the locator's BTreeMap
        merges by the order of removals, glibc's arena places by the order of frees);
        elsewhere a run goes after the nodes.
        """
        runs = {("run", run.first): run for run in self.runs}
        graph = _KeptParents(self.nodes, runs)
        leaves = sorted(self.leaves)   # a stale leaf (freed by a sweep) is absent: unavailable
        # unavailable_propagation, then useful_propagation, from every leaf
        reached, useful, settled = self._statuses(graph, leaves, runs)
        # identify_leaves_and_deletables from every leaf
        members = members_in_order(runs, on_free_member)
        ordered, deletables = _deletion_order(graph, leaves, runs, useful, members)
        new_leaves = {leaf for leaf in leaves if leaf in useful}
        for node_id in deletables:
            new_leaves.update(p for p in graph.successors(node_id) if p in useful)
        scratch = charge_passes(self, leaves, runs, reached, useful, deletables, new_leaves,
                                members)
        self.leaves = new_leaves                                   # mem::swap
        roots = self._unused_roots(useful, settled)                # clear_unused_roots
        visited = len(reached) + len(self.nodes) + 2 * self.run_nodes - len(runs)
        self._delete(ordered, roots, runs, deletables, members,
                     on_free, on_free_run, on_free_member)
        if scratch is not None:
            deletables_vec, old_leaves_table = scratch
            deletables_vec.push(len(roots))   # clear_unused_roots pushed them (earlier)
            deletables_vec.drop()
            old_leaves_table.drop()            # mem::swap left the old set to the end
        return visited

    def _delete(self, ordered, roots, runs, deletables, members, on_free, on_free_run,
                on_free_member) -> None:
        """``for node_to_delete in deletables { nodes.remove; on_free_graph }``: the walks'
        deletables in ``ordered``, then the unused roots; a run's members one by one in
        their place among the walks (``members``), else each freed run after the nodes
        (where the allocator keeps counts per size, a run's blocks go at once:
        :meth:`~sim.burn.graph.runs.NodeRun.free_nodes_where_unordered`)."""
        heap = self.server.sim.heap
        freed_runs = sorted((run for rep, run in runs.items() if rep in deletables),
                            key=lambda r: r.first)
        if members:
            for run in freed_runs:
                self.runs.remove(run)
                self.run_nodes -= run.count
                run.free_nodes_where_unordered(heap)
            freed_runs = []
        for node_id, run in ordered:
            if run is None:
                self._remove(node_id)
                on_free(node_id)
            elif members:
                run.free_member(heap, node_id)
                on_free_member(run, node_id)
        for node_id in roots:
            self._remove(node_id)
            on_free(node_id)
        for run in freed_runs:
            self._free_run(run, on_free_run)

    def free_unused_roots(self, on_free, on_free_run=None) -> int:
        """Free nodes with no handle and no parent left (the orphan sweep); returns nodes read."""
        nodes = self.nodes
        read = len(nodes) + self.run_nodes
        dead_runs = [run for run in self.runs
                     if all(pid not in nodes for pid, _ in run.parents)]
        items = self._in_map_order(self._unused_roots(()), dead_runs)
        # clear_unused_roots collects the ids into a Vec first, freed when the removals
        # are done
        sim = self.server.sim
        deletables = RustVec(sim.heap, sim.layout.node_id_bytes)
        deletables.push_each(sum(1 if run is None else run.count for _, run in items))
        for node_id, run in items:
            if run is None:
                self._remove(node_id)
                on_free(node_id)
            else:
                self._free_run(run, on_free_run)
        deletables.drop()
        return read

    def _in_map_order(self, node_ids, runs):
        """``(node_id, None)`` for ``node_ids`` (in map order) and ``(None, run)`` for
        ``runs``, merged in the map's insertion order: where a pass over the map would
        meet the runs' members."""
        if not runs:
            return [(node_id, None) for node_id in node_ids]
        at = self.serials
        merged = heapq.merge(((at.get(n, -1), n, None) for n in node_ids),
                             ((run.serial, None, run)
                              for run in sorted(runs, key=lambda r: r.serial)),
                             key=lambda item: item[0])
        return [(n, run) for _, n, run in merged]

    def _free_run(self, run, on_free_run) -> None:
        self.runs.remove(run)
        self.run_nodes -= run.count
        run.free(self.server.sim.heap)
        if on_free_run is not None:
            on_free_run(run)

    def _statuses(self, graph, leaves, runs) -> tuple:
        """:func:`_statuses`, walking only the nodes that are not settled where an index
        of them holds (:mod:`sim.burn.graph.settled`), else every node, and then building
        the index if this is not the graph's first backward; ``(reached, useful, the
        index used)``, whose nodes are all useful, or None."""
        if runs:
            return (*_statuses(graph, leaves, runs), None)
        found = self.settled.statuses(graph, leaves) if self.settled is not None else None
        if found is not None:
            return (*found, self.settled)
        reached, useful = _statuses(graph, leaves, runs)
        # statuses_table: made by the first backward on this graph
        self.settled = (SettledNodes(self.nodes, useful, graph)
                        if self.statuses_table is not None else None)
        return reached, useful, self.settled

    def _unused_roots(self, useful, settled=None):
        """The nodes ``clear_unused_roots`` frees: no handle, not ``useful``, no parent
        left; a ``settled`` node is useful, so only the others are read."""
        nodes = self.nodes
        items = nodes.items() if settled is None else ((n, nodes[n]) for n in settled.outside)
        return [
            node_id
            for node_id, (rc, parents) in items
            if rc.strong == 1
            and node_id not in useful
            and all(pid not in nodes for pid, _ in parents)
        ]


def _deletion_order(graph, leaves, runs, useful, members):
    """The deletables of ``free_unavailable_nodes`` in the order burn frees them,
    and the set of them (node ids and run representatives).

    burn's ``identify_leaves_and_deletables`` walks from each leaf in turn with a
    stack: it pops a node, stops at a useful one (a new leaf) and otherwise lists it
    for deletion and pushes its parents in their ``Vec`` order (so the last parent
    is walked first). A node listed again by a later walk, or twice by one, is
    removed only once (the second ``remove`` finds nothing), so only first listings
    count here. ``leaves``: sorted node leaf ids; ``runs``: representative -> run,
    each walked as its first member. With ``members`` every further member is a
    leaf of its own in id order (``(member_id, run)``; lazily, a run may hold
    millions); otherwise a run's only item is ``(first, run)``.
    Returns ``(order, deletables)``, order's items ``(node_id, None)`` or
    ``(member_id, run)``.
    """
    starts = sorted([(leaf, leaf, None) for leaf in leaves]
                    + [(run.first, rep, run) for rep, run in runs.items()],
                    key=lambda item: item[0])
    done = set()
    walks = []
    for key, start, run in starts:
        items = [(key, run)] if run is not None else []
        stack = [start]
        while stack:
            node_id = stack.pop()
            if node_id in done or node_id in useful:
                continue
            done.add(node_id)
            if node_id not in runs:
                items.append((node_id, None))
            stack.extend(p for p in graph.successors(node_id) if p not in done)
        walks.append((key, items))
    if members:
        walks = heapq.merge(walks, *map(_member_walks, runs.values()),
                            key=lambda walk: walk[0])
    return itertools.chain.from_iterable(items for _, items in walks), done


def _member_walks(run):
    """The walks of a run's members after its first, one leaf each: ``(member_id,
    ((member_id, run),))``, lazily."""
    return ((m, ((m, run),)) for m in run.ids[1:])


class _KeptParents:
    """The graph burn's passes walk, edges child -> parent: a node's parents in their
    ``Vec`` order, each once, burn's leaf filter applied (a parent that is a leaf is
    followed only while it is in ``nodes``); a run is one node, its representative in
    ``runs``; an id in neither (a stale leaf, a removed parent) has no parents."""

    __slots__ = ("nodes", "runs", "filtered", "_parents")

    def __init__(self, nodes, runs):
        self.nodes = nodes
        self.runs = runs
        self.filtered = set()    # the leaf parents the filter dropped
        self._parents = {}

    def successors(self, node_id) -> list:
        kept = self._parents.get(node_id)
        if kept is None:
            nodes = self.nodes
            run = self.runs.get(node_id)
            entry = nodes.get(node_id) if run is None else (None, run.parents)
            kept = []
            for pid, is_leaf in (entry[1] if entry is not None else ()):
                if is_leaf and pid not in nodes:
                    self.filtered.add(pid)
                elif pid not in kept:
                    kept.append(pid)
            self._parents[node_id] = kept
        return kept


def _statuses(graph, leaves, runs) -> tuple:
    """The outcome of ``unavailable_propagation`` and ``useful_propagation`` from every
    leaf (and run): ``(reached, useful)``. Unavailable: reached and able to reach an id
    no longer in ``nodes``; useful: an available node that a tensor still holds, and
    every node reachable from one."""
    nodes = graph.nodes
    reached = reachable(graph, leaves + list(runs))[0]
    absent = [n for n in reached if n not in nodes and n not in runs]
    unavailable = ancestors(graph, absent, reached) if absent else set()
    seeds = [n for n in reached
             if n not in unavailable and n not in runs and nodes[n][0].strong > 1]
    return reached, reachable(graph, seeds)[0]


def _extend_reserve(existing, incoming) -> int:
    """hashbrown ``extend``: reserve all of ``incoming`` into an empty table, else half."""
    if not isinstance(existing, int):
        existing, incoming = len(existing), len(incoming)
    return incoming if not existing else (incoming + 1) // 2
