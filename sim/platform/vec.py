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

__all__ = ["RustVec", "CapacityOneVecs", "min_non_zero_cap"]


def min_non_zero_cap(elem_bytes: int) -> int:
    """``RawVec::MIN_NON_ZERO_CAP`` for elements of ``elem_bytes``."""
    return 8 if elem_bytes == 1 else 4 if elem_bytes <= 1024 else 1


class RustVec:
    """One vector's heap block on ``heap``: its length, capacity and block handle.

    Examples
    --------
    >>> from sim.platform.heap import Heap
    >>> from sim.platform.rss import Allocator
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


class CapacityOneVecs:
    """``count`` vectors made by ``Vec::with_capacity(1)`` one after the other (burn's
    tape: one per depth ``0..=root depth``), pushed to by index, dropped from the last
    down (each depth's once its steps ran).

    A long chain (an EMA) gives a tape of thousands of depths, most without a step. Where
    the allocator keeps counts per size (not a glibc arena:
    :attr:`~sim.platform.heap.Heap.orders_frees`), the blocks are allocated together and the empty depths' blocks freed in runs
    (:meth:`Heap.alloc_many`/:meth:`Heap.free_many`: the same events, in O(1)); on an
    arena each ``Vec`` is its own block, as addresses depend on every event
    (``batched``: force either way; by default batched where the allocator allows)."""

    __slots__ = ("heap", "each", "pushed", "_next", "_order", "_at")

    #: bytes of one slot: a ``StepBoxed`` (a fat pointer)
    SLOT_BYTES = 16

    def __init__(self, heap, count: int, batched: bool = None):
        self.heap = heap
        self._next = count - 1       # the deepest depth not dropped yet
        if batched is None:
            batched = not heap.orders_frees
        if batched:
            self.each = None
            heap.alloc_many(self.SLOT_BYTES, count)
        else:
            self.each = [RustVec(heap, self.SLOT_BYTES, capacity=1, length=0)
                         for _ in range(count)]
        self.pushed = {}             # depth -> RustVec, for the depths a step went into
        self._order = None
        self._at = 0

    def push(self, depth: int) -> None:
        """A step goes into ``depth``'s ``Vec``."""
        if self.each is not None:
            self.each[depth].push()
            return
        vec = self.pushed.get(depth)
        if vec is None:
            vec = self.pushed[depth] = RustVec.allocated(self.heap, self.SLOT_BYTES, 1)
        vec.push()

    def drop_to(self, depth: int) -> None:
        """Drop the ``Vec`` s from the deepest one not dropped yet down to ``depth``."""
        if self.each is not None:
            for d in range(self._next, depth - 1, -1):
                self.each[d].drop()
        else:
            if self._order is None:           # the depths with a step, deepest first
                self._order = sorted(self.pushed, reverse=True)
            order, i, top = self._order, self._at, self._next
            while i < len(order) and order[i] >= depth:
                pushed = order[i]
                self.heap.free_many(self.SLOT_BYTES, top - pushed)   # the empty ones above
                self.pushed[pushed].drop()
                top = pushed - 1
                i += 1
            self.heap.free_many(self.SLOT_BYTES, top - depth + 1)
            self._at = i
        self._next = depth - 1
