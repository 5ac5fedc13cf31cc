"""Allocation model of Rust's hash tables (hashbrown, as in std's HashMap/HashSet).

A table owns one heap block holding its slots and control bytes. The rules
modelled here are hashbrown 0.15/0.16's (``src/raw/mod.rs``):

* an empty table owns no block; the first insert allocates 4 buckets;
* a table of ``b`` buckets holds ``b - 1`` items below 8 buckets, ``b / 8 * 7``
  from 8 buckets up;
* growing picks the next power of two of ``capacity * 8 / 7`` (4 or 8 or 16
  buckets below 15 items), allocates the new block, then frees the old one;
* the block is ``round_up(buckets * slot, ctrl_align) + buckets + GROUP_WIDTH``
  bytes, with ``ctrl_align = max(align_of(slot), GROUP_WIDTH)``; GROUP_WIDTH is
  16 on x86_64 (SSE2 groups) and 8 on aarch64 (NEON groups);
* removing items and ``clear()`` never shrink the block;
* ``insert`` reserves room for one more item before it looks the key up
  (``find_or_find_insert_slot``), so inserting a key that is already there into a
  full table grows it all the same (:meth:`RawTable.reinsert`).

Time: growing moves every item the table holds into the new block (each key hashed
again, its slot found, the slot copied: ``RawTableInner::resize``); the heap's
``rehash`` callback, when set (:meth:`sim.engine.simulation.Simulation.rehash`, a
profile with ``[time] rehash_item_ns``), is charged the items each growth moves. A
table grown one insert at a time is full when it grows: it moves its capacity.

Approximation: an erased slot is assumed to become EMPTY (not a tombstone), so
capacity is freed by removals; hashbrown leaves a tombstone only when the probe
group around the slot is full, which at these loads is rare.
"""

from __future__ import annotations

__all__ = ["TableLayout", "RawTable", "TableTap", "capacity_of", "buckets_for"]


def capacity_of(buckets: int) -> int:
    """Items a table of ``buckets`` buckets holds before it must grow."""
    if buckets == 0:
        return 0
    return buckets - 1 if buckets < 8 else buckets // 8 * 7


def buckets_for(capacity: int) -> int:
    """Buckets hashbrown allocates to hold ``capacity`` items (slots of 2 B or more)."""
    if capacity < 15:
        capacity = max(capacity, 3)
        return 4 if capacity < 4 else 8 if capacity < 8 else 16
    return 1 << ((capacity * 8 // 7) - 1).bit_length()


class TableLayout:
    """Slot size and alignment of one table type on one platform.

    Examples
    --------
    >>> TableLayout(8, 8, group_width=8).block_bytes(4)     # HashSet<NodeId>, aarch64
    44
    >>> TableLayout(8, 8, group_width=16).block_bytes(4)    # same on x86_64
    52
    """

    __slots__ = ("slot_bytes", "ctrl_align", "group_width", "_cache", "first_bytes")

    def __init__(self, slot_bytes: int, slot_align: int, group_width: int):
        self.slot_bytes = slot_bytes
        self.ctrl_align = max(slot_align, group_width)
        self.group_width = group_width
        self._cache = {}
        #: the block of a table's first insert (4 buckets)
        self.first_bytes = self.block_bytes(4)

    def block_bytes(self, buckets: int) -> int:
        """Size in bytes of the one block of a table with ``buckets`` buckets."""
        if buckets == 0:
            return 0
        nbytes = self._cache.get(buckets)
        if nbytes is None:
            a = self.ctrl_align
            ctrl_offset = -(-(self.slot_bytes * buckets) // a) * a
            nbytes = self._cache[buckets] = ctrl_offset + buckets + self.group_width
        return nbytes


class TableTap:
    """What a tapped table (:attr:`RawTable.tap`) tells: ``asked(table, items)``, the items
    each of its calls asks room for (an insert, a reserve), before the table acts. A table
    with no tap pays one attribute test per call."""

    __slots__ = ()

    def asked(self, table, items) -> None:
        pass


class RawTable:
    """Allocation state of one hash table; its contents live in a Python container.

    Call :meth:`fit` after an insert with the container's new length, and
    :meth:`reserve` where Rust calls ``reserve`` (``extend`` of a merge).

    Examples
    --------
    >>> from sim.platform.heap import Heap
    >>> from sim.platform.rss import Allocator
    >>> heap = Heap(Allocator.from_classes("glibc"))
    >>> t = RawTable(TableLayout(8, 8, 16), heap)
    >>> for n in range(1, 8): t.fit(n)
    >>> t.buckets, heap.live_blocks, heap.live_bytes
    (8, 1, 88)
    """

    __slots__ = ("layout", "heap", "buckets", "cap", "nbytes", "named", "block", "born", "tap")

    def __init__(self, layout: TableLayout, heap, named: bool = False):
        self.layout = layout
        self.heap = heap
        #: ``(heap live bytes, items)`` when a graph's ``nodes`` table was first read by an
        #: orphan sweep (:meth:`sim.platform.timing.Timing.sweep_live`: the TLB model), else None
        self.born = None
        self.buckets = 0
        self.cap = 0
        #: bytes of the table's block (0 when it owns none)
        self.nbytes = 0
        #: whether frees name the block (the allocator's handle, :attr:`block`; a run of
        #: dead graphs frees its members' tables' blocks by these: :mod:`sim.burn.graph.runs`)
        self.named = named
        self.block = None
        #: a :class:`TableTap` told the items each call asks room for, or None (fast-forward
        #: sets one while it watches an iteration: how high its count went,
        #: :class:`sim.engine.fastforward.chainrun.TableWatch`)
        self.tap = None

    def fit(self, items: int) -> None:
        """Grow if ``items`` no longer fit (one insert: grow to at least cap + 1)."""
        if self.tap is not None:
            self.tap.asked(self, items)
        if items > self.cap:
            if self.buckets == 0 and items <= 3:
                # the first insert into an empty table: 4 buckets (the common case)
                nbytes = self.nbytes = self.layout.first_bytes
                block = self.heap.alloc(nbytes)
                if self.named:
                    self.block = block
                self.buckets, self.cap = 4, 3
                return
            # one insert into a full table: its ``cap`` items move (items > cap here)
            self._resize(max(items, self.cap + 1), self.cap)

    def took_first(self, block) -> None:
        """The state :meth:`fit` leaves after the first insert into this empty table, whose
        block (``block``: its handle) was allocated already: a graph whose server is built
        after its first registration (:class:`sim.burn.runtime.graph.SingleNodeGraph`)."""
        self.nbytes = self.layout.first_bytes
        self.buckets, self.cap = 4, 3
        if self.named:
            self.block = block

    def reinsert(self, items: int) -> None:
        """An ``insert`` of a key already among the table's ``items``: hashbrown reserves
        one slot first, so a full table grows (to the next size), though no item is added."""
        if self.tap is not None:
            self.tap.asked(self, items + 1)
        if items >= self.cap:
            self._resize(max(items + 1, self.cap + 1), items)

    def grow_to(self, items: int) -> None:
        """Grow as ``items`` one-by-one inserts into this table would."""
        if self.tap is not None:
            self.tap.asked(self, items)
        while items > self.cap:
            self._resize(self.cap + 1, self.cap)

    def reserve(self, items: int, additional: int) -> None:
        """hashbrown ``reserve(additional)`` on a table currently holding ``items``."""
        if self.tap is not None:
            self.tap.asked(self, items + additional)
        if additional > self.cap - items:
            self._resize(max(items + additional, self.cap + 1), items)

    def _resize(self, capacity: int, moved: int = 0) -> None:
        """Grow to hold ``capacity`` items: the new block, ``moved`` items rehashed into it
        (charged to the heap's ``rehash`` callback), the old block freed."""
        buckets = buckets_for(capacity)
        old = self.nbytes
        nbytes = self.nbytes = self.layout.block_bytes(buckets)
        block = self.heap.alloc(nbytes)
        if old:
            if moved:
                rehash = getattr(self.heap, "rehash", None)
                if rehash is not None:
                    rehash(moved)
            self.heap.free(old, self.block)
        if self.named:
            self.block = block
        self.buckets = buckets
        self.cap = capacity_of(buckets)

    def clone(self) -> "RawTable":
        """hashbrown's ``Clone`` of this table (of ``Copy`` slots): a new table with a block
        of the same bucket count (none when this one owns none), whatever its length."""
        copy = RawTable(self.layout, self.heap, self.named)
        if self.buckets:
            copy.buckets, copy.cap, copy.nbytes = self.buckets, self.cap, self.nbytes
            block = self.heap.alloc(self.nbytes)
            if self.named:
                copy.block = block
        return copy

    def drop(self) -> None:
        """Free the block (the table itself is dropped)."""
        if self.buckets:
            self.heap.free(self.nbytes, self.block)
            self.buckets = 0
            self.cap = 0
            self.nbytes = 0
            self.block = None
