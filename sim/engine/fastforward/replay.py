"""An iteration's bookkeeping replayed for the iterations fast-forward skips.

What the chain (:mod:`sim.engine.fastforward.chainrun`) and leak (:mod:`sim.engine.fastforward.leakrun`) closed forms share:
the locator's BTreeMap operations of a probed iteration with keys relative to its first
id, replayed for another iteration; and the one-node graphs of a new parameter (its
RootStep alone) that an iteration leaves and the next one replaces, which keep their
objects and take the newest iteration's ids.
"""

from __future__ import annotations

__all__ = ["group_inserts", "relative_tree_ops", "replay_tree_ops", "rotating_graph",
           "relabel_rotating", "relabel_emptied"]


def relative_tree_ops(ops, w0, prev_lo):
    """The BTreeMap operations with keys relative to the iteration's first id (None where
    a key is older than the iteration before: not a shift of the same operation)."""
    out = []
    for tree, kind, key in ops:
        keys = key if kind == "remove_many" else (key,)
        if any(k < prev_lo for k in keys):
            return None
        rel = tuple(k - w0 for k in keys)
        out.append((tree, kind, rel if kind == "remove_many" else rel[0]))
    return tuple(out)


def replay_tree_ops(trees, ops, start) -> None:
    """The BTreeMap operations of an iteration (:func:`relative_tree_ops`) again, for the
    iteration whose first id is ``start``: the maps' nodes split and merge as in exact
    mode. An ``"insert_each"`` is a run of inserts into one map (its keys a tuple,
    :func:`group_inserts`)."""
    removing = finger = None     # a run of removals from one map: found from the last
    for tree, kind, key in ops:
        if kind == "remove":
            if tree != removing:
                removing, finger = tree, None
            finger = trees[tree].remove_after(start + key, finger)
            continue
        removing = None
        if kind == "insert":
            trees[tree].insert(start + key)
        elif kind == "insert_each":
            trees[tree].insert_each(key, start)
        else:
            trees[tree].remove_many([start + k for k in key])


def group_inserts(ops) -> tuple:
    """``ops`` (:func:`relative_tree_ops`) with each run of two or more inserts in a row
    into one map as one ``(map, "insert_each", keys)``, which :func:`replay_tree_ops`
    does as those inserts in turn."""
    out = []
    for op in ops:
        if op[1] == "insert" and out and out[-1][0] == op[0] and out[-1][1] in (
                "insert", "insert_each"):
            tree, kind, key = out[-1]
            keys = key if kind == "insert_each" else (key,)
            out[-1] = (tree, "insert_each", keys + (op[2],))
        else:
            out.append(op)
    return tuple(out)


def rotating_graph(locator, g, ids) -> bool:
    """Whether ``g``, created in the iteration with its node ids ``ids``, is one node's
    graph of nothing but its RootStep (a new parameter's): the closed forms keep its
    objects and give it the newest iteration's id (:func:`relabel_rotating`)."""
    mem = g.server.memory_management
    return (ids == [g.origin] and g.entries == 1 and len(mem.nodes) == 1 and not mem.runs
            and len(g.server.steps) == 1 and locator.keys.get(g.origin) == set()
            and g.origin not in locator.key_tables and g.origin not in locator.key_runs
            and g.server.steps[g.origin].actions is None)


def relabel_rotating(locator, effect, last, newest) -> dict:
    """The one-node graphs the last run iteration left take the ids the last skipped
    iteration gave its own (the BTreeMaps have them already: the replayed operations).
    Returns old id -> new id."""
    renamed = {}
    for offset in effect.rotating:
        old_id, new_id = last + offset, newest + offset
        g = locator.graphs.pop(old_id)
        locator.graphs[new_id] = g
        locator.keys[new_id] = locator.keys.pop(old_id)
        g.origin = new_id
        server = g.server
        memory = server.memory_management
        step = server.steps.pop(old_id)
        server.steps[new_id] = step
        rc, parents = memory.nodes.pop(old_id)
        memory.nodes[new_id] = (rc, parents)
        memory.settled = None      # an index of node ids (sim.burn.graph.settled)
        memory.leaves.discard(old_id)
        memory.leaves.add(new_id)
        step.node.id = new_id
        rc.id = new_id
        renamed[old_id] = new_id
    return renamed


def relabel_emptied(locator, effect, last, newest) -> None:
    """The graphs the last run iteration made and emptied into ``G``
    (:func:`sim.engine.fastforward.chainrun.emptied_graph`) take the newest iteration's
    ids: their origin and their entries (the BTreeMaps have the entries already: the
    replayed operations)."""
    for origin, ids in effect.emptied:
        g = locator.graphs[last + ids[0]]
        for offset in ids:
            if locator.graphs.pop(last + offset) is not g:
                raise AssertionError("fast-forward: an emptied graph's entries moved")
            locator.graphs[newest + offset] = g
        g.origin = newest + origin
