"""Fast-forward of a chain whose members keep storages (:mod:`sim.engine.fastforward.chainrun`'s replayed form).

A member's checkpoint actions may keep tensors: under Balanced checkpointing the EMA chain
of ema-balanced ``detach`` keeps each step's detached weight (1 MiB, a LARGE block, so
every step moves the LARGE placement), and a validation forward of a model that requires
grad hangs eight nodes off the parameters' graph whose actions keep the activations. The
chain's closed form counts blocks by size and cannot place those; here:

* :func:`kept_chain` proves, from the probe, that the iteration's heap events -- without
  the BTreeMaps' own and the orphan sweeps' clones of the map, whose size grows with the
  chain -- left its members' blocks and kept storages and nothing else, and records the
  storages (:class:`sim.engine.fastforward.leakrun.Kept`, or ``("old", buffer)`` for one from before the
  iteration that every iteration saves again: an input, a parameter);
* :func:`l2_growth` describes how the iteration changed the L2 models' LRUs where it did
  not leave them as it found them: the tail it touched, with each chunk named by what it
  is to the iteration (an old one, the ``i``-th of a free list, the iteration before's
  kept storage's, a new one), and the free lists after;
* :func:`build_replayed` applies one skipped iteration: its events replayed through the
  heap (:func:`sim.engine.fastforward.repeat._replay_drift`: placement, high-water marks and page
  faults as exact mode has them), its members built on a heap that only counts, their
  actions holding new storages of the replayed blocks, and the LRU change
  (:func:`touch_l2`);
* :func:`defer_members` applies a batch whose members :func:`deferrable` allows to stay
  unbuilt: they are a run of ``G``'s maps (:class:`sim.burn.graph.runs.MemberRuns`),
  built when something reads one, and the heap, BTreeMap and LRU (:func:`advance_l2`)
  take the batch at once;
* on a glibc arena (:func:`on_arena`) only such unbuilt members are taken: each skipped
  iteration's events go through the arena in order, its BTreeMap operations among them
  where the probe saw them (:func:`replay_on_arena`), most windows of iterations applied
  at once as a shift of the arena (:mod:`sim.engine.fastforward.arenawindow`), and a
  member built later takes the
  blocks the replay placed for it (the builder's requests are handed the iteration's kept
  blocks by size in the iteration's order, checked once against the probed iteration's
  members, :class:`ArenaPlan`), so its frees reach the chunks exact mode frees;
* :func:`kept_slots` and :func:`repoint_members` let :func:`sim.engine.fastforward.chainrun.apply_chain` hand
  the storage a module holds and the L2 chunks still resident to the members exact mode
  has them in (:func:`sim.engine.fastforward.leakrun.hand_over`).

Tests compare the CSV and every kept storage and LRU chunk with exact mode.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections import Counter
from typing import NamedTuple

from ...burn.graph.node import Node, NodeRefCount
from ...burn.ops import _Retro
from ...burn.graph.step import Step
from ...platform.l2_cache import Chunk
from ...platform.heap import CLOSED, Heap
from ...burn.graph.runs import MemberRuns, RunEntries
from .seams import indexes_nodes
from .replay import replay_tree_ops
from .arenawindow import place as place_windows
from .arenarun import ALLOC, FREE, REALLOC, handle_key
from ...burn.graph.runs import node_handles
from .leakrun import (_buffer, _COUNTING, _Counting, _Refuse, _strip, builder_blocks,
                      kept_storages, l2_contents, l2_signature, member_actions, replace_storage)

__all__ = ["ArenaPlan", "on_arena", "replay_on_arena", "member_positions", "kept_chain",
           "l2_growth", "build_replayed", "kept_slots", "repoint_members",
           "l2_ready", "l2_rotates", "old_nodes", "compare_before", "MAX_KEPT",
           "advance_l2", "deferrable", "defer_members"]

#: iterations back whose kept storages' chunks may still be in an L2 model's LRU when a
#: batch of a chain that keeps storages is applied (16-KiB weights: about a thousand in
#: a 16-MiB LRU); a chain with more runs exactly
MAX_KEPT = 4096


def compare_before(step, before, index, shared, prev_chunks) -> None:
    """What a member's actions keep against the same member of the iteration before
    (``before``, its step, or None): a storage both hold is older than the iteration (a
    model input, a parameter: its ``id`` goes into ``shared``); the chunk of the one the
    member before held in the place of a new one goes into ``prev_chunks`` (``id`` -> the
    new storage's index, ``index``: ``id`` -> index), for :func:`l2_growth`."""
    if before is None or before.actions is None:
        return
    for mine, theirs in ((step.actions.explicit, before.actions.explicit),
                         (step.actions.backup, before.actions.backup)):
        for (_, buf, _), (_, other, _) in zip(mine, theirs):
            if buf is None:
                continue
            if buf is other:
                shared.add(id(buf))
            elif other is not None and other.chunk is not None:
                prev_chunks[id(other.chunk)] = index[id(buf)]


def old_nodes(actions, w0, prev_lo):
    """``actions`` (an :class:`~sim.engine.fastforward.leakrun.ActionsTemplate`) with the nodes from before
    the iteration before named ``("old", id)``: the same node every iteration."""
    def entry(item):
        offset, at, sizes = item
        if offset is None or offset >= prev_lo - w0:
            return item
        return (("old", offset + w0), at, sizes)
    return actions._replace(explicit=tuple(map(entry, actions.explicit)),
                            backup=tuple(map(entry, actions.backup)))


def kept_chain(sim, snap, trees, trace, kept_at, members, tensors, blocks, shared,
               prev_chunks):
    """``(replayed trace, kept storages, the builder's blocks, L2 growth, the kept blocks'
    positions in the replayed trace by handle key)`` of a chain
    iteration whose events are replayed, or None where the iteration kept more than its
    members' blocks and storages. The trace leaves out the BTreeMaps' own events (their
    replayed operations make them) and the orphan sweeps' clones of the map, whose size
    grows with the chain (a transient: the next exact iteration's larger clone re-reaches
    every high-water mark the skipped ones would have). A storage the actions hold that
    is older than the iteration (an input or parameter every iteration saves again: its
    ``id`` in ``shared``) is ``("old", buffer)`` in the kept storages: the same object,
    one more holder. ``prev_chunks``: the L2 chunks of the iteration before's kept
    storages (``id`` -> the index of the storage in its place now), for :func:`l2_growth`."""
    stripped = _strip(trace, trees.spans + trees.clones + trees.grown, kept_at)
    if stripped is None:
        return None
    trace, positions = stripped
    refs = Counter(at for m in members if m.actions is not None
                   for _, at, _ in m.actions.explicit + m.actions.backup if at is not None)
    new = [at for at, prim in enumerate(tensors) if id(prim) not in shared]
    fresh = [tensors[at] for at in new]
    try:
        # a small block held from outside (a module's weight on 16-KiB tensors) is the
        # iteration's where the member before held another storage: builder_blocks below
        # then finds its blocks among the iteration's
        made = kept_storages(fresh, Counter({i: refs[at] for i, at in enumerate(new)}),
                             positions, small_tip=True, most_tips=None)
    except _Refuse:
        return None
    kept = [("old", prim) for prim in tensors]
    for at, k in zip(new, made):
        kept[at] = k
    need = builder_blocks(sim, trace, fresh)
    own = Counter(blocks)
    if need is None or need != {n: c for n, c in sorted(own.items()) if c}:
        return None
    l2 = l2_growth(sim, snap, dict(zip(new, fresh)), prev_chunks)
    if l2 is None:
        return None
    return trace, tuple(kept), tuple(need.items()), l2, positions


def l2_growth(sim, snap, kept, prev_chunks=None):
    """How the iteration left the L2 models' LRUs: ``()`` where as it found them (by size
    and order, and their free lists by size), else for each LRU it changed ``(kind, tail,
    free, fresh, bytes, chunks)``: it evicted nothing and touched a tail of the LRU
    (``tail``, in its final order), the chunks before it being the LRU's old ones in their
    old order; ``free``: its free lists afterwards, ``(size, chunks)``; ``chunks``: the
    chunk of each new kept storage, ``(index, chunk)`` (``kept``: index -> storage).
    Chunks are named ``("F", size, i)``, the ``i``-th of that size's free list before;
    ``("P", at)``, the chunk of the iteration before's kept storage ``at``
    (``prev_chunks``: ``id`` -> ``at``); ``("R", chunk)``, another one from before the
    iteration: the same object every iteration; ``("N", k)``, the ``k``-th new chunk, of
    ``fresh[k]`` bytes. ``bytes``: the new chunks' bytes (what the LRU gained before it
    evicted). Where the LRU is full the iteration evicts its least recently used chunks:
    allowed where they are dead (chunks before the tail that neither a free list nor the
    iteration before's kept storages hold), as a chain's kept activations are once newer
    ones push them out; :func:`touch_l2` evicts as the LRU does. None where the iteration
    evicted another chunk or left free lists of other lengths."""
    if l2_signature(sim) == snap.l2:
        return ()
    out = []
    for (kind, before, free), (_, after, free_after) in zip(snap.lru, l2_contents(sim)):
        cache = sim._backends[kind].cache
        mine = {at: prim.chunk for at, prim in kept.items()
                if prim.chunk is not None and prim.chunk.cache is cache}
        if (before == after and not mine and free.keys() == free_after.keys()
                and all(v == free_after[n] for n, v in free.items())):
            continue
        if ({n: len(v) for n, v in free.items()}
                != {n: len(v) for n, v in free_after.items()}):
            return None
        pos = {id(c): i for i, c in enumerate(after)}
        gone = sum(1 for c in before if id(c) not in pos)
        if gone:
            # the LRU is full and evicted its least recently used chunks: only dead ones
            # (a prefix of its old order, on no free list, no kept storage's of the
            # iteration before), which no iteration touches again
            dead = before[:gone]
            named = {id(c) for v in free.values() for c in v}
            named.update(id(c) for v in free_after.values() for c in v)
            if (any(id(c) in pos or id(c) in named for c in dead)
                    or (prev_chunks and any(id(c) in prev_chunks for c in dead))):
                return None
            before = before[gone:]
        old = {id(c) for c in before}
        in_free = {id(c): (n, i) for n, v in free.items() for i, c in enumerate(v)}
        fresh, index = [], {}

        def name(c):
            key = id(c)
            if key in in_free:
                return ("F",) + in_free[key]
            if prev_chunks and key in prev_chunks:
                return ("P", prev_chunks[key])
            if key in old:
                return ("R", c)
            if key not in index:
                index[key] = len(fresh)
                fresh.append(c.nbytes)
            return ("N", index[key])

        # the tail starts at the first new chunk, or earlier at the first old chunk out
        # of its old order (it was touched again)
        start = min((i for i, c in enumerate(after) if id(c) not in old), default=len(after))
        low = len(after)
        for c in reversed(before):
            p = pos[id(c)]
            if p > low:
                start = min(start, p)
            low = min(low, p)
        if after[:start] != [c for c in before if pos[id(c)] < start]:
            return None
        tail = tuple(name(c) for c in after[start:])
        free_refs = tuple((n, tuple(name(c) for c in v)) for n, v in sorted(free_after.items()))
        chunks = tuple((at, name(c)) for at, c in sorted(mine.items()))
        out.append((kind, tail, free_refs, tuple(fresh),
                    sum(c.nbytes for c in after if id(c) not in old), chunks))
    return tuple(out)


def build_replayed(sim, effect, graph, start, prev, via_offset, built, replay, clones,
                   first, touch=True):
    """:func:`build_members` for a chain whose events are replayed: the iteration's heap events
    placed (``replay``), then its members built on a heap that only counts (their blocks
    came with the events), their actions holding new storages of the replayed blocks
    (appended to ``clones``; ``first``: the kept storages of the last exact iteration).
    The builder's count is checked against the iteration's once. ``touch``: the LRUs
    take the iteration's change now (:func:`touch_l2`); else the caller advances them
    over the batch at once (:func:`advance_l2`)."""
    heap = sim.heap
    arena = effect.arena is not None
    handles = replay_on_arena(sim, effect, start) if arena else replay(sim, effect, 0)
    heap.allocs += effect.allocs
    _Counting.counts = Counter()
    # once the builder's blocks are checked against the iteration's, a plain heap tap
    # that drops them (the replay placed them) instead of counting them
    heap.tap = (_handing(effect, handles) if arena
                else _COUNTING if not effect.checked else CLOSED)
    try:
        buffers = [k[1] if type(k) is tuple else _buffer(k, b, handles)
                   for k, b in zip(effect.kept, effect.backends)]
        cur = build_members(sim, effect, graph, start, prev, via_offset, built, buffers)
    finally:
        heap.tap = None
    if effect.l2 and touch:
        touch_l2(sim, effect, buffers, clones[-1] if clones else first)
    if not effect.checked:
        counts = tuple((n, c) for n, c in sorted(_Counting.counts.items()) if c)
        if counts != effect.blocks or (arena and (
                any(_Handing.queues.values())
                or member_positions(graph.server, start, effect.members, _Handing.given)
                != effect.arena.positions)):
            raise AssertionError("chain fast-forward: the members built hold other blocks "
                                 "than the iteration kept")
        effect.checked = True
    _Counting.counts = None
    clones.append(buffers)
    return cur


def l2_ready(sim, effect) -> bool:
    """The LRUs the effect changes are in the state its iterations need: the chunks it
    names are there, and its free lists as long."""
    for kind, tail, free, _, _, _ in effect.l2:
        cache = sim._backends[kind].cache
        if ({n: len(v) for n, v in cache.free.items() if v}
                != {n: len(refs) for n, refs in free}):
            return False
        if any(ref[0] == "R" and ref[1] not in cache.lru for ref in tail):
            return False
    return True


def l2_rotates(sim, kind, tail, free, nbytes) -> bool:
    """Whether skipped iterations may fill the LRU of ``kind`` and go on evicting: the
    chunks an iteration touches are the tail of the one before (its free lists'
    chunks among them) and its new chunks, so when the tail's bytes and the new ones fit
    in the capacity, every chunk evicted is older than the tail (dead: no iteration
    touches it again), and exact mode's evictions, op by op, take the same chunks."""
    cache = sim._backends[kind].cache
    in_tail = set(tail)
    if any(ref not in in_tail for _, refs in free for ref in refs):
        return False
    lru = cache.lru
    if len(lru) < len(tail):
        return False
    suffix = list(itertools.islice(reversed(lru), len(tail)))
    return sum(c.nbytes for c in suffix) + nbytes <= cache.capacity


def touch_l2(sim, effect, buffers, previous) -> None:
    """One skipped iteration's change of the LRUs (:func:`l2_growth`): its tail touched in
    order, its free lists, the new chunks, and each new kept storage's chunk
    (``previous``: the kept storages of the iteration before)."""
    for kind, tail, free, fresh, nbytes, chunks in effect.l2:
        cache = sim._backends[kind].cache
        before = cache.free
        made = [Chunk(n, cache) for n in fresh]

        def chunk(ref):
            if ref[0] == "R":
                return ref[1]
            if ref[0] == "F":
                return before[ref[1]][ref[2]]
            if ref[0] == "P":
                return previous[ref[1]].chunk
            return made[ref[1]]
        lru = cache.lru
        for ref in tail:
            c = chunk(ref)
            if c in lru:
                lru.move_to_end(c)
            else:
                lru[c] = None
        cache.free = {n: [chunk(ref) for ref in refs] for n, refs in free}
        cache.resident += nbytes
        # a full LRU evicts its oldest chunks: dead ones (l2_rotates: the tail and the
        # new chunks fit, so eviction stops before the tail)
        while cache.resident > cache.capacity:
            gone, _ = lru.popitem(last=False)
            cache.resident -= gone.nbytes
        for at, ref in chunks:
            buffers[at].chunk = chunk(ref)


def kept_slots(effect, graph, last) -> list:
    """The storages the members' actions keep, iteration by iteration back from the one
    whose first id is ``last`` (in the effect's kept order), while the members there are
    the effect's: as many iterations as an L2 model's LRU can hold kept chunks of, and two
    more (the LRU holds the newest: a kept storage's chunk is touched when it is made and
    by the next iteration at most), up to :data:`MAX_KEPT` + 2; one where the LRU grows
    (:func:`l2_growth`: only the last one's chunks are named)."""
    steps = graph.server.steps
    slots = []
    for j in range(_slot_limit(effect)):
        base = last - j * effect.stride
        slot = [None] * len(effect.kept)
        for m in effect.members:
            if m.actions is None:
                continue
            step = steps.get(base + m.offset)
            actions = None if step is None else step.actions
            if actions is None or step.kind != m.kind or step.op != m.op:
                return slots
            for entries, template in ((actions.explicit, m.actions.explicit),
                                      (actions.backup, m.actions.backup)):
                if len(entries) != len(template):
                    return slots
                for (_, buf, _), (_, at, _) in zip(entries, template):
                    if (at is None) != (buf is None):
                        return slots
                    if at is not None:
                        old = effect.kept[at]
                        if type(old) is tuple and old[1] is not buf:
                            return slots
                        slot[at] = buf
        if any(b is None for b in slot):
            return slots
        slots.append(slot)
    return slots


def _slot_limit(effect) -> int:
    if effect.l2:
        return 1
    limit = 2
    for k, backend in zip(effect.kept, effect.backends):
        if type(k) is not tuple and k.chunk and k.nbytes:
            limit = max(limit, backend.cache.capacity // k.nbytes + 2)
    return min(limit, MAX_KEPT + 2)


def repoint_members(effect, server, base, old, new) -> None:
    """The actions of the members of the iteration whose first id is ``base`` hold ``new``
    where they held ``old``."""
    for m in effect.members:
        if m.actions is not None:
            replace_storage(server.steps[base + m.offset].actions, old, new)


def _node(ref, start, stride, cur, prev, locator):
    """The id and the node a member's parent reference names."""
    kind, value = ref
    if kind == "cur":
        return start + value, cur[value]
    if kind == "prev":
        return start - stride + value, prev[value]
    return value, locator.graphs[value].server.steps[value].node


#: a parent reference's kind in a :func:`_build_plan`: the iteration's member, the
#: iteration before's, a node from before the loop
_CUR, _PREV, _OLD = 0, 1, 2


def _build_plan(effect) -> tuple:
    """What :func:`build_members` reads of each member, made once per effect: its offset,
    its parents and its step's parents as ``(kind, value)`` (:data:`_CUR`, ...; a step
    parent None stays None), whether its order is a constant and the order (else relative
    to the member the chain goes through), the fields of its node and step, whether it
    enters the locator (not an emptied graph's) and whether it is keyed."""
    plan = effect.build_plan
    if plan is None:
        kinds = {"cur": _CUR, "prev": _PREV, "old": _OLD}
        plan = effect.build_plan = tuple(
            (m.offset, tuple((kinds[ref[0]], ref[1]) for ref, _ in m.parents),
             tuple(None if ref is None else (kinds[ref[0]], ref[1]) for ref in m.step_parents),
             m.order[0] == "const", m.order[1], m.requirement, m.memory_bound, m.actions,
             m.retro, m.kind, m.op, m.nbytes, m.shapes, m.emptied is None, m.keyed)
            for m in effect.members)
    return plan


def build_members(sim, effect, graph, start, prev, via_offset, built, buffers=None,
                  entered=False):
    """Register the members of the iteration whose first id is ``start`` in ``G`` as that
    iteration did (``prev``: the members of the one before, by offset): their nodes, ref
    counts and boxed steps, ``G``'s maps and tables, the locator's entries and ``G``'s key
    set (the BTreeMaps are left to the replayed operations). Returns the new members by
    offset; ``built`` collects every step; ``buffers``: the storages the
    members' actions keep (:func:`build_replayed`); ``entered``: the locator's entries and
    keys hold the members already (:func:`defer_members`)."""
    locator = sim.client.locator
    server = graph.server
    register = server.register
    alloc = sim.heap.alloc
    stride = effect.stride
    before = start - stride
    check = not effect.checked
    cur = {}
    # the nodes from before the loop the members name, looked up once an iteration
    old = {}
    if not entered:
        _leave_before(locator, server, graph, effect, before)
    entries = []            # the locator's entries, in the members' order
    keyed = []

    def node_of(kind, value):
        if kind == _PREV:
            return before + value, prev[value]
        found = old.get(value)
        if found is None:
            found = old[value] = (value, _node(("old", value), start, stride, cur, prev,
                                               locator)[1])
        return found

    for (offset, parent_refs, step_refs, const, value, requirement, memory_bound, template,
         retro, kind, op, nbytes, shapes, listed, is_keyed) in _build_plan(effect):
        node_id = start + offset
        parents = []
        for ref, at in parent_refs:
            if ref == _CUR:
                parents.append((start + at, cur[at].order == 0))
            else:
                pid, pnode = node_of(ref, at)
                parents.append((pid, pnode.order == 0))
        step_parents = []
        for ref in step_refs:
            if ref is None:
                step_parents.append(None)
            elif ref[0] == _CUR:
                step_parents.append(cur[ref[1]])
            else:
                step_parents.append(node_of(*ref)[1])
        node = Node(sim, node_id, tuple(parents),
                    value if const else prev[via_offset].order + value, requirement,
                    memory_bound)
        rc = NodeRefCount(sim, node_id)
        actions = None
        if template is not None:
            actions = member_actions(sim, template, start, buffers, check)
        if retro:
            node.retro = _Retro(sim)
        step = Step(kind, op, node, tuple(step_parents), nbytes, actions, shapes)
        # the boxed step (GraphMutexClient::register); on a glibc arena its handle, and
        # the node's, are blocks the replay placed (_Handing)
        step.block = alloc(nbytes)
        register(rc, step)
        built.append(step)
        cur[offset] = node
        if entered or not listed:
            # an emptied graph's entries: only the newest iteration's stay, and the closed
            # form gives them the emptied graph the last exact iteration left
            continue
        entries.append(node_id)
        if is_keyed:
            keyed.append(node_id)
    if entries:
        locator.graphs.update(dict.fromkeys(entries, graph))
        graph.entries += len(entries)
    if keyed:
        origin = graph.origin
        ids = locator.keys[origin]
        table = locator.key_tables[origin]
        extra = locator.key_runs.get(origin, 0)
        if table.tap is None and len(ids) + len(keyed) + extra <= table.cap:
            ids.update(keyed)       # no insert grows the table: nothing to ask
        else:
            for node_id in keyed:
                ids.add(node_id)
                table.fit(len(ids) + extra)
    return cur


def _leave_before(locator, server, graph, effect, prev_start) -> None:
    """What an iteration undoes of the iteration before's members (first id
    ``prev_start``): the steps it consumed (a backward through the parameters' RootSteps:
    their boxes freed, their nodes left in ``G``) and the locator entries in ``G`` its
    sweep removed (the BTreeMaps' removals are the replayed operations')."""
    for offset in effect.consumed:
        server.remove_step(prev_start + offset)
    if effect.dropped:
        keys = locator.keys.get(graph.origin)
        for offset in effect.dropped:
            node_id = prev_start + offset
            if locator.graphs.pop(node_id) is not graph:
                raise AssertionError("chain fast-forward: an entry of another graph")
            graph.entries -= 1
            if keys is not None:
                keys.discard(node_id)


def advance_l2(sim, effect, previous, count) -> list:
    """:func:`touch_l2` ``count`` times at once, for iterations whose members are not built
    (:func:`defer_members`); returns each iteration's ``((kept index, chunk), ...)``
    (``previous``: the chunks of the kept storages of the iteration before the first, by
    index).

    An iteration's tail is the one before's chunks it names (its free lists', its kept
    storages', the old ones every iteration touches) and new ones; a chunk of the tail the
    next iteration does not name is never touched again (dead). So after ``count``
    iterations the LRU holds, in order, the chunks untouched before, each iteration's dead
    chunks in its tail's order, and the last tail; each chunk is put in its final place
    once, and the oldest are evicted at the end, which takes what eviction after each
    iteration takes when the LRU only gains bytes and evicts dead chunks
    (:func:`l2_rotates`)."""
    kept = [[] for _ in range(count)]
    for kind, tail, free, fresh, nbytes, chunks in effect.l2:
        cache = sim._backends[kind].cache
        named = {ref for ref in tail if ref[0] == "R"}
        lists = dict(free)
        by_at = dict(chunks)
        for ref in tail:
            if ref[0] == "F":
                named.add(lists[ref[1]][ref[2]])
            elif ref[0] == "P":
                named.add(by_at[ref[1]])
        last_at = {ref: i for i, ref in enumerate(tail)}
        dead = [ref for i, ref in enumerate(tail) if ref not in named and last_at[ref] == i]
        lru = cache.lru
        if count > 0:
            cache.free = _l2_iterations(cache, kept, tail, dead, free, fresh, chunks,
                                        {at: previous[at] for at in by_at}, count)
        cache.resident += nbytes * count
        while cache.resident > cache.capacity:
            gone, _ = lru.popitem(last=False)
            cache.resident -= gone.nbytes
    return kept


def _l2_iterations(cache, kept, tail, dead, free, fresh, chunks, prev, count) -> dict:
    """:func:`advance_l2`'s ``count`` iterations on one LRU: each one's chunks as a slot
    vector (its new chunks, then the free lists' and kept storages' chunks it takes from
    the iteration before, then the ones every iteration names), its dead chunks (the
    tail for the last) put in their final place, its kept chunks appended to ``kept``;
    returns the free lists after the last one."""
    refs = list(dict.fromkeys([*tail, *(ref for _, ref in chunks),
                               *(ref for _, refs in free for ref in refs)]))
    taken = [ref for ref in refs if ref[0] == "F"] + [ref for ref in refs if ref[0] == "P"]
    fixed = [ref for ref in refs if ref[0] == "R"]
    slot = {("N", i): i for i in range(len(fresh))}
    for i, ref in enumerate(taken + fixed, len(fresh)):
        slot[ref] = i
    consts = [ref[1] for ref in fixed]
    lists = cache.free
    carried = [lists[ref[1]][ref[2]] if ref[0] == "F" else prev[ref[1]] for ref in taken]
    if count > 1:
        # where the next iteration's taken chunks are in this one's vector
        lists, by_at = dict(free), dict(chunks)
        source = [slot[lists[ref[1]][ref[2]] if ref[0] == "F" else by_at[ref[1]]]
                  for ref in taken]
    dead = [slot[ref] for ref in dead]
    ats = [at for at, _ in chunks]
    mine = [slot[ref] for _, ref in chunks]
    lru = cache.lru
    for j in range(count):
        vals = [Chunk(n, cache) for n in fresh]
        vals += carried
        vals += consts
        for s in (dead if j < count - 1 else [slot[ref] for ref in tail]):
            c = vals[s]
            if c in lru:
                lru.move_to_end(c)
            else:
                lru[c] = None
        kept[j].extend(zip(ats, [vals[s] for s in mine]))
        if j < count - 1:
            carried = [vals[s] for s in source]
    return {n: [vals[slot[ref]] for ref in refs] for n, refs in free}


def deferrable(sim, effect, graph) -> bool:
    """Whether the skipped iterations' members may stay unbuilt (:func:`defer_members`):
    members whose storages are replayed and join an L2 model's LRU, that hang off older
    nodes only (no node of the iteration before, no tip a tensor holds, no one-node graphs
    to relabel), no sweep in the iteration, ``G`` with no index of settled nodes or runs
    of dead leaves, and a policy
    whose own state the iteration leaves as it found it
    (:func:`sim.engine.fastforward.seams.indexes_nodes`)."""
    if (effect.trace is None or not effect.l2 or effect.via is not None
            or effect.tip_offset is not None or effect.rotating or effect.sweeps
            or effect.clone_at
            or indexes_nodes(effect)):
        return False
    memory = graph.server.memory_management
    if memory.settled is not None or memory.serials is not None or memory.runs:
        return False
    if any(type(k) is not tuple and k.tip for k in effect.kept):
        return False
    for m in effect.members:
        refs = [ref for ref, _ in m.parents] + [r for r in m.step_parents if r is not None]
        if m.order[0] != "const" or any(ref[0] == "prev" for ref in refs):
            return False
    for _, tail, _, _, _, chunks in effect.l2:
        ats = {at for at, _ in chunks}
        if any(ref[0] == "P" and ref[1] not in ats for ref in tail):
            return False
    return True


def defer_members(sim, effect, graph, last, count, replay, previous, trees) -> None:
    """``count`` iterations of ``effect`` after the one whose first id is ``last``, their
    members kept as a run of ``G``'s maps (:class:`~sim.burn.graph.runs.MemberRuns`),
    built only if something reads one. What the members change elsewhere is applied now:
    the heap events (:func:`sim.engine.fastforward.repeat._replay_drift`, all iterations at
    once where it can), the BTreeMaps (appends of ascending ids as one run each), the
    LRUs (:func:`advance_l2`), the locator's entries and keys, ``G``'s leaves and the
    holders of the older storages the members keep. ``previous``: the storages the
    iteration before the first keeps, by index."""
    stride = effect.stride
    first = last + stride
    starts = range(first, first + count * stride, stride)
    located = any(type(k) is not tuple and k.position is not None for k in effect.kept)
    handles = []
    if effect.arena is not None:
        # every block placed where exact mode puts it, its handle kept for the builder:
        # windows of iterations replayed, or shifted where the arena repeats
        handles = place_windows(sim, effect, starts, trees, replay_on_arena)
    elif not located and replay(sim, effect, 0, 0) is not None:
        _append_tree_ops(trees, effect, first, count - 1)
        replay(sim, effect, 0, count)
        _append_tree_ops(trees, effect, starts[-1], 1)
    else:
        for start in starts:
            placed = replay(sim, effect, 0)
            if located:
                handles.append(placed)
            replay_tree_ops(trees, effect.tree_ops, start)
    sim.heap.allocs += effect.allocs * count
    kept_chunks = advance_l2(sim, effect, [None if b is None else b.chunk for b in previous],
                             count)
    locator = sim.client.locator
    members = effect.members
    offsets = [m.offset for m in members]
    ids = [start + offset for start in starts for offset in offsets]
    locator.graphs.update(dict.fromkeys(ids, graph))
    graph.entries += len(ids)
    offsets = [m.offset for m in members if m.keyed]
    if offsets:
        locator.keys[graph.origin].update([start + offset for start in starts
                                           for offset in offsets])
    inner = {ref[1] for m in members for ref, _ in m.parents if ref[0] == "cur"}
    offsets = [m.offset for m in members if m.offset not in inner]
    leaves = [start + offset for start in starts for offset in offsets]
    memory = graph.server.memory_management
    memory.leaves.difference_update(
        {ref[1] for m in members for ref, _ in m.parents if ref[0] == "old"})
    memory.leaves.update(leaves)
    held = Counter(at for m in members if m.actions is not None
                   for _, at, _ in m.actions.explicit + m.actions.backup
                   if at is not None and type(effect.kept[at]) is tuple)
    old = [(effect.kept[at][1], n * count) for at, n in held.items()]
    for buf, n in old:
        buf.holders += n

    def build():
        memory.leaves.difference_update(leaves)
        for buf, n in old:
            buf.holders -= n
        _build_deferred(sim, effect, graph, starts, kept_chunks, handles)
    _member_runs(graph).add(first, starts[-1] + stride, len(ids), build)


def _member_runs(graph):
    """``G``'s :class:`~sim.burn.graph.runs.MemberRuns`, its ``steps`` and ``nodes`` maps
    made :class:`~sim.burn.graph.runs.RunEntries` the first time."""
    server = graph.server
    memory = server.memory_management
    if isinstance(server.steps, RunEntries):
        return server.steps.members
    runs = MemberRuns()
    server.steps = RunEntries(server.steps, runs)
    memory.nodes = RunEntries(memory.nodes, runs)
    runs.maps = (server.steps, memory.nodes)
    return runs


def _build_deferred(sim, effect, graph, starts, kept_chunks, handles) -> None:
    """The members of the iterations whose first ids are ``starts``, built as
    :func:`build_replayed` builds them (on a heap that only counts: their blocks were
    placed when they were applied), their new storages holding the chunks
    :func:`advance_l2` gave them."""
    heap = sim.heap
    tap, counts = heap.tap, _Counting.counts
    _Counting.counts = Counter()
    heap.tap = _COUNTING
    try:
        for j, start in enumerate(starts):
            placed = handles[j] if handles else None
            if effect.arena is not None:
                heap.tap = _handing(effect, placed)
            buffers = [k[1] if type(k) is tuple else _buffer(k, b, placed)
                       for k, b in zip(effect.kept, effect.backends)]
            for at, chunk in kept_chunks[j]:
                buffers[at].chunk = chunk
            build_members(sim, effect, graph, start, {}, None, [], buffers, entered=True)
    finally:
        heap.tap = tap
        _Counting.counts = counts


def _append_tree_ops(trees, effect, start, count) -> None:
    """The BTreeMap operations of ``count`` iterations from the one whose first id is
    ``start``: a map that only takes ascending ids, one after another across the
    iterations, takes them at once (``append_ascending``); any other, one iteration at a
    time."""
    if count <= 0:
        return
    stride = effect.stride
    by_tree = {}
    for op in effect.tree_ops:
        by_tree.setdefault(op[0], []).append(op)
    for tree, ops in sorted(by_tree.items()):
        keys = [key for _, kind, key in ops if kind == "insert"]
        step = keys[1] - keys[0] if len(keys) > 1 else stride
        top = trees[tree].max_key()
        if (len(keys) == len(ops) and step > 0 and step * len(keys) == stride
                and all(b - a == step for a, b in zip(keys, keys[1:]))
                and (top is None or top < start + keys[0])):
            trees[tree].append_ascending(start + keys[0], step, len(keys) * count)
            continue
        for i in range(count):
            replay_tree_ops(trees, ops, start + i * stride)


# -- on a glibc arena ---------------------------------------------------------------------

class ArenaPlan(NamedTuple):
    """What a glibc arena's replay of a chain iteration needs besides its trace: where its
    BTreeMap operations come among its events (``tree_at``: a position in the replayed
    trace per operation), the allocations the members' builder makes, in order, each as
    ``(request size, position)`` of the block it takes (``hand``), the position a realloc of
    one of them moves its block to (``moves``: position -> position), and the positions
    of every block the probed iteration's members hold (``positions``:
    :func:`member_positions`), which the first built iteration must reproduce."""
    tree_at: tuple
    hand: tuple
    moves: dict
    positions: tuple
    #: the replay's runs of requests between operations (:func:`_arena_segments`), made
    #: on first use
    segments: tuple = None


def member_positions(server, start, members, position_of) -> tuple:
    """The replayed positions (``position_of``: handle key -> position) of the blocks the
    members of the iteration whose first id is ``start`` hold: each node's
    (:func:`sim.burn.graph.runs.node_handles`) and its checkpoint actions' (their blocks,
    their two Vecs); None for no block, -1 for a block no position names."""
    memory = server.memory_management
    out = []
    for m in members:
        node_id = start + m.offset
        step = server.steps[node_id]
        rc, parents = memory.nodes[node_id]
        held = list(node_handles(step, rc, parents))
        actions = step.actions
        if actions is not None:
            held.extend(h for _, _, blocks in actions.explicit + actions.backup
                        for _, h in blocks)
            held.extend(v.block for v in actions._vecs)
        out.append(tuple(None if h is None else position_of.get(handle_key(h), -1)
                         for h in held))
    return tuple(out)


def on_arena(sim, effect, graph, trees, positions) -> bool:
    """Ready ``effect`` (a chain whose events are replayed) for a glibc arena, or False
    where it cannot be applied there: only members that stay unbuilt
    (:func:`deferrable`) are taken, each free must name its block, and the builder's
    blocks must be the ones the iteration kept besides its storages'
    (:class:`ArenaPlan`; ``positions``: handle key -> replayed position of each kept
    block, ``trees``: the probe's :class:`~sim.engine.fastforward.chainrun.TreeLog`)."""
    if not deferrable(sim, effect, graph) or None in trees.at:
        return False
    # the operations' places in the trace without their events and the clones'
    inside = sorted(i for start, end in trees.spans + trees.clones for i in range(start, end))
    tree_at = tuple(at - bisect_left(inside, at) for at in trees.at)
    live, moves, allocs = {}, {}, []
    for i, (kind, nbytes, arg, _) in enumerate(effect.trace):
        if kind == ALLOC:
            live[i] = nbytes
            allocs.append((nbytes, i))
        elif kind == FREE:
            if arg < 0:
                return False          # freed by size: which block is the arena's choice
            del live[arg]
        elif kind == REALLOC:
            old, at = arg
            if at < 0:
                return False
            del live[at]
            live[i] = nbytes
            moves[at] = i
        else:
            return False              # counts of one size: not placed one by one
    storages = {at for k in effect.kept if type(k) is not tuple
                for at in (k.position,) + k.handles if at is not None}

    def final(at):
        while at in moves:
            at = moves[at]
        return at
    hand = tuple((nbytes, at) for nbytes, at in allocs
                 if final(at) in live and final(at) not in storages)
    effect.arena = ArenaPlan(tree_at, hand, moves,
                             member_positions(graph.server, effect.first_id, effect.members,
                                              positions))
    return all(-1 not in held for held in effect.arena.positions)


def replay_on_arena(sim, effect, start, nodes=None, placed=None) -> dict:
    """The heap events of the iteration whose first id is ``start`` through a glibc arena,
    its BTreeMap operations made where the probed iteration made them (their nodes take
    their places among the requests); returns the blocks it kept, by position.
    ``nodes``: the node sizes each operation allocates, where the maps made the
    operations already (:mod:`sim.engine.fastforward.arenawindow`): the nodes' requests
    alone are made in their place; ``placed``: a list that gets every block the arena
    hands out for the iteration's own events.

    The requests go to the arena itself, and the heap's counters follow per run of them
    between two operations (:func:`_arena_segments`): its live bytes, blocks and
    allocation calls by the run's sums, its peak by the highest point the run reached
    (the operations' own nodes go through the heap, which is up to date before each)."""
    heap = sim.heap
    arena = heap._arena
    allocator = heap.allocator
    trees = (sim.client.locator.graphs_tree, sim.client.locator.keys_tree)
    plan = effect.arena
    if plan.segments is None:
        effect.arena = plan = plan._replace(segments=_arena_segments(effect))
    handles = {}
    alloc, free, realloc = arena.alloc, arena.free, arena.realloc
    done = 0
    for ops, events, nbytes, nblocks, nallocs, top, large, calls in plan.segments:
        if ops:
            if nodes is None:
                replay_tree_ops(trees, ops, start)
            else:
                for sizes in nodes[done:done + len(ops)]:
                    for size in sizes:
                        heap.alloc(size)
                done += len(ops)
        live = heap.live_bytes
        if live + top > heap.peak_bytes:
            heap.peak_bytes = live + top
        if calls is not None:
            # no request made with page faults off: the arena's own loop
            arena.replay_trace(calls, handles, placed)
            events = ()
        for i, kind, size, arg, unfaulted in events:
            if kind == ALLOC:
                if unfaulted and allocator.fault is not None:
                    fault, allocator.fault = allocator.fault, None
                    handles[i] = alloc(size, arg)
                    allocator.fault = fault
                else:
                    handles[i] = alloc(size, arg)
            elif kind == FREE:
                free(handles.pop(arg), size)
            else:
                old, at = arg
                handles[i] = realloc(handles.pop(at), old, size)
            if placed is not None and kind != FREE:
                placed.append(handles[i])
        heap.live_bytes = live + nbytes
        heap.live_blocks += nblocks
        heap.allocs += nallocs
        heap.large_bytes += large
    return handles


def _arena_segments(effect) -> tuple:
    """The replayed trace of ``effect`` cut at its BTreeMap operations:
    ``(operations before the run, its events as (position, kind, size, arg, unfaulted),
    live bytes, live blocks and allocation calls it adds, the highest live bytes it
    reaches above its start, the bytes of LARGE blocks it adds, the events as the arena's
    calls: :func:`_calls`)`` per run."""
    ops, tree_at = effect.tree_ops, effect.arena.tree_at
    large_bytes = Heap.LARGE_BYTES
    segments = []
    k = 0
    current = None
    for i, (kind, nbytes, arg, unfaulted) in enumerate(effect.trace):
        first = k
        while k < len(ops) and tree_at[k] <= i:
            k += 1
        if current is None or k > first:
            current = [tuple(ops[first:k]), [], 0, 0, 0, 0, 0]
            segments.append(current)
        current[1].append((i, kind, nbytes, arg, unfaulted))
        if kind == ALLOC:
            delta, blocks, calls = nbytes, 1, 1
            large = nbytes if nbytes >= large_bytes else 0
        elif kind == FREE:
            delta, blocks, calls = -nbytes, -1, 0
            large = -nbytes if nbytes >= large_bytes else 0
        else:
            old = arg[0]
            delta, blocks, calls = nbytes - old, 0, 0
            large = ((nbytes if nbytes >= large_bytes else 0)
                     - (old if old >= large_bytes else 0))
        current[2] += delta
        current[3] += blocks
        current[4] += calls
        current[5] = max(current[5], current[2])
        current[6] += large
    out = [(ops, tuple(events), nbytes, nblocks, nallocs, top, large, _calls(events))
           for ops, events, nbytes, nblocks, nallocs, top, large in segments]
    if k < len(ops):
        out.append((tuple(ops[k:]), (), 0, 0, 0, 0, 0, ()))
    return tuple(out)


def _calls(events):
    """A run's events as :meth:`~sim.platform.ptmalloc.PtmallocArena.replay_trace`'s calls
    (kind 0 an allocation, 1 a free, 2 a realloc), or None where one is made with page
    faults off (replayed one by one)."""
    codes = {ALLOC: 0, FREE: 1, REALLOC: 2}
    if any(unfaulted or kind not in codes for _, kind, _, _, unfaulted in events):
        return None
    return tuple((i, codes[kind], size, arg) for i, kind, size, arg, _ in events)


class _Pending:
    """A block the builder allocates that the iteration reallocated (its handle is the
    realloc's)."""

    __slots__ = ("position",)

    def __init__(self, position):
        self.position = position


class _Handing(_Counting):
    """The heap's tap while members are built on a glibc arena: it counts as
    :class:`~sim.engine.fastforward.leakrun._Counting` does and gives each allocation the
    block the replay placed for it (:attr:`ArenaPlan.hand`, by request size in the
    iteration's order); ``given``: handle key -> position of each block given."""

    __slots__ = ()
    queues = None
    placed = None
    moves = None
    given = None

    def alloc(self, heap, nbytes, align):
        _Counting.alloc(self, heap, nbytes, align)
        if nbytes <= 0:
            return None
        queue = _Handing.queues.get(nbytes)
        if not queue:
            raise AssertionError("chain fast-forward: the members built allocate blocks "
                                 "the iteration did not keep")
        return self._give(queue.pop(0))

    def realloc(self, heap, old_nbytes, nbytes, block):
        if old_nbytes <= 0:
            return self.alloc(heap, nbytes, 0)
        _Counting.realloc(self, heap, old_nbytes, nbytes, block)
        at = block.position if type(block) is _Pending else _Handing.given[handle_key(block)]
        return self._give(_Handing.moves[at])

    @staticmethod
    def _give(at):
        if at in _Handing.moves:
            return _Pending(at)
        block = _Handing.placed[at]
        _Handing.given[handle_key(block)] = at
        return block


_HANDING = _Handing()


def _handing(effect, placed) -> _Handing:
    """The :class:`_Handing` tap for the builder of one iteration whose blocks the replay
    placed (``placed``: position -> block)."""
    queues = {}
    for nbytes, at in effect.arena.hand:
        queues.setdefault(nbytes, []).append(at)
    _Handing.queues, _Handing.placed = queues, placed
    _Handing.moves, _Handing.given = effect.arena.moves, {}
    return _HANDING
