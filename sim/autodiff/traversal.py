"""Tape validation (burn-autodiff 0.22.1 ``graph/traversal.rs``).

``collect_steps`` walks the steps reachable from a backward's root through
their parents and returns their ids, root first. It is read-only: a reached
parent that has no step is fine if it is a leaf (its root step was consumed
earlier; gradients stop there), and otherwise means an earlier backward
consumed part of this tape, which burn 0.22.1 rejects before anything runs
("graph tape has already been consumed", the check that came with PR #5645).
"""

from __future__ import annotations

import networkx as nx

__all__ = ["collect_steps", "TapeConsumed"]


class TapeConsumed(Exception):
    """A backward reached a step an earlier backward consumed (burn panics)."""

    def __init__(self, node_id):
        super().__init__(
            f"Cannot run backward: graph tape has already been consumed at NodeId({node_id}). "
            "Burn does not support retain_graph."
        )
        self.node_id = node_id


def collect_steps(root_id, steps) -> list:
    """Ids of every step the backward from ``root_id`` runs, root first.

    Parameters
    ----------
    root_id : int
    steps : dict
        node id -> :class:`~sim.autodiff.step.Step` of one graph's server.

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
    >>> collect_steps(3, {3: S((2, False))})
    Traceback (most recent call last):
    ...
    sim.autodiff.traversal.TapeConsumed: Cannot run backward: graph tape has already been consumed at NodeId(2). Burn does not support retain_graph.
    """
    if root_id not in steps:
        raise TapeConsumed(root_id)
    tape = nx.DiGraph()
    tape.add_node(root_id)
    frontier = [root_id]
    while frontier:
        node_id = frontier.pop()
        for pid, is_leaf in steps[node_id].parents:
            if pid in tape:
                tape.add_edge(node_id, pid)
                continue
            if pid in steps:
                tape.add_edge(node_id, pid)
                frontier.append(pid)
            elif not is_leaf:
                raise TapeConsumed(pid)
    return list(nx.dfs_preorder_nodes(tape, root_id))
