"""Windows of replayed iterations on a glibc arena applied as a shift of the arena.

A chain whose members stay unbuilt (:func:`sim.engine.fastforward.keptchain.defer_members`)
places each skipped iteration's requests on glibc's arena one by one
(:func:`sim.engine.fastforward.keptchain.replay_on_arena`). Here a run of ``WINDOW``
iterations is one unit. Its program is the iteration's requests and the nodes the
BTreeMaps' operations allocate (the maps make their operations first, on a heap tap that
only notes the nodes' sizes). A window replayed request by request is recorded
(:class:`_Window`): the arena's free structures before and after it (tcache, fastbins,
unsorted bin, small and large bins, free chunks, last remainder), every chunk it entered
into or took from the in-use map, the blocks it appended to the live lists, the kept
blocks by position, the heap's counters and highest point, and the events where the
arena reads its break (carves from the top, merges into the top, reallocs at the top).

A later window with the same program is applied from a recorded one without a request
when the arena is that window's starting arena shifted (:func:`_shift`): with ``D`` the
top's advance since, there is an address ``L`` below which every free structure's chunk
is where it was, and above which every one moved by exactly ``D`` in the same order, in
the same bins, with the same sizes (a tcache bin or fastbin compared only above the
lowest length the recorded window drained it to: the chunks under it were not touched).
No chunk crosses ``L`` and none below ends at it. glibc's ``malloc``, ``free`` and
``realloc`` decide by sizes, bin orders and lengths, by which chunk is the last
remainder, and by adjacency (a free chunk ending where a freed one starts, or starting
where it ends, or the top): all of these are the recorded window's under the map
``a -> a`` below ``L``, ``a -> a + D`` above it (chunks carved from a chunk lie inside
it, from the top above ``L``; adjacency is kept inside each side, and none crosses
``L``). So the window does what the recorded one did, every address mapped, and its
result is the recorded result mapped. What the map does not carry is checked or
recomputed: the break (grown, and trimmed, by a walk over the recorded top events with
this window's break, which must take the same realloc-at-the-top decisions), the
resident end and page faults (the walk's touches), the fastbins' consolidations (none:
the recorded window had no fastbin chunk at an event that reads the break), aligned
requests (none), the mmap threshold (every request below it), the alias and carve runs
(none).

The result is the arena request-by-request replay gives, chunk by chunk; the tests of
the inference loop compare it with exact mode's after 40, 60 and 400 forwards, and after
a backward that frees every kept block.
"""

from __future__ import annotations

from bisect import bisect_left

from ...platform.heap import HeapTap
from .arenarun import ALLOC
from ...platform.ptmalloc import MINSIZE, SIZE_SZ, TCACHE_MAX_CHUNK, MAX_FAST, NSMALLBINS, \
    CONSOLIDATION_THRESHOLD

__all__ = ["WINDOW", "place", "STATS"]

#: iterations applied as a shift, and replayed request by request (diagnostics)
STATS = {"shifted": 0, "replayed": 0}

#: iterations per window
WINDOW = 2
#: recorded windows kept per program
KEEP = 24


class _NodeSizes(HeapTap):
    """The heap's tap while the BTreeMaps make a window's operations: each node's size
    noted, nothing placed."""

    __slots__ = ("sizes",)

    def __init__(self):
        self.sizes = []

    def alloc(self, heap, nbytes, align):
        self.sizes.append(nbytes)
        return None

    def free(self, heap, nbytes, block):
        raise _Unshiftable

    def realloc(self, heap, old_nbytes, nbytes, block):
        raise _Unshiftable


class _Unshiftable(Exception):
    pass


class _Lowest(list):
    """A tcache bin or fastbin that notes the fewest chunks it held (recording)."""

    __slots__ = ("low",)

    def __init__(self, items):
        super().__init__(items)
        self.low = len(items)

    def pop(self, *args):
        item = list.pop(self, *args)
        if len(self) < self.low:
            self.low = len(self)
        return item


class _Seen(dict):
    """The tcache or the fastbins by size, noting the sizes read (recording)."""

    __slots__ = ("seen",)

    def __init__(self, items):
        super().__init__(items)
        self.seen = set()

    def __getitem__(self, key):
        self.seen.add(key)
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        self.seen.add(key)
        return dict.get(self, key, default)

    def items(self):
        self.seen.update(self.keys())
        return dict.items(self)


def _free_structures(arena) -> tuple:
    """``(tcache, fastbins, unsorted, bins, free chunks, last remainder, nfast)``: copies."""
    return ({s: list(v) for s, v in arena.tcache.items() if v},
            {s: list(v) for s, v in arena.fast.items() if v},
            [(a, arena.free_at[a]) for a in arena.unsorted],
            [(i, list(arena.bins[i])) for i in arena.binmap],
            dict(arena.free_at), arena.last_remainder, arena.nfast)


def _view(arena) -> tuple:
    """:func:`_free_structures` without copies of the tcache and fastbins (a lookup)."""
    return (arena.tcache, arena.fast, [(a, arena.free_at[a]) for a in arena.unsorted],
            [(i, list(arena.bins[i])) for i in arena.binmap],
            arena.free_at, arena.last_remainder, arena.nfast)


class _Window:
    """A window replayed request by request (see the module docstring)."""

    __slots__ = ("before", "after", "low", "top0", "top1", "inuse", "live", "handles",
                 "heap", "bin_changes", "events", "changed", "read", "gone", "chunks",
                 "canon", "cut", "links")


def _sizes_key(state, read) -> tuple:
    """What of the free structures a shift leaves alone: the lengths of the tcache bins
    and fastbins a window reads (``read``: ``(tcache sizes, fastbin sizes)``), the
    unsorted bin's and the bins' sizes, the free chunks' count."""
    tcache, fast, unsorted, bins, free_at, lr, nfast = state
    return (nfast, lr is None, tuple(len(tcache.get(s, ())) for s in read[0]),
            tuple(len(fast.get(s, ())) for s in read[1]), tuple(z for _, z in unsorted),
            tuple((i, len(c)) for i, c in bins), len(free_at))


def _record(sim, effect, starts, nodes, replay_one):
    """Replay the window (``nodes``: each iteration's operations' node sizes) and record
    it; returns ``(handles per iteration, _Window or None)``."""
    heap = sim.heap
    arena = heap._arena
    w = _Window()
    w.before = _free_structures(arena)
    w.top0 = top0 = arena.top
    sizes = {n for _, n, _, _ in effect.trace}
    sizes.update(n for per in nodes for op in per for n in op)
    sizes.update(arg[0] for kind, _, arg, _ in effect.trace if type(arg) is tuple)
    lens = {n: len(arena.live.get(n, ())) for n in sizes}
    live0, blocks0, allocs0, large0 = (heap.live_bytes, heap.live_blocks, heap.allocs,
                                       heap.large_bytes)
    peak, heap.peak_bytes = heap.peak_bytes, heap.live_bytes
    changes, trims = arena.bin_changes, arena.trims
    events, ok = [], [True]
    arena.tcache = _Seen((s, _Lowest(v)) for s, v in arena.tcache.items())
    arena.fast = _Seen((s, _Lowest(v)) for s, v in arena.fast.items())
    from_top, free_uncached, resize = arena._from_top, arena._free_uncached, arena._resize
    merge_run = arena._merge_run
    merged = [0]

    def merging(addrs, size):
        merged[0] = merge_run(addrs, size)
        return merged[0]

    def top_carve(nb):
        if arena.nfast:
            ok[0] = False
        events.append((0, arena.top - top0, nb))
        return from_top(nb)

    def uncached(addr, size):
        # a free past the tcache: a fastbin, or merged (into the top: an event that
        # reads the break; a merged chunk of 64 KiB elsewhere would too: not shifted)
        top, nfast = arena.top, arena.nfast
        merged[0] = 0
        free_uncached(addr, size)
        if size <= MAX_FAST:
            return
        if arena.top != top:
            if nfast:
                ok[0] = False
            events.append((1, arena.top - top0, 0))
        elif merged[0] >= CONSOLIDATION_THRESHOLD:
            ok[0] = False

    def resized(block, nb):
        if type(block) is int:
            size = arena.inuse[block]
            top = arena.top
            if block + size == top and size < nb:
                new = resize(block, nb)
                events.append((2, top - top0, (size, nb, arena.top != top)))
                return new
        return resize(block, nb)
    arena._from_top, arena._free_uncached, arena._resize = top_carve, uncached, resized
    arena._merge_run = merging
    placed = []
    handles = []
    try:
        for start, per in zip(starts, nodes):
            handles.append(replay_one(sim, effect, start, per, placed))
    finally:
        del arena._from_top, arena._free_uncached, arena._resize, arena._merge_run
        low = {}
        read = (tuple(sorted(arena.tcache.seen)), tuple(sorted(arena.fast.seen)))
        for is_fast, d in ((False, arena.tcache), (True, arena.fast)):
            for s, v in dict.items(d):
                if v.low:
                    low[(is_fast, s)] = v.low
        arena.tcache = {s: list(v) for s, v in dict.items(arena.tcache)}
        arena.fast = {s: list(v) for s, v in dict.items(arena.fast)}
        heap.peak_bytes, rise = max(peak, heap.peak_bytes), heap.peak_bytes - live0
    if not ok[0] or arena.trims != trims or arena.alias or arena.runs:
        return handles, None
    w.low = low
    w.read = read
    w.chunks = _chunks(w.before, low, read)
    w.canon = {}
    w.links = {}
    w.after = after = _free_structures(arena)
    # the tcache bins and fastbins the window changed
    w.changed = tuple((is_fast, s) for is_fast, i in ((False, 0), (True, 1))
                      for s in set(w.before[i]) | set(after[i])
                      if w.before[i].get(s) != after[i].get(s)
                      or low.get((is_fast, s), 0) < len(after[i].get(s, ())))
    w.top1 = arena.top
    w.live = tuple((n, tuple(arena.live[n][lens[n]:])) for n in sorted(sizes)
                   if len(arena.live.get(n, ())) > lens[n])
    # the chunks the window entered into or took from the in-use map
    tc0 = {a: s for d in w.before[:2] for s, v in d.items() for a in v}
    touched = set(tc0) | set(w.before[4]) | set(after[4]) | set(placed)
    touched.update(a for d in after[:2] for v in d.values() for a in v)
    touched.update(a for _, blocks in w.live for a in blocks)
    inuse = arena.inuse
    diff = [(a, inuse.get(a)) for a in sorted(touched, key=int) if inuse.get(a) != tc0.get(a)]
    w.gone = tuple(a for a, z in diff if z is None)
    w.inuse = tuple((a, z) for a, z in diff if z is not None)
    w.cut = [a for a, _ in w.inuse]
    w.handles = handles
    w.heap = (heap.live_bytes - live0, heap.live_blocks - blocks0, heap.allocs - allocs0,
              heap.large_bytes - large0, rise)
    w.bin_changes = arena.bin_changes - changes
    w.events = tuple(events)
    return handles, w


def _chunks(state, low, read):
    """Address -> size of the chunks in free structures that a window may read."""
    tcache, fast, _, _, free_at, _, _ = state
    out = dict(free_at)
    for is_fast, d in ((False, tcache), (True, fast)):
        for s in read[is_fast]:
            for a in d.get(s, ())[low.get((is_fast, s), 0):]:
                out[a] = s
    return out


def _canon(state, low, read, lo, top):
    tcache, fast, unsorted, bins, free_at, lr, nfast = state

    def c(a):
        return a if a < lo else ("M", a - top)
    return (nfast, None if lr is None else c(lr),
            [[c(a) for a in tcache.get(s, ())[low.get((False, s), 0):]] for s in read[0]],
            [[c(a) for a in fast.get(s, ())[low.get((True, s), 0):]] for s in read[1]],
            [(c(a), z) for a, z in unsorted],
            [(i, [c(a) if type(a) is int else (a[0], c(a[1])) for a in ch]) for i, ch in bins],
            sorted(((c(a), z) for a, z in free_at.items()), key=repr))


def _shift(w, state, top):
    """``(L, D)`` where the arena's free structures ``state`` (top ``top``) are ``w``'s
    starting ones shifted (see the module docstring), else None."""
    d = top - w.top0
    if d < 0:
        return None
    c0, c1 = w.chunks, _chunks(state, w.low, w.read)
    if len(c0) != len(c1):
        return None
    moved = [a for a, z in c1.items() if c0.get(a) != z]
    hi = min(moved, default=top)
    lo = hi - d
    for a, z in c0.items():
        if a < lo and (a + z > lo or a + z == lo):
            return None
    if any(a >= lo and c1.get(a) == z and a < hi for a, z in c0.items()):
        return None
    canon = w.canon.get(lo)
    if canon is None:
        canon = w.canon[lo] = _canon(w.before, w.low, w.read, lo, w.top0)
    if canon != _canon(state, w.low, w.read, hi, top):
        return None
    return lo, d


def _walk(arena, w, d):
    """The break, resident end, trims and fault bytes after the window applied with the
    top moved by ``d``: the recorded top events walked with this arena's break; None
    where a realloc at the top would decide otherwise."""
    brk, resident, page = arena.brk, arena.resident_end, arena.page
    trims = trimmed = 0
    base = w.top0 + d
    for kind, rel, arg in w.events:
        top = base + rel
        if kind == 0:
            nb = arg
            if brk - top < nb + MINSIZE:
                need = nb + arena.top_pad + MINSIZE - (brk - top)
                brk += -(-need // page) * page
            end = top + nb + 2 * SIZE_SZ
        elif kind == 1:
            if brk - top >= CONSOLIDATION_THRESHOLD and brk - top >= arena.trim_threshold:
                area = brk - top - MINSIZE - 1
                if area > arena.top_pad:
                    extra = (area - arena.top_pad) // page * page
                    if extra:
                        brk -= extra
                        trims += 1
                        trimmed += extra
                        resident = min(resident, brk)
            continue
        else:
            size, nb, grew = arg
            if (size + brk - top >= nb + MINSIZE) != grew:
                return None
            if not grew:
                continue
            end = top - size + nb + 2 * SIZE_SZ
        if end > resident:
            resident = end
    return brk, resident, trims, trimmed


def _apply(sim, effect, w, lo, d, walked):
    """The recorded window ``w`` again, every address ``a`` of it at ``a`` below ``lo``
    and ``a + d`` from there (:func:`_shift`); returns the shifted handles."""
    heap = sim.heap
    arena = heap._arena

    tcache, fast, unsorted, bins, free_at, lr, nfast = w.after
    for is_fast, s in w.changed:
        d_now, d_rec = (arena.fast, fast) if is_fast else (arena.tcache, tcache)
        keep = w.low.get((is_fast, s), 0)
        d_now[s] = d_now[s][:keep] + [a if a < lo else a + d for a in d_rec.get(s, ())[keep:]]
    arena.nfast = nfast
    arena.free_at = free = {(a if a < lo else a + d): z for a, z in free_at.items()}
    arena.free_end = {a + z: a for a, z in free.items()}
    arena.unsorted = {(a if a < lo else a + d): None for a, _ in unsorted}
    arena._unsorted_dead = 0
    now = arena.bins
    for i, _ in w.before[3]:
        now[i] = {} if i < NSMALLBINS else []
    for i, ch in bins:
        if i < NSMALLBINS:
            now[i] = {(a if a < lo else a + d): None for a in ch}
        else:
            now[i] = [(z, a if a < lo else a + d) for z, a in ch]
    arena.binmap = [i for i, _ in bins]
    arena.last_remainder = None if lr is None or lr < lo else lr + d
    inuse = arena.inuse
    for a in w.gone:
        del inuse[a if a < lo else a + d]
    k = bisect_left(w.cut, lo)
    pairs = w.inuse
    inuse.update(pairs[:k])
    inuse.update({a + d: z for a, z in pairs[k:]})
    live = arena.live
    for n, blocks in w.live:
        live.setdefault(n, []).extend([a if a < lo else a + d for a in blocks])
    arena.top = w.top1 + d
    brk, resident, trims, trimmed = walked
    arena.brk = brk
    arena.trims += trims
    arena.trimmed_bytes += trimmed
    if resident > arena.resident_end:
        page = arena.page
        old = -(-arena.resident_end // page) * page
        new = -(-resident // page) * page
        arena.resident_end = resident
        if new > old and arena.fault is not None:
            arena.fault(new - old, False)
    else:
        arena.resident_end = resident
    arena.bin_changes += w.bin_changes
    nbytes, nblocks, nallocs, large, rise = w.heap
    if heap.live_bytes + rise > heap.peak_bytes:
        heap.peak_bytes = heap.live_bytes + rise
    heap.live_bytes += nbytes
    heap.live_blocks += nblocks
    heap.allocs += nallocs
    heap.large_bytes += large
    return [_Shifted(h, lo, d) for h in w.handles]


class _Shifted:
    """An iteration's kept blocks by position, a recorded window's mapped on first read."""

    __slots__ = ("base", "lo", "d", "_made")

    def __init__(self, base, lo, d):
        self.base, self.lo, self.d, self._made = base, lo, d, None

    def _map(self):
        if self._made is None:
            lo, d = self.lo, self.d
            self._made = {i: (a if type(a) is not int or a < lo else a + d)
                          for i, a in self.base.items()}
        return self._made

    def __getitem__(self, i):
        return self._map()[i]

    def get(self, i, default=None):
        return self._map().get(i, default)

    def items(self):
        return self._map().items()

    def __contains__(self, i):
        return i in self._map()


def _linkable(a, lo_a, d_a, b, lo_b, d_b) -> bool:
    """Whether the window ``b`` follows ``a`` wherever ``a`` is applied with the threshold
    ``lo_a`` (just now: ``a`` at ``(lo_a, d_a)``, then ``b`` found at ``(lo_b, d_b)``):
    what ``b`` reads of the tcache and fastbins ``a`` read and left above ``b``'s lowest
    lengths (so it is ``a``'s result, not what ``a`` left untouched), and each address
    ``b`` reads on the same side of ``lo_a`` after ``a`` as of ``lo_b`` before ``b``.
    Then ``a`` applied with ``lo_a`` and any advance ``d`` is followed by ``b`` at
    ``(lo_b, d + d_b - d_a)`` (the arena's state after ``a`` is ``a``'s recorded result
    mapped: :func:`_apply`)."""
    for is_fast in (False, True):
        mine = set(a.read[is_fast])
        for s in b.read[is_fast]:
            if s not in mine or b.low.get((is_fast, s), 0) < a.low.get((is_fast, s), 0):
                return False
    lr = b.before[5]
    for x in list(b.chunks) + ([] if lr is None else [lr]):
        if (x < lo_b) != ((x if x < lo_b else x + d_b) < lo_a):
            return False
    return True


def _shiftable(arena, effect) -> bool:
    """Whether the iteration's requests allow a window to be shifted at all."""
    return (not arena.alias and not arena.runs
            and all(type(arg) is tuple or not arg or arg < 0
                    for kind, _, arg, _ in effect.trace if kind == ALLOC)
            and not any(unfaulted for *_, unfaulted in effect.trace)
            and max((n for _, n, _, _ in effect.trace), default=0) < arena.mmap_threshold)


def place(sim, effect, starts, trees, replay_one) -> list:
    """The heap events and BTreeMap operations of the iterations whose first ids are
    ``starts``, on a glibc arena; returns each iteration's kept blocks by position."""
    heap = sim.heap
    arena = heap._arena
    if not _shiftable(arena, effect) or any(kind != "insert" for _, kind, _ in effect.tree_ops):
        return [replay_one(sim, effect, start) for start in starts]
    if effect.windows is None:
        effect.windows = {}
    memo = effect.windows
    starts = list(starts)
    # windows start at the same phase of the loop in every batch (the maps' node splits
    # come in a pattern of the iterations' count): the iterations before the first such
    # start are replayed
    lead = -((starts[0] - effect.first_id) // effect.stride) % WINDOW if starts else 0
    handles = [replay_one(sim, effect, start) for start in starts[:lead]]
    prev = None
    for i in range(lead, len(starts), WINDOW):
        window = starts[i:i + WINDOW]
        sizes = _NodeSizes()
        tap, heap.tap = heap.tap, sizes
        made = sizes.sizes
        nodes = []
        try:
            for start in window:
                per = []
                for tree, _, key in effect.tree_ops:
                    if trees[tree].insert(start + key) and made:
                        per.append(tuple(made))
                        made.clear()
                    else:
                        per.append(())
                nodes.append(tuple(per))
        finally:
            heap.tap = tap
        program = tuple(nodes)
        found = None
        if prev is not None:
            link = prev[0].links.get((prev[1], program))
            if link is not None:
                w, lo, delta = link
                d = prev[2] + delta
                walked = _walk(arena, w, d) if arena.top - w.top0 == d else None
                if walked is not None:
                    found = (w, lo, d, walked)
                    STATS["linked"] = STATS.get("linked", 0) + 1
        by_read = memo.get(program, {}) if found is None else {}
        state = _view(arena) if found is None else None
        candidates = False
        for read, by_key in by_read.items():
            listed = by_key.get(_sizes_key(state, read), ())
            for w in reversed(listed):
                candidates = True
                shift = _shift(w, state, arena.top)
                if shift is not None:
                    walked = _walk(arena, w, shift[1])
                    if walked is not None:
                        found = (w,) + shift + (walked,)
                        # the last one found is tried first
                        listed.remove(w)
                        listed.append(w)
                        break
            if found is not None:
                break
        if found is not None:
            w, lo, d, _ = found
            if (prev is not None and (prev[1], program) not in prev[0].links
                    and _linkable(prev[0], prev[1], prev[2], w, lo, d)):
                prev[0].links[(prev[1], program)] = (w, lo, d - prev[2])
            handles.extend(_apply(sim, effect, *found))
            STATS["shifted"] += len(window)
            prev = (w, lo, d)
            continue
        prev = None
        STATS["replayed"] += len(window)
        key = "cand" if candidates else ("prog" if by_read else "none")
        STATS[key] = STATS.get(key, 0) + 1
        STATS.setdefault("where", []).append((i, key))
        placed, w = _record(sim, effect, window, nodes, replay_one)
        handles.extend(placed)
        if w is None:
            STATS["unrecorded"] = STATS.get("unrecorded", 0) + 1
        if w is not None and len(window) == WINDOW:
            kept = memo.setdefault(program, {}).setdefault(w.read, {}).setdefault(
                _sizes_key(w.before, w.read), [])
            kept.append(w)
            del kept[:-KEEP]
    return handles
