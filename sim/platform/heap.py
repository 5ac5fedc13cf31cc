"""Host heap: a counting allocator plus the platform allocator's residency.

Every allocation and free that the simulated bookkeeping makes goes through
:class:`Heap`, the simulated counterpart of the counting ``#[global_allocator]``
used by the seed programs: it keeps **live bytes** and **live blocks** exactly
as that allocator would report them (requested sizes, not rounded ones).

Residency (what RSS sees) is delegated to an :class:`~sim.platform.rss.Allocator`
model, which rounds each request to the platform allocator's size classes and
keeps freed small blocks for reuse.

Units: bytes and blocks (one block = one successful ``alloc`` call).
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from .compiled import adopt_compiled
from .ptmalloc import ZEROED, chunk_size

__all__ = ["Heap", "HeapTap", "ExcludedHeap"]


class Heap:
    """Live bytes and blocks of the host heap, and its resident footprint.

    Parameters
    ----------
    allocator : sim.platform.rss.Allocator
        Size-class model of the platform allocator; receives every event.

    Examples
    --------
    >>> from sim.platform.rss import Allocator
    >>> heap = Heap(Allocator.from_classes("glibc"))
    >>> heap.alloc(24); heap.alloc(100); heap.free(24)
    >>> heap.live_bytes, heap.live_blocks
    (100, 1)
    """

    __slots__ = ("live_bytes", "live_blocks", "peak_bytes", "allocs", "allocator", "_small",
                 "_live", "_high", "_mark", "_arena", "large_bytes", "tap", "rehash")

    #: B from which a block counts in :attr:`large_bytes`: glibc's default mmap threshold,
    #: below which a request is always carved among the arena's other small chunks
    LARGE_BYTES = 128 * 1024

    def __init__(self, allocator):
        self.live_bytes = 0
        self.live_blocks = 0
        self.peak_bytes = 0
        self.allocs = 0
        #: live bytes in blocks of at least :attr:`LARGE_BYTES` (tensor data, big tables):
        #: ``live_bytes - large_bytes`` is what the small blocks among the graph's keys hold
        self.large_bytes = 0
        self.allocator = allocator
        # size -> (zone, rounded) for small sizes, shared with the allocator (hot path)
        self._small = allocator._lookup
        self._live = allocator.live
        self._high = allocator.high
        self._mark = allocator.mark
        # a glibc arena places every block itself (hot path: called directly)
        self._arena = allocator.arena
        #: a :class:`HeapTap` that sees every event instead of the heap (fast-forward's
        #: recorder, a closed heap), or None: the heap does each event itself
        self.tap = None
        #: called with the items a hash table's growth moves (:mod:`sim.platform.hashbrown`),
        #: or None: the rehash costs no time (set by the simulation from ``rehash_item_ns``)
        self.rehash = None

    def untapped(self, event, *args):
        """``event(*args)`` (one of this heap's methods) done by the heap itself, as if no
        tap were set: what a :class:`HeapTap` calls to pass an event on."""
        tap, self.tap = self.tap, None
        try:
            return event(*args)
        finally:
            self.tap = tap

    def alloc(self, nbytes: int, align: int = 0):
        """Allocate one block of ``nbytes`` (zero-sized requests allocate nothing);
        ``align``: the alignment asked for, where it is more than malloc's 16 B, or
        :data:`~sim.platform.ptmalloc.ZEROED` for zeroed memory (``calloc``).

        Returns the allocator's handle of the block where it places blocks
        individually (macOS LARGE blocks, the glibc arena), else None; pass it back
        to :meth:`free`.
        """
        tap = self.tap
        if tap is not None:
            # a closed heap's events change nothing (no call: fast-forward's builder
            # makes many once its blocks are checked)
            return None if tap is CLOSED else tap.alloc(self, nbytes, align)
        hit = self._small.get(nbytes)  # a small size already seen (never one <= 0)
        if hit is None and nbytes <= 0:
            return
        live = self.live_bytes = self.live_bytes + nbytes
        self.live_blocks += 1
        self.allocs += 1
        if live > self.peak_bytes:
            self.peak_bytes = live
        if hit is None:
            if nbytes >= self.LARGE_BYTES:
                self.large_bytes += nbytes
            if self._arena is not None:
                return self._arena.alloc(nbytes, align)
            return self.allocator.alloc(nbytes, 1, align)
        zone, size = hit
        zl = self._live
        zone_live = zl[zone] = zl[zone] + size
        if zone_live > self._high[zone]:
            self._high[zone] = zone_live
            if zone_live > self._mark[zone]:
                # the high-water mark entered a new page: it becomes resident (a fault)
                self.allocator.fault_to(zone, zone_live)

    def alloc_run(self, nbytes: int, count: int) -> tuple:
        """:meth:`alloc` of ``count`` blocks of ``nbytes``, one after the other (a map's
        nodes cloned); returns their handles. Where a glibc arena places them and no tap
        is set, the arena takes each request and the counters take the run's sums (live
        bytes only rise, so the peak is the run's end)."""
        arena = self._arena
        if (arena is None or self.tap is not None or self._small or nbytes <= 0
                or nbytes >= self.LARGE_BYTES):
            return tuple(self.alloc(nbytes) for _ in range(count))
        live = self.live_bytes = self.live_bytes + nbytes * count
        self.live_blocks += count
        self.allocs += count
        if live > self.peak_bytes:
            self.peak_bytes = live
        return arena.alloc_each(nbytes, count)

    def free_run(self, nbytes: int, blocks) -> None:
        """:meth:`free` of each of ``blocks`` (handles of ``nbytes``) in turn; where a glibc
        arena places them and no tap is set, the counters take the run's sums."""
        arena = self._arena
        if (arena is None or self.tap is not None or self._small or nbytes <= 0
                or nbytes >= self.LARGE_BYTES):
            for block in blocks:
                self.free(nbytes, block)
            return
        self.live_bytes -= nbytes * len(blocks)
        self.live_blocks -= len(blocks)
        live = arena.live.get(nbytes)
        if live is not None and len(blocks) > 1 and not (arena.alias or arena.runs):
            # the blocks moved to the live list's end, the first to go last: each free
            # then finds its block there at once (not by a search from the newest end,
            # past the blocks allocated after it), and the list ends as the frees one by
            # one leave it (the others in their order)
            n = len(blocks)
            if live[-n:] == list(blocks):
                # allocated last (a clone freed before anything else of its size came)
                live[-n:] = blocks[::-1]
            else:
                going = set(blocks)
                kept = [block for block in live if block not in going]
                if len(going) == len(blocks) and len(kept) == len(live) - len(blocks):
                    live[:] = kept
                    live.extend(reversed(blocks))
        arena.free_each(blocks, nbytes)

    def alloc_row(self, sizes) -> list:
        """:meth:`alloc` of each of ``sizes`` in turn (a row of requests with nothing
        between them: a new graph's tables); returns the handles."""
        return list(map(self.alloc, sizes))

    def free(self, nbytes: int, block=None) -> None:
        """Free one block previously allocated with the same ``nbytes`` (``block``: its handle)."""
        tap = self.tap
        if tap is not None:
            if tap is not CLOSED:
                tap.free(self, nbytes, block)
            return
        hit = self._small.get(nbytes)
        if hit is None and nbytes <= 0:
            return
        self.live_bytes -= nbytes
        self.live_blocks -= 1
        if hit is None:
            if nbytes >= self.LARGE_BYTES:
                self.large_bytes -= nbytes
            if self._arena is not None:
                self._arena.free(block, nbytes)
                return
            self.allocator.free(nbytes, 1, block)
            return
        self._live[hit[0]] -= hit[1]

    def realloc(self, old_nbytes: int, nbytes: int, block=None):
        """Rust's ``realloc`` of a block of ``old_nbytes`` (``block``: its handle) to
        ``nbytes`` (a ``Vec`` growing): still one block, of the new size. A glibc arena
        grows it in place where it can (``_int_realloc``); elsewhere it is a new block and
        the old one freed. Returns the block's handle."""
        if self.tap is not None:
            return self.tap.realloc(self, old_nbytes, nbytes, block)
        if old_nbytes <= 0:
            return self.alloc(nbytes)      # a first block: an alloc
        if self._arena is None:
            # Heap's own alloc and free (not a subclass's: a recording heap's realloc
            # records the resize once)
            handle = Heap.alloc(self, nbytes)
            Heap.free(self, old_nbytes, block)
            self.allocs -= 1       # one block all along: not a new allocation
            return handle
        live = self.live_bytes = self.live_bytes + nbytes - old_nbytes
        if live > self.peak_bytes:
            self.peak_bytes = live
        large = self.LARGE_BYTES
        self.large_bytes += (nbytes if nbytes >= large else 0) - (old_nbytes if old_nbytes >= large else 0)
        return self._arena.realloc(block, old_nbytes, nbytes)

    def libc_alloc(self, nbytes: int, zeroed: bool = False):
        """An allocation libc makes for itself (not through Rust's global allocator: a
        counting allocator does not see it, so live bytes and blocks do not change). Only
        a glibc arena places it (it decides where later chunks land). Returns the arena's
        handle (None elsewhere): a block libc frees again (an ``opendir``'s ``DIR``) goes
        back through :meth:`libc_free`; most live as long as the process."""
        if self.tap is not None:
            return self.tap.libc_alloc(self, nbytes, zeroed)
        if self._arena is not None and nbytes > 0:
            return self._arena.alloc(nbytes, ZEROED if zeroed else 0)
        return None

    def libc_free(self, nbytes: int, block=None) -> None:
        """libc frees a block of its own (:meth:`libc_alloc`'s ``block``)."""
        if self.tap is not None:
            return self.tap.libc_free(self, nbytes, block)
        if self._arena is not None and nbytes > 0:
            self._arena.free(block, nbytes)

    def excluded(self) -> "ExcludedHeap":
        """A view of this heap whose events the counting allocator does not see (a
        measuring program's own blocks, kept out of its snapshots: the probes'
        ``alloc::exclude``): the allocator places and frees them, live bytes and blocks
        stay as they are."""
        return ExcludedHeap(self)

    def close(self) -> None:
        """The program ended: later events change nothing. The frees of the simulated
        objects Python collects afterwards are dropped (a real process does not free its
        heap at exit, and a glibc arena would otherwise enter every chunk of its carve
        runs one by one just to free them)."""
        self.tap = CLOSED

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self.tap is CLOSED

    def alloc_many(self, nbytes: int, count: int) -> None:
        """``count`` allocations of ``nbytes`` each, in O(1) (fast-forward)."""
        if self.tap is not None:
            return self.tap.alloc_many(self, nbytes, count)
        if nbytes <= 0 or count <= 0:
            return
        if count == 1:
            self.alloc(nbytes)
            return
        live = self.live_bytes = self.live_bytes + nbytes * count
        if nbytes >= self.LARGE_BYTES:
            self.large_bytes += nbytes * count
        self.live_blocks += count
        self.allocs += count
        if live > self.peak_bytes:
            self.peak_bytes = live
        self.allocator.alloc(nbytes, count)

    def nested(self, events) -> None:
        """A run of allocations and frees that frees every block it allocates (a
        recursion's clones): each event > 0 allocates that many bytes, each < 0 frees the
        block allocated that many events before. The same events as :meth:`alloc` and
        :meth:`free` one by one; where a glibc arena places them and no tap is set, the
        arena takes each request and the counters take the run's sums (live bytes and
        blocks end as they began)."""
        arena = self._arena
        if arena is None or self.tap is not None or self._small:
            alloc, free = self.alloc, self.free
            handles = []
            for i, event in enumerate(events):
                if event > 0:
                    handles.append(alloc(event))
                else:
                    free(events[i + event], handles[i + event])
                    handles.append(None)
            return
        # the arena's loop (compiled with it)
        allocs, peak = arena.nested(events if type(events) is list else list(events))
        self.allocs += allocs
        if self.live_bytes + peak > self.peak_bytes:
            self.peak_bytes = self.live_bytes + peak

    def pairs(self, sizes) -> None:
        """A run of allocations each freed before the next (a walk's clones of a parents
        ``Vec``): the same as :meth:`alloc` then :meth:`free` of each of ``sizes`` (an
        array of ints, 0: no request) in turn. Where a glibc arena places them and no tap
        is set, a request whose tcache bin holds a chunk takes that chunk and gives it
        back (nothing but the counters changes), so only a size's requests that find its
        bin empty go to the arena: one each, as the free parks its chunk there for the
        rest. With a recorder on the arena (which hears each bin read) they go one by
        one."""
        sizes = np.asarray(sizes)
        sizes = sizes[sizes > 0]
        if not sizes.size:
            return
        arena = self._arena
        if (arena is None or self.tap is not None or self._small or arena.alias
                or arena.runs or arena.recorder is not None):
            self._pairs_one_by_one(sizes)
            return
        kinds, firsts = np.unique(sizes, return_index=True)
        kinds = kinds[np.argsort(firsts)].tolist()
        tcache = arena.tcache
        if any(chunk_size(nbytes) not in tcache for nbytes in kinds):
            self._pairs_one_by_one(sizes)      # a chunk past the tcache: each one placed
            return
        exact = 0
        for nbytes in kinds:
            if not tcache[chunk_size(nbytes)]:
                self.free(nbytes, self.alloc(nbytes))
                exact += 1
        self.allocs += sizes.size - exact
        peak = self.live_bytes + max(kinds)
        if peak > self.peak_bytes:
            self.peak_bytes = peak

    def _pairs_one_by_one(self, sizes) -> None:
        for nbytes in sizes.tolist():
            self.free(nbytes, self.alloc(nbytes))

    def transient(self, nbytes: int, count: int) -> None:
        """``count`` blocks of ``nbytes``, each allocated and freed before the next (a
        ``Vec`` made and dropped per member of a run), in O(1): the allocator sees one
        block come and go, the counter every allocation call."""
        if nbytes <= 0 or count <= 0 or self.tap is CLOSED:
            return
        if self.tap is not None:
            return self.tap.transient(self, nbytes, count)
        self.alloc(nbytes)
        self.free(nbytes)
        self.allocs += count - 1

    def free_many(self, nbytes: int, count: int) -> None:
        """``count`` frees of blocks of ``nbytes``, in O(1)."""
        if self.tap is not None:
            return self.tap.free_many(self, nbytes, count)
        if nbytes <= 0 or count <= 0:
            return
        self.live_bytes -= nbytes * count
        if nbytes >= self.LARGE_BYTES:
            self.large_bytes -= nbytes * count
        self.live_blocks -= count
        self.allocator.free(nbytes, count)

    @property
    def orders_frees(self) -> bool:
        """Whether the allocator places blocks one by one, so that the order of frees
        decides later placement (a glibc arena), rather than keeping counts per size."""
        return self._arena is not None

    def unordered(self, batch):
        """``batch`` (a context that holds many frees back and makes them together) where
        the allocator keeps counts per size, so that the order of frees cannot matter;
        elsewhere (a glibc arena, which places by the order of every free) a context that
        changes nothing: one free at a time."""
        return nullcontext() if self._arena is not None and self.tap is not CLOSED else batch

    def free_each(self, order, count: int) -> None:
        """``count`` objects each freeing blocks of the sizes in ``order``, object after
        object (a run of identical dead nodes, :class:`~sim.burn.graph.runs.NodeRun`).

        A size-class allocator keeps counts only, so the frees are taken size by size in
        O(sizes); a glibc arena places blocks one by one, and the order of frees decides
        which free chunks merge and which is reused first, so there they are done in
        order (O(count x len(order)))."""
        if count <= 0 or self.tap is CLOSED:
            return
        if self._arena is None or len(set(order)) <= 1:
            for nbytes in sorted(set(order)):
                self.free_many(nbytes, order.count(nbytes) * count)
            return
        free = self.free
        for _ in range(count):
            for nbytes in order:
                free(nbytes)


class ExcludedHeap:
    """:meth:`Heap.excluded`: ``alloc``, ``free`` and ``realloc`` on the heap, its counts
    (live bytes and blocks, allocations, peak) left unchanged."""

    __slots__ = ("heap",)

    #: > 0 while an uncounted event runs (fast-forward's recorder leaves such iterations
    #: to exact mode: its replay counts every event)
    active = 0

    def __init__(self, heap):
        self.heap = heap

    @property
    def rehash(self):
        """The heap's :attr:`Heap.rehash`: a table grown uncounted still moves its items."""
        return self.heap.rehash

    def _uncounted(self, call, *args):
        heap = self.heap
        counts = (heap.live_bytes, heap.live_blocks, heap.allocs, heap.peak_bytes)
        ExcludedHeap.active += 1
        try:
            return call(*args)
        finally:
            ExcludedHeap.active -= 1
            heap.live_bytes, heap.live_blocks, heap.allocs, heap.peak_bytes = counts

    def alloc(self, nbytes: int, align: int = 0):
        return self._uncounted(self.heap.alloc, nbytes, align)

    def free(self, nbytes: int, block=None) -> None:
        self._uncounted(self.heap.free, nbytes, block)

    def realloc(self, old_nbytes: int, nbytes: int, block=None):
        return self._uncounted(self.heap.realloc, old_nbytes, nbytes, block)


class HeapTap:
    """What a tapped heap (:attr:`Heap.tap`) hands its events to instead of doing them:
    ``alloc``, ``free``, ``realloc``, ``libc_alloc``, ``libc_free``, ``alloc_many``,
    ``free_many`` and ``transient``, each called with the heap first and the event's arguments after. This
    base passes every event on to the heap (:meth:`Heap.untapped`); a tap that records
    wraps that, one that counts or drops events replaces it. A heap with no tap pays one
    attribute test per event."""

    __slots__ = ()

    def alloc(self, heap, nbytes, align):
        return heap.untapped(heap.alloc, nbytes, align)

    def free(self, heap, nbytes, block):
        return heap.untapped(heap.free, nbytes, block)

    def realloc(self, heap, old_nbytes, nbytes, block):
        return heap.untapped(heap.realloc, old_nbytes, nbytes, block)

    def libc_alloc(self, heap, nbytes, zeroed):
        return heap.untapped(heap.libc_alloc, nbytes, zeroed)

    def libc_free(self, heap, nbytes, block):
        return heap.untapped(heap.libc_free, nbytes, block)

    def alloc_many(self, heap, nbytes, count):
        return heap.untapped(heap.alloc_many, nbytes, count)

    def free_many(self, heap, nbytes, count):
        return heap.untapped(heap.free_many, nbytes, count)

    def transient(self, heap, nbytes, count):
        """:meth:`Heap.transient`: one block comes and goes through the tap, the counter
        takes every allocation call."""
        heap.alloc(nbytes)
        heap.free(nbytes)
        heap.allocs += count - 1


class _Closed(HeapTap):
    """The tap of a closed heap (:meth:`Heap.close`): every event changes nothing."""

    __slots__ = ()

    def alloc(self, heap, nbytes, align):
        return None

    def free(self, heap, nbytes, block):
        pass

    def realloc(self, heap, old_nbytes, nbytes, block):
        return None

    def libc_alloc(self, heap, nbytes, zeroed):
        return None

    def libc_free(self, heap, nbytes, block):
        pass

    def alloc_many(self, heap, nbytes, count):
        pass

    def free_many(self, heap, nbytes, count):
        pass


CLOSED = _Closed()


# the compiled build of this file (setup.py; the fields' types in its .pxd) in place
# of its classes when built from this very text; SIM_PURE_HEAP=1 keeps the Python
adopt_compiled(globals(), "sim.platform.heap", "_heap_c", "SIM_PURE_HEAP", "the heap")
