"""``drop-release``: dropping the last handle of a node releases it (reference counting)."""

from __future__ import annotations

from types import SimpleNamespace

from ..burn.runtime.graph import GraphMutexClient
from ..burn.runtime.memory_management import GraphMemoryManagement
from ..platform.hashbrown import RawTable, TableLayout
from ..platform.vec import RustVec
from .base import Policy

__all__ = ["DropRelease", "DropReleaseClient", "DropReleaseMemory", "ReleaseOnDropClient",
           "ReleaseOnDropMemory"]


class ReleaseOnDropClient(GraphMutexClient):
    """A ``GraphMutexClient`` that releases a node whose last handle dropped, and each node's
    count of registered children (kept for the whole process, keyed by node id, so that a
    parent in another graph than its child is found: an op on a tensor whose entry a
    backward removed starts a new graph). Every removal of a node, however it goes (its
    release, a backward consuming it, a sweep), leaves its parents without that child, and
    a parent left without children and handles goes too: the pytorch policy's client.
    :class:`DropReleaseClient` is the patch's, which does that on its release path only."""

    def __init__(self, sim):
        super().__init__(sim)
        self.children = {}
        #: nodes whose last child or handle went while a backward ran: released after it
        self.deferred = []
        # worklist of (memory, node id) releases: a cascade up a long chain is a loop,
        # not a recursion (a 1000-deep chain overflowed Python's stack)
        self._cascade = []
        self._draining = False
        # the heap vectors of the release running for a dropped handle (None outside one)
        self._vectors = None
        # registered id -> its Arc<NodeId>, whose ``owner`` is the graph holding the node
        self.rcs = {}

    def register(self, rc, step) -> None:
        super().register(rc, step)
        self.rcs[rc.id] = rc
        children = self.children
        parents = step.node.parents
        for pid, _ in parents:
            children[pid] = children.get(pid, 0) + 1
        if parents and getattr(rc.owner, "child_counts", None) is not None:
            # the patch's children table: one entry update per parent, charged here with
            # burn's registration (the server's register charges nothing for it)
            self.sim.timing.lookups(len(parents))

    def memory_of(self, node_id):
        """The memory management whose ``nodes`` holds ``node_id`` (None if no graph does)."""
        rc = self.rcs.get(node_id)
        return rc.owner if rc is not None else None

    def release(self, server, rc) -> None:
        """``GraphMutexClient::release``: the last handle of ``rc`` dropped. The node's
        graph is found in the locator (a node whose entry a backward removed: nothing
        more), then ``AutodiffServer::release``, whose vectors live on the heap until it
        returns, whether or not the node can go."""
        if self.sim.in_backward:
            self.deferred.append(rc.id)
            return
        locator = self.locator
        if locator is None or rc.id not in locator.graphs:
            if self.children.get(rc.id, 0) == 0:
                self._release(server.memory_management, rc.id)
            return
        # each call keeps its own vectors: a release can run inside another (a node's
        # release drops the last entry of a graph, whose nodes map drops a node's last
        # reference)
        outer = self._vectors
        vectors = self._vectors = _ReleaseVectors(self.sim.heap)
        try:
            if self.children.get(rc.id, 0) == 0:
                self._release(server.memory_management, rc.id)
        finally:
            vectors.drop()
            self._vectors = outer

    def release_deferred(self) -> None:
        """Release nodes whose last child went while a backward was running."""
        deferred, self.deferred = self.deferred, []
        for node_id in deferred:
            memory = self.memory_of(node_id)  # consumed nodes have no locator entry left
            if memory is None:
                continue
            entry = memory.nodes.get(node_id)
            if entry is not None and entry[0].strong == 1 and not self.children.get(node_id):
                self._release(memory, node_id)

    def node_removed(self, memory, node_id, parents) -> None:
        """``remove_node``: ``node_id`` left ``memory``'s nodes; each parent it leaves
        without children becomes a leaf, and goes too if no handle holds it."""
        children = self.children
        rc = self.rcs.get(node_id)
        if rc is None or rc.owner is None:  # no other graph still holds it
            self.rcs.pop(node_id, None)
            children.pop(node_id, None)
        childless = 0
        for pid, _ in parents:
            left = children.get(pid, 0) - 1
            if left > 0:
                children[pid] = left
                continue
            children.pop(pid, None)
            childless += pid in memory.nodes
            holder = memory if pid in memory.nodes else self.memory_of(pid)
            entry = holder.nodes.get(pid) if holder is not None else None
            if entry is not None:
                holder.leaves.add(pid)
                if entry[0].strong == 1:
                    if self.sim.in_backward:
                        # the tape is being built: release once the backward is done
                        self.deferred.append(pid)
                    else:
                        self._release(holder, pid)
        if self._vectors is not None and childless:
            self._vectors.childless(childless)

    def _release(self, memory, node_id) -> None:
        cascade = self._cascade
        cascade.append((memory, node_id))
        if self._draining:
            return  # an outer call is draining the worklist
        self._draining = True
        try:
            while cascade:
                self._release_one(*cascade.pop())
        finally:
            self._draining = False
            cascade.clear()

    def _release_one(self, memory, node_id) -> None:
        if node_id not in memory.nodes:
            return
        if self._vectors is not None:
            self._vectors.released.push()
        memory.server.remove_step(node_id)
        memory.leaves.discard(node_id)
        memory._remove(node_id)
        if self.locator is not None:
            self.locator.remove_entry(node_id)
        self.sim.timing.handle_drop(1)


class DropReleaseClient(ReleaseOnDropClient):
    """``GraphMutexClient`` of ``experiments/patches/drop-release.patch``: ``release`` of a
    node whose last handle dropped, as the patch writes it.

    * ``GraphMutexClient::release`` looks the node up in the locator first: a node whose
      entry is gone (a backward removed it, the node lives on in its graph's ``nodes``
      because a tensor held it) is left to the sweeps, not released.
    * Only the release path (``GraphMemoryManagement::release``) hands on the parents a
      removal leaves without children, and only those in the same graph's ``nodes``: each
      becomes a leaf again and goes too if no handle holds it. ``consume_node`` (a backward)
      and the sweeps' frees (``free_unavailable_nodes``, ``free_unused_roots``) call
      ``remove_node`` with a callback that does nothing: they lower the children counts, and
      the parent stays as it was (not a leaf), until its own handle drops or a sweep frees
      it.
    """

    def __init__(self, sim):
        super().__init__(sim)
        # whether the removal under way is a release (the patch's ``release``), whose
        # ``remove_node`` hands on the childless parents
        self._releasing = False

    def release(self, server, rc) -> None:
        locator = self.locator
        if locator is None or rc.id not in locator.graphs:
            return      # `None => return`: no entry, nothing to release
        super().release(server, rc)

    def node_removed(self, memory, node_id, parents) -> None:
        """``remove_node``: the counts of ``node_id``'s parents lowered; on the release path,
        each parent of ``memory``'s graph this leaves without children becomes a leaf and
        goes too if no handle holds it."""
        children = self.children
        rc = self.rcs.get(node_id)
        if rc is None or rc.owner is None:  # no other graph still holds it
            self.rcs.pop(node_id, None)
            children.pop(node_id, None)
        childless = []
        for pid, _ in parents:
            left = children.get(pid, 0) - 1
            if left > 0:
                children[pid] = left
                continue
            children.pop(pid, None)
            if self._releasing and pid in memory.nodes:
                childless.append(pid)
        if not childless:
            return
        if self._vectors is not None:
            self._vectors.childless(len(childless))
        for pid in childless:
            memory.leaves.add(pid)
            if memory.nodes[pid][0].strong == 1:
                self._release(memory, pid)

    def _release_one(self, memory, node_id) -> None:
        outer, self._releasing = self._releasing, True
        try:
            super()._release_one(memory, node_id)
        finally:
            self._releasing = outer     # a release inside another keeps the outer's flag


class ReleaseOnDropMemory(GraphMemoryManagement):
    """A ``GraphMemoryManagement`` whose node goes when its last handle drops
    (``AutodiffTensor``'s ``Drop``), removing a node updating its parents' children (the
    client's counts); the pytorch policy's, and the patch's below."""

    __slots__ = ()

    def on_last_handle(self, rc) -> None:
        self.server.sim.client.release(self.server, rc)
        super().on_last_handle(rc)

    def _remove(self, node_id) -> None:
        entry = self.nodes.get(node_id)
        super()._remove(node_id)
        if entry is not None:
            self.server.sim.client.node_removed(self, node_id, entry[1])


class DropReleaseMemory(ReleaseOnDropMemory):
    """``GraphMemoryManagement`` of the patch, with its field ``children:
    HashMap<NodeId, usize>``: how many of this graph's registered nodes list each id as a
    parent. The map's own struct (``hash_map_bytes``) is a fourth map in the struct, so in
    ``Arc<Graph>``: each graph's block is that much larger (:meth:`layout_of`; 272 -> 320 B on
    64-bit, as the patched run's heap trace shows). Its one heap block (slots of a
    ``NodeId`` and a ``usize``, as a backward's ``n_required``) is allocated by the first
    parent registered, grows as hashbrown's tables do and never shrinks; ``register``
    updates it in the parents loop, before the node's leaf and ``nodes`` entry are
    inserted; ``extend`` (a merge) inserts the other graph's entries one by one after the
    other maps' and the other's block goes after; it goes with the graph, after the other
    three maps (Rust drops the fields in order). Each entry update (``+= 1`` per parent in
    ``register``, ``get_mut`` and ``-= 1`` per parent in every ``remove_node``) is one hash
    lookup, charged as :meth:`~sim.platform.timing.Timing.lookup_ns`
    (:meth:`~sim.platform.timing.Timing.lookups`: per parent counted in the client's
    ``register``, and per parent of a removed node); a node removed by the
    graph's drop updates no entry (Rust's drop looks nothing up)."""

    __slots__ = ("child_counts", "children_table")

    def __init__(self, server):
        super().__init__(server)
        self.child_counts = {}
        sim = server.sim
        self.children_table = RawTable(
            TableLayout(sim.layout.n_required_slot_bytes, 8, sim.layout.group_width), sim.heap)

    @classmethod
    def layout_of(cls, layout):
        """``layout`` with ``children``'s struct in ``Arc<Graph>`` (``graph_arc_bytes``)."""
        layout = super().layout_of(layout)
        return SimpleNamespace(**{**vars(layout),
                                  "graph_arc_bytes": layout.graph_arc_bytes + layout.hash_map_bytes})

    def register(self, rc, parents) -> None:
        # the parents loop counts each parent before the node's leaf and entry go in
        self.count_parents(parents)
        super().register(rc, parents)

    def count_parents(self, parents) -> None:
        """One more child of each of ``parents``."""
        if parents:
            counts, table = self.child_counts, self.children_table
            for pid, _ in parents:
                n = counts.get(pid, 0)
                counts[pid] = n + 1
                if not n:
                    table.fit(len(counts))

    def _remove(self, node_id) -> None:
        entry = self.nodes.get(node_id)
        super()._remove(node_id)
        counts = self.child_counts
        if entry is None or counts is None or not entry[1]:
            return      # not here, or the graph is being dropped
        self.server.sim.timing.lookups(len(entry[1]))
        for pid, _ in entry[1]:
            n = counts.get(pid)
            if n is None:
                continue
            if n > 1:
                counts[pid] = n - 1
            else:
                del counts[pid]

    def extend(self, other) -> None:
        super().extend(other)
        theirs = other.child_counts
        if theirs:
            self.server.sim.timing.lookups(len(theirs))
            counts, table = self.child_counts, self.children_table
            for pid, n in theirs.items():
                had = counts.get(pid, 0)
                counts[pid] = had + n
                if not had:
                    table.fit(len(counts))
        other.child_counts = {}
        other.children_table.drop()

    def drop(self) -> None:
        self.child_counts = None
        super().drop()
        self.children_table.drop()


class DropRelease(Policy):
    name = "drop-release"
    changes = ("Give AutodiffTensor a Drop: when a node's Arc<NodeId> strong count falls to the "
               "graph's own reference and no registered node lists it as a parent, remove it "
               "(steps, actions_builder, nodes, leaves, locator entry), then do the same for "
               "each of its parents that this leaves without children and without handles. "
               "Requires a children count per node (each graph's memory management keeps a "
               "HashMap<NodeId, usize> of them: its heap block, grown as parents are added, "
               "merged with the graph, freed with it) and costs work on every drop.")
    expected = ("Untracked records and abandoned tracked branches vanish as their tensors drop "
                "(flat adleak flex.autodiff, flat pit-infer A/B host growth and A's GPU growth); "
                "a chain still reachable from a live tensor (EMA) is kept, as it must be.")

    GraphMutexClient = DropReleaseClient
    GraphMemoryManagement = DropReleaseMemory

    def after_backward(self, client) -> None:
        client.release_deferred()
        super().after_backward(client)


class _ReleaseVectors:
    """The vectors one ``AutodiffServer::release`` call keeps on the heap (the patch's
    ``server.rs``/``memory_management.rs``): its worklist ``candidates``
    (``vec![node]``, then every parent a release leaves without children), the ids it
    ``released``, and per released node with such parents a ``childless`` list; all
    freed when the call returns. Two allocations per dropped output that goes without
    parents (an untracked op's), three with one tracked parent, one where the node
    cannot go (it has children)."""

    __slots__ = ("heap", "candidates", "released")

    def __init__(self, heap):
        self.heap = heap
        self.candidates = RustVec(heap, 8, capacity=1)    # vec![node]
        self.released = RustVec(heap, 8)

    def childless(self, count) -> None:
        """A released node left ``count`` parents of its graph without children: each
        pushed on a ``childless`` vector (dropped at once), then on the worklist (whose
        popped node made room for one)."""
        vec = RustVec(self.heap, 8)
        vec.push_each(count)
        vec.drop()
        self.candidates.len -= 1
        self.candidates.push_each(count)

    def drop(self) -> None:
        self.released.drop()
        self.candidates.drop()
