"""Allocation model of Rust's ``Vec<T>`` (``alloc::raw_vec::RawVec``).

A vector owns one heap block of ``capacity * size_of::<T>()`` bytes, none while its
capacity is 0. The rules modelled (Rust 1.8x ``raw_vec.rs``):

* ``Vec::new()`` allocates nothing; ``Vec::with_capacity(n)`` allocates ``n`` slots;
* a push past the capacity grows it to ``max(2 * capacity, needed, MIN_NON_ZERO_CAP)``
  slots, where ``MIN_NON_ZERO_CAP`` is 8 for 1-byte elements, 4 up to 1 KiB, else 1,
  and the block is ``realloc``'d (the first growth of an empty vector allocates);
* ``collect`` of an iterator without an exact size (a ``filter``) allocates its first
  block when the first item comes: ``max(MIN_NON_ZERO_CAP, lower bound + 1)`` slots,
  which for a lower bound of 0 is what a first ``push`` does (so such a collect is a
  run of pushes);
* a vector never shrinks unless asked; dropping it frees the block.

Units: bytes.
"""

from __future__ import annotations

__all__ = ["RustVec", "min_non_zero_cap"]


def min_non_zero_cap(elem_bytes: int) -> int:
    """``RawVec::MIN_NON_ZERO_CAP`` for elements of ``elem_bytes``."""
    return 8 if elem_bytes == 1 else 4 if elem_bytes <= 1024 else 1


class RustVec:
    """One vector's heap block on ``heap``: its length, capacity and block handle.

    Examples
    --------
    >>> from sim.costs.heap import Heap
    >>> from sim.costs.rss import Allocator
    >>> heap = Heap(Allocator.from_classes("glibc"))
    >>> v = RustVec(heap, 8, capacity=1)         # vec![id]
    >>> v.push(); v.capacity, heap.live_bytes    # the second push reallocates to 4 slots
    (4, 32)
    >>> v.drop(); heap.live_bytes
    0
    """

    __slots__ = ("heap", "elem", "len", "capacity", "block")

    def __init__(self, heap, elem_bytes: int, capacity: int = 0, length: int = None):
        self.heap = heap
        self.elem = elem_bytes
        self.capacity = capacity
        self.len = capacity if length is None else length
        self.block = heap.alloc(capacity * elem_bytes) if capacity else None

    @classmethod
    def allocated(cls, heap, elem_bytes: int, capacity: int) -> "RustVec":
        """An empty vector of ``capacity`` slots whose block the caller already allocated
        on ``heap`` (one of a run taken with :meth:`Heap.alloc_many`: no handle)."""
        vec = cls(heap, elem_bytes)
        vec.capacity = capacity
        return vec

    def push(self, n: int = 1) -> None:
        """``n`` more items (``push`` one by one, or one ``extend_from_slice`` of ``n``)."""
        needed = self.len + n
        if needed > self.capacity:
            self.grow_to(max(2 * self.capacity, needed, min_non_zero_cap(self.elem)))
        self.len = needed

    def push_each(self, n: int) -> None:
        """``n`` pushes one by one: each growth past the capacity a ``realloc`` (in
        O(log n))."""
        while n > 0:
            room = self.capacity - self.len
            if room <= 0:
                self.grow_to(max(2 * self.capacity, self.len + 1,
                                 min_non_zero_cap(self.elem)))
                continue
            step = min(room, n)
            self.len += step
            n -= step

    def grow_to(self, capacity: int) -> None:
        """Reallocate the block for ``capacity`` slots."""
        old = self.capacity * self.elem
        self.block = self.heap.realloc(old, capacity * self.elem, self.block)
        self.capacity = capacity

    def drop(self) -> None:
        """Free the block (the vector is dropped)."""
        if self.capacity:
            self.heap.free(self.capacity * self.elem, self.block)
        self.capacity = 0
        self.block = None
