"""Tape validation (burn-autodiff 0.22.1 ``graph/traversal.rs``).

``collect_steps`` walks the steps reachable from a backward's root through
their parents and returns their ids, root first. It is read-only: a reached
parent that has no step is fine if it is a leaf (its root step was consumed
earlier; gradients stop there), and otherwise means an earlier backward
consumed part of this tape, which burn 0.22.1 rejects before anything runs
("graph tape has already been consumed", the check that came with PR #5645).
"""

from __future__ import annotations

from ..costs.vec import RustVec

__all__ = ["collect_steps", "TapeConsumed"]


class TapeConsumed(Exception):
    """A backward reached a step an earlier backward consumed (burn panics)."""

    def __init__(self, node_id):
        super().__init__(
            f"Cannot run backward: graph tape has already been consumed at NodeId({node_id}). "
            "Burn does not support retain_graph."
        )
        self.node_id = node_id


def collect_steps(root_id, steps, sim=None) -> list:
    """Ids of every step the backward from ``root_id`` runs, in burn's order: the root,
    then each step as ``GraphTraversal::collect_steps`` reaches it, popping the last
    parent pushed first (a stack). The order is burn's, not a graph library's: it is the
    order the tape runs the steps of one depth in.

    Parameters
    ----------
    root_id : int
    steps : dict
        node id -> :class:`~sim.autodiff.step.Step` of one graph's server.
    sim : sim.engine.Simulation, optional
        Where the walk's own heap blocks go: the ``nodes`` Vec it returns (the caller
        frees it: returned as the last item of a pair then), the ``parents`` stack and
        the ``visited`` set, both freed when it returns.

    Raises
    ------
    TapeConsumed
        The root, or a non-leaf parent on the way, has no step.

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
    sim.autodiff.traversal.TapeConsumed: Cannot run backward: graph tape has already been consumed at NodeId(2). Burn does not support retain_graph.
    """
    if root_id not in steps:
        raise TapeConsumed(root_id)
    nodes = [root_id]
    visited = {root_id}
    stack = list(steps[root_id].parents)
    trace = sim is not None
    if trace:
        layout = sim.layout
        heap = sim.heap
        nodes_vec = RustVec(heap, layout.node_id_bytes, capacity=1)
        stack_vec = RustVec(heap, layout.parent_bytes, capacity=len(stack))
        visited_table = sim.tables.key_set()
        visited_table.fit(1)
    while stack:
        pid, is_leaf = stack.pop()
        if pid in visited:
            if trace:      # hashbrown reserves before it finds the key: a full set grows
                visited_table.reinsert(len(visited))
            continue
        visited.add(pid)
        if trace:
            visited_table.fit(len(visited))
        step = steps.get(pid)
        if step is not None:
            nodes.append(pid)
            stack.extend(step.parents)
            if trace:
                nodes_vec.push()
                if step.parents:
                    stack_vec.len = len(stack) - len(step.parents)
                    stack_vec.push(len(step.parents))
        elif not is_leaf:
            if trace:   # the panic unwinds: the walk's blocks are freed
                stack_vec.drop()
                visited_table.drop()
                nodes_vec.drop()
            raise TapeConsumed(pid)
    if trace:
        stack_vec.drop()
        visited_table.drop()
        return nodes, nodes_vec
    return nodes
