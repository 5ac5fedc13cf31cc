"""Host heap: a counting allocator plus the platform allocator's residency.

Every allocation and free that the simulated bookkeeping makes goes through
:class:`Heap`, the simulated counterpart of the counting ``#[global_allocator]``
used by the seed programs: it keeps **live bytes** and **live blocks** exactly
as that allocator would report them (requested sizes, not rounded ones).

Residency (what RSS sees) is delegated to an :class:`~sim.costs.rss.Allocator`
model, which rounds each request to the platform allocator's size classes and
keeps freed small blocks for reuse.

Units: bytes and blocks (one block = one successful ``alloc`` call).
"""

from __future__ import annotations

__all__ = ["Heap"]


class Heap:
    """Live bytes and blocks of the host heap, and its resident footprint.

    Parameters
    ----------
    allocator : sim.costs.rss.Allocator
        Size-class model of the platform allocator; receives every event.

    Examples
    --------
    >>> from sim.costs.rss import Allocator
    >>> heap = Heap(Allocator.from_classes("glibc"))
    >>> heap.alloc(24); heap.alloc(100); heap.free(24)
    >>> heap.live_bytes, heap.live_blocks
    (100, 1)
    """

    __slots__ = ("live_bytes", "live_blocks", "peak_bytes", "allocs", "allocator")

    def __init__(self, allocator):
        self.live_bytes = 0
        self.live_blocks = 0
        self.peak_bytes = 0
        self.allocs = 0
        self.allocator = allocator

    def alloc(self, nbytes: int) -> None:
        """Allocate one block of ``nbytes`` (zero-sized requests allocate nothing)."""
        if nbytes <= 0:
            return
        self.live_bytes += nbytes
        self.live_blocks += 1
        self.allocs += 1
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
        self.allocator.alloc(nbytes)

    def free(self, nbytes: int) -> None:
        """Free one block previously allocated with the same ``nbytes``."""
        if nbytes <= 0:
            return
        self.live_bytes -= nbytes
        self.live_blocks -= 1
        self.allocator.free(nbytes)

    def realloc(self, old_nbytes: int, new_nbytes: int) -> None:
        """Replace a block by one of another size (a hash-table resize: alloc new, free old)."""
        self.alloc(new_nbytes)
        self.free(old_nbytes)
