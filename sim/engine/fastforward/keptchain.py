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
* :func:`kept_slots` and :func:`repoint_members` let :func:`sim.engine.fastforward.chainrun.apply_chain` hand
  the storage a module holds and the L2 chunks still resident to the members exact mode
  has them in (:func:`sim.engine.fastforward.leakrun.hand_over`).

Tests compare the CSV and every kept storage and LRU chunk with exact mode.
"""

from __future__ import annotations

import itertools
from collections import Counter

from ...burn.graph.node import Node, NodeRefCount
from ...burn.ops import _Retro
from ...burn.graph.step import Step
from ...platform.l2_cache import Chunk
from ...platform.heap import Heap
from .leakrun import (_buffer, _Counting, _Refuse, _strip, builder_blocks, kept_storages,
                      l2_contents, l2_signature, member_actions, replace_storage)

__all__ = ["kept_chain", "l2_growth", "build_replayed", "kept_slots", "repoint_members",
           "l2_ready", "l2_rotates", "old_nodes", "compare_before", "MAX_KEPT"]

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
    """``(replayed trace, kept storages, the builder's blocks, L2 growth)`` of a chain
    iteration whose events are replayed, or None where the iteration kept more than its
    members' blocks and storages. The trace leaves out the BTreeMaps' own events (their
    replayed operations make them) and the orphan sweeps' clones of the map, whose size
    grows with the chain (a transient: the next exact iteration's larger clone re-reaches
    every high-water mark the skipped ones would have). A storage the actions hold that
    is older than the iteration (an input or parameter every iteration saves again: its
    ``id`` in ``shared``) is ``("old", buffer)`` in the kept storages: the same object,
    one more holder. ``prev_chunks``: the L2 chunks of the iteration before's kept
    storages (``id`` -> the index of the storage in its place now), for :func:`l2_growth`."""
    stripped = _strip(trace, trees.spans + trees.clones, kept_at)
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
                             positions, small_tip=True)
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
    return trace, tuple(kept), tuple(need.items()), l2


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


def build_replayed(sim, effect, graph, start, prev, via_offset, children_of_tip, tip_node,
                   built, replay, clones, first):
    """:func:`build_members` for a chain whose events are replayed: the iteration's heap events
    placed (``replay``), then its members built on a heap that only counts (their blocks
    came with the events), their actions holding new storages of the replayed blocks
    (appended to ``clones``; ``first``: the kept storages of the last exact iteration).
    The builder's count is checked against the iteration's once."""
    heap = sim.heap
    handles = replay(sim, effect, 0)
    heap.allocs += effect.allocs
    _Counting.counts = Counter()
    heap.__class__ = _Counting
    try:
        buffers = [k[1] if type(k) is tuple else _buffer(k, b, handles)
                   for k, b in zip(effect.kept, effect.backends)]
        cur = build_members(sim, effect, graph, start, prev, via_offset, children_of_tip, tip_node,
                     built, buffers)
    finally:
        heap.__class__ = Heap
    if effect.l2:
        touch_l2(sim, effect, buffers, clones[-1] if clones else first)
    if not effect.checked:
        counts = tuple((n, c) for n, c in sorted(_Counting.counts.items()) if c)
        if counts != effect.blocks:
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


def build_members(sim, effect, graph, start, prev, via_offset, children_of_tip, tip_node, built,
           buffers=None):
    """Register the members of the iteration whose first id is ``start`` in ``G`` as that
    iteration did (``prev``: the members of the one before, by offset): their nodes, ref
    counts and boxed steps, ``G``'s maps and tables, the locator's entries and ``G``'s key
    set (the BTreeMaps are left to the replayed operations). Returns the new members by
    offset; ``children_of_tip`` (a list, or None) collects the steps that have
    ``tip_node`` as a parent, ``built`` every step; ``buffers``: the storages the
    members' actions keep (:func:`build_replayed`)."""
    locator = sim.client.locator
    server = graph.server
    heap = sim.heap
    stride = effect.stride
    cur = {}
    origin = graph.origin
    for member in effect.members:
        node_id = start + member.offset
        parents = []
        for ref, _ in member.parents:
            pid, pnode = _node(ref, start, stride, cur, prev, locator)
            parents.append((pid, pnode.order == 0))
        step_parents = tuple(None if ref is None else
                             _node(ref, start, stride, cur, prev, locator)[1]
                             for ref in member.step_parents)
        kind, value = member.order
        order = value if kind == "const" else prev[via_offset].order + value
        node = Node(sim, node_id, tuple(parents), order, member.requirement,
                    member.memory_bound)
        rc = NodeRefCount(sim, node_id)
        actions = None
        if member.actions is not None:
            actions = member_actions(sim, member.actions, start, buffers)
        if member.retro:
            node.retro = _Retro(sim)
        step = Step(member.kind, member.op, node, step_parents, member.nbytes, actions,
                    member.shapes)
        if children_of_tip is not None and any(p is tip_node for p in step_parents):
            children_of_tip.append(step)
        heap.alloc(member.nbytes)          # the boxed step (GraphMutexClient::register)
        node._block = None
        server.register(rc, step)
        built.append(step)
        locator.graphs[node_id] = graph
        graph.entries += 1
        if member.keyed:
            ids = locator.keys[origin]
            ids.add(node_id)
            locator.key_tables[origin].fit(len(ids) + locator.key_runs.get(origin, 0))
        cur[member.offset] = node
    return cur
