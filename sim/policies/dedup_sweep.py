"""``dedup-sweep``: the orphan sweep visits each graph once, with a live-handle count per graph."""

from __future__ import annotations

from ..burn.graph.runs import NodeRun
from ..burn.runtime.graph import GraphCleaner, OrphanSweep
from ..platform.vec import RustVec
from .base import Policy

__all__ = ["DedupSweep", "DedupCleaner"]


class DedupCleaner(GraphCleaner):
    """``GraphCleaner`` of ``experiments/patches/dedup-sweep.patch``."""

    __slots__ = ()

    def cleanup_orphaned_entries(self) -> int:
        """Each distinct graph once (no clone of the map); a dead graph's
        ``free_unused_roots`` repeated until it frees nothing."""
        locator = self.locator
        sim = locator.sim
        sweep = OrphanSweep(sim, locator, clone=False)
        graphs = distinct_graphs(sim, locator)                    # state.distinct_graphs()
        for graph in list(locator.live):                          # for graph in graphs.iter()
            if type(graph) is NodeRun:
                sweep.visit_run(graph)           # dead single-node graphs, entry by entry
            elif graph.entries:
                self._visit_once(sweep, graph)
        sweep.remove_entries()                   # for node in should_remove: remove_entry
        graphs.drop()                            # the Vec goes when the sweep returns
        return sweep.freed

    @staticmethod
    def _visit_once(sweep, graph) -> None:
        """One visit of ``graph``: ``maybe_useful`` still scans its nodes up to the first
        live handle (burn keeps no count of them: a handle's clone and drop tell it
        nothing), once instead of once per entry; if dead, ``free_unused_roots`` until it
        frees nothing (``loop { ..; if should_remove.len() == before { break } }``)."""
        server = graph.server
        memory = server.memory_management
        timing = sweep.sim.timing
        sweep.visits += 1
        if memory.maybe_useful():
            sweep.reads.add(id(memory), memory.scan_length())
            timing.sweep_live(memory, 1)  # the time model's record
            return
        first = True
        while True:
            before = sweep.freed
            # the time model's record: the first pass reads the nodes for maybe_useful too
            timing.sweep_dead(memory, 1, first)
            if first:
                sweep.reads.add(None, memory.node_count())
                first = False
            sweep.reads.add(None, server.free_unused_roots(sweep.collect, sweep.collect))
            if sweep.freed == before:
                return


#: B of an ``Arc<Graph>`` (a pointer: every profile is a 64-bit target)
ARC_BYTES = 8


def distinct_graphs(sim, locator) -> RustVec:
    """``GraphLocator::distinct_graphs`` of the patch: every entry's graph origin inserted
    into a ``HashSet<NodeId>`` (``seen``), each graph seen first pushed on the
    ``Vec<Arc<Graph>>`` it returns (a ``collect`` of a ``filter``: a run of pushes);
    ``seen`` is dropped when it returns. Both grow as the distinct graphs come, each by its
    own rule, their growths taken in the order the inserts make them (in O(log n)). The
    walk's time is the sweep's: each entry's origin read through its Arc and one set
    insert instead of the clone's copy (:attr:`~sim.platform.timing.Timing.sweep_walks_entries`;
    a run's sweeps are all of one kind, so fast-forward's recomputed sweeps see the same)."""
    sim.timing.sweep_walks_entries = True
    n = 0
    for graph in locator.live:
        if type(graph) is NodeRun:
            n += graph.count     # dead single-node graphs: a graph per member
        elif graph.entries:
            n += 1               # held by a backward only: not in the map
    seen = sim.tables.key_set()
    graphs = RustVec(sim.heap, ARC_BYTES)
    while True:
        grow_set, grow_vec = seen.cap + 1, graphs.capacity + 1
        at = min(grow_set, grow_vec)
        if at > n:
            break
        if grow_set == at:
            seen.fit(at)         # seen.insert(origin) of the at-th distinct graph
        if grow_vec == at:
            graphs.len = at - 1
            graphs.push()        # then its Arc pushed
    graphs.len = n
    seen.drop()
    return graphs


class DedupSweep(Policy):
    name = "dedup-sweep"
    changes = ("GraphCleaner::cleanup_orphaned_entries walks the locator's entries once to "
               "collect the distinct graphs (no clone of the map; a HashSet of the origins seen "
               "and a Vec of the graphs, both grown as they fill, one set insert per entry) "
               "and visits each graph once: "
               "one maybe_useful scan up to the first live handle, and a dead graph's "
               "free_unused_roots repeated until nothing more is freed "
               "(experiments/patches/dedup-sweep.patch). A per-graph count of live handles, "
               "which would make maybe_useful O(1), needs burn to hear of every handle's "
               "clone and drop (AutodiffTensor has no Drop): not part of this fix.")
    expected = ("Sweep cost O(entries + nodes scanned once) instead of O(entries x nodes "
                "scanned): near-flat ms/step for the EMA chain (whose memory still grows, the "
                "chain is reachable).")

    GraphCleaner = DedupCleaner
