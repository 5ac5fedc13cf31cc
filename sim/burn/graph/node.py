"""Nodes, node ids and node reference counts (burn-autodiff ``graph/node.rs``,
``graph/requirement.rs``, ``tensor.rs``).

* :class:`Node` is ``Arc<Node>``: created once per autodiff tensor, held by the
  tensor and by every step that records it (as its own node or as a tracked
  parent). Python's reference counting plays the role of the ``Arc``: the node's
  heap block (``Arc<Node>`` plus its parents ``Vec``) is freed when the last
  Python reference goes, exactly when Rust would drop it.
* :class:`NodeRefCount` is ``Arc<NodeId>``: one strong reference per live tensor
  handle, plus one while the node is a key of a graph's ``nodes`` map.
  ``strong > 1`` while registered means "a tensor can still reach this node",
  which is what ``maybe_useful`` and ``is_referenced`` ask.
* Node ids come from one process-wide counter, so they ascend (which the
  locator's BTreeMaps care about).
"""

from __future__ import annotations

__all__ = ["GRAD", "GRAD_IN_BACKWARD", "NONE", "Node", "NodeRefCount"]

#: ``Requirement`` variants.
GRAD, GRAD_IN_BACKWARD, NONE = 0, 1, 2


class Node:
    """``Arc<Node>``: parents (``(id, is_leaf)`` of tracked inputs), order, id, requirement.

    ``is_leaf`` of a parent is ``order == 0``, as in ``from_parents``.
    """

    __slots__ = ("id", "parents", "order", "requirement", "memory_bound", "retro", "_heap",
                 "_nbytes", "_block")

    def __init__(self, sim, node_id, parents, order, requirement, memory_bound=False):
        self.id = node_id
        self.parents = parents
        self.order = order
        self.requirement = requirement
        self.memory_bound = memory_bound
        self.retro = None
        layout = sim.layout
        nbytes = layout.arc_node_bytes
        heap = sim.heap
        if parents:
            # the parents Vec is collected from a filtered iterator (capacity max(4, n))
            # before Arc::new(Node { parents, .. })
            n = len(parents)
            vec = layout.parent_bytes * (n if n > 4 else 4)
            nbytes = (nbytes, vec, heap.alloc(vec))
        # the block's handle: a node freed as a node (its last Arc dropped) frees the block
        # it was given; one compacted into a run of dead nodes leaves the free to the run,
        # which frees the same block (sim.burn.graph.runs)
        self._block = heap.alloc(layout.arc_node_bytes)
        self._heap = heap
        self._nbytes = nbytes

    @property
    def is_root(self) -> bool:
        return self.order == 0

    def __del__(self):
        nbytes = self._nbytes
        if type(nbytes) is tuple:
            # Arc::drop: the Node (its parents Vec) first, then the ArcInner
            self._heap.free(nbytes[1], nbytes[2])
            self._heap.free(nbytes[0], self._block)
        elif nbytes:  # 0: a compacted node, whose run owns its block
            self._heap.free(nbytes, self._block)

    def __repr__(self):
        return f"Node({self.id}, order={self.order}, parents={list(self.parents)})"


class NodeRefCount:
    """``Arc<NodeId>`` with an explicit strong count.

    ``owner`` is the :class:`~sim.burn.runtime.memory_management.GraphMemoryManagement` whose
    ``nodes`` map holds this id (or None), told when the count crosses 1 so the
    ``dedup-sweep`` policy can keep a per-graph count of referenced nodes.
    ``extra`` lists further maps holding the same Arc: a RootStep re-registered
    after a backward consumed the id while a tensor kept it (the old graph keeps
    its key, the new graph takes another); while two maps hold it the count
    cannot fall to 1.
    """

    __slots__ = ("id", "strong", "owner", "extra", "_heap", "_nbytes", "_block",
                 "parents_block")

    def __init__(self, sim, node_id):
        self.id = node_id
        # the handle of the parents Vec the ``nodes`` map holds beside this key (None: none,
        # or one allocated in closed form, freed by size)
        self.parents_block = None
        self.strong = 0
        self.owner = None
        self.extra = ()
        self._heap = sim.heap
        self._nbytes = sim.layout.arc_node_id_bytes
        self._block = self._heap.alloc(self._nbytes)

    def acquire(self) -> None:
        strong = self.strong = self.strong + 1
        if strong == 2 and self.owner is not None:
            self.owner.referenced += 1
            for other in self.extra:
                other.referenced += 1

    def hold(self, memory) -> None:
        """``memory``'s ``nodes`` map now holds this Arc (after :meth:`acquire`)."""
        if self.owner is None:
            self.owner = memory
        elif self.owner is not memory and memory not in self.extra:
            self.extra += (memory,)

    def unhold(self, memory) -> None:
        """``memory``'s ``nodes`` map no longer holds this Arc (before :meth:`release`)."""
        if self.owner is memory:
            self.owner, self.extra = (self.extra[0], self.extra[1:]) if self.extra else (None, ())
        else:
            self.extra = tuple(m for m in self.extra if m is not memory)

    def move(self, old, new) -> None:
        """A merge moved the holding map ``old``'s entry into ``new``."""
        if self.owner is old:
            self.owner = new
        else:
            self.extra = tuple(new if m is old else m for m in self.extra)

    def release(self) -> None:
        strong = self.strong = self.strong - 1
        if strong == 1:
            if self.owner is not None:
                self.owner.referenced -= 1
                self.owner.on_last_handle(self)
        elif strong == 0:
            self._heap.free(self._nbytes, self._block)

    def __repr__(self):
        return f"NodeRefCount({self.id}, strong={self.strong})"
