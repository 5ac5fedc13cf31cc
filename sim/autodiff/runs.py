"""Runs of identical dead nodes, as fast-forward creates them.

When a loop body's iterations are identical (:mod:`sim.fastforward`), the
nodes they leave behind are recorded as one :class:`NodeRun` instead of one
object each: ``count`` nodes with ids ``first, first + stride, ...``, the same
parents, no tensor handle left, and the same heap blocks each. A run is either

* ``new_graph=True``: each node is an untracked op's own single-node graph
  (kept by the locator, in its ``live`` graphs, in creation order), or
* ``new_graph=False``: the nodes sit in one existing graph as childless leaves
  (kept by that graph's memory management).

Runs are not part of burn; they are the simulator's compressed form of state
burn would hold node by node, and every bookkeeping pass treats a run exactly as
it would treat its members one by one.
"""

from __future__ import annotations

from collections import Counter

__all__ = ["NodeRun", "node_blocks", "graph_blocks"]


def node_blocks(layout, step, parents) -> Counter:
    """Heap blocks one dead registered node holds, by size: ``Arc<Node>`` (and its
    parents ``Vec``), ``Arc<NodeId>``, the boxed step, and the ``nodes`` map's copy of
    the parents."""
    blocks = Counter([layout.arc_node_bytes, layout.arc_node_id_bytes, step.nbytes])
    if parents:
        blocks[layout.parent_bytes * max(4, len(parents))] += 1
        blocks[layout.parent_bytes * len(parents)] += 1
    return blocks


def graph_blocks(layout, server) -> Counter:
    """Heap blocks of a graph apart from its nodes: ``Arc<Graph>`` and its four tables."""
    memory = server.memory_management
    return Counter(nbytes for nbytes in (
        layout.graph_arc_bytes, server.steps_table.nbytes, server.actions_table.nbytes,
        memory.nodes_table.nbytes, memory.leaves_table.nbytes) if nbytes)


class NodeRun:
    """``count`` identical dead nodes."""

    __slots__ = ("first", "stride", "count", "parents", "blocks", "new_graph", "graph",
                 "graph_blocks", "nodes_freed")

    def __init__(self, first, stride, count, parents, blocks, new_graph, graph=None,
                 graph_blocks=()):
        self.first = first
        self.stride = stride
        self.count = count
        self.parents = parents
        #: ((nbytes, blocks per member), ...): every block a member holds
        self.blocks = blocks
        self.new_graph = new_graph
        self.graph = graph
        #: the part of ``blocks`` that belongs to a member's graph (Arc<Graph>, its
        #: tables) rather than to its node: a sweep frees the node part when it
        #: visits the entry, the graph part when the entry is removed
        self.graph_blocks = graph_blocks
        self.nodes_freed = False

    @property
    def ids(self):
        return range(self.first, self.first + self.stride * self.count, self.stride)

    @property
    def last(self):
        return self.first + self.stride * (self.count - 1)

    def alloc(self, heap) -> None:
        for nbytes, per_node in self.blocks:
            heap.alloc_many(nbytes, per_node * self.count)

    def free(self, heap) -> None:
        """Free what the members still hold."""
        blocks = self.graph_blocks if self.nodes_freed else self.blocks
        for nbytes, per_node in blocks:
            heap.free_many(nbytes, per_node * self.count)

    def free_nodes(self, heap) -> None:
        """Free the members' node blocks (their graphs' blocks stay until :meth:`free`)."""
        if self.nodes_freed:
            return
        graph_part = dict(self.graph_blocks)
        for nbytes, per_node in self.blocks:
            n = per_node - graph_part.get(nbytes, 0)
            if n:
                heap.free_many(nbytes, n * self.count)
        self.nodes_freed = True

    def __repr__(self):
        kind = "graphs" if self.new_graph else "nodes"
        return f"NodeRun({self.count} {kind} from {self.first} step {self.stride})"
