"""Windows of replayed iterations on a glibc arena, applied as a shift of the arena.

A chain whose members stay unbuilt (:func:`sim.engine.fastforward.keptchain.defer_members`)
places each skipped iteration's requests on glibc's arena one by one
(:func:`sim.engine.fastforward.keptchain.replay_on_arena`), which costs about what the
exact iteration's placement does. Here a few iterations (:func:`window_length`) are one
unit, and most units are applied without a request.

**The program.** A window's program is its iterations' requests (the same every
iteration) and the nodes its BTreeMap operations allocate (these vary: a leaf splits every
few iterations, an internal node more rarely). The maps make the window's operations
first: appends of ascending ids in closed form (:meth:`~sim.platform.btree.BTreeNodes.
append_nodes`), other operations on a heap tap that only notes each one's node sizes
(:class:`_NodeSizes`).

**A recorded window.** A window replayed request by request is recorded
(:func:`_record`) through the arena's tap (:class:`~sim.platform.ptmalloc.ArenaReads`,
the arena's ``recorder``: the arena calls it where it reads a bin's length or its break;
no method of the arena is replaced): the arena's free structures before and after it
(tcache bins, fastbins, unsorted bin, small and large bins, free chunks, last remainder,
fastbin count), which tcache bins and fastbins it read and the fewest chunks each held
meanwhile (the chunks under that were not touched), every chunk it entered into or took
from the in-use map, the blocks it appended to the live lists, the kept blocks by
position, the heap's counters and highest point, and the events where the arena reads
its break (carves from the top, frees merged into the top, reallocs at the top).

**Tcache lengths.** glibc reads a tcache bin's length only to ask whether it is empty
(a request) or full (a free), so a window holds for a range of lengths of each bin it
reads: where no request found the bin empty and no free found it full, the same window
with the bin ``k`` chunks longer makes the same decisions as long as it never runs dry
and never fills (:func:`_lengths`); the chunks under its lowest point stay where they
are. A loop that parks one chunk a window in a bin it never takes from (a bin filling
over seven windows) is then one record, not seven.

**The shift.** A later window with the same program is that recorded window again when
the arena is the recorded window's starting arena shifted (:func:`_shift`): with ``D`` the
top's advance since, there is an address ``L`` below which every chunk of the free
structures the window reads is where it was, and from which every one moved by exactly
``D`` -- in the same bins, the same order, with the same sizes -- no chunk crosses ``L``
and none below it ends at it. glibc's ``malloc``, ``free`` and ``realloc`` decide by
sizes, bin orders and lengths, by which chunk is the last remainder, and by adjacency
(a free chunk ending where a freed one starts or starting where it ends, or the top).
Under the map ``a -> a`` below ``L``, ``a -> a + D`` from it, every one of these is the
recorded window's: a chunk carved from a chunk lies inside it, one carved from the top
lies above ``L``, chunks are adjacent within one side only, and the in-use chunks the
window does not free (older blocks, and the tcache chunks under the lowest length) are
never looked at. So the window makes the recorded window's decisions, each address
mapped, and ends in the recorded end state mapped (:func:`_apply`). What the map does not
carry is checked or recomputed: the break (a walk over the recorded top events with this
arena's break, which grows and trims it as ``sysmalloc`` and ``systrim`` do, and must
take each realloc at the top the same way: :func:`_walk`), the resident end and page
faults (the walk's touches; the simulator's fault time is that of the cumulative bytes),
``malloc_consolidate`` (not shifted: a recorded window with fastbin chunks at an event
that reads the break, or that merged a chunk of 64 KiB off the top), aligned requests
and mmapped chunks (none: every request below the mmap threshold), aliases (none).

**Held chunks.** The chunks a shifted window carves from the top and leaves in use (out
of the tcache and fastbins), and the blocks it appends to the live lists, are not entered
one by one: the windows applied in a row hand them to one carve run of the arena
(:func:`_hold`), which enters them when a free or realloc names one of its blocks or a
free by size reaches it. No window's request does (an iteration frees only its own
blocks), so a loop that keeps what it carves pays for the in-use map and the live lists
only where something frees the kept blocks.

**Links.** After a window applied at ``(L, D)`` the arena is that window's recorded end
mapped, so where the next window was found at ``(L', D')`` reading only what the first
one read and left, and each address it reads on the same side of ``L`` as of ``L'``,
the next window follows the first one wherever it is applied with ``L``
(:func:`_linkable`): it is applied without comparing the arena again.

**The window's length.** A program repeats only where the window's BTreeMap appends split
the maps' rightmost nodes at the same places: ascending appends split the rightmost leaf
every :data:`~sim.platform.btree.SPLIT_PERIOD` (7) appends, so a window spans a whole
number of those periods in each map (:func:`window_length`): with 8 appends an iteration,
7 iterations (8 leaf splits, at the same appends in every window), where two would see
seven programs of leaf splits alone, each recorded apart.

Windows start at the same phase of the loop in every batch. The tests compare the arena
with exact mode's chunk by chunk (in-use map, live lists, bins, tcache, break, resident
end) after 40, 60, 400 and 1,500 forwards, and after a backward that frees every kept
block.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from math import gcd

from ...platform.btree import SPLIT_PERIOD
from ...platform.heap import HeapTap
from ...platform.ptmalloc import (CONSOLIDATION_THRESHOLD, MINSIZE, NSMALLBINS,
                                  SIZE_SZ, ArenaReads, CarveRun)
from .arenarun import ALLOC

__all__ = ["WINDOW", "KEEP", "place", "window_length"]

#: iterations per window
WINDOW = 2
#: recorded windows kept per program and sizes of the free structures
KEEP = 24


class _Unshiftable(Exception):
    """A BTreeMap operation freed or reallocated a node (not a window's program)."""


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


def _free_structures(arena) -> tuple:
    """``(tcache, fastbins, unsorted, bins, free chunks, last remainder, nfast)``: copies."""
    return ({s: list(v) for s, v in arena.tcache.items() if v},
            {s: list(v) for s, v in arena.fast.items() if v},
            [(a, arena.free_at[a]) for a in arena.unsorted],
            [(i, list(arena.bins[i])) for i in arena.binmap],
            dict(arena.free_at), arena.last_remainder, arena.nfast)


def _view(arena) -> tuple:
    """:func:`_free_structures` without copies of the tcache, fastbins and free chunks
    (a lookup)."""
    return (arena.tcache, arena.fast, [(a, arena.free_at[a]) for a in arena.unsorted],
            [(i, list(arena.bins[i])) for i in arena.binmap],
            arena.free_at, arena.last_remainder, arena.nfast)


def _sizes_key(state, read) -> tuple:
    """What of the free structures a shift leaves alone: the lengths of the fastbins a
    window reads (``read``: ``(tcache sizes, fastbin sizes)``), the unsorted bin's and
    the bins' sizes, the free chunks' count. The tcache bins' lengths are not in it: a
    window holds for a range of them (:func:`_lengths`)."""
    tcache, fast, unsorted, bins, free_at, lr, nfast = state
    return (nfast, lr is None, tuple(len(fast.get(s, ())) for s in read[1]),
            tuple(z for _, z in unsorted), tuple((i, len(c)) for i, c in bins),
            len(free_at))


def _lengths(w, tcache):
    """How much longer than in ``w``'s start each tcache bin ``w`` reads is in
    ``tcache`` (a tuple in ``w.read[0]``'s order), or None where that changes a decision
    of the window. glibc reads a bin's length in two places: a request takes the newest
    chunk if there is one, a free parks its chunk while there are fewer than
    ``TCACHE_COUNT``. So a bin ``k`` chunks longer (or shorter) makes the window's
    decisions again where no request found it empty and no free found it full, it never
    runs dry (``low + k >= 0``, and no request finds it empty: ``looked + k >= 1``) and
    never fills (``high + k <= TCACHE_COUNT``); its chunks under the window's lowest
    point are never looked at (:func:`_apply` keeps them)."""
    out = []
    for s, (start, lowest, highest) in zip(w.read[0], w.bounds):
        k = len(tcache.get(s, ())) - start
        if k and not lowest <= k <= highest:
            return None
        out.append(k)
    return tuple(out)


class _Window:
    """A window replayed request by request (see the module docstring): its free
    structures ``before`` and ``after``, the tcache and fastbin sizes it ``read`` and
    their ``low`` lengths, ``changed`` (the bins it left otherwise), the top ``top0`` and
    ``top1``, the in-use chunks it added or resized (``inuse``, by address, and their
    addresses ``cut``) and took out (``gone``), the blocks it appended to the live lists
    (``live``; ``borrows``: those below ``top0``), the kept blocks by position
    (``handles``, per iteration), the heap's changes ``(live bytes, blocks, allocation
    calls, large bytes, highest rise)``, the bins' change count, the top ``events``; and
    for lookups its readable ``chunks``, its canonical forms by threshold and its
    ``links``."""

    __slots__ = ("before", "after", "low", "bounds", "read", "changed", "top0", "top1", "cut",
                 "sizes", "held", "gone", "live", "borrows", "handles", "heap", "bin_changes",
                 "events", "reach", "plan", "chunks", "canon", "links")


def _record(sim, effect, starts, nodes, replay_one):
    """Replay the window (``nodes``: each iteration's operations' node sizes) and record
    it; returns ``(kept blocks per iteration, _Window or None)``."""
    heap = sim.heap
    arena = heap._arena
    w = _Window()
    w.before = _free_structures(arena)
    w.top0 = arena.top
    sizes = set(effect.windows.sizes)
    sizes.update(n for per in nodes for op in per for n in op)
    lens = {n: len(arena.live.get(n, ())) for n in sizes}
    counts = (heap.live_bytes, heap.live_blocks, heap.allocs, heap.large_bytes)
    peak, heap.peak_bytes = heap.peak_bytes, heap.live_bytes
    changes, trims = arena.bin_changes, arena.trims
    placed, handles = [], []
    runs = list(arena.runs)
    arena.recorder = recorder = ArenaReads(arena)
    try:
        for start, per in zip(starts, nodes):
            handles.append(replay_one(sim, effect, start, per, placed))
    finally:
        arena.recorder = None
        heap.peak_bytes, rise = max(peak, heap.peak_bytes), heap.peak_bytes - counts[0]
    w.read, w.low, w.bounds = recorder.read()
    events = recorder.events
    if not recorder.ok or arena.trims != trims or arena.alias or arena.runs != runs:
        return handles, None
    w.chunks = _chunks(w.before, w.low, w.read)
    w.canon, w.links = {}, {}
    w.after = after = _free_structures(arena)
    w.changed = tuple((is_fast, s) for is_fast in (False, True)
                      for s in set(w.before[is_fast]) | set(after[is_fast])
                      if w.before[is_fast].get(s) != after[is_fast].get(s))
    w.top1 = arena.top
    appended = [(n, arena.live[n][lens[n]:]) for n in sorted(sizes)
                if len(arena.live.get(n, ())) > lens[n]]
    w.live = tuple((n, tuple(blocks)) for n, blocks in appended)
    # the live blocks below the window's first top (chunks it took from the tcache and
    # fastbins), which a carve run holding its chunks borrows (:func:`_hold`)
    w.borrows = tuple(a for _, blocks in w.live for a in blocks if a < w.top0)
    # the chunks the window entered into or took from the in-use map: a chunk not in a
    # tcache bin or fastbin before was not in use (the window frees only its own blocks)
    cached = {a: s for bins in w.before[:2] for s, v in bins.items() for a in v}
    touched = set(cached) | set(w.before[4]) | set(after[4]) | set(placed)
    touched.update(a for bins in after[:2] for v in bins.values() for a in v)
    touched.update(a for _, blocks in w.live for a in blocks)
    now, was = arena.inuse.get, cached.get
    # the chunks carved from the top that stay in use, out of the tcache and fastbins, are
    # held by a carve run of the arena (:func:`_hold`); the others enter the in-use map
    parked = {a for bins in after[:2] for v in bins.values() for a in v}
    gone, held, entered = [], [], []
    top0 = w.top0
    for a in sorted(touched):
        z = now(a)
        if z == was(a):
            continue
        if z is None:
            gone.append(a)
        elif a >= top0 and a not in parked:
            held.append((a, z))
        else:
            entered.append((a, z))
    w.gone = tuple(gone)
    w.cut = tuple(a for a, _ in entered)
    w.sizes = tuple(z for _, z in entered)
    w.held = tuple(held)
    w.handles = handles
    w.heap = (heap.live_bytes - counts[0], heap.live_blocks - counts[1],
              heap.allocs - counts[2], heap.large_bytes - counts[3], rise)
    w.bin_changes = arena.bin_changes - changes
    w.events = tuple(events)
    w.reach = _reach(events)
    w.plan = _walk_plan(events)
    return handles, w


def _reach(events):
    """For :func:`_walk`'s short way, relative to the window's first top: the most a
    carve needs below the break, the highest byte it touches, and the lowest top a merge
    into the top leaves; None where a realloc reads the break."""
    need = 0
    end = low = None
    for kind, rel, arg in events:
        if kind == 0:
            need = max(need, rel + arg + MINSIZE)
            touched = rel + arg + 2 * SIZE_SZ
            end = touched if end is None else max(end, touched)
        elif kind == 1:
            low = rel if low is None else min(low, rel)
        else:
            return None
    return need, end, low


def _walk_plan(events) -> tuple:
    """:func:`_walk`'s top events with each run of carves between two other events as one
    ``(0, needs, end)``: the carves' needs below the break relative to the window's first
    top (``rel + nb + MINSIZE``), only those above every one before them in the run
    (ascending: the others find the break high enough, since within the run it only
    rises), and the highest byte the run touches; the other events as they are."""
    plan = []
    needs, end = [], None
    for kind, rel, arg in events:
        if kind == 0:
            need = rel + arg + MINSIZE
            if not needs or need > needs[-1]:
                needs.append(need)
            touched = rel + arg + 2 * SIZE_SZ
            end = touched if end is None else max(end, touched)
            continue
        if needs:
            plan.append((0, tuple(needs), end))
            needs, end = [], None
        plan.append((kind, rel, arg))
    if needs:
        plan.append((0, tuple(needs), end))
    return tuple(plan)


def _chunks(state, low, read, more=None) -> dict:
    """Address -> size of the chunks in free structures that a window reads (``more``:
    how much longer each tcache bin it reads is than at its start, :func:`_lengths`)."""
    tcache, fast, _, _, free_at, _, _ = state
    out = dict(free_at)
    for j, s in enumerate(read[0]):
        for a in tcache.get(s, ())[low.get((False, s), 0) + (more[j] if more else 0):]:
            out[a] = s
    for s in read[1]:
        for a in fast.get(s, ())[low.get((True, s), 0):]:
            out[a] = s
    return out


def _canon(state, low, read, lo, top, more=None) -> tuple:
    """The free structures a window reads, each address below ``lo`` as it is and from
    there relative to the top (``more``: as for :func:`_chunks`)."""
    tcache, fast, unsorted, bins, free_at, lr, nfast = state

    def c(a):
        return a if a < lo else ("M", a - top)
    return (nfast, None if lr is None else c(lr),
            [[c(a) for a in tcache.get(s, ())[low.get((False, s), 0)
                                               + (more[j] if more else 0):]]
             for j, s in enumerate(read[0])],
            [[c(a) for a in fast.get(s, ())[low.get((True, s), 0):]] for s in read[1]],
            [(c(a), z) for a, z in unsorted],
            [(i, [c(a) if type(a) is int else (a[0], c(a[1])) for a in ch]) for i, ch in bins],
            sorted(((c(a), z) for a, z in free_at.items()), key=repr))


def _shift(w, state, top):
    """``(L, D, more)`` where the arena's free structures ``state`` (top ``top``) are
    ``w``'s starting ones shifted (see the module docstring), its tcache bins ``more``
    chunks longer (:func:`_lengths`), else None."""
    d = top - w.top0
    if d < 0:
        return None
    more = _lengths(w, state[0])
    if more is None:
        return None
    c0, c1 = w.chunks, _chunks(state, w.low, w.read, more)
    if len(c0) != len(c1):
        return None
    hi = min((a for a, z in c1.items() if c0.get(a) != z), default=top)
    lo = hi - d
    for a, z in c0.items():
        if a < lo <= a + z:
            return None              # a chunk crosses L, or ends at it
    canon = w.canon.get(lo)
    if canon is None:
        canon = w.canon[lo] = _canon(w.before, w.low, w.read, lo, w.top0)
    if canon != _canon(state, w.low, w.read, hi, top, more):
        return None
    return lo, d, more


def _walk(arena, w, d):
    """``(break, resident end, trims, trimmed bytes, resident end before the latest trim)``
    after ``w`` applied with the top moved by ``d``: its top events walked with this arena's
    break (``sysmalloc``'s growth, ``systrim`` after a merge into the top); None where a
    realloc at the top would decide otherwise than in ``w``."""
    brk, resident, page = arena.brk, arena.resident_end, arena.page
    trims = trimmed = 0
    trim_from = arena.trim_from
    base = w.top0 + d
    if w.reach is not None:
        # the short way: no carve grows the heap, no merge into the top trims it
        need, end, low = w.reach
        if brk >= base + need and (low is None or brk - base - low < max(
                CONSOLIDATION_THRESHOLD, arena.trim_threshold)):
            return brk, resident if end is None else max(resident, base + end), 0, 0, trim_from
    for kind, rel, arg in w.plan:
        if kind == 0:
            # a run of carves (_walk_plan): the break grows at each need above it, as
            # sysmalloc grows it by the need, the top pad and MINSIZE in whole pages
            needs = rel
            i = bisect_right(needs, brk - base)
            while i < len(needs):
                need = base + needs[i] + arena.top_pad - brk
                brk += -(-need // page) * page
                i = bisect_right(needs, brk - base, i + 1)
            end = base + arg
            if end > resident:
                resident = end
            continue
        top = base + rel
        if kind == 1:
            if brk - top >= CONSOLIDATION_THRESHOLD and brk - top >= arena.trim_threshold:
                area = brk - top - MINSIZE - 1
                if area > arena.top_pad:
                    extra = (area - arena.top_pad) // page * page
                    if extra:
                        brk -= extra
                        trims += 1
                        trimmed += extra
                        trim_from = resident
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
    return brk, resident, trims, trimmed, trim_from


def _apply(sim, pending, w, lo, d, more, walked) -> list:
    """The recorded window ``w`` again, each of its addresses ``a`` at ``a`` below ``lo``
    and at ``a + d`` from there, its tcache bins ``more`` chunks longer (:func:`_shift`;
    ``walked``: :func:`_walk`); returns the iterations' kept blocks by position. Its held
    chunks and live blocks join ``pending`` (the windows applied in a row, held by one
    run: :func:`_hold`)."""
    heap = sim.heap
    arena = heap._arena
    tcache, fast, unsorted, bins, free_at, lr, nfast = w.after
    longer = dict(zip(w.read[0], more)) if any(more) else None
    for is_fast, s in w.changed:
        now, rec = (arena.fast, fast) if is_fast else (arena.tcache, tcache)
        keep = w.low.get((is_fast, s), 0)
        under = keep + longer[s] if longer and not is_fast else keep
        # in place: the arena's bins are never replaced (it reads them by size as well)
        now[s][:] = now[s][:under] + [a if a < lo else a + d for a in rec.get(s, ())[keep:]]
    arena.nfast = nfast
    if free_at or w.before[4]:
        arena.free_at = free = {(a if a < lo else a + d): z for a, z in free_at.items()}
        arena.free_end = {a + z: a for a, z in free.items()}
        arena.unsorted = {(a if a < lo else a + d): z for a, z in unsorted}
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
    # the chunks from L on, moved by D (address order: a cut at L)
    addrs, sizes = w.cut, w.sizes
    k = bisect_left(addrs, lo)
    if k:
        inuse.update(zip(addrs[:k], sizes[:k]))
    inuse.update(zip(map(d.__add__, addrs[k:]), sizes[k:]))
    # the held chunks and the live blocks: by the run the windows applied in a row make
    pending.append((w, lo, d))
    arena.top = w.top1 + d
    brk, resident, trims, trimmed, trim_from = walked
    arena.brk = brk
    arena.trims += trims
    arena.trimmed_bytes += trimmed
    arena.trim_from = trim_from
    if trims and arena.trim is not None:
        arena.trim(trimmed, trims)
    page = arena.page
    old, new = -(-arena.resident_end // page) * page, -(-resident // page) * page
    arena.resident_end = resident
    if new > old and arena.fault is not None:
        arena.fault(new - old, False)
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
    """An iteration's kept blocks by position: a recorded window's, mapped on first read."""

    __slots__ = ("base", "lo", "d", "_made")

    def __init__(self, base, lo, d):
        self.base, self.lo, self.d, self._made = base, lo, d, None

    def _map(self) -> dict:
        if self._made is None:
            lo, d = self.lo, self.d
            self._made = {i: (a if a < lo else a + d) for i, a in self.base.items()}
        return self._made

    def __getitem__(self, i):
        return self._map()[i]

    def get(self, i, default=None):
        return self._map().get(i, default)

    def items(self):
        return self._map().items()

    def __contains__(self, i):
        return i in self._map()


def _linkable(a, lo_a, d_a, more_a, b, lo_b, d_b, more_b) -> bool:
    """Whether window ``b`` follows window ``a`` wherever ``a`` is applied with the
    threshold ``lo_a`` (just now: ``a`` at ``(lo_a, d_a)``, then ``b`` found at
    ``(lo_b, d_b)``): ``b`` reads only tcache bins and fastbins ``a`` read, no deeper than
    ``a`` went (so what it reads is ``a``'s recorded result, not what ``a`` left
    untouched), and every address ``b`` reads lies on the same side of ``lo_a`` after
    ``a`` as of ``lo_b`` before ``b``. Then ``a`` applied at ``(lo_a, d)`` with its
    tcache bins ``more_a`` longer is followed by ``b`` at ``(lo_b, d + d_b - d_a)`` with
    its bins ``more_b`` longer: the arena after :func:`_apply` is ``a``'s recorded end
    mapped."""
    for is_fast, extra_a, extra_b in ((False, dict(zip(a.read[0], more_a)),
                                       dict(zip(b.read[0], more_b))), (True, {}, {})):
        mine = set(a.read[is_fast])
        for s in b.read[is_fast]:
            if s not in mine or (b.low.get((is_fast, s), 0) + extra_b.get(s, 0)
                                 < a.low.get((is_fast, s), 0) + extra_a.get(s, 0)):
                return False
    lr = b.before[5]
    for x in list(b.chunks) + ([] if lr is None else [lr]):
        if (x < lo_b) != ((x if x < lo_b else x + d_b) < lo_a):
            return False
    return True


def _shiftable(arena, effect) -> bool:
    """Whether the iteration's requests let a window be shifted at all: no aligned
    request, none made with page faults off, all below the mmap threshold, only inserts
    into the maps, no alias in the arena (carve runs may be there: the iteration frees only
    its own blocks, so none enters)."""
    return (not arena.alias
            and all(type(arg) is tuple or not arg or arg < 0
                    for kind, _, arg, _ in effect.trace if kind == ALLOC)
            and not any(unfaulted for *_, unfaulted in effect.trace)
            and max((n for _, n, _, _ in effect.trace), default=0) < arena.mmap_threshold
            and all(kind == "insert" for _, kind, _ in effect.tree_ops))


def window_length(effect) -> int:
    """Iterations per window: the fewest, at least :data:`WINDOW`, whose BTreeMap inserts
    are a whole number of :data:`~sim.platform.btree.SPLIT_PERIOD` appends in every map.

    >>> class E: tree_ops = ((0, "insert", 0),) * 8
    >>> window_length(E)
    7
    >>> E.tree_ops = ((0, "insert", 0),) * 7 + ((1, "insert", 0),) * 14
    >>> window_length(E)
    2
    """
    length = 1
    for appends in Counter(tree for tree, _, _ in effect.tree_ops).values():
        period = SPLIT_PERIOD // gcd(appends, SPLIT_PERIOD)
        length = length * period // gcd(length, period)
    return -(-WINDOW // length) * length


def _node_sizes(heap, effect, trees, window) -> tuple:
    """The window's BTreeMap operations made; the node sizes each allocated, per
    iteration and operation."""
    appended = _appended(effect.windows, effect, trees, window)
    if appended is not None:
        return appended
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
    return tuple(nodes)


class _Memo:
    """What a chain's windows keep across its batches: the recorded windows (``by_program``:
    program -> bins read -> sizes of the free structures -> windows), the top's advance
    over the latest one (``carved``), the maps' inserts
    where they are appends (``appends``: per map, the positions of its inserts among the
    operations, the first one's key and the keys' step; None where they are not) and the
    programs made of the nodes those appends create (``programs``)."""

    __slots__ = ("by_program", "appends", "programs", "carved", "sizes")

    def __init__(self, effect):
        self.by_program, self.programs = {}, {}
        #: the request sizes of the iteration's events (a realloc's old one too)
        self.sizes = frozenset({n for _, n, _, _ in effect.trace} |
                               {arg[0] for _, _, arg, _ in effect.trace if type(arg) is tuple})
        self.appends = _appends(effect)
        #: the top's advance over the latest record kept (bytes)
        self.carved = 0


def _appends(effect):
    """Per map, ``(map, positions of its inserts among the operations, first key, step)``
    where each map's inserts are ids ascending by one step across the iterations, else
    None."""
    ops = effect.tree_ops
    out = []
    for tree in sorted({t for t, _, _ in ops}):
        at = tuple(i for i, (t, kind, _) in enumerate(ops) if t == tree and kind == "insert")
        keys = [ops[i][2] for i in at]
        step = keys[1] - keys[0] if len(keys) > 1 else effect.stride
        if (len(at) != sum(1 for t, _, _ in ops if t == tree) or step <= 0
                or step * len(keys) != effect.stride
                or any(b - a != step for a, b in zip(keys, keys[1:]))):
            return None
        out.append((tree, at, keys[0], step))
    return tuple(out)


def _appended(memo, effect, trees, window):
    """:func:`_node_sizes` where every map's inserts over the window are appends of
    ascending ids (:func:`_appends`) to a map that holds no run: the nodes each makes in
    closed form (:meth:`~sim.platform.btree.BTreeNodes.append_nodes`); else None."""
    appends = memo.appends
    if appends is None:
        return None
    for tree, _, key, _ in appends:
        top = trees[tree].max_key()
        if trees[tree].appends_in_closed_form or (top is not None and top >= window[0] + key):
            return None
    made = tuple(tuple(trees[tree].append_nodes(window[0] + key, step, len(at) * len(window)))
                 for tree, at, key, step in appends)
    program = memo.programs.get(made)
    if program is None:
        nodes = [[[] for _ in effect.tree_ops] for _ in window]
        for (_, at, _, _), nodes_of_map in zip(appends, made):
            per = len(at)
            for n, nbytes in nodes_of_map:
                nodes[n // per][at[n % per]].append(nbytes)
        program = memo.programs[made] = tuple(tuple(map(tuple, per)) for per in nodes)
    return program


def _find(arena, memo, program, prev):
    """``(window, L, D, more, walked)`` to apply for ``program`` now, or None: the link
    from the window applied before (``prev``: ``(window, L, D, more)``), else a recorded
    window of that program the arena is a shift of."""
    if prev is not None:
        link = prev[0].links.get((prev[1], program, prev[3]))
        if link is not None:
            w, lo, delta, more = link
            d = prev[2] + delta
            walked = _walk(arena, w, d) if arena.top - w.top0 == d >= 0 else None
            if walked is not None:
                return w, lo, d, more, walked
    by_read = memo.get(program)
    if not by_read:
        return None
    state = _view(arena)
    for read, by_key in by_read.items():
        listed = by_key.get(_sizes_key(state, read), ())
        for w in reversed(listed):
            shift = _shift(w, state, arena.top)
            walked = None if shift is None else _walk(arena, w, shift[1])
            if walked is not None:
                listed.remove(w)       # the last one found is tried first
                listed.append(w)
                if prev is not None and _linkable(*prev, w, *shift):
                    prev[0].links[(prev[1], program, prev[3])] = (
                        w, shift[0], shift[1] - prev[2], shift[2])
                return (w,) + shift + (walked,)
    return None


def place(sim, effect, starts, trees, replay_one) -> list:
    """The heap events and BTreeMap operations of the iterations whose first ids are
    ``starts`` on a glibc arena (``replay_one``:
    :func:`sim.engine.fastforward.keptchain.replay_on_arena`); returns each iteration's
    kept blocks by position."""
    heap = sim.heap
    arena = heap._arena
    starts = list(starts)
    if not starts or not _shiftable(arena, effect):
        return [replay_one(sim, effect, start) for start in starts]
    if effect.windows is None:
        effect.windows = _Memo(effect)
    memo = effect.windows.by_program
    length = window_length(effect)
    # windows start at the same phase of the loop in every batch
    lead = -((starts[0] - effect.first_id) // effect.stride) % length
    handles = [replay_one(sim, effect, start) for start in starts[:lead]]
    prev = None
    pending = []
    for i in range(lead, len(starts), length):
        window = starts[i:i + length]
        program = _node_sizes(heap, effect, trees, window)
        found = _find(arena, memo, program, prev)
        if found is not None:
            handles.extend(_apply(sim, pending, *found))
            sim.arena_shifted += len(window)
            prev = found[:4]
            continue
        prev = None
        _hold(arena, pending)
        pending = []
        if len(window) < length or _from_remainder(arena, effect.windows):
            # a record no later window could be a shift of: replayed, not recorded
            handles.extend(replay_one(sim, effect, start, per)
                           for start, per in zip(window, program))
            continue
        placed, w = _record(sim, effect, window, program, replay_one)
        handles.extend(placed)
        if w is not None:
            kept = memo.setdefault(program, {}).setdefault(w.read, {}).setdefault(
                _sizes_key(w.before, w.read), [])
            kept.append(w)
            del kept[:-KEEP]
            if w.top1 > w.top0:
                effect.windows.carved = w.top1 - w.top0
    _hold(arena, pending)
    return handles


def _hold(arena, pending) -> None:
    """The held chunks and live blocks of the windows applied in a row (``pending``:
    ``(window, L, D)`` each), as one carve run of the arena
    (:class:`~sim.platform.ptmalloc.CarveRun`): the top they carved, from the first one's
    top to the last one's, holds them; the run stands in the live lists of their sizes
    where their blocks would be, and the live blocks below it (chunks the windows took
    from the tcache) are borrowed. The arena enters the run chunk by chunk when a free or
    realloc names one of its blocks or a free by size reaches it (none of the windows'
    own requests does: they free only their own blocks); until then the in-use map and
    the live lists do not pay per kept chunk. Between its chunks lie chunks the windows
    freed into the bins (and whatever later requests carve there): the run takes those
    spans as pinned, left to the arena."""
    if not pending:
        return
    count = sum(len(w.held) for w, _, _ in pending)
    if not count:
        live = arena.live
        for w, lo, d in pending:
            for n, blocks in w.live:
                live.setdefault(n, []).extend(a if a < lo else a + d for a in blocks)
        return
    first, last = pending[0], pending[-1]
    start, end = first[0].top0 + first[2], last[0].top1 + last[2]
    sizes = tuple(sorted({n for w, _, _ in pending for n, _ in w.live}))
    borrowed = tuple(a if a < lo else a + d for w, lo, d in pending for a in w.borrows)
    pending = tuple(pending)

    def contents():
        chunks, placed = [], {}
        at = start
        for w, lo, d in pending:
            for a, z in w.held:
                a += d
                if a != at:
                    run.pinned[at] = a - at
                    chunks.append((at, a - at))
                chunks.append((a, z))
                at = a + z
            for n, blocks in w.live:
                placed.setdefault(n, []).extend(a if a < lo else a + d for a in blocks)
        if at != end:
            run.pinned[at] = end - at
            chunks.append((at, end - at))
        return chunks, placed
    run = CarveRun(start, end, contents, sizes, {}, None, count, borrowed)
    for addr in borrowed:
        arena._borrowed[addr] = run
    live = arena.live
    for n in sizes:
        if n in live:
            live[n].append(run)
        else:
            live[n] = [run]
    i = bisect_right(arena._run_starts, start)
    arena._run_starts.insert(i, start)
    arena.runs.insert(i, run)


def _from_remainder(arena, memo) -> bool:
    """Whether the window would take its chunks from the last remainder rather than the
    top: the remainder (a free chunk) holds at least what the latest kept record carved.
    Such a window leaves the top where it was and the remainder another size, so no later
    arena is a shift of its record (a run's batches start so, consuming the table the
    exact iteration before freed)."""
    lr = arena.last_remainder
    return bool(memo.carved) and lr is not None and arena.free_at.get(lr, 0) >= memo.carved
