"""Nodes of one graph that the last ``free_unavailable_nodes`` found useful, kept between
backwards so that the next one walks only what changed.

burn's three passes walk every node a leaf reaches, on every backward: a chain that
grows by a few nodes a step and is never backwarded (a loss summed across steps, an
EMA of the parameters) makes each backward walk all of it, as real burn does. The
simulator charges that walk from its counts; :class:`SettledNodes` lets it find the
counts without walking the chain again. Not part of burn: an index beside
:class:`~sim.burn.runtime.memory_management.GraphMemoryManagement`'s ``nodes``, like
the runs of :mod:`sim.burn.graph.runs`.

Why the settled nodes stay useful: ``ids`` is closed under parents (every kept parent of
a settled node is settled) and every settled node is still in ``nodes``, so none can
reach a removed id (all are available); every settled node is reachable from one of
``tops`` (the settled nodes no other settled node lists as a parent). So once a pass
from the leaves reaches every top, it reaches every settled node, and once the useful
pass reaches every top (or the top still has a tensor handle), every settled node is
useful. Whatever could break that drops the index: a settled node removed or
registered again with other parents, or an id a settled node's leaf filter dropped
(:attr:`filtered`) registered again.
"""

from __future__ import annotations

__all__ = ["SettledNodes", "reachable", "ancestors"]


class SettledNodes:
    """``ids``: the settled node ids; ``tops``: those no other settled node has as a
    parent; ``filtered``: absent leaf parents that a walk dropped; ``outside``: the
    other node ids of ``nodes``, in the map's order (the order passes read it in);
    ``tape``: where glibc's arena places the passes' blocks, the heap events of the last
    walk's recursion from its first leaf, or None
    (:class:`~sim.burn.runtime.pass_blocks.Tape`); ``useful``: likewise the last useful
    pass's walk from a useful leaf (:class:`~sim.burn.runtime.pass_blocks.UsefulTape`)."""

    __slots__ = ("ids", "tops", "filtered", "outside", "tape", "useful")

    def __init__(self, nodes, useful, graph):
        self.ids = set(useful)
        parents = {p for node_id in self.ids for p in graph.successors(node_id) if p != node_id}
        self.tops = self.ids - parents
        self.filtered = set(graph.filtered)
        self.outside = {node_id: None for node_id in nodes if node_id not in self.ids}
        self.tape = None
        self.useful = None

    def inserted(self, node_id) -> bool:
        """``node_id`` entered ``nodes``; False if the index no longer holds."""
        if node_id in self.filtered:
            return False
        self.outside[node_id] = None
        return True

    def replaced(self, node_id) -> bool:
        """``node_id``'s parents were replaced; False if the index no longer holds."""
        return node_id not in self.ids

    def removed(self, node_id) -> bool:
        """``node_id`` left ``nodes``; False if the index no longer holds."""
        if node_id in self.ids:
            return False
        self.outside.pop(node_id, None)
        return True

    def statuses(self, graph, leaves):
        """burn's passes from ``leaves`` (no runs), walking only the unsettled nodes:
        ``(reached, useful)`` as :func:`~sim.burn.runtime.memory_management._statuses`
        gives them (read-only views), or None where the settled nodes are not all reached
        and useful (then the caller walks everything and builds a new index). The newly
        useful nodes become settled."""
        nodes = graph.nodes
        reached, hit = reachable(graph, leaves, self.ids)
        if not self.tops <= hit:
            return None
        absent = [n for n in reached if n not in nodes]
        unavailable = ancestors(graph, absent, reached) if absent else set()
        seeds = [n for n in reached if n not in unavailable and nodes[n][0].strong > 1]
        useful, hit = reachable(graph, seeds, self.ids)
        if any(t not in hit and nodes[t][0].strong <= 1 for t in self.tops):
            return None
        if not self._settle(graph, useful, hit):
            return None
        return _Union(reached, self.ids, len(useful)), _Union(useful, self.ids, len(useful))

    def _settle(self, graph, useful, hit) -> bool:
        """Add ``useful`` (closed under parents into the settled ids: its walk stopped at
        ``hit``); False if some of it is reachable from no top (a cycle)."""
        parents = {p for n in useful for p in graph.successors(n) if p != n}
        tops = [n for n in useful if n not in parents]
        if reachable(graph, tops, self.ids)[0] != useful:
            return False
        self.tops -= hit
        self.tops.update(tops)
        self.ids.update(useful)
        self.filtered.update(graph.filtered)
        outside = self.outside
        for node_id in useful:
            outside.pop(node_id, None)
        return True


class _Union:
    """A read-only set: ``extra`` and ``settled``, which share ``shared`` ids."""

    __slots__ = ("extra", "settled", "length")

    def __init__(self, extra, settled, shared):
        self.extra = extra
        self.settled = settled
        self.length = len(extra) + len(settled) - shared

    def __contains__(self, node_id) -> bool:
        return node_id in self.settled or node_id in self.extra

    def __len__(self) -> int:
        return self.length

    def __iter__(self):
        yield from self.settled
        yield from (n for n in self.extra if n not in self.settled)


def reachable(graph, sources, settled=()) -> tuple:
    """``(found, hit)``: the sources and every node reachable from them along the graph's
    edges without entering ``settled``, and the settled nodes where the walk stopped
    (sources among them)."""
    found, hit, stack = set(), set(), []
    for node_id in sources:
        if node_id in settled:
            hit.add(node_id)
        elif node_id not in found:
            found.add(node_id)
            stack.append(node_id)
    while stack:
        for parent in graph.successors(stack.pop()):
            if parent in settled:
                hit.add(parent)
            elif parent not in found:
                found.add(parent)
                stack.append(parent)
    return found, hit


def ancestors(graph, targets, among) -> set:
    """``targets`` and the nodes of ``among`` (closed under successors, but for settled
    nodes, which reach no target) with a path to one of them."""
    children = {}
    for node_id in among:
        for parent in graph.successors(node_id):
            children.setdefault(parent, []).append(node_id)
    found = set(targets)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found
