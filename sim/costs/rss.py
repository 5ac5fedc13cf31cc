"""Resident memory of the host heap: the platform allocator's size classes.

The counting allocator (:mod:`sim.costs.heap`) sees requested sizes. What the
operating system sees (RSS) depends on how the platform allocator serves them:

* each request is rounded up to its **zone**'s quantum (plus a per-block header
  where the allocator keeps one, and a minimum block size);
* zones that **retain** freed blocks (macOS tiny/small/medium magazines, glibc's
  main arena) keep the freed memory resident for reuse: their resident bytes are
  the high-water mark of their live rounded bytes, so RSS does not fall after a
  backward frees the bookkeeping;
* zones that do not retain (macOS large allocations, glibc mmapped chunks) are
  mapped on allocation and unmapped on free, rounded to pages.

glibc raises its mmap threshold to the size of a freed mmapped chunk (dynamic
threshold, up to 32 MiB): after the first large tensor is freed, later tensors of
that size are served from the retained arena. ``dynamic_mmap_threshold`` models it.

All sizes are bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Zone", "Allocator", "ALLOCATOR_CLASSES"]


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


#: Documented size classes of the two platform allocators the profiles use.
#: macOS libmalloc (magazine malloc, arm64, macOS 13+): tiny up to 1008 B in 16 B
#: quanta, small up to 32 KiB in 512 B quanta, medium up to 8 MiB in 32 KiB quanta,
#: all three retaining freed blocks; larger requests are vm_allocate'd pages.
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
            Zone("medium", 8 * 1024 * 1024, 32768),
            Zone("large", math.inf, 16384, retain=False),
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
                 "_placed")

    def __init__(self, zones, page_bytes, dynamic_mmap_threshold=False):
        self.zones = list(zones)
        self.page_bytes = int(page_bytes)
        self.dynamic = bool(dynamic_mmap_threshold)
        self.live = [0] * len(self.zones)
        self.high = [0] * len(self.zones)
        self.mmap_threshold = int(self.zones[0].max_bytes) + 1 if self.dynamic else 0
        # zone index and rounded size of every small request, precomputed
        self._lookup = {}
        # zone of each live large block, by size (large placement can change over time)
        self._placed = {}

    @classmethod
    def from_classes(cls, name: str) -> "Allocator":
        """Allocator with one of the documented :data:`ALLOCATOR_CLASSES`."""
        spec = ALLOCATOR_CLASSES[name]
        return cls(spec["zones"], spec["page_bytes"], spec["dynamic_mmap_threshold"])

    def _place(self, nbytes: int):
        hit = self._lookup.get(nbytes)
        if hit is not None:
            return hit
        if self.dynamic and nbytes < self.mmap_threshold:
            zi = 0
        elif self.dynamic:
            zi = len(self.zones) - 1
        else:
            zi = next(i for i, z in enumerate(self.zones) if nbytes <= z.max_bytes)
        hit = (zi, self.zones[zi].rounded(nbytes))
        if self.zones[zi].retain and nbytes < 65536:
            self._lookup[nbytes] = hit
        return hit

    def alloc(self, nbytes: int, count: int = 1) -> None:
        zi, size = self._place(nbytes)
        if nbytes >= 65536:
            self._placed.setdefault(nbytes, []).extend([(zi, size)] * count)
        live = self.live[zi] + size * count
        self.live[zi] = live
        if live > self.high[zi]:
            self.high[zi] = live

    def free(self, nbytes: int, count: int = 1) -> None:
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

    def resident_bytes(self) -> int:
        """Bytes resident because of the heap (retained high-water plus mapped blocks)."""
        total = 0
        for zone, live, high in zip(self.zones, self.live, self.high):
            total += high * zone.overhead if zone.retain else live
        return int(total)

    def state(self) -> tuple:
        """Counters that fast-forward may extrapolate."""
        return tuple(self.live) + tuple(self.high)
