"""Which tensor buffers sit in the core's L2 cache: an LRU of buffer memory.

The time model charges an elementwise op ``bytes / gbps`` at one bandwidth
(``[backend.<kind>] gbps``, the L2-resident rate). A CPU streaming kernel is
that fast only while its operands are in the core's L2; an operand whose lines
were evicted since it was last touched streams from L3/DRAM at ``gbps_miss``.
Which one depends on what the ops in between touched: p10-ema's ``ema-only``
loop touches three 1-MiB buffers per step (``ema``, ``w``, the temporary
``w * 0.01``), 3 MiB > a 2-MiB L2, so under LRU every operand has been evicted
by the time it is read again; adleak's 256-KiB ``a + b`` stays resident.

Model (:class:`L2Cache`):

* the unit is a **chunk**: the memory of one tensor buffer
  (:class:`sim.burn.backend.Buffer`), ``nbytes`` bytes, resident or not as a whole;
* an LRU list of chunks with a capacity in bytes (the L2 size): an op *touches*
  its input buffers, then its output buffer (most recently used last), and the
  least recently used chunks are evicted until the resident bytes fit;
* a chunk's bytes are charged at the miss rate when it is not resident at the
  op's start; an in-place output is its input's chunk, so it shares its fate
  (the write hits the lines the read brought in, the write-back is the cost);
* **allocator reuse**: a freed buffer's chunk stays in the LRU (its lines are
  still cached) and goes on a free list by size; a new buffer of the same size
  takes the most recently freed chunk (LIFO, as glibc's bins and top chunk and
  libmalloc hand back the block just freed), inheriting its residency. A new
  buffer of a size with no freed chunk gets a fresh chunk, not resident
  (a write-allocate miss).

Only the elementwise ops that go through :meth:`sim.burn.backend.Backend.output`
(forward ops and the optimizer's update) touch the LRU; the backward's gradient
buffers are not modelled. Deterministic: no randomness, no addresses; the state
depends only on the sequence of ops and frees.

Units: bytes.
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict

import numpy as np

from .compiled import adopt_compiled

__all__ = ["Chunk", "L2Cache", "set_miss_fraction", "set_miss_fraction_array", "hierarchy_read_ns",
           "hierarchy_read_ns_array", "TlbMissCurve", "TlbLayoutCurves", "touched_pages",
           "sweep_tlb_point"]


class Chunk:
    """The memory of one buffer (``nbytes`` B); identity is the LRU key."""

    __slots__ = ("nbytes", "cache", "__weakref__")

    def __init__(self, nbytes, cache):
        self.nbytes = nbytes
        self.cache = cache

    def release(self) -> None:
        """The buffer holding this chunk was freed: the allocator keeps the memory."""
        self.cache.free.setdefault(self.nbytes, []).append(self)


class L2Cache:
    """LRU residency of buffer chunks in an L2 of ``capacity`` bytes.

    Examples
    --------
    >>> c = L2Cache(2 << 20)
    >>> a, b, t = c.claim(1 << 20), c.claim(1 << 20), c.claim(1 << 20)
    >>> c.touch((a,)), c.touch((b,)), c.touch((t,))      # fresh chunks miss
    (1048576, 1048576, 1048576)
    >>> c.touch((a,))                                   # evicted by t (3 MiB > 2 MiB)
    1048576
    >>> c.touch((t,))                                   # still resident
    0
    """

    __slots__ = ("capacity", "lru", "resident", "free", "hits", "misses")

    def __init__(self, capacity):
        if capacity <= 0:
            raise ValueError(f"L2 capacity must be positive, got {capacity}")
        self.capacity = int(capacity)
        self.lru = OrderedDict()   # chunk -> None, least recently used first
        self.resident = 0          # bytes of the chunks in ``lru``
        self.free = {}             # nbytes -> freed chunks, most recent last
        self.hits = 0              # bytes charged at the L2 rate
        self.misses = 0            # bytes charged at the miss rate

    def claim(self, nbytes) -> Chunk:
        """The chunk a new buffer of ``nbytes`` gets: the last one freed at that size, or
        a fresh one."""
        stack = self.free.get(nbytes)
        if stack:
            return stack.pop()
        return Chunk(nbytes, self)

    def touch(self, chunks) -> int:
        """An op reads/writes ``chunks`` (in order; a chunk listed twice, as an in-place
        op's input and output, is charged twice but held once): returns the bytes
        not resident at the op's start, then makes them the most recently used."""
        lru = self.lru
        missed = 0
        for c in chunks:
            if c in lru:
                self.hits += c.nbytes
            else:
                missed += c.nbytes
        self.misses += missed
        for c in chunks:
            if c in lru:
                lru.move_to_end(c)
            else:
                lru[c] = None
                self.resident += c.nbytes
        while self.resident > self.capacity and lru:
            old, _ = lru.popitem(last=False)
            self.resident -= old.nbytes
        return missed


def set_miss_fraction(nbytes, capacity, ways) -> float:
    """Fraction of the reads of a repeatedly read working set of ``nbytes`` B that miss a
    ``ways``-way set-associative cache of ``capacity`` B (the orphan sweep's model,
    :meth:`sim.platform.timing.Timing.sweep`).

    The sweep re-reads the same structures over and over (every locator entry of a
    graph re-reads the graph's scan prefix), a cyclic access pattern. Under LRU within
    a set, a set that holds at most ``ways`` of the working set's lines always hits and
    a set that gets more misses on every read of all of them. Lines land in sets by
    physical address, i.e. by 4-KiB page placed anywhere, so the number of lines in a
    set is taken as Poisson with mean ``lam = ways * nbytes / capacity``; the fraction
    of reads that go to overfull sets is ``E[X; X > ways] / E[X] = P(Poisson(lam) >=
    ways)``. No fitted parameter: ``capacity`` and ``ways`` come from the CPU
    (sysfs ``cache/index2/size``, ``ways_of_associativity``). With 16 ways the fraction
    is 0.008 at half the capacity, 0.16 at 3/4, 0.53 at the capacity and 0.97 at 1.5x.

    Examples
    --------
    >>> round(set_miss_fraction(1 << 20, 2 << 20, 16), 3)
    0.008
    >>> round(set_miss_fraction(2 << 20, 2 << 20, 16), 3)
    0.533
    >>> set_miss_fraction(0, 2 << 20, 16), set_miss_fraction(1 << 20, 0, 16)
    (0.0, 0.0)
    """
    if nbytes <= 0 or capacity <= 0 or ways <= 0:
        return 0.0
    lam = ways * nbytes / capacity
    if lam > 50.0 * ways:
        return 1.0
    term = math.exp(-lam)
    below = term
    for j in range(1, int(ways)):
        term *= lam / j
        below += term
    return min(1.0, max(0.0, 1.0 - below))


def set_miss_fraction_array(nbytes, capacity, ways):
    """:func:`set_miss_fraction` of each of ``nbytes`` (a float64 array) at once, with the
    same floating-point operations in the same order, so each element is bit for bit the
    scalar function's (``math.exp`` per element: numpy's own ``exp`` may round
    otherwise). Fast-forward charges a batch's orphan sweeps with it
    (:meth:`sim.platform.timing.Timing.sweep_ns_many`).

    Examples
    --------
    >>> import numpy as np
    >>> xs = [0.0, 1 << 18, 1 << 20, 3 << 19, 2 << 20, 1 << 30]
    >>> got = set_miss_fraction_array(np.array(xs, dtype=float), 2 << 20, 16).tolist()
    >>> got == [set_miss_fraction(x, 2 << 20, 16) for x in xs]
    True
    """
    if capacity <= 0 or ways <= 0:
        return np.zeros(len(nbytes))
    lam = ways * nbytes / capacity
    exp = math.exp
    # a level the set cannot miss (no bytes) or always misses is not read off the sum
    lam_exp = np.where((nbytes <= 0) | (lam > 50.0 * ways), 0.0, lam)
    term = np.array(list(map(exp, (-lam_exp).tolist())), dtype=float)
    below = term
    for j in range(1, int(ways)):
        term = term * (lam / j)
        below = below + term
    out = 1.0 - below
    out = np.where(out > 0.0, out, 0.0)
    out = np.where(out < 1.0, out, 1.0)
    out = np.where(lam > 50.0 * ways, 1.0, out)
    return np.where(nbytes <= 0, 0.0, out)


def hierarchy_read_ns_array(nbytes, levels):
    """:func:`hierarchy_read_ns` of each of ``nbytes`` (a float64 array), element by element
    equal to it (the levels' terms summed in the same order)."""
    total = None
    for capacity, ways, ns in levels:
        if ns:
            term = ns * set_miss_fraction_array(nbytes, capacity, ways)
            total = term if total is None else total + term
    return np.zeros(len(nbytes)) if total is None else total


def page_set_miss_fraction(nbytes, capacity, ways, reads_per_page=1.0) -> float:
    """Fraction of the reads of a repeatedly read working set of ``nbytes`` B of pages (pages
    read x page size) that miss a ``ways``-way data TLB whose entries reach ``capacity`` B,
    from the TLB's size alone (LRU within a set): the orphan sweep's TLB model where the
    profile has no measured miss curve (:class:`TlbMissCurve`; none of the committed
    profiles with a TLB lacks one); ``reads_per_page``: how many of the working set's reads
    fall on each page per pass.

    Unlike a cache's, a TLB's set is chosen by the virtual page number, and the pages of one
    heap are consecutive: they spread evenly, ``m = ways * nbytes / capacity`` to a set, so
    that nothing misses until the pages outgrow the reach. A set holding ``q > ways`` pages
    is read in a fixed cycle (every pass reads the same keys in the same hash order), each
    page ``r = reads_per_page`` times at random places in the cycle. A read hits under LRU
    when fewer than ``ways`` other pages of its set were read since the page's previous read:
    the gap to it is the spacing of ``r`` random points on the cycle (a Beta(1, r - 1)
    fraction of it), within which a share ``1 - (1 - x) ** r`` of the other pages comes up,
    so a read misses with probability ``(1 - ways / q) ** ((r - 1) / r)``: every read
    when each page is read once a pass (``r = 1``), ``1 - ways / q`` when pages are read
    many times in random order. The AMD EPYC's hardware misses from ~0.9 of the reach on and
    more slowly past it (the sweep-scan probe's ``tlbr`` rows,
    ``experiments/measured/linux-x86_64/sweep-levels/tlbr/``), which is why a measured curve
    replaces this where there is one.

    Examples
    --------
    >>> page_set_miss_fraction(2048 * 4096, 3072 * 4096, 8)
    0.0
    >>> round(page_set_miss_fraction(3264 * 4096, 3072 * 4096, 8), 3)
    0.529
    >>> page_set_miss_fraction(4096 * 4096, 3072 * 4096, 8)
    1.0
    >>> round(page_set_miss_fraction(4096 * 4096, 3072 * 4096, 8, reads_per_page=9.0), 3)
    0.291
    """
    if nbytes <= 0 or capacity <= 0 or ways <= 0:
        return 0.0
    m = ways * nbytes / capacity
    if m <= ways:
        return 0.0
    full = math.floor(m)
    share = m - full               # of the sets hold full + 1 pages, the others full
    power = 1.0 - 1.0 / max(1.0, reads_per_page)
    if full > ways and power == 0.0:
        return 1.0

    def missed(q):
        return (1.0 - ways / q) ** power if q > ways else 0.0

    return min(1.0, ((1.0 - share) * full * missed(full) + share * (full + 1) * missed(full + 1)) / m)


class TlbMissCurve:
    """The fraction of a repeatedly read working set's reads that miss the data TLB, as the
    host's hardware does it: measured, not derived (the sweep-scan probe's ``tlbr`` rows,
    written into a profile's ``[time] sweep_tlb_miss_*`` by ``sim calibrate --tlb``,
    :func:`sim.analysis.tlb.read_tlbr_dir`).

    ``reads``: the reads per page and pass of each measured curve (ascending);
    ``reach``: each curve's working sets, pages read over the TLB's entries (ascending);
    ``miss``: each curve's fraction of reads that miss there (``(ns - lines4k) /
    sweep_tlb_read_ns`` of the probe). A working set is read off each curve linearly
    between its points (and from no miss at no pages to its first point), its last point's
    past its last; between two curves linearly in the log of the reads per page, the
    nearest curve outside them.

    Examples
    --------
    >>> curve = TlbMissCurve((1.0, 10.0), ((1.0, 2.0), (1.0, 2.0)), ((0.4, 0.9), (0.1, 0.5)))
    >>> [round(curve(*a), 3) for a in ((1.5, 1.0), (1.5, 10.0), (3.0, 100.0), (0.5, 1.0))]
    [0.65, 0.3, 0.5, 0.2]
    >>> round(curve(1.0, 10 ** 0.5), 3)
    0.25
    """

    __slots__ = ("reads", "curves")

    def __init__(self, reads, reach, miss):
        if not (len(reads) == len(reach) == len(miss)) or not reads:
            raise ValueError("one reach and one miss row per reads-per-page value")
        self.reads = tuple(float(r) for r in reads)
        self.curves = tuple((tuple(map(float, x)), tuple(min(1.0, max(0.0, f)) for f in y))
                            for x, y in zip(reach, miss))

    @staticmethod
    def _read(x, xs, ys) -> float:
        i = bisect.bisect_right(xs, x)
        if i == 0:
            return ys[0] * max(0.0, x) / xs[0] if xs[0] > 0.0 else ys[0]
        if i == len(xs):
            return ys[-1]
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)

    def __call__(self, reach, reads_per_page=1.0) -> float:
        reads, curves = self.reads, self.curves
        r = max(1.0, reads_per_page)
        if r <= reads[0]:
            return self._read(reach, *curves[0])
        if r >= reads[-1]:
            return self._read(reach, *curves[-1])
        j = bisect.bisect_right(reads, r)
        w = math.log(r / reads[j - 1]) / math.log(reads[j] / reads[j - 1])
        return ((1.0 - w) * self._read(reach, *curves[j - 1])
                + w * self._read(reach, *curves[j]))


class TlbLayoutCurves:
    """Miss curves of the data TLB measured on several key layouts, one
    :class:`TlbMissCurve` per layout, each named by its keys' spacing (B of heap per key):
    the layout's pages and where they lie change the misses at the same pages read (a
    layout whose pages fill a small share of their span crowds some of the TLB's sets and
    misses before its reach), which the pages read and reads per page alone do not say. A
    working set whose keys are ``spacing`` B apart reads the curves of the two measured
    spacings around it, linearly between them; the nearest outside them.

    Examples
    --------
    >>> near = TlbMissCurve((1.0,), ((1.0, 2.0),), ((0.0, 0.2),))
    >>> far = TlbMissCurve((1.0,), ((1.0, 2.0),), ((0.2, 0.6),))
    >>> curves = TlbLayoutCurves((400.0, 600.0), (near, far))
    >>> [round(curves.at(s)(2.0, 1.0), 3) for s in (300.0, 400.0, 500.0, 600.0, 900.0)]
    [0.2, 0.2, 0.4, 0.6, 0.6]
    """

    __slots__ = ("spacings", "curves", "_at")

    #: spacings whose curves are kept for the next read of the same spacing
    CACHED = 256

    def __init__(self, spacings, curves):
        if len(spacings) != len(curves) or not curves:
            raise ValueError("one curve per key spacing")
        if list(spacings) != sorted(set(spacings)):
            raise ValueError("the key spacings ascending, each once")
        self.spacings = tuple(float(s) for s in spacings)
        self.curves = tuple(curves)
        self._at = {}

    def at(self, spacing):
        """The miss curve (``curve(reach, reads_per_page)``) of keys ``spacing`` B apart."""
        got = self._at.get(spacing)
        if got is None:
            s, c = self.spacings, self.curves
            j = bisect.bisect_right(s, spacing)
            if j == 0 or j == len(s):
                got = c[0] if j == 0 else c[-1]
            else:
                w = (spacing - s[j - 1]) / (s[j] - s[j - 1])
                lo, hi = c[j - 1], c[j]

                def got(reach, reads_per_page=1.0, lo=lo, hi=hi, w=w):
                    return (1.0 - w) * lo(reach, reads_per_page) + w * hi(reach, reads_per_page)
            if len(self._at) >= self.CACHED:
                # an exact run's growing graph has a new spacing at nearly every sweep
                self._at.clear()
            self._at[spacing] = got
        return got

    @classmethod
    def from_rows(cls, spacing, reads, reach, miss):
        """The curves of a profile's ``sweep_tlb_order_*`` keys: ``spacing`` names the layout
        of each ``reads`` value (and its ``reach`` and ``miss`` rows), a layout's values one
        run, in ascending spacing."""
        blocks = {}
        for s, r, x, m in zip(spacing, reads, reach, miss):
            block = blocks.setdefault(float(s), ([], [], []))
            block[0].append(r)
            block[1].append(x)
            block[2].append(m)
        order = sorted(blocks)
        return cls(order, [TlbMissCurve(*blocks[s]) for s in order])


def touched_pages(k, n, spacing, page=4096) -> float:
    """Pages the reads of ``k`` of a graph's ``n`` keys touch (in hash order a random subset;
    the keys ``spacing`` B of heap apart, at most one a line): the orphan sweep's TLB model
    (:meth:`sim.platform.timing.Timing._sweep_reads`).

    >>> round(touched_pages(1000, 1000, 512.0), 1), round(touched_pages(500, 1000, 512.0), 1)
    (125.0, 124.5)
    """
    span = n * spacing / page            # pages the graph's n keys lie on
    if span >= n:
        return k
    return span * (1.0 - (1.0 - min(k, n) / n) ** (n / span))


def sweep_tlb_point(k, n, spacing, table, reach, page=4096):
    """``(pages read over the TLB's reach, reads per page)`` of a sweep pass that reads ``k``
    of a live graph's ``n`` keys (``spacing`` B of heap apart) and that share of its ``nodes``
    table of ``table`` B, against a TLB reaching ``reach`` B: where the sweep's model reads
    the TLB's miss curve (:meth:`sim.platform.timing.Timing._sweep_reads`, keys more than a
    line apart), and where ``sim calibrate --tlb`` puts the sweep-scan probe's `order` rows.

    >>> x, r = sweep_tlb_point(1000, 1000, 512.0, 32 * 2048 + 2048 + 16, 3072 * 4096)
    >>> round(x, 4), r
    (0.0461, 8.0)
    """
    t = touched_pages(k, n, spacing, page)
    return (t * page + (k / n) * table) / reach, max(1.0, k / t)


def tlb_read_ns(nbytes, levels, reads_per_page=1.0, curve=None) -> float:
    """ns more per read of a repeatedly read working set of ``nbytes`` B of pages than if
    the TLB held them all: ``levels`` lists each TLB level as ``(reach B, ways, ns)``; the
    fraction of reads that miss it is the measured ``curve``'s (:class:`TlbMissCurve`, at
    ``nbytes`` over the reach) where there is one, else :func:`page_set_miss_fraction`'s
    (``reads_per_page``: the working set's reads per page and pass).

    Examples
    --------
    >>> round(tlb_read_ns(8192 * 4096, ((3072 * 4096, 8, 6.0),)), 3)
    6.0
    >>> curve = TlbMissCurve((1.0,), ((1.0, 2.0),), ((0.0, 0.5),))
    >>> round(tlb_read_ns(6144 * 4096, ((3072 * 4096, 8, 6.0),), 10.0, curve), 3)
    3.0
    """
    if curve is not None:
        return sum(ns * curve(nbytes / capacity, reads_per_page)
                   for capacity, _, ns in levels if ns and capacity > 0 and nbytes > 0)
    return sum(ns * page_set_miss_fraction(nbytes, capacity, ways, reads_per_page)
               for capacity, ways, ns in levels if ns)


def hierarchy_read_ns(nbytes, levels) -> float:
    """ns more per read of a repeatedly read working set of ``nbytes`` B than if it stayed
    in the innermost cache: ``levels`` lists each cache level, innermost first, as
    ``(capacity B, ways, ns)``, ``ns`` being what a read that misses that level costs more
    (served by the next level out); the misses of each level are
    :func:`set_miss_fraction` of the working set against it (the orphan sweep's model,
    :meth:`sim.platform.timing.Timing.sweep`). A level of capacity 0 or 0 ways is not
    modelled (0 ns).

    Examples
    --------
    >>> levels = ((32 << 10, 8, 0.1), (1 << 20, 8, 1.5), (32 << 20, 16, 12.0))
    >>> round(hierarchy_read_ns(8 << 10, levels), 3)         # in the L1d
    0.0
    >>> round(hierarchy_read_ns(512 << 10, levels), 3)       # L2 hits, a few L3
    0.177
    >>> round(hierarchy_read_ns(4 << 20, levels), 3)         # L3 hits
    1.6
    >>> round(hierarchy_read_ns(256 << 20, levels), 3)       # DRAM
    13.6
    """
    return sum(ns * set_miss_fraction(nbytes, capacity, ways)
               for capacity, ways, ns in levels if ns)


# the compiled build of this file (setup.py; the fields' types in its .pxd) in place of
# its classes and functions when built from this very text; SIM_PURE_L2=1 keeps the Python
adopt_compiled(globals(), "sim.platform.l2_cache", "_l2_cache_c", "SIM_PURE_L2", "the L2 model")
