"""GPU memory pool (cubecl 0.11.3 memory management, as burn 0.22.1 uses it on
wgpu/Metal; see docs/burn-notes/gpu-pool.md).

* Every tensor buffer is rounded up to the device alignment (256 B on Metal)
  before it reaches the pool; ``bytes_in_use`` is the sum of live rounded sizes.
* Requests up to 64 KiB are sliced out of 8 MiB pages (the small pool); larger
  ones out of the arena, whose pages start at 2 MiB and, when a request does not
  fit, grow to ``roundup(size + 1 MiB, 1 MiB)``.
* Allocations made while a persistent window is open (lazily initialised
  parameters) go to the persistent pool: one exact-size buffer each.
* A buffer is free the moment its last handle drops; ``bytes_reserved`` (whole
  pages) never shrinks without an explicit cleanup.

Reserved bytes are modelled as pages needed for the high-water mark of each
pool's live bytes (first-fit slicing with coalescing is approximated by perfect
packing within a page size). Units: bytes.
"""

from __future__ import annotations

__all__ = ["MemoryPool"]

MiB = 1024 * 1024


class MemoryPool:
    """Live and reserved bytes of one device's pools.

    Examples
    --------
    >>> pool = MemoryPool(alignment=256)
    >>> a = pool.alloc(524_288); b = pool.alloc(4)
    >>> pool.bytes_in_use
    524544
    >>> pool.free(*a); pool.bytes_in_use
    256
    """

    def __init__(self, alignment=256, small_max=64 * 1024, small_page=8 * MiB, arena_page=2 * MiB):
        self.alignment = int(alignment)
        self.small_max = int(small_max)
        self.small_page = int(small_page)
        self.arena_page = int(arena_page)
        self.live = {"small": 0, "arena": 0, "persistent": 0}
        self.high = {"small": 0, "arena": 0, "persistent": 0}
        self.persistent_window = 0
        self.count = 0

    def rounded(self, nbytes: int) -> int:
        a = self.alignment
        return max(a, -(-nbytes // a) * a)

    def alloc(self, nbytes: int):
        """Reserve a buffer; returns ``(pool name, rounded bytes)`` for :meth:`free`."""
        size = self.rounded(nbytes)
        if self.persistent_window:
            name = "persistent"
        elif size <= self.small_max:
            name = "small"
        else:
            name = "arena"
            while size + self.alignment > self.arena_page:
                self.arena_page = -(-(size + MiB) // MiB) * MiB
        live = self.live[name] + size
        self.live[name] = live
        if live > self.high[name]:
            self.high[name] = live
        self.count += 1
        return name, size

    def free(self, name: str, size: int) -> None:
        self.live[name] -= size
        self.count -= 1

    def state(self) -> tuple:
        """Everything :meth:`alloc` and :meth:`free` change (fast-forward compares it
        between iterations)."""
        return (tuple(self.live.values()), tuple(self.high.values()), self.count,
                self.arena_page, self.persistent_window)

    @property
    def bytes_in_use(self) -> int:
        """Sum of the live buffers' (rounded) sizes, all pools."""
        return sum(self.live.values())

    @property
    def bytes_reserved(self) -> int:
        """Pages held by the pools (a high-water mark)."""
        small = -(-self.high["small"] // self.small_page) * self.small_page
        arena = -(-self.high["arena"] // self.arena_page) * self.arena_page
        return small + arena + self.high["persistent"]
