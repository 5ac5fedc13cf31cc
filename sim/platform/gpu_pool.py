"""GPU memory pool: cubecl 0.11.3's memory management, as burn 0.22.1 uses it through
wgpu (Metal on macOS, Vulkan here); see docs/burn-notes/gpu-pool.md.

Mirrored from the released crates (paraphrased; class and method names are cubecl's):

* cubecl-wgpu ``runtime.rs`` (``create_server``): the device's memory properties are
  ``max_page_size = min(max_storage_buffer_binding_size, max_buffer_size)`` and
  ``alignment = max(min_uniform_buffer_offset_alignment,
  min_storage_buffer_offset_alignment)``; burn-cubecl's allocations go through
  cubecl-server ``allocator.rs`` (``ContiguousMemoryLayoutPolicy``), which asks the pool
  for the tensor's bytes rounded up to that alignment.
* cubecl-wgpu ``compute/mem_manager.rs``: a stream has a main memory (the ``Adaptive``
  layout) and two auxiliary ones, staging (buffers a read maps) and uniforms (launch
  metadata), both ``ExclusivePages``. A device's usage is the sum over all three.
* cubecl-server ``memory_management/memory_manage.rs`` (:class:`MemoryManagement`):
  every reservation first runs a periodic cleanup, then goes to the persistent pool
  while a persistent window is open (lazily initialised parameters), else to the
  dynamic pools; ``memory_cleanup`` is an explicit cleanup.
* ``dynamic/adaptive.rs`` (:class:`AdaptiveMemory`): zero-byte allocations have a pool
  of their own; up to 64 KiB are sliced out of 8 MiB pages (the small pool, which
  never takes a larger allocation); everything else goes to the arena.
* ``dynamic/arena.rs`` (:class:`PoolArena`, :class:`PageSizing`): the arena carves
  pages of one size, starting at 2 MiB; an allocation that does not fit one (padded)
  makes a new pool of ``roundup(size + 1 MiB, 1 MiB)`` pages the current one, and the
  old pool is outdated: it serves nothing new and gives each page back at the first
  reservation or cleanup after it empties.
* ``memory_pool/sliced_pool.rs``, ``memory_page.rs`` (:class:`SlicedPool`,
  :class:`MemoryPage`): first fit over the pages in order and, within a page, over its
  slices in address order; each page is coalesced (runs of two or more free slices
  merged) right before it is searched. A free slice keeps the size of the last
  allocation it held (its padding is not reusable until it is merged), and a reused
  slice's old padding is dropped from the page's accounting.
* ``memory_pool/persistent_pool.rs`` (:class:`PersistentPool`): one buffer per
  allocation, reused only for an allocation of the same padded size.
* ``dynamic/exclusive.rs``, ``memory_pool/exclusive_pool.rs`` (:class:`ExclusivePools`,
  :class:`ExclusiveMemoryPool`): one buffer per allocation in 24 log-spaced size
  buckets; a new buffer is the larger of the request and a running mean of the sizes
  the bucket was asked for; free buffers go back after sitting out five periodic
  checks, or at an explicit cleanup.

``bytes_in_use`` is the sum of live allocations' requested bytes (padding apart), and
``bytes_reserved`` the sum of every slice's size plus padding over all pools: a page's
bytes, less the padding a reuse dropped.

* cubecl-wgpu ``compute/stream.rs`` (``info_uniform``), cubecl-server
  ``metadata_cache.rs`` (:class:`MetadataInfoCache`): each launch's metadata words go in
  a uniform buffer of the uniform memory, cached by the words (512 entries, least
  recently used evicted, infos over 2048 B not cached); ``memory_cleanup`` clears the
  cache and cleans the uniform memory explicitly (``server.rs`` ``memory_cleanup``,
  ``mem_manager.rs`` ``cleanup_uniforms``). Which words a launch stages:
  :mod:`sim.platform.kernels`.
* cubecl-server ``relocation/streams.rs`` (``reclaim``), ``dynamic/arena.rs`` (``plan``,
  ``commit``): ``memory_cleanup`` first relocates live slices off outdated pages into
  the current pool's free room (:meth:`PoolArena.relocate`).

Not modelled: relocation for other reasons (memory pressure, which needs a device that
states its capacity, which WebGPU does not; the arena's 64 slots filling: the model
stops with an error there instead; graph capture), guarded pages, lazy page mapping
(dry runs), pinned cache entries (graph capture). Units: bytes.
"""

from __future__ import annotations

import math

__all__ = ["MemoryPool", "MemoryManagement", "MemoryDeviceProperties", "AdaptiveMemory",
           "PoolArena", "PageSizing", "SlicedPool", "MemoryPage", "Slice", "PersistentPool",
           "ExclusivePools", "ExclusiveMemoryPool", "MetadataInfoCache", "padding"]

MiB = 1024 * 1024

# dynamic/adaptive.rs
SMALL_PAGE = 8 * MiB
SMALL_SLICE = 64 * 1024
MIN_PAGE = 2 * MiB
# dynamic/arena.rs
ARENA_SLOTS = 64
PAGE_SLACK = MiB
PAGE_GRANULE = MiB
# dynamic/exclusive.rs
MIN_BUCKET_SIZE = 32 * 1024
MAX_BUCKETS = 24
BASE_DEALLOC_PERIOD = 5000
DEALLOC_SCALE = 1024 ** 3
# memory_pool/exclusive_pool.rs
SIZE_AVG_DECAY = 0.01
ALLOC_AFTER_FREE = 5
# wgpu::COPY_BUFFER_ALIGNMENT: a read's staging copy is a multiple of 4 bytes
COPY_BUFFER_ALIGNMENT = 4


def padding(size: int, alignment: int) -> int:
    """``calculate_padding``: bytes that round ``size`` up to a multiple of ``alignment``."""
    return -size % alignment


def next_multiple_of(size: int, unit: int) -> int:
    return -(-size // unit) * unit


class MemoryDeviceProperties:
    """What cubecl reads of an adapter: the largest page and the alignment (cubecl-ir
    ``MemoryDeviceProperties``, filled by cubecl-wgpu ``runtime.rs`` from the limits)."""

    def __init__(self, max_page_size: int, alignment: int):
        if max_page_size <= 0 or alignment <= 0:
            raise ValueError("max_page_size and alignment must be positive")
        self.max_page_size = int(max_page_size)
        self.alignment = int(alignment)

    @classmethod
    def from_limits(cls, max_storage_buffer_binding_size, max_buffer_size,
                    min_uniform_buffer_offset_alignment, min_storage_buffer_offset_alignment):
        """cubecl-wgpu ``runtime.rs``: the page is the smaller of the two buffer limits, the
        alignment the larger of the two offset alignments."""
        return cls(min(int(max_storage_buffer_binding_size), int(max_buffer_size)),
                   max(int(min_uniform_buffer_offset_alignment),
                       int(min_storage_buffer_offset_alignment)))


class Slice:
    """A range of a page (or a whole buffer): ``size`` requested bytes, then ``padding``.
    ``live`` while a handle to it is held (cubecl: the handle is not free)."""

    __slots__ = ("offset", "size", "padding", "live")

    def __init__(self, offset, size, padding=0):
        self.offset = offset
        self.size = size
        self.padding = padding
        self.live = False

    @property
    def effective_size(self) -> int:
        return self.size + self.padding

    def key(self):
        return (self.offset, self.size, self.padding, self.live)


class MemoryPage:
    """One page of a :class:`SlicedPool` (``memory_page.rs``): slices in address order,
    starting as one free slice of the whole page."""

    __slots__ = ("size", "alignment", "slices")

    def __init__(self, size, alignment):
        self.size = size
        self.alignment = alignment
        self.slices = [Slice(0, size)]

    def is_empty(self) -> bool:
        return not any(s.live for s in self.slices)

    def try_reserve(self, size):
        """First free slice whose (last-held) size holds ``size`` padded: it becomes the
        allocation, the rest of it a new free slice right after (its old padding is
        dropped)."""
        pad = padding(size, self.alignment)
        effective = size + pad
        for index, slice_ in enumerate(self.slices):
            if slice_.live or slice_.size < effective:
                continue
            rest = slice_.size - effective
            slice_.size, slice_.padding, slice_.live = size, pad, True
            if rest > 0:
                self.slices.insert(index + 1, Slice(slice_.offset + effective, rest))
            return slice_
        return None

    def coalesce(self) -> None:
        """Merge every run of two or more adjacent free slices into one free slice of
        their summed sizes and paddings (``MemoryPage::coalesce``)."""
        merged, run = [], []
        for slice_ in self.slices + [None]:
            if slice_ is not None and not slice_.live:
                run.append(slice_)
                continue
            if len(run) >= 2:
                merged.append(Slice(run[0].offset, sum(s.effective_size for s in run)))
            else:
                merged.extend(run)
            run = []
            if slice_ is not None:
                merged.append(slice_)
        self.slices = merged

    def usage(self):
        """``(allocations, bytes in use, padding, reserved)``: reserved is the slices' sum."""
        live = [s for s in self.slices if s.live]
        return (len(live), sum(s.size for s in live), sum(s.padding for s in live),
                sum(s.effective_size for s in self.slices))

    def state(self):
        return tuple(s.key() for s in self.slices)


class SlicedPool:
    """Pages of one size carved into slices (``sliced_pool.rs``)."""

    def __init__(self, page_size, max_slice_size, alignment, near_page_size=True):
        self.page_size = page_size
        self.max_slice_size = min(max_slice_size, page_size)
        self.near_page_size = near_page_size
        self.alignment = alignment
        self.pages = []
        self.pages_peak = 0

    def accept(self, size) -> bool:
        """Up to the largest slice, or (unless :meth:`up_to_max_slice`) within 20 % of a
        page."""
        if self.max_slice_size >= size:
            return True
        return self.near_page_size and size <= self.page_size and \
            (self.page_size - size) * 5 < self.page_size

    def try_reserve(self, size):
        """``reserve_free``: coalesce each page, then first fit, page by page."""
        for page in self.pages:
            page.coalesce()
            slice_ = page.try_reserve(size)
            if slice_ is not None:
                return slice_
        return None

    def alloc(self, size):
        """A new page, the allocation at its start."""
        page = MemoryPage(self.page_size, self.alignment)
        self.pages.append(page)
        self.pages_peak = max(self.pages_peak, len(self.pages))
        return page.try_reserve(size)

    def reserve(self, size):
        slice_ = self.try_reserve(size)
        return slice_ if slice_ is not None else self.alloc(size)

    def release_empty(self) -> None:
        """Coalesce every page and give the empty ones back."""
        kept = []
        for page in self.pages:
            page.coalesce()
            if not page.is_empty():
                kept.append(page)
        self.pages = kept

    def cleanup(self, explicit) -> None:
        if explicit:
            self.release_empty()

    def usage(self):
        return _sum_usage(page.usage() for page in self.pages)

    def state(self):
        return (self.page_size, tuple(page.state() for page in self.pages))


class PageSizing:
    """How the arena's pages are sized (``arena.rs``): from ``min_page_size`` up to the
    device's largest page, alignment-rounded down."""

    def __init__(self, min_page_size, properties: MemoryDeviceProperties):
        a = properties.alignment
        self.alignment = a
        self.max_page_size = max(properties.max_page_size // a * a, a)
        self.min_page_size = min(next_multiple_of(max(min_page_size, a), a), self.max_page_size)

    def fit(self, size, page_size):
        """``None`` when a page of ``page_size`` holds ``size`` padded, else the size of
        the pages to grow to; :class:`ValueError` when no page the device allocates
        does (cubecl: ``BufferTooBig``)."""
        needed = size + padding(size, self.alignment)
        if needed <= page_size:
            return None
        if needed > self.max_page_size:
            raise ValueError(f"allocation of {size} B exceeds the device's largest page "
                             f"({self.max_page_size} B)")
        grown = next_multiple_of(next_multiple_of(size + PAGE_SLACK, PAGE_GRANULE),
                                 self.alignment)
        return min(max(grown, self.min_page_size), self.max_page_size)

    def pool(self, page_size) -> SlicedPool:
        return SlicedPool(page_size, page_size, self.alignment)


class PoolArena:
    """The pools the arena grew through (``arena.rs``): the current one carves, the
    outdated ones only drain."""

    def __init__(self, sizing: PageSizing):
        self.sizing = sizing
        self.current = sizing.pool(sizing.min_page_size)
        self.outdated = []

    def reserve(self, size):
        grow = self.sizing.fit(size, self.current.page_size)
        if grow is None:
            return self.current.reserve(size)
        if len(self.outdated) + 1 >= ARENA_SLOTS:
            raise ValueError("the arena has no slot left for another page size")
        pool = self.sizing.pool(grow)
        slice_ = pool.alloc(size)
        self.outdated.append(self.current)
        self.current = pool
        return slice_

    def cleanup(self, explicit) -> None:
        self.current.cleanup(explicit)
        self.drain()

    def relocate(self) -> None:
        """An explicit relocation (``arena.rs`` ``plan``, ``plan_move``, ``commit``;
        ``relocation/analysis.rs``): the outdated pages holding live slices, fewest live
        bytes first, each emptied into the current pool's free room (``TargetRoom::Held``:
        no new page) only if every slice on it finds a target; a page that cannot be
        emptied gives its targets back. Each moved allocation keeps its handle (the
        tensor's) at its new place; the emptied pages go at the drain that follows."""
        pages = [page for pool in self.outdated for page in pool.pages
                 if not page.is_empty()]
        pages.sort(key=lambda page: sum(s.size for s in page.slices if s.live))
        moves = []
        for page in pages:
            planned = []
            for slice_ in [s for s in page.slices if s.live]:
                target = self.current.try_reserve(slice_.size)
                if target is None:
                    break
                planned.append((page, slice_, target))
            else:
                moves.extend(planned)
                continue
            for _, _, target in planned:
                target.live = False
        if not moves:
            return
        for page, source, target in moves:
            _hand_over(page, source, self.current, target)
        self.drain()

    def drain(self) -> None:
        """Outdated pools give back every empty page; a pool with none left goes."""
        kept = []
        for pool in self.outdated:
            pool.release_empty()
            if pool.pages:
                kept.append(pool)
        self.outdated = kept

    def usage(self):
        return _sum_usage([self.current.usage()] + [p.usage() for p in self.outdated])

    def report(self):
        return [(self.current.page_size, len(self.current.pages))] + [
            (p.page_size, len(p.pages)) for p in self.outdated]

    def state(self):
        return (self.current.state(), tuple(p.state() for p in self.outdated))


class ExclusiveMemoryPool:
    """One buffer per allocation (``exclusive_pool.rs``), for sizes up to
    ``max_alloc_size``."""

    def __init__(self, max_alloc_size, alignment, dealloc_period):
        self.max_alloc_size = max_alloc_size
        self.alignment = alignment
        self.dealloc_period = dealloc_period
        self.last_dealloc_check = 0
        self.cur_avg_size = max_alloc_size / 2.0
        self.pages = []          # [slice, alloc_size, free_count]
        self.pages_peak = 0

    def accept(self, size) -> bool:
        return self.max_alloc_size >= size

    def try_reserve(self, size):
        """Every ask moves the running mean; a free buffer large enough, the one with the
        fewest free counts first, is reused."""
        self.cur_avg_size = self.cur_avg_size * (1.0 - SIZE_AVG_DECAY) + size * SIZE_AVG_DECAY
        free = [p for p in self.pages if p[1] >= size and not p[0].live]
        if not free:
            return None
        page = min(free, key=lambda p: p[2])    # min_by_key: the first of the least
        slice_ = page[0]
        slice_.size, slice_.padding, slice_.live = size, padding(size, self.alignment), True
        page[2] = max(page[2] - 1, 0)
        return slice_

    def alloc(self, size):
        alloc_size = next_multiple_of(max(int(self.cur_avg_size), size), self.alignment)
        slice_ = Slice(0, size, padding(size, self.alignment))
        slice_.live = True
        self.pages.append([slice_, alloc_size, ALLOC_AFTER_FREE - 1])
        self.pages_peak = max(self.pages_peak, len(self.pages))
        return slice_

    def cleanup(self, alloc_nr, explicit) -> None:
        check_period = self.dealloc_period // ALLOC_AFTER_FREE
        if not explicit and alloc_nr - self.last_dealloc_check < check_period:
            return
        self.last_dealloc_check = alloc_nr
        kept = []
        for page in self.pages:
            if not page[0].live:
                page[2] += 1
                if page[2] >= ALLOC_AFTER_FREE or explicit:
                    continue
            kept.append(page)
        self.pages = kept

    def usage(self):
        live = [p[0] for p in self.pages if p[0].live]
        return (len(live), sum(s.size for s in live), sum(s.padding for s in live),
                sum(p[1] for p in self.pages))

    def state(self):
        return (self.cur_avg_size, self.last_dealloc_check, self.layout())

    def layout(self):
        return tuple((p[0].key(), p[1], p[2]) for p in self.pages)


def bucket_sizes(max_size, alignment):
    """``dynamic/exclusive.rs``: 24 sizes log-spaced from 32 KiB to ``max_size``, each
    rounded up to the alignment, repeats dropped."""
    log_min = math.log(MIN_BUCKET_SIZE)
    log_range = math.log(max_size) - log_min
    sizes = []
    for index in range(MAX_BUCKETS):
        position = index / (MAX_BUCKETS - 1)
        size = next_multiple_of(int(math.exp(log_min + log_range * position)), alignment)
        if not sizes or sizes[-1] != size:
            sizes.append(size)
    return sizes


class ExclusivePools:
    """The ``ExclusivePages`` layout: a bucket per size, each an
    :class:`ExclusiveMemoryPool` (``dynamic/exclusive.rs``)."""

    def __init__(self, properties: MemoryDeviceProperties):
        self.buckets = []
        for size in bucket_sizes(properties.max_page_size, properties.alignment):
            period = int(BASE_DEALLOC_PERIOD * _round_half_away(1.0 + size / DEALLOC_SCALE))
            self.buckets.append(ExclusiveMemoryPool(size, properties.alignment, period))

    def try_reserve(self, size):
        for pool in self.buckets:
            if pool.accept(size):
                slice_ = pool.try_reserve(size)
                if slice_ is not None:
                    return slice_
        return None

    def reserve(self, size):
        slice_ = self.try_reserve(size)
        if slice_ is not None:
            return slice_
        for pool in self.buckets:
            if pool.accept(size):
                return pool.alloc(size)
        raise ValueError(f"allocation of {size} B exceeds the device's largest page")

    def cleanup(self, alloc_nr, explicit) -> None:
        for pool in self.buckets:
            pool.cleanup(alloc_nr, explicit)

    def usage(self):
        return _sum_usage(pool.usage() for pool in self.buckets)

    def state(self):
        return tuple(pool.state() for pool in self.buckets)

    def layout(self):
        return tuple(pool.layout() for pool in self.buckets)


class AdaptiveMemory:
    """The ``Adaptive`` layout (``dynamic/adaptive.rs``): zero-byte, small, arena."""

    def __init__(self, properties: MemoryDeviceProperties):
        a = properties.alignment
        self.tiny = ExclusiveMemoryPool(0, a, 2 ** 64 - 1)
        self.small = SlicedPool(next_multiple_of(SMALL_PAGE, a), next_multiple_of(SMALL_SLICE, a),
                                a, near_page_size=False)
        self.arena = PoolArena(PageSizing(min(MIN_PAGE, properties.max_page_size), properties))

    def reserve(self, size):
        if self.tiny.accept(size):
            slice_ = self.tiny.try_reserve(size)
            return slice_ if slice_ is not None else self.tiny.alloc(size)
        if self.small.accept(size):
            return self.small.reserve(size)
        return self.arena.reserve(size)

    def cleanup(self, alloc_nr, explicit) -> None:
        self.tiny.cleanup(alloc_nr, explicit)
        self.small.cleanup(explicit)
        self.arena.cleanup(explicit)

    def usage(self):
        return _sum_usage([self.tiny.usage(), self.small.usage(), self.arena.usage()])

    def report(self):
        """``(page size, pages)`` of each page-carving pool in routing order: small, the
        arena's current pool, the outdated ones (burn's ``memory_pool_report``)."""
        return [(self.small.page_size, len(self.small.pages))] + self.arena.report()

    def state(self):
        return (self.tiny.state(), self.small.state(), self.arena.state())

    def layout(self):
        return (self.tiny.layout(), self.small.state(), self.arena.state())


class PersistentPool:
    """Buffers of exactly one allocation each (``persistent_pool.rs``), indexed by the
    padded size they were made for; a reuse takes the first free one of that size and
    keeps its padding as it was (only the requested bytes change)."""

    def __init__(self, alignment):
        self.alignment = alignment
        self.slices = []          # [slice, padded size it is indexed by]

    def try_reserve(self, size):
        effective = size + padding(size, self.alignment)
        for slice_, key in self.slices:
            if key == effective and not slice_.live:
                slice_.size, slice_.live = size, True
                return slice_
        return None

    def alloc(self, size):
        slice_ = Slice(0, size, padding(size, self.alignment))
        slice_.live = True
        self.slices.append([slice_, slice_.effective_size])
        return slice_

    def cleanup(self, explicit) -> None:
        """An explicit cleanup frees the free buffers and re-indexes the rest by their
        present size and padding."""
        if explicit:
            self.slices = [[s, s.effective_size] for s, _ in self.slices if s.live]

    def usage(self):
        live = [s for s, _ in self.slices if s.live]
        return (len(live), sum(s.size for s in live), sum(s.padding for s in live),
                sum(s.effective_size for s, _ in self.slices))

    def state(self):
        return tuple((s.key(), key) for s, key in self.slices)


class MemoryManagement:
    """One memory of a stream (``memory_manage.rs``): the persistent pool and the dynamic
    pools (``adaptive`` or exclusive pages)."""

    def __init__(self, properties: MemoryDeviceProperties, adaptive=True):
        self.persistent = PersistentPool(properties.alignment)
        self.pools = AdaptiveMemory(properties) if adaptive else ExclusivePools(properties)
        self.alloc_reserve_count = 0

    def cleanup(self, explicit) -> None:
        self.persistent.cleanup(explicit)
        self.pools.cleanup(self.alloc_reserve_count, explicit)

    def relocate(self) -> None:
        """``relocate`` with ``RelocationReason::Explicit`` (``memory_manage.rs``): only the
        adaptive layout has outdated pages to empty."""
        if isinstance(self.pools, AdaptiveMemory):
            self.pools.arena.relocate()

    def reserve(self, size, persistent=False):
        """``reserve`` with ``PageUpdate::Allow``: a periodic cleanup, then the
        persistent pool (same-size reuse first) in a persistent window, else the
        dynamic pools."""
        self.cleanup(False)
        self.alloc_reserve_count += 1
        if persistent:
            slice_ = self.persistent.try_reserve(size)
            return slice_ if slice_ is not None else self.persistent.alloc(size)
        return self.pools.reserve(size)

    def usage(self):
        return _sum_usage([self.persistent.usage(), self.pools.usage()])

    def state(self):
        return (self.alloc_reserve_count, self.persistent.state(), self.pools.state())

    def layout(self):
        """:meth:`state` without the counters and running means."""
        return (self.persistent.state(), self.pools.layout())


#: cubecl-wgpu ``compute/stream.rs``: each stream's info cache is
#: ``MetadataCachePolicy::new(512, 2048)``
INFO_CACHE_ENTRIES = 512
INFO_CACHE_MAX_BYTES = 2048


class MetadataInfoCache:
    """A stream's cache of launch-metadata uniforms (cubecl-server ``metadata_cache.rs``,
    outside graph capture): keyed by the info words alone (two launches of different
    kernels with equal words share a buffer); an info of more than ``max_bytes`` is not
    cached; a store into a full cache first evicts the least recently used entry, whose
    buffer goes back to the uniform memory."""

    def __init__(self, max_entries=INFO_CACHE_ENTRIES, max_bytes=INFO_CACHE_MAX_BYTES):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.entries = {}        # words -> [slice, last use]
        self.clock = 0

    def should_cache(self, nbytes) -> bool:
        return self.max_entries > 0 and nbytes <= self.max_bytes

    def get(self, words):
        """``get``: the entry's buffer (its last use now), or None; every call ticks."""
        self.clock += 1
        entry = self.entries.get(words)
        if entry is None:
            return None
        entry[1] = self.clock
        return entry[0]

    def insert(self, words, slice_) -> None:
        if len(self.entries) >= self.max_entries:
            victim = min(self.entries, key=lambda k: self.entries[k][1])
            self.entries.pop(victim)[0].live = False
        self.entries[words] = [slice_, self.clock]

    def clear_unpinned(self) -> None:
        """Explicit cleanup: no entry is pinned (no captured graph), so all go."""
        for slice_, _ in self.entries.values():
            slice_.live = False
        self.entries = {}

    def state(self):
        return frozenset(self.entries)


class MemoryPool:
    """A wgpu device's memories as burn sees them (cubecl-wgpu ``mem_manager.rs``): the
    main memory every tensor lives in, the staging memory reads map, and the uniform
    memory holding each launch's metadata (through the stream's
    :class:`MetadataInfoCache`).

    ``persistent_window`` > 0 while burn initialises parameters lazily
    (``memory_persistent_allocations``): their buffers go to the persistent pool.

    Examples
    --------
    >>> pool = MemoryPool(alignment=256, max_page_size=256 * MiB)
    >>> a = pool.alloc(524_288); b = pool.alloc(4)
    >>> pool.bytes_in_use, pool.bytes_reserved
    (524544, 10485760)
    >>> pool.free(a); pool.bytes_in_use
    256
    """

    def __init__(self, alignment=256, max_page_size=256 * MiB):
        self.properties = MemoryDeviceProperties(max_page_size, alignment)
        self.alignment = self.properties.alignment
        self.main = MemoryManagement(self.properties)
        self.staging = MemoryManagement(self.properties, adaptive=False)
        self.uniforms = MemoryManagement(self.properties, adaptive=False)
        self.info_cache = MetadataInfoCache()
        self.persistent_window = 0

    def rounded(self, nbytes: int) -> int:
        """The bytes ``ContiguousMemoryLayoutPolicy`` asks for: a multiple of the alignment."""
        return next_multiple_of(int(nbytes), self.alignment)

    def alloc(self, nbytes: int):
        """Reserve a tensor buffer of ``nbytes``; returns the handle :meth:`free` takes."""
        return self.main.reserve(self.rounded(nbytes), persistent=self.persistent_window > 0)

    def free(self, handle) -> None:
        """The buffer's last handle dropped: its slice is free at once."""
        handle.live = False

    def read(self, nbytes: int) -> None:
        """A read back to the host (``into_scalar``, ``into_data``): a staging buffer of the
        bytes rounded to 4 is reserved, mapped and dropped (cubecl-wgpu ``stream.rs``
        ``read_resources``)."""
        if nbytes > 0:
            self.free(self.staging.reserve(next_multiple_of(int(nbytes), COPY_BUFFER_ALIGNMENT)))

    def launch(self, words) -> None:
        """A kernel launch whose metadata is ``words`` (u64s; :mod:`sim.platform.kernels`):
        cubecl-wgpu ``stream.rs`` ``info_uniform``. No info, no uniform; a cached info
        reuses its buffer; a miss reserves one of ``8 * len(words)`` bytes in the uniform
        memory and keeps it in the cache; an info too large to cache gets a uniform
        (``create_uniform``) that the next submit releases, before any snapshot."""
        if not words:
            return
        nbytes = 8 * len(words)
        cache = self.info_cache
        if not cache.should_cache(nbytes):
            self.free(self.uniforms.reserve(nbytes))
            return
        if cache.get(words) is not None:
            return
        cache.insert(words, self.uniforms.reserve(nbytes))

    def memory_cleanup(self) -> None:
        """``Device::memory_cleanup`` (cubecl-wgpu ``server.rs`` ``memory_cleanup``): the
        info cache drops every entry, then cubecl-server ``relocation/streams.rs``
        ``reclaim``: a relocation off the outdated arena pages into room already held
        (:meth:`PoolArena.relocate`), then the stream's ``cleanup_memory``, an explicit
        cleanup of the main memory and of the uniform memory (the staging memory is left
        to its periodic checks)."""
        self.info_cache.clear_unpinned()
        self.main.relocate()
        self.main.cleanup(True)
        self.uniforms.cleanup(True)

    def usage(self):
        """``(allocations, bytes in use, padding, reserved)`` over the memories."""
        return _sum_usage([self.main.usage(), self.staging.usage(), self.uniforms.usage()])

    @property
    def bytes_in_use(self) -> int:
        """Live allocations' bytes (as requested: a multiple of the alignment)."""
        return self.usage()[1]

    @property
    def bytes_reserved(self) -> int:
        """Every pool's slices, free ones included, the staging and uniform buffers."""
        return self.usage()[3]

    @property
    def bytes_padding(self) -> int:
        return self.usage()[2]

    def report(self):
        """``(page size, pages)`` per page-carving pool, as ``memory_pool_report``."""
        return self.main.pools.report()

    def state(self) -> tuple:
        """What :meth:`alloc`, :meth:`free` and :meth:`read` change that a later
        allocation's place depends on (fast-forward compares it between iterations):
        every page, slice and buffer, live or free, and each staging buffer's free count.

        Left out, so that a loop reading one scalar per iteration repeats: the
        reservation counters and the staging buckets' running means. A skipped iteration
        does not advance them, which changes nothing a loop that reuses its buffers can
        see: the running mean sizes only a staging buffer made later, and the counters
        time the staging memory's periodic release of buffers five checks unused. The
        info cache enters by its keys, not its clock: recency decides only which entry
        goes when 512 are held, and a loop whose launches all hit adds none."""
        return (self.main.layout(), self.staging.layout(), self.uniforms.layout(),
                self.info_cache.state(), self.persistent_window)


def _hand_over(page, source, pool, target) -> None:
    """``hand_over``: the live ``source`` object (the handle its owner holds) takes
    ``target``'s place in ``pool``; a free slice of its size and padding stays on ``page``
    where it was."""
    index = page.slices.index(source)
    page.slices[index] = Slice(source.offset, source.size, source.padding)
    for candidate in pool.pages:
        if target in candidate.slices:
            at = candidate.slices.index(target)
            source.offset, source.padding = target.offset, target.padding
            candidate.slices[at] = source
            return


def _sum_usage(usages):
    total = [0, 0, 0, 0]
    for usage in usages:
        for i in range(4):
            total[i] += usage[i]
    return tuple(total)


def _round_half_away(x: float) -> float:
    """Rust's ``f64::round``: halves away from zero (Python's ``round`` goes to even)."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)
