"""Resident memory of the host heap: the platform allocator's size classes.

The counting allocator (:mod:`sim.platform.heap`) sees requested sizes. What the
operating system sees (RSS) depends on how the platform allocator serves them:

* each request is rounded up to its **zone**'s quantum (plus a per-block header
  where the allocator keeps one, and a minimum block size);
* zones that **retain** freed blocks (macOS tiny/small/medium magazines, glibc's
  main arena) keep the freed memory resident for reuse: their resident bytes are
  the high-water mark of their live rounded bytes, so RSS does not fall after a
  backward frees the bookkeeping;
* zones that do not retain (macOS large allocations, glibc mmapped chunks) are
  mapped on allocation and unmapped on free, rounded to pages.

macOS 26+ on arm64 serves the heap with **xzone malloc** (libmalloc-792,
``src/malloc.c`` ``_malloc_init_featureflags``: ``SecureAllocator_SystemWide``
defaults to on for macOS, off only on Intel). Its LARGE blocks (32 KiB < n <=
2 MiB; ``src/xzone_malloc/xzone_malloc.h``) are whole 16 KiB slices carved out of
4 MiB segments by a split-and-coalesce span allocator (``xzone_segment.c``:
``_xzm_segment_group_find_and_allocate_chunk`` scans the size-segregated span
queues from the request's queue upward and takes the first span that fits,
returning the remainder to its queue; ``_xzm_segment_group_segment_span_free_coalesce``
merges a freed chunk with its free neighbours). A freed chunk is not unmapped:
``xzm_segment_group_free_chunk`` madvises it ``MADV_FREE_REUSABLE`` or queues it
for deferred reclaim, and either way its pages stay in the task's resident size
(what ``ps -o rss`` prints) until the kernel takes them under memory pressure;
only a segment that becomes entirely empty may be deallocated, and only in the
pure-data segment groups. In a general macOS process (libmalloc ``src/platform.h``:
``CONFIG_XZM_DEFERRED_RECLAIM``; the enablement tests expect ``defer_large``) LARGE
groups use deferred reclamation (``_xzm_segment_group_uses_deferred_reclamation``): a
freed chunk is not madvised at all, its coalesced span is entered in the
``mach_vm_reclaim`` ring (``_xzm_segment_group_span_mark_free``) and taken back with
``mach_vm_reclaim_try_cancel`` when a later chunk is carved from it; only a span the
kernel is reclaiming at that moment is skipped. Placement is plain first fit: nothing
prefers pristine (never written) spans over freed ones. Every segment group exists once
per CPU cluster (``CONFIG_XZM_CLUSTER_AWARE``; :class:`ClusterSegmentZone`). :class:`SegmentZone` follows that placement slice by
slice: its resident bytes are the slices ever written in the segments still
mapped, so RSS rises while the placement of a loop's buffers settles
(fragmentation), then stays.

glibc raises its mmap threshold to the size of a freed mmapped chunk (dynamic
threshold, up to 32 MiB): after the first large tensor is freed, later tensors of
that size are served from the retained arena. ``dynamic_mmap_threshold`` models it.

All sizes are bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .ptmalloc import PtmallocArena

__all__ = ["Zone", "SegmentZone", "ClusterSegmentZone", "Allocator", "ALLOCATOR_CLASSES",
           "TouchedPages", "CODE_PATHS", "FAULT_AROUND_BYTES"]


@dataclass(frozen=True)
class Zone:
    """One size class range of the platform allocator.

    ``max_bytes`` is the largest request served by the zone (inclusive),
    ``quantum`` the rounding granule, ``header`` bytes of per-block metadata
    added before rounding, ``min_block`` the smallest block, ``retain`` whether
    freed blocks stay resident for reuse.
    """

    name: str
    max_bytes: float
    quantum: int
    header: int = 0
    min_block: int = 0
    retain: bool = True
    #: resident bytes per usable byte (region metadata of the zone)
    overhead: float = 1.0

    def rounded(self, nbytes: int) -> int:
        """Bytes the zone really uses for a request of ``nbytes``."""
        q = self.quantum
        size = -(-(nbytes + self.header) // q) * q
        return size if size > self.min_block else self.min_block


def _span_queue(slices: int, queues: int) -> int:
    """Span queue of a free span of ``slices``: mimalloc's slice bin (exact up to 8,
    then four queues per power of two), capped at the last queue."""
    if slices <= 8:
        return slices
    s = slices - 1
    b = s.bit_length() - 1
    return min(((b << 2) | ((s >> (b - 2)) & 3)) - 4, queues - 1)


class SegmentZone:
    """Slice-granular placement of LARGE blocks in segments (xzone malloc).

    ``slice_bytes`` is the allocation granule, ``segment_bytes`` the reservation
    chunks are carved from, ``min_slices`` the smallest chunk, ``queues`` the
    number of span queues, ``release_empty`` whether a segment whose last chunk is
    freed is unmapped. A block is ``(segment, first slice, slices)``.

    Residency: a slice becomes resident when a chunk covering it is allocated
    (the program writes its buffers) and stays resident after the chunk is freed
    (madvised reusable / queued for deferred reclaim: still counted by ``ps``)
    until its segment is unmapped. Each event costs O(free spans in the scanned
    queues), a handful for the loops simulated here.

    Examples
    --------
    >>> z = SegmentZone("large", 2 << 20, 16384, 4 << 20)
    >>> a = z.alloc(1 << 20); b = z.alloc(1 << 20); z.free(a)
    >>> c = z.alloc(1 << 17)          # carved from the freed first MiB: nothing new
    >>> z.resident_bytes() // 1024
    2048
    """

    __slots__ = ("name", "max_bytes", "slice_bytes", "segment_slices", "min_slices",
                 "queues", "release_empty", "segments", "span_q", "touched", "_next_seg")

    retain = True
    overhead = 1.0

    def __init__(self, name, max_bytes, slice_bytes, segment_bytes, min_slices=2,
                 queues=27, release_empty=False):
        self.name = name
        self.max_bytes = max_bytes
        self.slice_bytes = int(slice_bytes)
        self.segment_slices = int(segment_bytes) // self.slice_bytes
        self.min_slices = int(min_slices)
        self.queues = int(queues)
        self.release_empty = bool(release_empty)
        # segment id -> [chunks in use, written-slice flags, free spans {start: length},
        #                free span ends {end: start}]
        self.segments = {}
        # span queues; the END of each list is its head (spans are pushed at the head)
        self.span_q = [[] for _ in range(self.queues)]
        self.touched = 0
        self._next_seg = 0

    def fresh(self) -> "SegmentZone":
        """An empty zone with the same parameters."""
        return SegmentZone(self.name, self.max_bytes, self.slice_bytes,
                           self.segment_slices * self.slice_bytes, self.min_slices,
                           self.queues, self.release_empty)

    def slices_for(self, nbytes: int) -> int:
        n = -(-nbytes // self.slice_bytes)
        return n if n > self.min_slices else self.min_slices

    # -- free spans ----------------------------------------------------------------------
    def _push(self, seg, start, length) -> None:
        s = self.segments[seg]
        s[2][start] = length
        s[3][start + length] = start
        self.span_q[_span_queue(length, self.queues)].append((seg, start))

    def _remove(self, seg, start) -> int:
        s = self.segments[seg]
        length = s[2].pop(start)
        del s[3][start + length]
        self.span_q[_span_queue(length, self.queues)].remove((seg, start))
        return length

    def _find(self, need):
        segments = self.segments
        for q in range(_span_queue(need, self.queues), self.queues):
            queue = self.span_q[q]
            for i in range(len(queue) - 1, -1, -1):
                seg, start = queue[i]
                if segments[seg][2][start] >= need:
                    return queue[i]
        return None

    # -- blocks --------------------------------------------------------------------------
    def alloc(self, nbytes: int):
        """Place one block of ``nbytes``; returns it as ``(segment, start, slices)``."""
        need = self.slices_for(nbytes)
        found = self._find(need)
        if found is None:
            # a new segment: one free span of all its slices, nothing resident yet
            seg = self._next_seg
            self._next_seg += 1
            self.segments[seg] = [0, bytearray(self.segment_slices), {}, {}]
            self._push(seg, 0, self.segment_slices)
            found = (seg, 0)
        seg, start = found
        length = self._remove(seg, start)
        if length > need:
            self._push(seg, start + need, length - need)
        s = self.segments[seg]
        s[0] += 1
        written = s[1]
        fresh = need - sum(written[start:start + need])
        if fresh:
            written[start:start + need] = b"\x01" * need
            self.touched += fresh
        return (seg, start, need)

    def free(self, block) -> None:
        """Return a block: coalesce with free neighbours; unmap an empty segment if allowed."""
        seg, start, length = block
        s = self.segments[seg]
        if start + length in s[2]:
            length += self._remove(seg, start + length)
        prev = s[3].get(start)
        if prev is not None:
            length += self._remove(seg, prev)
            start = prev
        s[0] -= 1
        if s[0] == 0 and self.release_empty:
            del self.segments[seg]
            self.touched -= sum(s[1])
            return
        self._push(seg, start, length)

    def resident_bytes(self) -> int:
        return self.touched * self.slice_bytes

    def state(self) -> tuple:
        """What fast-forward compares between iterations: the written slices and segments.

        The exact span layout is left out on purpose: a loop's placement settles
        into a short cycle of layouts (the same buffers land in alternating holes)
        whose union of written slices no longer grows, so an iteration that writes
        no new slice leaves RSS unchanged whichever layout of the cycle it ends in.
        """
        return (self.touched, len(self.segments))


class ClusterSegmentZone(SegmentZone):
    """LARGE placement split into one segment group per CPU cluster (xzone malloc).

    With ``CONFIG_XZM_CLUSTER_AWARE`` (set for macOS in libmalloc ``src/platform.h``)
    a general macOS process has ``ncpuclusters`` copies of every segment group
    (the enablement tests expect ``segment_group_count = ncpuclusters * (ids +
    fronts)``), and ``_xzm_segment_group_for_id_and_front`` (``xzone_malloc.c``)
    picks the copy of the cluster the allocating thread runs on at that moment
    (``_malloc_cpu_cluster_number``); a LARGE chunk is freed into the group that
    owns its segment (``_xzm_free_large_huge`` -> ``_xzm_segment_group_for_slice``).
    Each group has its own segments and span queues, so a loop whose thread runs on
    a second cluster builds a second resident copy of its transient working set.

    ``groups`` is the number of clusters; :meth:`set_group` says which one the
    thread runs on now (the caller's scheduling model: libmalloc does not decide
    it). A block is ``(group, segment, first slice, slices)``.

    >>> z = ClusterSegmentZone("large", 2 << 20, 16384, 4 << 20, groups=2)
    >>> a = z.alloc(1 << 20); z.free(a); z.set_group(1); b = z.alloc(1 << 20)
    >>> z.resident_bytes() // 1024    # the second cluster's group wrote its own MiB
    2048
    """

    __slots__ = ("groups", "current")

    def __init__(self, name, max_bytes, slice_bytes, segment_bytes, min_slices=2,
                 queues=27, release_empty=False, groups=1):
        super().__init__(name, max_bytes, slice_bytes, segment_bytes, min_slices, queues,
                         release_empty)
        self.groups = [SegmentZone(name, max_bytes, slice_bytes, segment_bytes, min_slices,
                                   queues, release_empty) for _ in range(int(groups))]
        self.current = 0

    def fresh(self) -> "ClusterSegmentZone":
        return ClusterSegmentZone(self.name, self.max_bytes, self.slice_bytes,
                                  self.segment_slices * self.slice_bytes, self.min_slices,
                                  self.queues, self.release_empty, len(self.groups))

    def set_group(self, index: int) -> None:
        """The cluster the allocating thread runs on from now on (modulo ``groups``)."""
        self.current = index % len(self.groups)

    def alloc(self, nbytes: int):
        g = self.current
        return (g,) + self.groups[g].alloc(nbytes)

    def free(self, block) -> None:
        self.groups[block[0]].free(block[1:])

    def resident_bytes(self) -> int:
        return sum(g.resident_bytes() for g in self.groups)

    def state(self) -> tuple:
        return (self.current,) + tuple(g.state() for g in self.groups)


#: Documented size classes of the two platform allocators the profiles use.
#: macOS (arm64, macOS 26+: xzone malloc): blocks up to 32 KiB keep the size classes
#: of the magazine allocator (libmalloc src/thresholds.h: tiny up to 1008 B in 16 B
#: quanta, small up to 32 KiB in 512 B quanta), retaining freed blocks; LARGE blocks
#: (32 KiB < n <= 2 MiB) are placed slice by slice in 4 MiB segments
#: (:class:`SegmentZone`); HUGE blocks (> 2 MiB) get a private segment each, mapped on
#: allocation and unmapped on free.
#: glibc ptmalloc2 (x86_64): chunks of request + 8 B header rounded to 16 B, at
#: least 32 B, from a retaining arena; requests at or above the mmap threshold
#: (128 KiB initially) are mmapped pages.
ALLOCATOR_CLASSES = {
    "macos": dict(
        page_bytes=16384,
        dynamic_mmap_threshold=False,
        zones=[
            # a 1 MiB tiny region holds 64,520 quanta of 16 B; an 8 MiB small region 16,319 x 512 B
            Zone("tiny", 1008, 16, overhead=1048576 / (64520 * 16)),
            Zone("small", 32768, 512, overhead=8388608 / (16319 * 512)),
            # xzone_malloc.h: XZM_SEGMENT_SLICE_SIZE 16 KiB, XZM_SEGMENT_SIZE 4 MiB,
            # XZM_LARGE_BLOCK_SIZE_MAX 2 MiB, XZM_SPAN_QUEUE_COUNT 27; xzone_segment.c
            # (xzm_segment_group_alloc_chunk): a one-slice LARGE chunk becomes two slices;
            # xzm_segment_group_free_chunk: only pure-data segment groups deallocate an
            # empty segment -- untyped malloc / posix_memalign (Rust's System allocator,
            # PyTorch's CPU allocator) carry no pure-data type descriptor
            # one segment group per CPU cluster (CONFIG_XZM_CLUSTER_AWARE, platform.h;
            # _xzm_segment_group_for_id_and_front): an M2 Max has 3 clusters (8 P-cores at
            # hw.perflevel0.cpusperl2 = 4 per L2, 4 E-cores in one). Nothing in the engine
            # moves the thread off cluster 0 yet (Allocator.set_cluster): which cluster runs
            # it when is the scheduler's choice, not libmalloc's (docs/known-gaps.md)
            ClusterSegmentZone("large", 2 * 1024 * 1024, 16384, 4 * 1024 * 1024,
                               min_slices=2, queues=27, release_empty=False, groups=3),
            Zone("huge", math.inf, 16384, retain=False),
        ],
    ),
    "glibc": dict(
        page_bytes=4096,
        dynamic_mmap_threshold=True,
        zones=[
            Zone("arena", 131071, 16, header=8, min_block=32),
            Zone("mmap", math.inf, 4096, header=16, retain=False),
        ],
    ),
    # glibc 2.36 placed chunk by chunk (sim.platform.ptmalloc): fragmentation, top trimming
    "glibc-arena": dict(page_bytes=4096, dynamic_mmap_threshold=False, zones=[], arena=True),
}


class Allocator:
    """Resident bytes of the platform allocator, fed with every heap event.

    Examples
    --------
    >>> a = Allocator.from_classes("macos")
    >>> a.alloc(1000); a.alloc(24); a.free(1000)
    >>> a.resident_bytes()   # the freed tiny block stays resident (plus region metadata)
    1056
    """

    __slots__ = ("zones", "live", "high", "page_bytes", "dynamic", "mmap_threshold", "_lookup",
                 "_segment_lookup",
                 "_placed", "_segmented", "_blocks", "_fault", "mark", "arena")

    def __init__(self, zones, page_bytes, dynamic_mmap_threshold=False, arena=False,
                 mallopt=None):
        # glibc placed address by address (sim.platform.ptmalloc): it takes every event;
        # ``mallopt``: its trim_threshold / mmap_threshold / top_pad settings (0: default)
        self.arena = PtmallocArena(page_bytes, **(mallopt or {})) if arena else None
        # placement zones keep state: each allocator gets its own
        self.zones = [z.fresh() if isinstance(z, SegmentZone) else z for z in zones]
        self._segmented = [isinstance(z, SegmentZone) for z in self.zones]
        self.page_bytes = int(page_bytes)
        self.dynamic = bool(dynamic_mmap_threshold)
        self.live = [0] * len(self.zones)
        self.high = [0] * len(self.zones)
        self.mmap_threshold = int(self.zones[0].max_bytes) + 1 if self.dynamic else 0
        # zone index and rounded size of every small request, precomputed
        self._lookup = {}
        # zone index and slice-rounded size of requests placed in a placement zone (a
        # separate map: the heap's fast path must hand these to alloc and free)
        self._segment_lookup = {}
        # zone of each live large block, by size (large placement can change over time)
        self._placed = {}
        # live blocks of placement zones by size (a free that names no block takes the newest)
        self._blocks = {}
        # per zone: the end of its resident pages (high-water rounded up to a page); inf
        # while nobody charges faults, so that the heap's fast path never calls fault_to
        self.mark = [math.inf] * len(self.zones)
        self.fault = None

    @property
    def fault(self):
        """Called with ``(bytes, mapped)`` whenever memory becomes resident for the first
        time (page faults): a retaining zone's high-water mark enters new pages, a
        placement zone writes new slices, or a non-retaining zone maps a block
        (``mapped=True``: its pages fault again after every unmap); None: not charged."""
        return self._fault

    @fault.setter
    def fault(self, callback):
        self._fault = callback
        if self.arena is not None:
            self.arena.fault = callback
        page = self.page_bytes
        for zi, high in enumerate(self.high):
            self.mark[zi] = math.inf if callback is None else -(-high // page) * page

    def fault_to(self, zi, high) -> None:
        """Zone ``zi``'s high-water mark rose to ``high`` past its resident pages."""
        page = self.page_bytes
        end = -(-high // page) * page
        self._fault(end - self.mark[zi])
        self.mark[zi] = end

    @classmethod
    def from_classes(cls, name: str, mallopt=None) -> "Allocator":
        """Allocator with one of the documented :data:`ALLOCATOR_CLASSES` (``mallopt``: the
        glibc arena's settings, see :class:`~sim.platform.ptmalloc.PtmallocArena`)."""
        spec = ALLOCATOR_CLASSES[name]
        return cls(spec["zones"], spec["page_bytes"], spec["dynamic_mmap_threshold"],
                   spec.get("arena", False), mallopt)

    def _place(self, nbytes: int):
        hit = self._lookup.get(nbytes)
        if hit is not None:
            return hit
        hit = self._segment_lookup.get(nbytes)
        if hit is not None:
            return hit
        if self.dynamic and nbytes < self.mmap_threshold:
            zi = 0
        elif self.dynamic:
            zi = len(self.zones) - 1
        else:
            zi = next(i for i, z in enumerate(self.zones) if nbytes <= z.max_bytes)
        zone = self.zones[zi]
        if self._segmented[zi]:
            # not in the heap's fast path: it must hand these to alloc/free
            hit = (zi, zone.slices_for(nbytes) * zone.slice_bytes)
            if not self.dynamic:
                self._segment_lookup[nbytes] = hit
            return hit
        hit = (zi, zone.rounded(nbytes))
        if zone.retain and 0 < nbytes < 65536:  # the heap's fast path: real blocks only
            self._lookup[nbytes] = hit
        return hit

    def alloc(self, nbytes: int, count: int = 1, align: int = 0):
        """Account ``count`` blocks of ``nbytes``; returns the (last) block of a placement zone
        (``align``: posix_memalign's alignment; only the glibc arena places by it)."""
        if self.arena is not None:
            if count == 1:
                return self.arena.alloc(nbytes, align)
            self.arena.alloc_many(nbytes, count)
            return None
        zi, size = self._place(nbytes)
        block = None
        fault = self.fault
        if self._segmented[zi]:
            zone = self.zones[zi]
            # live blocks in allocation order (a dict: a free by handle is O(1))
            live = self._blocks.setdefault(nbytes, {})
            before = zone.resident_bytes()
            for _ in range(count):
                block = zone.alloc(nbytes)
                live[block] = None
            if fault is not None and zone.resident_bytes() > before:
                fault(zone.resident_bytes() - before)
            fault = None
        elif nbytes >= 65536:
            self._placed.setdefault(nbytes, []).extend([(zi, size)] * count)
        live = self.live[zi] + size * count
        self.live[zi] = live
        if fault is not None and not self.zones[zi].retain:
            fault(size * count, True)   # freshly mapped pages, faulted on first write
            fault = None
        if live > self.high[zi]:
            self.high[zi] = live
            if fault is not None and live > self.mark[zi]:
                self.fault_to(zi, live)
        return block

    def free(self, nbytes: int, count: int = 1, block=None) -> None:
        """Free ``count`` blocks of ``nbytes``; ``block`` names the one :meth:`alloc` returned."""
        if self.arena is not None:
            if count == 1:
                self.arena.free(block, nbytes)
            else:
                self.arena.free_many(nbytes, count)
            return
        placed = self._blocks.get(nbytes)
        if placed:
            zi, size = self._place(nbytes)
            zone = self.zones[zi]
            for _ in range(count):
                if block is not None and block in placed:
                    del placed[block]
                    zone.free(block)
                    block = None
                else:
                    # by size, or a named block an earlier free by size took already: this
                    # free takes the block that one really meant (the newest left), as
                    # PtmallocArena.free does
                    block = None
                    zone.free(placed.popitem()[0])   # the newest block of that size
            self.live[zi] -= size * count
            return
        if nbytes >= 65536:
            for _ in range(count):
                zi, size = self._placed[nbytes].pop()
                self._unmap(zi, size)
            return
        zi, size = self._place(nbytes)
        self.live[zi] -= size * count

    def _unmap(self, zi, size) -> None:
        self.live[zi] -= size
        if self.dynamic and not self.zones[zi].retain:
            # glibc: freeing an mmapped chunk raises the threshold to its size
            self.mmap_threshold = min(max(self.mmap_threshold, size + 1), 32 * 1024 * 1024)
            self._lookup.clear()

    def bulk_exact(self) -> bool:
        """Whether blocks may be allocated (and later freed) size by size in bulk: not in a
        glibc arena, where the order of single requests and frees sets the addresses,
        which chunks the tcache and fastbins keep, and so the layout later requests find
        (fast-forward then replays those loops' events one iteration at a time)."""
        return self.arena is None

    def set_cluster(self, index: int) -> None:
        """The CPU cluster the (single) allocating thread runs on from now on: per-cluster
        placement zones (:class:`ClusterSegmentZone`) serve its next blocks from that
        cluster's segment group. No-op for allocators without such zones."""
        for zone in self.zones:
            if isinstance(zone, ClusterSegmentZone):
                zone.set_group(index)

    def resident_bytes(self) -> int:
        """Bytes resident because of the heap (retained high-water, placed slices, mapped blocks)."""
        if self.arena is not None:
            return self.arena.resident_bytes()
        total = 0
        for zone, live, high, placed in zip(self.zones, self.live, self.high, self._segmented):
            if placed:
                total += zone.resident_bytes()
            else:
                total += high * zone.overhead if zone.retain else live
        return int(total)

    def state(self) -> tuple:
        """Counters that fast-forward may extrapolate, and the placement of placement zones."""
        if self.arena is not None:
            return self.arena.state()
        return tuple(self.live) + tuple(self.high) + self.placement()

    def cluster(self) -> tuple:
        """The CPU cluster each cluster-aware placement zone allocates on now (what a
        workload's :meth:`set_cluster` changes)."""
        return tuple(z.current for z in self.zones if isinstance(z, ClusterSegmentZone))

    def placement(self) -> tuple:
        """The placement zones' state (written slices, segments, the cluster the thread
        runs on); ``()`` for a glibc arena, whose placement fast-forward replays."""
        if self.arena is not None:
            return ()
        return tuple(z.state() for z, p in zip(self.zones, self._segmented) if p)


#: B, Linux's fault-around window (mm/memory.c ``fault_around_pages``, 64 KiB by default): a
#: read fault on a file mapping maps the window's pages that the page cache holds, so a code
#: path's text comes in by one fault per 64 KiB, not one per page   [source]
FAULT_AROUND_BYTES = 64 << 10

#: Code paths of the program binary whose text pages the first execution faults in (the
#: profile's ``[code]`` table gives the resident bytes of each; ``<path>_bytes``):
#: ``device`` creating the CPU device, ``module`` building an nn module, ``creation`` a
#: tensor from data or a random fill, ``elementwise`` / ``matmul`` / ``reduce`` the CPU
#: backend's kernels (binary, unary and scalar ops / gemm / sum and mean), ``gemv``
#: gemm's matrix-vector kernels, which a matmul whose gemm has one row or one column runs
#: besides gemm's dispatch (a single-row forward: ``sim.burn.backend.gemm_is_gemv``),
#: ``autodiff`` registering a step with the graph client, ``backward`` building and
#: running a tape, ``optimizer`` an SGD step.
CODE_PATHS = ("device", "module", "creation", "elementwise", "matmul", "gemv", "reduce",
              "autodiff", "backward", "optimizer")


class TouchedPages:
    """Memory made resident once by its first use and never released (bytes).

    Two kinds, both outside the heap allocator's accounting:

    * **text**: the binary's code is mapped from its file and faulted in the first time a
      code path runs, one fault per window of :data:`FAULT_AROUND_BYTES` (Linux maps the
      window's pages from the page cache: no zero-fill); clean file pages stay resident
      while the process lives. ``touch_code(path)`` adds the path's bytes once per process
      and passes them to ``text_fault``.
    * **written buffers**: pages of a big mapping that the program writes (gemm's thread-local
      L2 slab: only the packed-lhs prefix is ever written). ``touch_buffer(key, nbytes)``
      keeps the largest written extent per buffer (already resident pages stay).

    >>> t = TouchedPages({"matmul": 65536})
    >>> t.touch_code("matmul"); t.touch_code("matmul"); t.touch_buffer("slab", 8192)
    >>> t.touch_buffer("slab", 4096); (t.text_bytes(), t.resident_bytes())
    (65536, 73728)
    """

    __slots__ = ("path_bytes", "paths", "buffers", "text", "written", "fault", "text_fault")

    def __init__(self, path_bytes):
        self.path_bytes = {k: int(v) for k, v in path_bytes.items()}
        self.paths = set()
        self.buffers = {}
        self.text = 0
        self.written = 0
        # called with the bytes that become resident (written buffers: zero-fill page
        # faults; text: fault-around read faults); None: not charged
        self.fault = None
        self.text_fault = None

    def touch_code(self, path: str) -> None:
        """Code path ``path`` runs: its text becomes resident the first time."""
        if path not in self.paths:
            self.touch_text(path, self.path_bytes[path])

    def touch_text(self, key, nbytes: int) -> None:
        """``nbytes`` of a file mapping's pages (``key``: a code path, or any other mapped
        file) are read for the first time: resident from now on, once per key."""
        if key not in self.paths:
            self.paths.add(key)
            self.text += nbytes
            if self.text_fault is not None and nbytes > 0:
                self.text_fault(nbytes)

    def touch_buffer(self, key, nbytes: int) -> None:
        """``nbytes`` from the start of buffer ``key`` have been written (page-rounded by the caller)."""
        old = self.buffers.get(key, 0)
        if nbytes > old:
            self.buffers[key] = nbytes
            self.written += nbytes - old
            if self.fault is not None:
                self.fault(nbytes - old)

    def text_bytes(self) -> int:
        return self.text

    def resident_bytes(self) -> int:
        return self.text + self.written

    def state(self) -> tuple:
        """What fast-forward compares: an iteration that touches new pages is not batched."""
        return (self.text, self.written)
