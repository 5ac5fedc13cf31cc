"""Tape validation (burn-autodiff 0.22.1 ``graph/traversal.rs``).

``collect_steps`` walks the steps reachable from a backward's root through
their parents and returns their ids, root first. It is read-only: a reached
parent that has no step is fine if it is a leaf (its root step was consumed
earlier; gradients stop there), and otherwise means an earlier backward
consumed part of this tape, which burn 0.22.1 rejects before anything runs
("graph tape has already been consumed", the check that came with PR #5645).
"""

from __future__ import annotations

from ...platform.vec import RustVec

__all__ = ["collect_steps", "TapeConsumed"]


class TapeConsumed(Exception):
    """A backward reached a step an earlier backward consumed (burn panics)."""

    def __init__(self, node_id):
        super().__init__(
            f"Cannot run backward: graph tape has already been consumed at NodeId({node_id}). "
            "Burn does not support retain_graph."
        )
        self.node_id = node_id


class _WalkBlocks:
    """The heap blocks of ``collect_steps``' own collections, where burn's blocks are
    modelled: the ``nodes`` Vec it returns, the ``parents`` stack and the ``visited`` set
    (hashbrown reserves before it finds a key: a full set grows on a repeated insert)."""

    __slots__ = ("nodes", "stack", "visited")

    def __init__(self, sim, n_parents):
        layout = sim.layout
        self.nodes = RustVec(sim.heap, layout.node_id_bytes, capacity=1)
        self.stack = RustVec(sim.heap, layout.parent_bytes, capacity=n_parents)
        self.visited = sim.tables.key_set()
        self.visited.fit(1)

    def insert(self, n_visited, new) -> None:
        """``visited.insert``: a new id (``new``) or one already there."""
        if new:
            self.visited.fit(n_visited)
        else:
            self.visited.reinsert(n_visited)

    def push(self, n_stacked, parents) -> None:
        """A step found: its id pushed on ``nodes``, its ``parents`` on the stack (which
        holds ``n_stacked`` after)."""
        self.nodes.push()
        if parents:
            self.stack.len = n_stacked - len(parents)
            self.stack.push(len(parents))

    def drop(self, returned=True):
        """The walk returns (the ``nodes`` Vec goes to the caller, returned) or panics
        (``returned=False``: every block freed as it unwinds)."""
        self.stack.drop()
        self.visited.drop()
        if returned:
            return self.nodes
        self.nodes.drop()
        return None


class _NoBlocks:
    """:class:`_WalkBlocks` where burn's blocks are not modelled."""

    __slots__ = ()

    def insert(self, n_visited, new) -> None:
        pass

    def push(self, n_stacked, parents) -> None:
        pass

    def drop(self, returned=True):
        return None


_NO_BLOCKS = _NoBlocks()


def collect_steps(root_id, steps, sim=None) -> list:
    """Ids of every step the backward from ``root_id`` runs, in burn's order: the root,
    then each step as ``GraphTraversal::collect_steps`` reaches it, popping the last
    parent pushed first (a stack), the order the tape runs the steps of one depth in.

    ``steps``: node id -> :class:`~sim.burn.graph.step.Step` of one graph's server. With
    ``sim``, the walk's own blocks go on its heap (:class:`_WalkBlocks`) and the result
    is ``(ids, nodes Vec)``, the caller freeing the Vec.

    Raises :class:`TapeConsumed` when the root, or a non-leaf parent on the way, has no
    step.

    Examples
    --------
    >>> class S:                       # a stand-in step: only parents matter
    ...     def __init__(self, *parents): self.parents = parents
    >>> collect_steps(3, {3: S((2, False)), 2: S((1, True)), 1: S()})
    [3, 2, 1]
    >>> collect_steps(4, {4: S((1, True), (2, True)), 1: S(), 2: S()})   # last parent first
    [4, 2, 1]
    >>> collect_steps(3, {3: S((2, False))})
    Traceback (most recent call last):
    ...
    sim.burn.graph.traversal.TapeConsumed: Cannot run backward: graph tape has already been consumed at NodeId(2). Burn does not support retain_graph.
    """
    root = steps.get(root_id)
    if root is None:
        raise TapeConsumed(root_id)
    nodes = [root_id]
    visited = {root_id}
    parents = list(root.parents)
    blocks = _NO_BLOCKS if sim is None else _WalkBlocks(sim, len(parents))
    while parents:
        pid, is_leaf = parents.pop()
        new = pid not in visited
        blocks.insert(len(visited) + new, new)
        if not new:
            continue
        visited.add(pid)
        step = steps.get(pid)
        if step is not None:
            nodes.append(pid)
            parents.extend(step.parents)
            blocks.push(len(parents), step.parents)
        elif not is_leaf:
            blocks.drop(returned=False)
            raise TapeConsumed(pid)
    nodes_vec = blocks.drop()
    return nodes if sim is None else (nodes, nodes_vec)
