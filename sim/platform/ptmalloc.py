"""glibc's malloc (ptmalloc2) main arena, address by address.

The high-water model of :mod:`sim.platform.rss` packs the live bytes perfectly and
never gives memory back. glibc's main arena does neither: chunks sit at
addresses in one brk heap, a freed chunk can only be reused by requests it fits,
and the **top** chunk (the free space at the end of the heap) is given back to
the kernel when a free leaves it above the trim threshold -- the next request
that needs it faults the pages in again. This module follows that placement for
glibc 2.36 on x86_64 (``malloc/malloc.c``), request by request:

* a request of ``n`` bytes is a chunk of ``n + 8`` rounded up to 16, at least 32
  (``request2size``);
* **tcache**: up to 7 freed chunks per size up to 1040 B, reused last-in first-out,
  before anything else (``tcache_put`` / ``tcache_get``);
* **fastbins**: freed chunks up to 128 B once their tcache bin is full; neither is
  coalesced with its neighbours until ``malloc_consolidate`` (a request of 1024 B or
  more, or a free that leaves a chunk of 64 KiB or more, while fastbins hold chunks);
* every other freed chunk is merged with free neighbours at once and, when it
  borders the top chunk, joins the top; otherwise it enters the front of the
  **unsorted bin**;
* a request no tcache or fastbin serves goes through ``_int_malloc`` in glibc's
  order: the small bin of its size (oldest chunk first); the unsorted bin from its
  oldest chunk, where a small request splits the **last remainder** (the rest of the
  last chunk a small request split) when that is the only unsorted chunk, an exact
  fit is taken or parked in the tcache, and every other chunk is sorted into its
  **small bin** (one size each, below 1024 B) or **large bin** (size ranges, sorted);
  then a large request's own bin (smallest fit), the next non-empty bin up (split,
  the rest back into the unsorted bin), and finally the top. ``calloc``, ``realloc``
  and ``posix_memalign`` skip the tcache (glibc 2.36); ``realloc`` grows in place into
  the top or a free neighbour when it can;
* when the top is too small, a request of at least the mmap threshold is mmapped
  on its own (page-rounded, with a 16-B header); otherwise the heap grows by
  ``sbrk`` to leave the top pad (128 KiB) after the request (``sysmalloc``);
* freeing an mmapped chunk larger than the threshold raises the mmap threshold to
  its size and the trim threshold to twice that (up to 32 MiB; ``free``);
* a free whose merged chunk is at least 64 KiB trims the top down to the top pad
  when the top reaches the trim threshold (``_int_free`` -> ``systrim``);
* ``posix_memalign`` (an alignment above 16 B) takes a chunk of ``nb + align + 32``
  bytes and frees its misaligned head and its spare tail as chunks of their own
  (``_int_memalign``): small ones park in the tcache right next to the block.

Residency: a chunk carved from the top is written by its owner, so the heap is
resident up to the highest byte ever carved (``resident_end``); a trim drops the
pages above the new break. mmapped chunks are resident while mapped.

Frees that do not name their block take the newest live block of that request size
(the heap's other callers free by size). Addresses are byte offsets from the
start of the heap. All sizes are bytes.

**Carve runs.** A loop that leaves chunks behind, once an iteration is shown to
carve from the top one chunk after the other, to leave the bins alone and the tcache
and fastbins as full as it found them (:mod:`sim.engine.fastforward.arenarun`), may hand the arena the
rest of the loop as one :meth:`PtmallocArena.carve_run`: the top, the break and the
resident end move in closed form, and the run's chunks are entered one by one only
when a free reaches one of them (``materialize``), at the addresses single requests
would have given them.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from itertools import islice

from ..errors import UserError
from .compiled import adopt_compiled

__all__ = ["PtmallocArena", "CarveRun", "ReplayProgram", "ArenaBudgetExceeded", "ZEROED",
           "handle_key"]

SIZE_SZ = 8
#: the ``align`` of a request made with ``calloc`` (Rust's ``alloc_zeroed``: ``vec![0; n]``)
ZEROED = -1
MINSIZE = 32
#: largest chunk the tcache holds (64 bins of 16 B from 32 B), and chunks per bin
TCACHE_MAX_CHUNK = 1040
TCACHE_COUNT = 7
#: largest fastbin chunk (DEFAULT_MXFAST 128 on 64-bit)
MAX_FAST = 128
#: smallest chunk of the large bins: requests from here on consolidate the fastbins
MIN_LARGE = 1024
#: a free that leaves a chunk of this size consolidates and may trim
CONSOLIDATION_THRESHOLD = 65536
#: mallopt(3) defaults
TOP_PAD = 128 * 1024
MMAP_THRESHOLD = 128 * 1024
TRIM_THRESHOLD = 128 * 1024
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
#: frees by size a carve run serves from its end before it is entered chunk by chunk
TAIL_FREES = 16


#: the operations of a compiled replay program (:class:`ReplayProgram`): those of sizes
#: whose live lists the replay sets at its end (``_HELD``), and the others
(_ALLOC_HELD, _FREE_HELD, _ALIGNED_HELD, _ZEROED_HELD, _REALLOC_HELD, _ALLOC, _FREE, _FREE_NEWEST,
 _REALLOC, _ALLOC_MANY, _FREE_MANY) = range(11)
#: the codes of the requests that make a block (the block ``index`` of its iteration)
_ALLOCATING = (_ALLOC_HELD, _ZEROED_HELD, _ALIGNED_HELD, _REALLOC_HELD, _ALLOC, _REALLOC)

#: bins below this index are small bins, one chunk size each (``NSMALLBINS``); how many
#: bins there are (:func:`bin_index` is below it)
NSMALLBINS = 64
NBINS = 127


def bin_index(size: int) -> int:
    """glibc's bin index of a chunk size: ``smallbin_index`` below ``MIN_LARGE``,
    ``largebin_index_64`` from there on (bins 64-126, ever wider size ranges)."""
    if size < MIN_LARGE:
        return size >> 4
    if size >> 6 <= 48:
        return 48 + (size >> 6)
    if size >> 9 <= 20:
        return 91 + (size >> 9)
    if size >> 12 <= 10:
        return 110 + (size >> 12)
    if size >> 15 <= 4:
        return 119 + (size >> 15)
    if size >> 18 <= 2:
        return 124 + (size >> 18)
    return 126


#: :func:`bin_index` of every chunk size below ``BIN_TABLE`` bytes, by ``size >> 4``
BIN_TABLE = 1 << 17
_BIN_OF = []


def bin_of(size: int) -> int:
    """:func:`bin_index`, from a table below ``BIN_TABLE`` (the hot paths' form)."""
    return _BIN_OF[size >> 4] if size < BIN_TABLE else bin_index(size)


def chunk_size(nbytes: int) -> int:
    """glibc's ``request2size``: the chunk that serves a request of ``nbytes``."""
    size = (nbytes + SIZE_SZ + 15) & ~15
    return size if size > MINSIZE else MINSIZE


_BIN_OF.extend(bin_index(size) for size in range(0, BIN_TABLE, 16))


# the binmap (the non-empty bins' indices, ascending; at most NBINS of them, mostly a few)
# walked in a loop, which the arena's build compiles to C
def _binmap_mark(binmap, idx) -> None:
    """``mark_bin``: bin ``idx`` (empty so far) enters ``binmap`` in order."""
    i = len(binmap)
    while i:
        other = binmap[i - 1]
        if other < idx:
            break
        i -= 1
    binmap.insert(i, idx)


def _binmap_unmark(binmap, idx) -> None:
    """``unmark_bin``: bin ``idx`` (just emptied) leaves ``binmap`` (``binmap.remove``)."""
    i = 0
    while True:
        other = binmap[i]
        if other == idx:
            break
        i += 1
    del binmap[i]


def _binmap_after(binmap, idx) -> int:
    """Where the bins above ``idx`` start in ``binmap`` (``bisect_right``)."""
    i = 0
    n = len(binmap)
    while i < n:
        other = binmap[i]
        if other > idx:
            break
        i += 1
    return i


class ArenaBudgetExceeded(UserError):
    """Entering a carve run's chunks one by one would pass the arena's chunk budget."""


class CarveRun:
    """Chunks carved from the top in a row, ``start`` to ``end`` (bytes), not yet entered
    in the arena one by one. ``contents()`` returns them: ``(address, chunk size)`` pairs
    in address order and, by request size, the live blocks among them in allocation
    order. ``pinned`` (address -> chunk size) were entered on their own: chunks the
    tcache or a fastbin holds at the run's end, and blocks frees took from the run's
    end (``tail(nbytes, j)`` names the ``j``-th newest live block of ``nbytes``: its
    ``(address, chunk size)``, None when the run made fewer, False when it cannot tell
    without entering the run; ``taken`` counts those frees by size). The run stands
    in the live lists of the request sizes in ``sizes`` where its blocks would be (see
    :meth:`PtmallocArena.carve_run`), ``borrowed`` among them: live blocks outside its
    range, chunks its requests took from the tcache and fastbins (a free naming one
    enters the run first)."""

    __slots__ = ("start", "end", "contents", "sizes", "pinned", "tail", "taken", "chunks",
                 "borrowed")

    def __init__(self, start, end, contents, sizes, pinned, tail=None, chunks=0, borrowed=()):
        #: how many chunks it holds
        self.chunks = chunks
        self.borrowed = borrowed
        self.start = start
        self.end = end
        self.contents = contents
        self.sizes = sizes
        self.pinned = pinned
        self.tail = tail
        self.taken = {}


def _remove_newest(live, block) -> bool:
    """Remove ``block`` from the live list ``live`` (allocation order), searching from its
    newest end (a named free is mostly of a recent block; the list may hold millions);
    returns whether it was there."""
    n = len(live)
    if n > 1 and live[-2] == block and live[-1] != block:   # mostly the one before it
        del live[-2]
        return True
    for i in range(n - 1, max(-1, n - 65), -1):
        if live[i] == block:
            del live[i]
            return True
    try:
        del live[live.index(block, 0, max(0, n - 64))]
    except ValueError:
        return False
    return True


def handle_key(block):
    """What names a block the arena handed out, in a table keyed by blocks: an arena
    chunk is its address (an int); an mmapped one a tuple (another of the same size is
    equal), told apart by identity."""
    return block if type(block) is int else ("id", id(block))


class ReplayProgram:
    """One iteration's requests compiled for :meth:`PtmallocArena.replay` (see
    :meth:`PtmallocArena.compile` for the template).

    A request size whose blocks are all allocated by ``alloc`` and freed by name within
    ``depth`` iterations is *held*: the replay places and frees its chunks without
    touching its live list and sets the list once at the end (``held``: per size, the
    ``(back, index)`` of the blocks live at an iteration's end, in allocation order).
    Every other size (freed by size, reallocated, allocated in bulk) goes through the
    arena's calls, which keep its live list as they go."""

    __slots__ = ("template", "ops", "flat", "depth", "held", "blocks")

    def __init__(self, template):
        template = tuple(template)
        self.template = template
        sizes = []                          # request size of each allocated block
        depth = 0
        unheld = set()
        for kind, nbytes, arg in template:
            if kind == "alloc":
                sizes.append(nbytes)
            elif kind == "realloc":
                depth = max(depth, arg[1])
                sizes.append(nbytes)
            elif kind == "free":
                if arg is None:
                    unheld.add(nbytes)
                else:
                    depth = max(depth, arg[0])
            elif kind in ("alloc_many", "free_many"):
                unheld.add(nbytes)
            else:
                raise ValueError(f"replay: unknown event {kind!r}")
        self.depth = depth
        # which allocation each named free frees: the index within its iteration and back
        freed = {}
        count = 0
        for kind, nbytes, arg in template:
            named = arg if kind == "free" else arg[1:] if kind == "realloc" else None
            if named is not None:
                back, index = named
                old = nbytes if kind == "free" else arg[0]
                # each iteration makes its blocks as the template's does: the one named
                # is of the size freed, not yet freed, and made before the free
                if (index >= len(sizes) or (back == 0 and index >= count) or index in freed
                        or sizes[index] != old):
                    raise ValueError("replay: a free names no allocation of the template")
                freed[index] = back
            if kind in ("alloc", "realloc"):
                count += 1
        for index, nbytes in enumerate(sizes):
            if index not in freed:
                unheld.add(nbytes)       # kept past the template's reach, or freed by size
        # a realloc moves a block from one live list to another: both are held, or neither
        pairs = {(nbytes, arg[0]) for kind, nbytes, arg in template if kind == "realloc"}
        while any((a in unheld) != (b in unheld) for a, b in pairs):
            for a, b in pairs:
                if a in unheld or b in unheld:
                    unheld.update((a, b))
        ops = []
        count = 0
        for kind, nbytes, arg in template:
            held = nbytes not in unheld
            if kind == "alloc":
                nb = chunk_size(nbytes)
                if not held:
                    ops.append((_ALLOC, nbytes, nb, arg, 0))
                elif not arg:
                    ops.append((_ALLOC_HELD, nbytes, nb, 0, 0))
                elif arg == ZEROED:
                    ops.append((_ZEROED_HELD, nbytes, nb, 0, 0))
                else:
                    ops.append((_ALIGNED_HELD, nbytes, nb, arg, 0))
            elif kind == "free":
                if arg is None:
                    ops.append((_FREE_NEWEST, nbytes, 0, 0, 0))
                else:
                    ops.append((_FREE_HELD if held else _FREE, nbytes, 0, arg[0], arg[1]))
            elif kind == "realloc":
                if held and arg[0] not in unheld:
                    ops.append((_REALLOC_HELD, nbytes, chunk_size(nbytes), arg[1], arg[2]))
                else:
                    ops.append((_REALLOC, nbytes, arg[0], arg[1], arg[2]))
            elif kind == "alloc_many":
                ops.append((_ALLOC_MANY, nbytes, 0, arg, 0))
            else:
                ops.append((_FREE_MANY, nbytes, 0, arg, 0))
        self.ops = tuple(ops)
        # the ops as one list of ints for :meth:`PtmallocArena._replay_run`, six a request:
        # the five of ``ops`` and a sixth: for an allocation of a held size whether it is
        # the first of a neutral pair (:func:`_neutral_pair`), for a free of one the chunk
        # size its block's request asked for (the size its chunk mostly has)
        asked = [nb for code, _, nb, _, _ in ops if code in _ALLOCATING]
        flat = []
        index = 0
        for i, op in enumerate(self.ops):
            flat.extend(op)
            if op[0] == _ALLOC_HELD:
                flat.append(int(_neutral_pair(self.ops, i, index)))
            elif op[0] == _FREE_HELD:
                flat.append(asked[op[4]])
            else:
                flat.append(0)
            if op[0] in _ALLOCATING:
                index += 1
        # as C ints (``long long``), which the compiled replay loop reads without boxing
        try:
            self.flat = array("q", flat)
        except OverflowError:
            raise UserError(f"replay: a request of {max(n for _, n, _ in template):,} B is "
                            f"past what the arena's replay holds (a chunk size under 2^63 B)"
                            ) from None
        # the held blocks live at an iteration's end: allocated ``d`` iterations back (0:
        # this one) and freed more than ``d`` iterations after their own
        held = {}
        for d in range(depth - 1, -1, -1):
            for index, nbytes in enumerate(sizes):
                if nbytes not in unheld and freed[index] > d:
                    held.setdefault(nbytes, []).append((d + 1, index))
        for nbytes in {s for s in sizes if s not in unheld}:
            held.setdefault(nbytes, [])
        self.held = {nbytes: tuple(p) for nbytes, p in held.items()}
        self.blocks = len(sizes)


def _neutral_pair(ops, i, index) -> bool:
    """Whether ``ops[i]`` allocates block ``index`` of a tcache size with malloc's plain
    path and ``ops[i + 1]`` frees it by name (no request in between)."""
    if i + 1 >= len(ops):
        return False
    code, _, nb, a, _ = ops[i]
    if not ((code == _ALLOC_HELD or (code == _ALLOC and a == 0)) and nb <= TCACHE_MAX_CHUNK):
        return False
    code, _, _, a, b = ops[i + 1]
    return code in (_FREE_HELD, _FREE) and a == 0 and b == index


class ArenaReads:
    """A tap for the arena's :attr:`~_Arena.recorder`: what a stretch of requests read of
    the arena -- the tcache bins' and fastbins' lengths, and its break -- for fast-forward's
    windows (:mod:`sim.engine.fastforward.arenawindow` keeps what a later stretch needs to
    make the same decisions). Here, so that the compiled build compiles it with the arena
    (the arena calls it several times a request while it records).

    Per tcache bin read: ``[length at the start, lowest length, highest length, fewest
    chunks a request found there, exact]`` (``exact``: a request found it empty or a free
    found it full, so its length decided alone); per fastbin read: ``[length at the
    start, lowest length]``. A bin's length changes only where the arena reads it, so the
    first read sees its length at the stretch's start. The top events: ``(kind, top -
    top0, arg)``, 0 a carve of ``arg`` bytes, 1 a merge into the top, 2 a realloc at the
    top ``(size, nb, grew)``; ``ok`` False where the stretch reads the break in a way a
    shift of the arena does not carry (a carve or a merge into the top while the fastbins
    hold chunks, a merge into a chunk of 64 KiB elsewhere)."""

    def __init__(self, arena):
        self.top0 = arena.top
        self.events = []
        self.ok = True
        self.tcache = {}
        self.fast = {}
        self._resizing = None
        self._top = 0

    def took(self, size, n) -> None:
        """A request looks into the tcache bin of ``size``, which holds ``n`` chunks
        (and takes the newest, if any)."""
        entry = self.tcache.get(size)
        if entry is None:
            entry = self.tcache[size] = [n, n, n, TCACHE_COUNT, False]
        if not n:
            entry[4] = True
            return
        if n - 1 < entry[1]:
            entry[1] = n - 1
        if n < entry[3]:
            entry[3] = n

    def parked(self, size, n) -> None:
        """A free looks into the tcache bin of ``size``, which holds ``n`` chunks (and
        parks its chunk there unless it is full)."""
        entry = self.tcache.get(size)
        if entry is None:
            entry = self.tcache[size] = [n, n, n, TCACHE_COUNT, False]
        if n >= TCACHE_COUNT:
            entry[4] = True
        elif n + 1 > entry[2]:
            entry[2] = n + 1

    def filled(self, size, n, now) -> None:
        """A request moved chunks of its size into the tcache bin (``n`` -> ``now``) until
        its source ran dry or the bin was full."""
        entry = self.tcache.get(size)
        if entry is None:
            entry = self.tcache[size] = [n, n, n, TCACHE_COUNT, False]
        if now >= TCACHE_COUNT:
            entry[4] = True
        elif now > entry[2]:
            entry[2] = now

    def fast_took(self, size, now) -> None:
        """A request looked into the fastbin of ``size``, which holds ``now`` chunks
        after it."""
        entry = self.fast.get(size)
        if entry is None:
            self.fast[size] = [now, now]
        elif now < entry[1]:
            entry[1] = now

    def fast_parked(self, size, n) -> None:
        """A free parks a chunk in the fastbin of ``size``, which held ``n``."""
        if size not in self.fast:
            self.fast[size] = [n, n]

    def consolidated(self, arena) -> None:
        """``malloc_consolidate`` empties every fastbin."""
        for size, chunks in arena.fast.items():
            entry = self.fast.get(size)
            if entry is None:
                self.fast[size] = [len(chunks), 0]
            else:
                entry[1] = 0

    def carved(self, arena, nb) -> None:
        """A chunk of ``nb`` carved from the top."""
        if arena.nfast:
            self.ok = False          # a top too small would consolidate the fastbins
        self.events.append((0, arena.top - self.top0, nb))

    def merging(self, arena) -> None:
        """A free past the tcache and fastbins is about to merge (:meth:`merged`)."""
        self._top = arena.top

    def merged(self, arena, merged) -> None:
        """The free merged into a chunk of ``merged`` bytes: into the top (an event that
        reads the break), or into a chunk of 64 KiB elsewhere (which would too: not
        shifted)."""
        if arena.top != self._top:
            if arena.nfast:
                self.ok = False
            self.events.append((1, arena.top - self.top0, 0))
        elif merged >= CONSOLIDATION_THRESHOLD:
            self.ok = False

    def resizing(self, arena, size, nb) -> None:
        """A realloc of the chunk (``size``) right below the top to ``nb``: noted when it
        is done (:meth:`resized`)."""
        self._resizing = (arena.top, size, nb)

    def resized(self, arena) -> None:
        top, size, nb = self._resizing
        self.events.append((2, top - self.top0, (size, nb, arena.top != top)))

    def read(self) -> tuple:
        """``(read, low, bounds)``: the tcache and fastbin sizes read, the lowest length
        of each (where above 0), and per tcache bin read its length at the start and by
        how much less or more a stretch's decisions stay the same: ``(start, fewer,
        more)``, ``(start, 0, 0)`` where its length decided alone (a request found it
        empty or a free found it full; see ``arenawindow._lengths``)."""
        read = (tuple(sorted(self.tcache)), tuple(sorted(self.fast)))
        low = {(False, s): e[1] for s, e in self.tcache.items() if e[1]}
        low.update(((True, s), e[1]) for s, e in self.fast.items() if e[1])
        bounds = tuple((e[0], 0, 0) if e[4] else
                       (e[0], max(-e[1], 1 - e[3]), TCACHE_COUNT - e[2])
                       for _, e in sorted(self.tcache.items()))
        return read, low, bounds


class _Arena:
    """The arena's state and code, which :class:`PtmallocArena` is (see there). Built with
    Cython (``setup.py``, the types in ``ptmalloc.pxd``), this class is an extension
    type compiled from this same source; without the build it runs as Python."""

    def __init__(self, page_bytes: int = 4096, trim_threshold: int = 0, mmap_threshold: int = 0,
                 top_pad: int = 0):
        self.page = int(page_bytes)
        # mallopt(3) / MALLOC_*_ environment: 0 keeps glibc's default; setting any of the
        # three turns the dynamic mmap threshold off (mp_.no_dyn_threshold)
        self.dynamic = not (trim_threshold or mmap_threshold or top_pad)
        self.top_pad = int(top_pad) or TOP_PAD
        self.brk = 0
        self.top = 0
        self.resident_end = 0
        self.mapped = 0
        self.mmap_threshold = int(mmap_threshold) or MMAP_THRESHOLD
        self.trim_threshold = int(trim_threshold) or TRIM_THRESHOLD
        self.trims = 0
        self.trimmed_bytes = 0
        #: the resident end just before the latest trim (0 before any): the level a run
        #: whose top was not trimmed then would hold (Simulation.untrimmed_bytes)
        self.trim_from = 0
        self.fault = None
        # called with ``(bytes, count)`` where a trim gives ``bytes`` of the top back
        # (``count`` trims): the model's charge for systrim's brk calls; None: not charged
        self.trim = None
        # in-use chunks (allocated, or parked in tcache / fastbins): address -> size
        self.inuse = {}
        # free chunks (unsorted or binned): address -> size, and end -> address
        self.free_at = {}
        self.free_end = {}
        # the unsorted bin, back (oldest) first: {address: size} (the size object ``free_at``
        # holds, so that a pass reads it with the address). ``_int_malloc`` walks it
        # from its oldest chunk and takes the chunks it sorted out in one step afterwards;
        # ``_unsorted_dead`` counts the places a pass that stopped early left at its front
        self.unsorted = {}
        self._unsorted_dead = 0
        # bin index -> its chunks (every bin there, empty or not): a small bin {address:
        # None} back first, a large bin [(size, address)] front (largest) first; and the
        # non-empty bins' indices, ascending
        self.bins = [{} for _ in range(NSMALLBINS)] + \
            [[] for _ in range(NSMALLBINS, NBINS)]
        self.binmap = []
        # where the last split of a small request left its remainder (a bare address,
        # as glibc keeps it: never cleared)
        self.last_remainder = None
        # chunk size -> its tcache bin, newest last (every bin there from the start: a
        # replay's loop holds them)
        self.tcache = {size: [] for size in range(MINSIZE, TCACHE_MAX_CHUNK + 1, 2 * SIZE_SZ)}
        # chunk size -> its fastbin, newest last (every bin there from the start)
        self.fast = {size: [] for size in range(MINSIZE, MAX_FAST + 1, 2 * SIZE_SZ)}
        # the same bins by ``size >> 4`` (None below MINSIZE), which the hot paths read: a
        # list's index, where the dicts' lookup boxes the size and probes a table whose
        # keys, multiples of 16, share a few home slots (the fastbins' seven all one). A
        # bin is never replaced, only changed in place, so both name the same lists
        self._tcache_by = [self.tcache.get(size) for size in range(0, TCACHE_MAX_CHUNK + 1, 16)]
        self._fast_by = [self.fast.get(size) for size in range(0, MAX_FAST + 1, 16)]
        self.nfast = 0
        # the tap fast-forward records a window of the arena through (None: nothing
        # listens): told where the arena reads a tcache bin's or fastbin's length, carves
        # from the top, merges a free into the top or reallocs at the top
        # (:class:`ArenaReads`: took, parked, filled, fast_took,
        # fast_parked, consolidated, carved, merging / merged, resizing / resized)
        self.recorder = None
        # live blocks by request size, newest last (frees that name no block); a CarveRun
        # stands where its blocks are until it is materialized
        self.live = {}
        # carve runs not yet materialized, by start address (ascending), and their starts
        self.runs = []
        self._run_starts = []
        # the live blocks outside a run's range that it stands for (CarveRun.borrowed)
        self._borrowed = {}
        # chunks entered into or taken from the bins or the top by a free (fast-forward
        # checks that an iteration left them alone)
        self.bin_changes = 0
        # the most chunks a carve run may bring the arena to when it is entered (None: no
        # limit; the simulation sets its memory budget)
        self.chunk_budget = None
        # handle -> chunk, for blocks whose holders still name the block an exact run would
        # have given them (a replay placed it elsewhere: :meth:`rebind`; an mmapped chunk's
        # handle by identity, ``("id", id(handle))``); a new block whose address is such a
        # handle is handed out as a negative number of its own (``_tags`` counts them)
        self.alias = {}
        self._tags = 0

    # -- bins ------------------------------------------------------------------------
    def _bin_insert(self, addr, size) -> None:
        """A free chunk enters the front of the unsorted bin (a free, a consolidation, a
        split's remainder)."""
        self.bin_changes += 1
        self.free_at[addr] = size
        self.free_end[addr + size] = addr
        self.unsorted[addr] = size

    def _bin_remove(self, addr) -> int:
        """Unlink a free chunk from the unsorted bin or its bin; its size."""
        self.bin_changes += 1
        size = self.free_at.pop(addr)
        del self.free_end[addr + size]
        if not self.unsorted.pop(addr, 0):           # not in the unsorted bin
            self._unbin(addr, size)
        return size

    def _unbin(self, addr, size) -> None:
        """Take a free chunk (not in the unsorted bin) out of its small or large bin."""
        if size < MIN_LARGE:
            idx = size >> 4
            chunks = self.bins[idx]
            del chunks[addr]
        else:
            idx = bin_of(size)
            chunks = self.bins[idx]
            chunks.remove((size, addr))
        if not chunks:
            _binmap_unmark(self.binmap, idx)

    def _largest_free(self) -> int:
        """The size of the largest free chunk (unsorted or binned; 0: none): a small bin
        holds chunks of one size, a large bin its largest first."""
        largest = max(self.unsorted.values(), default=0)
        if self.binmap:
            idx = self.binmap[-1]
            largest = max(largest, idx << 4 if idx < NSMALLBINS else self.bins[idx][0][0])
        return largest

    def _large_place(self, addr, size) -> None:
        """A chunk (just off the unsorted bin) into its large bin: sorted by size, largest
        first; a chunk of a size the bin holds goes right after the first chunk of that
        size."""
        idx = bin_of(size)
        chunks = self.bins[idx]
        if not chunks:
            chunks.append((size, addr))
            _binmap_mark(self.binmap, idx)
            return
        i = 0
        n = len(chunks)
        while i < n and chunks[i][0] > size:
            i += 1
        if i < n and chunks[i][0] == size:
            i += 1
        chunks.insert(i, (size, addr))

    def _split(self, addr, size, nb, remainder_is_last) -> int:
        """Serve ``nb`` from the free chunk at ``addr`` (already unlinked): the whole chunk
        when less than ``MINSIZE`` would be left, else its start, the rest entering the
        unsorted bin (and becoming the last remainder for a small request)."""
        if size - nb < MINSIZE:
            self.inuse[addr] = size
            return addr
        rest = addr + nb
        left = size - nb
        self.bin_changes += 1
        self.free_at[rest] = left
        self.free_end[addr + size] = rest
        self.unsorted[rest] = left
        if remainder_is_last:
            self.last_remainder = addr + nb
        self.inuse[addr] = nb
        return addr

    def _merge_run(self, addrs, size) -> int:
        """Free the in-use chunks of ``size`` at ``addrs``, last first, each into the
        unsorted bin or the top, merged with its free neighbours; returns the last
        one's merged size (:meth:`_bin_remove`, :meth:`_unbin` and :meth:`_bin_insert`
        inline: the hot path of frees and consolidations)."""
        inuse, free_at, free_end, unsorted = self.inuse, self.free_at, self.free_end, self.unsorted
        bins, top = self.bins, self.top
        # each chunk is one change, and one more where it enters the bins (not the top)
        changes = 2 * len(addrs)
        merged = 0
        k = len(addrs)
        while k:
            k -= 1
            addr = addrs[k]
            del inuse[addr]
            merged = size
            prev = free_end.pop(addr, None)
            if prev is not None:                 # the free chunk below it
                below = free_at.pop(prev)
                if not unsorted.pop(prev, 0):            # in a small or large bin
                    if below < MIN_LARGE:
                        sbin = bins[below >> 4]
                        del sbin[prev]
                        if not sbin:
                            _binmap_unmark(self.binmap, below >> 4)
                    else:
                        self._unbin(prev, below)
                merged += below
                addr = prev
                changes += 1
            end = addr + merged
            if end == top:
                self.top = top = addr
                merged = self.brk - addr
                changes -= 1
                continue
            above = free_at.pop(end, None)
            if above is not None:                # the free chunk above it, from ``start``
                start = end
                end = start + above
                del free_end[end]
                if not unsorted.pop(start, 0):
                    if above < MIN_LARGE:
                        sbin = bins[above >> 4]
                        del sbin[start]
                        if not sbin:
                            _binmap_unmark(self.binmap, above >> 4)
                    else:
                        self._unbin(start, above)
                merged += above
                changes += 1
            free_at[addr] = merged
            free_end[end] = addr                 # the merged chunk's end
            unsorted[addr] = merged
        self.bin_changes += changes
        return merged

    def _consolidate(self) -> None:
        """``malloc_consolidate``: every fastbin chunk merged into the unsorted bin or the
        top, the bins by size, each from its newest chunk."""
        if self.recorder is not None:
            self.recorder.consolidated(self)
        for size, chunks in self.fast.items():       # sizes ascending
            if chunks:
                self._merge_run(chunks, size)
                chunks.clear()
        self.nfast = 0

    def _touch(self, end) -> None:
        if end > self.resident_end:
            page = self.page
            old = -(-self.resident_end // page) * page
            self.resident_end = end
            new = -(-end // page) * page
            if new > old and self.fault is not None:
                self.fault(new - old, False)

    def _grow(self, nb) -> None:
        """``sysmalloc``: grow the heap so that the top keeps its pad after a request of
        ``nb`` (called when the top is too small for it)."""
        need = nb + self.top_pad + MINSIZE - (self.brk - self.top)
        self.brk += -(-need // self.page) * self.page

    def _from_top(self, nb) -> int:
        if self.recorder is not None:
            self.recorder.carved(self, nb)
        if self.brk - self.top < nb + MINSIZE:
            self._grow(nb)
        addr = self.top
        self.top = addr + nb
        self._touch(self.top + 2 * SIZE_SZ)   # the chunk, and the new top's header
        return addr

    def _systrim(self) -> None:
        area = self.brk - self.top - MINSIZE - 1
        if area <= self.top_pad:
            return
        extra = (area - self.top_pad) // self.page * self.page
        if extra:
            self.brk -= extra
            self.trims += 1
            self.trimmed_bytes += extra
            self.trim_from = self.resident_end
            if self.resident_end > self.brk:
                self.resident_end = self.brk
            if self.trim is not None:
                self.trim(extra, 1)

    # -- malloc / free -----------------------------------------------------------------
    def _malloc(self, nb):
        if nb <= TCACHE_MAX_CHUNK:
            cached = self._tcache_by[nb >> 4]
            if self.recorder is not None:
                self.recorder.took(nb, len(cached))
            if cached:
                return cached.pop()
        return self._int_malloc(nb)

    def _int_malloc(self, nb):
        """``_int_malloc``: what a request gets past the tcache (``calloc``, ``realloc``
        and ``posix_memalign`` come here directly, without looking into the tcache).

        In glibc's order: the fastbin (its other chunks move into the tcache); the small
        bin of that size, oldest chunk first (likewise); a large request consolidates
        the fastbins. Then the unsorted bin, oldest first: a small request splits the
        last remainder when it is the only chunk there, an exact fit is taken (or, while
        the tcache has room, parked there and taken at the end), every other chunk goes
        to its bin. Then a large request's own bin (the smallest chunk that fits), the
        next non-empty bin up (its oldest, or smallest, chunk; split, the rest to the
        unsorted bin), the top, and when the top is too small: consolidation and another
        pass, an mmap, or heap growth."""
        if nb <= MAX_FAST:
            fast = self._fast_by[nb >> 4]
            if fast:
                addr = fast.pop()
                self.nfast -= 1
                # the rest of that fastbin moves into the tcache
                cache = self._tcache_by[nb >> 4]
                count = len(cache)
                while fast and len(cache) < TCACHE_COUNT:
                    cache.append(fast.pop())
                    self.nfast -= 1
                if self.recorder is not None:
                    self.recorder.fast_took(nb, len(fast))
                    self.recorder.filled(nb, count, len(cache))
                return addr
            if self.recorder is not None:
                self.recorder.fast_took(nb, 0)
        bins, binmap, free_at, free_end = self.bins, self.binmap, self.free_at, self.free_end
        small = nb < MIN_LARGE
        if small:
            sbin = bins[nb >> 4]
            if sbin:
                # the small bin's oldest chunk; more of them fill the tcache (``chunk``: its
                # size, nb, as the maps hold it: no new int for the maps in the build)
                inuse = self.inuse
                for addr in sbin:
                    break
                del sbin[addr]
                chunk = free_at.pop(addr)
                del free_end[addr + chunk]
                inuse[addr] = chunk
                taken = 1
                if nb <= TCACHE_MAX_CHUNK:
                    cache = self._tcache_by[nb >> 4]
                    count = len(cache)
                    while sbin and len(cache) < TCACHE_COUNT:
                        for other in sbin:
                            break
                        del sbin[other], free_at[other], free_end[other + chunk]
                        inuse[other] = chunk
                        cache.append(other)
                        taken += 1
                    if self.recorder is not None:
                        self.recorder.filled(nb, count, len(cache))
                self.bin_changes += taken
                if not sbin:
                    _binmap_unmark(binmap, nb >> 4)
                return addr
        elif self.nfast:
            self._consolidate()
        unsorted = self.unsorted
        cached = False
        while True:
            if unsorted:
                # oldest first; the chunks looked at leave the bin together afterwards
                last = self.last_remainder if small else None
                count = len(unsorted)
                took = None
                done = 0
                for addr, chunk in unsorted.items():     # chunk: its size, as the maps hold it
                    done += 1
                    size = chunk
                    if size == nb:
                        del free_at[addr], free_end[addr + chunk]
                        self.inuse[addr] = chunk
                        if nb <= TCACHE_MAX_CHUNK and self.recorder is not None:
                            self.recorder.parked(nb, len(self._tcache_by[nb >> 4]))
                        if nb <= TCACHE_MAX_CHUNK and len(cache := self._tcache_by[nb >> 4]) < TCACHE_COUNT:
                            cache.append(addr)
                            cached = True
                            continue
                        took = addr
                        break
                    if done == count and addr == last and size > nb + MINSIZE:
                        # the last remainder, the only chunk left: split (below)
                        del free_at[addr], free_end[addr + chunk]
                        took = addr
                        break
                    # into its bin: a small bin's front (newest), or sorted into a large bin
                    if size < MIN_LARGE:
                        sbin = bins[size >> 4]
                        if not sbin:
                            _binmap_mark(binmap, size >> 4)
                        sbin[addr] = None
                    else:
                        self._large_place(addr, chunk)
                self.bin_changes += done
                if done == count:
                    unsorted.clear()
                    self._unsorted_dead = 0
                else:
                    for addr in list(islice(unsorted, done)):
                        del unsorted[addr]
                    # the places deleted stay at the dict's front, and each pass walks over
                    # them, until it is resized: when they outnumber its chunks, it is
                    # built afresh
                    self._unsorted_dead += done
                    if self._unsorted_dead > 2 * count + 64:
                        self.unsorted = unsorted = dict(unsorted)
                        self._unsorted_dead = 0
                if took is not None:
                    return took if size == nb else self._split(took, size, nb, True)
            if cached:
                if self.recorder is not None:
                    self.recorder.took(nb, len(self._tcache_by[nb >> 4]))
                return self._tcache_by[nb >> 4].pop()
            if not small:
                addr = self._large_fit(nb)
                if addr is not None:
                    return addr
            i = _binmap_after(binmap, nb >> 4 if small else bin_of(nb))   # smallbin_index
            if i < len(binmap):
                # the next non-empty bin up: its oldest (or smallest) chunk, split (the
                # rest to the unsorted bin: :meth:`_split` inline)
                idx = binmap[i]
                if idx < NSMALLBINS:
                    sbin = bins[idx]
                    for addr in sbin:
                        break
                    del sbin[addr]
                    size = idx << 4
                    emptied = not sbin
                else:
                    lbin = bins[idx]
                    size, addr = lbin.pop()
                    emptied = not lbin
                if emptied:
                    del binmap[i]
                chunk = free_at.pop(addr)
                if size - nb < MINSIZE:
                    del free_end[addr + chunk]
                    self.bin_changes += 1
                    self.inuse[addr] = chunk
                    return addr
                rest = addr + nb
                left = size - nb
                self.bin_changes += 2
                free_at[rest] = left
                free_end[addr + chunk] = rest
                unsorted[rest] = left
                if small:
                    self.last_remainder = rest
                self.inuse[addr] = nb
                return addr
            if self.brk - self.top >= nb + MINSIZE:
                break
            if not self.nfast:
                if nb >= self.mmap_threshold:
                    size = self._mapped_size(nb)
                    self.mapped += size
                    if self.fault is not None:
                        self.fault(size, True)
                    return ("mmap", size)
                break
            self._consolidate()
        addr = self._from_top(nb)
        self.inuse[addr] = nb
        return addr

    def _mapped_size(self, nb) -> int:
        """Bytes of an mmapped chunk for chunk size ``nb``: its header word and the chunk,
        whole pages (``sysmalloc``'s ``sysmalloc_mmap``, ``mremap_chunk``)."""
        return -(-(nb + SIZE_SZ) // self.page) * self.page

    def _large_fit(self, nb):
        """A large request from its own bin: the smallest chunk that fits (the second one
        of that size when there are several, which keeps the size's first chunk in
        place), split; None when none fits."""
        chunks = self.bins[bin_of(nb)]
        if not chunks or chunks[0][0] < nb:
            return None
        i = len(chunks) - 1
        while chunks[i][0] < nb:
            i -= 1
        while i > 0 and chunks[i - 1][0] == chunks[i][0]:
            i -= 1                       # the first chunk of that size
        if i + 1 < len(chunks) and chunks[i + 1][0] == chunks[i][0]:
            i += 1
        addr = chunks[i][1]
        return self._split(addr, self._bin_remove(addr), nb, False)

    def alloc(self, nbytes: int, align: int = 0):
        """Place one request of ``nbytes`` (``align``: posix_memalign's alignment, when more
        than malloc's 16 B; :data:`ZEROED`: a ``calloc``); returns its block."""
        if align:
            if align == ZEROED:
                return self.calloc(nbytes)
            nb = chunk_size(nbytes)
            block = self._memalign(nb, align) if align > 2 * SIZE_SZ else self._malloc(nb)
        else:
            # chunk_size and _malloc inlined (hot path): the tcache first, else _int_malloc
            nb = (nbytes + SIZE_SZ + 15) & ~15
            if nb < MINSIZE:
                nb = MINSIZE
            cached = self._tcache_by[nb >> 4] if nb <= TCACHE_MAX_CHUNK else None
            if self.recorder is not None and nb <= TCACHE_MAX_CHUNK:
                self.recorder.took(nb, len(cached))
            block = cached.pop() if cached else self._int_malloc(nb)
        live = self.live.get(nbytes)
        if live is None:
            self.live[nbytes] = [block]
        else:
            live.append(block)
        if self.alias and block in self.alias:
            return self._tag(block)
        return block

    def alloc_each(self, nbytes: int, count: int) -> tuple:
        """:meth:`alloc` of ``count`` requests of ``nbytes``, one after the other (a map's
        nodes cloned); returns their blocks in order (a loop the arena's build compiles)."""
        blocks = []
        for i in range(count):
            blocks.append(self.alloc(nbytes, 0))
        return tuple(blocks)

    def free_each(self, blocks, nbytes: int) -> None:
        """:meth:`free` of each of ``blocks`` (of ``nbytes``) in turn."""
        for block in blocks:
            self.free(block, nbytes)

    def calloc(self, nbytes: int):
        """``calloc``: placed by ``_int_malloc`` without the tcache (glibc 2.36's
        ``__libc_calloc`` only initialises it); returns its block."""
        block = self._int_malloc(chunk_size(nbytes))
        self.live.setdefault(nbytes, []).append(block)
        if self.alias and block in self.alias:
            return self._tag(block)
        return block

    def _tag(self, block) -> int:
        """A handle for ``block`` that no holder uses yet (its address is a handle that
        :attr:`alias` maps to another chunk)."""
        self._tags += 1
        self.alias[-self._tags] = block
        return -self._tags

    def realloc(self, block, old_nbytes: int, nbytes: int):
        """``realloc`` of ``block`` (a request of ``old_nbytes``) to ``nbytes``, as glibc's
        ``_int_realloc`` does it: shrink in place, grow into the top or into a free bin
        chunk right after it, else a new chunk from ``_int_malloc`` (no tcache) and a free
        of the old one; a chunk left with 32 B or more to spare frees the spare tail. An
        mmapped chunk is remapped to its new page-rounded size. Returns the new block."""
        if self.alias:
            block = self.alias.pop(handle_key(block), block)
            new = self._realloc(block, old_nbytes, nbytes)
            return self._tag(new) if new in self.alias else new
        return self._realloc(block, old_nbytes, nbytes)

    def _realloc(self, block, old_nbytes, nbytes):
        if self.runs:
            self._settle(block, old_nbytes)   # a block inside a carve run enters it first
        live = self.live[old_nbytes]
        if not _remove_newest(live, block):
            # an anonymous free of that size took this block already (as in free): this
            # realloc takes the block that free really meant, the newest one left
            taken = self._settle(None, old_nbytes) if self.runs else None
            block = taken if taken is not None else live.pop()
        new = self._resize(block, chunk_size(nbytes))
        self.live.setdefault(nbytes, []).append(new)
        return new

    def _resize(self, block, nb):
        """``_int_realloc`` of the chunk ``block`` to chunk size ``nb`` (the live lists left
        alone); returns the new block."""
        if type(block) is tuple:
            size = self._mapped_size(nb)
            if size > block[1] and self.fault is not None:
                self.fault(size - block[1], True)
            self.mapped += size - block[1]
            new = ("mmap", size)
        else:
            new = block
            size = self.inuse[block]
            after = block + size
            watched = self.recorder is not None and after == self.top and size < nb
            if watched:
                self.recorder.resizing(self, size, nb)
            if size >= nb:
                pass
            elif after == self.top and size + self.brk - self.top >= nb + MINSIZE:
                self.top = block + nb
                self._touch(self.top + 2 * SIZE_SZ)
                size = nb
            elif after in self.free_at and size + self.free_at[after] >= nb:
                size += self._bin_remove(after)
            else:
                new = self._int_malloc(nb)
                if new == after:
                    # the chunk right after it (a consolidation freed it): no copy
                    size += self.inuse.pop(after)
                    new = block
                else:
                    self._free_chunk(block)
                    size = None
            if size is not None:
                self.inuse[block] = size
                if size - nb >= MINSIZE:
                    self.inuse[block] = nb
                    self._free_split(block + nb, size - nb)
            if watched:
                self.recorder.resized(self)
        return new

    def _memalign(self, nb, align):
        """``_int_memalign``: a chunk of ``nb + align + MINSIZE`` bytes, its misaligned head and
        its tail beyond ``nb`` split off and freed (small ones park in the tcache, next to
        the block: they keep it from merging with its neighbours when it is freed)."""
        addr = self._int_malloc(chunk_size(nb + align + MINSIZE))
        if type(addr) is tuple:
            return addr
        size = self.inuse[addr]
        user = addr + 2 * SIZE_SZ          # the heap starts page-aligned
        if user % align:
            start = -(-user // align) * align - 2 * SIZE_SZ
            if start - addr < MINSIZE:
                start += align
            self._free_split(addr, start - addr)
            size -= start - addr
            addr = start
        if size > nb + MINSIZE:
            self._free_split(addr + nb, size - nb)
            size = nb
        self.inuse[addr] = size
        return addr

    def alloc_many(self, nbytes: int, count: int) -> None:
        """``count`` requests of ``nbytes`` in a row, placed as ``count`` single requests
        would be, in few steps where glibc's choice repeats: pieces of the top as far as
        it reaches (nothing else can serve the request) and pieces of the last
        remainder (a small request it serves); otherwise one at a time (a caller that
        batches several sizes, such as a B-tree clone of leaves and internal nodes,
        places them size by size rather than interleaved)."""
        nb = chunk_size(nbytes)
        live = self.live.setdefault(nbytes, [])
        inuse = self.inuse
        small = nb < MIN_LARGE
        while count:
            if (nb >= self.mmap_threshold or self.tcache.get(nb) or self.fast.get(nb)
                    or (nb >= MIN_LARGE and self.nfast) or (small and self.bins[nb >> 4])):
                live.append(self._malloc(nb))      # one at a time, as _malloc decides
                count -= 1
                continue
            if self.unsorted:
                last = self.last_remainder
                if not (small and len(self.unsorted) == 1 and last in self.unsorted
                        and self.free_at[last] > nb + MINSIZE):
                    live.append(self._malloc(nb))  # sorts the unsorted bin first
                    count -= 1
                    continue
                # pieces of the last remainder while more than nb + MINSIZE is left
                size = self.free_at[last]
                k = min(count, (size - MINSIZE - 1) // nb)
                self._bin_remove(last)
                for at in range(last, last + k * nb, nb):
                    inuse[at] = nb
                live.extend(range(last, last + k * nb, nb))
                self._bin_insert(last + k * nb, size - k * nb)
                self.last_remainder = last + k * nb
                self.bin_changes += 2 * (k - 1)
                count -= k
                continue
            if self._largest_free() >= nb:
                live.append(self._malloc(nb))      # from a bin
                count -= 1
                continue
            fit = (self.brk - self.top - MINSIZE) // nb
            if fit <= 0:
                live.append(self._malloc(nb))      # consolidates, or grows the heap
                count -= 1
                continue
            k = min(fit, count)
            start = self.top
            self.top = start + k * nb
            self._touch(self.top + 2 * SIZE_SZ)
            for addr in range(start, self.top, nb):
                inuse[addr] = nb
            live.extend(range(start, self.top, nb))
            count -= k

    def free(self, block=None, nbytes=None) -> None:
        """Free ``block`` (or, with ``block=None``, the newest live block of ``nbytes``)."""
        if self.alias and block is not None:
            block = self.alias.pop(handle_key(block), block)
        if self.runs:
            taken = self._settle(block, nbytes)
            if taken is not None:
                self._free_chunk(taken)
                return
        if block is None:
            block = self.live[nbytes].pop()
        elif nbytes is not None:
            live = self.live[nbytes]
            if live[-1] == block:
                live.pop()
            else:
                if not _remove_newest(live, block):
                    # an anonymous free of that size took this block already: this one
                    # frees the block that free really meant (the newest one left)
                    taken = self._settle(None, nbytes) if self.runs else None
                    if taken is not None:
                        self._free_chunk(taken)
                        return
                    block = live.pop()
        if type(block) is tuple:
            self._free_mapped(block)
            return
        self._free_chunk(block)

    def _free_mapped(self, block) -> None:
        """``munmap_chunk``: an mmapped chunk goes; the dynamic thresholds may rise."""
        size = block[1]
        self.mapped -= size
        if self.dynamic and self.mmap_threshold < size <= MMAP_THRESHOLD_MAX:
            self.mmap_threshold = size
            self.trim_threshold = 2 * size

    def _free_chunk(self, addr) -> None:
        """``_int_free`` of an arena chunk: the tcache, a fastbin, or merged into the bins or
        the top (then maybe ``malloc_consolidate`` and ``systrim``)."""
        size = self.inuse[addr]
        self._free_sized(addr, size, self._tcache_by[size >> 4] if size <= TCACHE_MAX_CHUNK else None)

    def _free_split(self, addr, size) -> None:
        """A chunk of ``size`` just split off the end or the start of another (``_memalign``,
        ``_resize``) enters ``inuse`` and is freed: :meth:`_free_chunk`, its size known."""
        self.inuse[addr] = size
        self._free_sized(addr, size, self._tcache_by[size >> 4] if size <= TCACHE_MAX_CHUNK else None)

    def _free_sized(self, addr, size, cached) -> None:
        """:meth:`_free_chunk` of the chunk at ``addr``, its ``size`` known and ``cached`` its
        tcache bin (None: a size the tcache does not hold): that bin while it has room, else
        :meth:`_free_uncached`. Every free of an arena chunk takes this path (``free``,
        ``_free_chunk``, the replay's frees); a recorder is told the bin's length."""
        if cached is not None:
            if self.recorder is not None:
                self.recorder.parked(size, len(cached))
            if len(cached) < TCACHE_COUNT:
                cached.append(addr)
                return
        self._free_uncached(addr, size)

    def _free_uncached(self, addr, size) -> None:
        """:meth:`_free_chunk` past the tcache (its bin for ``size`` full, or none): a
        fastbin, or merged into the bins or the top."""
        if size <= MAX_FAST:
            fast = self._fast_by[size >> 4]
            if self.recorder is not None:
                self.recorder.fast_parked(size, len(fast))
            fast.append(addr)
            self.nfast += 1
            return
        if self.recorder is not None:
            self.recorder.merging(self)
        merged = self._merge_run([addr], size)
        if self.recorder is not None:
            self.recorder.merged(self, merged)
        if merged >= CONSOLIDATION_THRESHOLD:
            if self.nfast:
                self._consolidate()
            if self.brk - self.top >= self.trim_threshold:
                self._systrim()

    def free_many(self, nbytes: int, count: int) -> None:
        """``count`` frees by size (the newest live blocks of ``nbytes``, newest first), as
        single frees would do them; blocks that lie each right below the one freed before
        them and would merge into the bins one after the other are merged in one step
        (:meth:`_merge_many`)."""
        live = self.live.get(nbytes)
        while count:
            n = 0 if self.runs else self._merge_many(live, count)
            if not n:
                self.free(None, nbytes)
                n = 1
            count -= n

    def _merges(self, block) -> bool:
        """Whether a free of ``block`` now would merge it into the bins (not the tcache, a
        fastbin or the top, not an mmapped chunk)."""
        if type(block) is not int:
            return False
        size = self.inuse[block]
        if size <= MAX_FAST or (size <= TCACHE_MAX_CHUNK and
                                len(self.tcache.get(size, ())) < TCACHE_COUNT):
            return False
        return block + size != self.top

    def _merge_many(self, live, count) -> int:
        """Free the newest blocks of ``live`` (up to ``count``) that lie each right below the
        one before and would each merge into the bins, in one step; returns how many (0:
        none). Single frees would merge each into the chunk the previous one left, so the
        bins end with one chunk spanning them, merged with the free chunks right above
        and below. A free whose merged chunk reaches 64 KiB may consolidate the fastbins
        or trim the top: unless neither can happen (no fastbin chunk, the top below the
        trim threshold), the step stops before such a free, which is then done alone."""
        if not live or not self._merges(live[-1]):
            return 0
        inuse, free_at = self.inuse, self.free_at
        high = live[-1]
        end = high + inuse[high]
        above = free_at.get(end, 0)
        bounded = self.nfast or self.brk - self.top >= self.trim_threshold
        merged = above
        low, n = high, 0
        while n < count and n < len(live):
            block = live[-1 - n]
            if n and (type(block) is not int or block + inuse[block] != low
                      or not self._merges(block)):
                break
            size = inuse[block]
            below = self.free_end.get(block)
            # this free's merged chunk: the ones before, this block, and (if free) the chunk
            # right below it, which only the last block of the step can have
            if bounded and merged + size + (free_at[below] if below is not None else 0) \
                    >= CONSOLIDATION_THRESHOLD:
                break
            merged += size
            low, n = block, n + 1
        if not n:
            return 0
        for _ in range(n):
            del inuse[live.pop()]
        self.bin_changes += n
        start = low
        prev = self.free_end.get(low)
        if prev is not None:
            self._bin_remove(prev)
            start = prev
        if above:
            self._bin_remove(end)
            end += above
        self._bin_insert(start, end - start)
        return n

    def nested(self, events) -> tuple:
        """A recursion's requests (:meth:`sim.platform.heap.Heap.nested`'s ``events``, a
        list: > 0 an allocation of that many bytes, < 0 a free of the block allocated
        that many events before), each made as :meth:`alloc` and :meth:`free` make it, in
        a loop that the arena's build compiles. Returns ``(allocations, peak)``: the
        allocations made and the most bytes live at once above the run's start."""
        if self.recorder is not None or self.runs or self.alias:
            handles = []
            live = peak = allocs = 0
            for i in range(len(events)):
                event = events[i]
                if event > 0:
                    live += event
                    if live > peak:
                        peak = live
                    allocs += 1
                    handles.append(self.alloc(event, 0))
                else:
                    nbytes = events[i + event]
                    live -= nbytes
                    self.free(handles[i + event], nbytes)
                    handles.append(None)
            return allocs, peak
        return self._nested_folded(events)

    def _nested_folded(self, events) -> tuple:
        """:meth:`nested` where nothing listens and no handle is translated: an allocation
        its size's tcache bin can serve is held back (``pending``), and where its free is
        the next event of that kind to reach the arena (every one held back after it freed
        already) the pair is left out: the chunk would leave the top of its bin and go
        back to it (the bin had room: the chunk came from it), and its live list would
        gain and lose it at the end; the pairs held back between change nothing either.
        Any other request makes the held-back allocations first, in their order: the
        arena is then where the requests one by one would have left it."""
        n = len(events)
        handles = [None] * n
        pending = array("q", bytes(8 * n))     # event indexes of the allocations held back
        popped = array("q", bytes(8 * (TCACHE_MAX_CHUNK // 16 + 1)))   # per tcache bin
        held = 0
        tcache = self.tcache
        bins = [tcache.get(size) for size in range(0, TCACHE_MAX_CHUNK + 1, 16)]
        live = peak = allocs = 0
        for i in range(n):
            event = events[i]
            if event > 0:
                live += event
                if live > peak:
                    peak = live
                allocs += 1
                nb = (event + SIZE_SZ + 15) & ~15
                if nb < MINSIZE:
                    nb = MINSIZE
                if nb <= TCACHE_MAX_CHUNK and len(bins[nb >> 4]) > popped[nb >> 4]:
                    popped[nb >> 4] += 1
                    pending[held] = i
                    held += 1
                    continue
                if held:
                    self._unhold(events, handles, pending, held, popped)
                    held = 0
                handles[i] = self.alloc(event, 0)
            else:
                at = i + event
                nbytes = events[at]
                live -= nbytes
                if held and pending[held - 1] == at:
                    held -= 1
                    nb = (nbytes + SIZE_SZ + 15) & ~15
                    popped[(nb if nb >= MINSIZE else MINSIZE) >> 4] -= 1
                    continue
                if held:
                    self._unhold(events, handles, pending, held, popped)
                    held = 0
                self.free(handles[at], nbytes)
        if held:
            self._unhold(events, handles, pending, held, popped)
        return allocs, peak

    def _unhold(self, events, handles, pending, held, popped) -> None:
        """The first ``held`` allocations of ``pending`` that :meth:`_nested_folded` held
        back, made in their order."""
        for k in range(held):
            at = pending[k]
            nbytes = events[at]
            handles[at] = self.alloc(nbytes, 0)
            nb = (nbytes + SIZE_SZ + 15) & ~15
            popped[(nb if nb >= MINSIZE else MINSIZE) >> 4] = 0

    # -- address-free programs ----------------------------------------------------------
    def run_program(self, flat) -> int:
        """Make the requests of an address-free program
        (:mod:`sim.engine.fastforward.arenatokens`: ``flat``, an int64 array of 4-int
        tokens), as :meth:`alloc`, :meth:`free` and :meth:`realloc` one by one would make
        them. A free names its block by its rank among the live blocks of its size
        (0: the newest), so the program holds no address and replays wherever its
        sizes' live lists are as they were. A repeated body that frees every block it
        allocates, each chunk size last-in-first-out, is left out once its tcache bins
        hold its depth of chunks (:meth:`_neutral`): its allocations would take chunks
        off the top of their bins and its frees put them back, the live lists gaining
        and losing them at their ends, so the arena would end as it began; so is a folded
        run (``N``), whose tokens are made only where the bins are short. Returns how many
        folded runs without tokens found their bins short (0: the arena is exact)."""
        return self._run_span(flat, 0, len(flat) // 4)

    def _run_span(self, flat, start, end):
        """The tokens ``start`` to ``end`` of :meth:`run_program`'s ``flat``; returns how
        many folded runs found their tcache bins short and had no tokens to make."""
        short = 0
        i = start
        while i < end:
            code = flat[4 * i]
            a = flat[4 * i + 1]
            b = flat[4 * i + 2]
            c = flat[4 * i + 3]
            if code == 0:                  # an allocation of a bytes, alignment b
                self.alloc(a, b)
            elif code == 1:                # a free of the live block of a bytes ranked b
                self._free_rank(a, b)
            elif code == 2:                # c frees of a bytes, ranked b, b - 1, ...
                for k in range(c):
                    self._free_rank(a, b - k)
            elif code == 3:                # the block of b bytes ranked c grown to a
                live = self.live[b]
                self.realloc(live[len(live) - 1 - c], b, a)
            elif code == 6:                # a folded balanced run: a depths, b tokens
                body = i + 1 + a
                stop = body + b
                if not self._neutral(flat, i + 1, body):
                    if b:
                        short += self._run_span(flat, body, stop)
                    else:
                        short += 1
                i = stop
                continue
            else:                          # b rounds of the next a tokens, c of them depths
                body = i + 1 + (c if c > 0 else 0)
                stop = i + 1 + a
                for k in range(b):
                    if c > 0 and self._neutral(flat, i + 1, body):
                        break
                    short += self._run_span(flat, body, stop)
                i = stop
                continue
            i += 1
        return short

    def _neutral(self, flat, start, end) -> bool:
        """Whether each tcache bin the depth tokens ``start`` to ``end`` name (chunk size,
        depth) holds at least that many chunks, nothing listens and no handle is
        translated: a balanced body then leaves the arena as it found it."""
        if self.recorder is not None or self.runs or self.alias:
            return False
        tcache = self.tcache
        for j in range(start, end):
            cached = tcache.get(flat[4 * j + 1])
            if cached is None or len(cached) < flat[4 * j + 2]:
                return False
        return True

    def _free_rank(self, nbytes, rank) -> None:
        """Free the live block of ``nbytes`` ranked ``rank`` from the newest (0)."""
        live = self.live[nbytes]
        at = len(live) - 1 - rank
        block = live[at]
        if self.alias or self.runs:
            self.free(block, nbytes)
            return
        del live[at]
        if type(block) is tuple:
            self._free_mapped(block)
        else:
            self._free_chunk(block)

    # -- replay -------------------------------------------------------------------------
    @staticmethod
    def compile(template) -> "ReplayProgram":
        """A template of one iteration's requests, ready for :meth:`replay`. ``template``:
        ``(kind, nbytes, arg)`` in order, kind one of ``"alloc"`` (arg: the alignment, 0
        or :data:`ZEROED`), ``"free"`` (arg: ``(back, index)``, the ``index``-th block
        allocated ``back`` iterations before this one, 0 this one; or None, the newest
        live block of ``nbytes``), ``"realloc"`` (arg: ``(old nbytes, back, index)``),
        ``"alloc_many"`` and ``"free_many"`` (arg: the count). An alloc or realloc makes
        the iteration's next block."""
        return ReplayProgram(template)

    def replay(self, program: "ReplayProgram", n: int, carry) -> list:
        """Make the requests of :meth:`compile`'s ``program`` ``n`` times, one iteration
        after the other, exactly as single :meth:`alloc`, :meth:`free` and
        :meth:`realloc` calls in that order would (placement, top, break, trims, page
        faults, the live lists a free by size takes from). ``carry``: the blocks each of
        the ``program.depth`` iterations before the first one allocated, as chunks (not
        handles), oldest first. Returns the same for the last ``program.depth``
        iterations, for :meth:`rebind`."""
        carry = [list(blocks) for blocks in carry]
        if len(carry) != program.depth:
            raise ValueError("replay: the carry does not match the program's depth")
        if n <= 0:
            return carry
        # the replay names chunks, not handles: none is translated or tagged
        alias, self.alias = self.alias, {}
        try:
            # carve runs, or a recorder listening (fast-forward's window recorder: the
            # compiled loop pops tcache chunks and skips neutral pairs without telling
            # it): the requests through the public calls
            if self.runs or self.recorder is not None:
                for _ in range(n):
                    carry.append(self._replay_calls(program.template, carry))
                    del carry[0]
                return carry
            # the blocks of sizes the program frees only by name enter and leave their live
            # lists once, after the last iteration (no free by size reads them meanwhile)
            live = self.live
            before = {nbytes: {carry[-d][j] for d, j in positions}
                      for nbytes, positions in program.held.items()}
            carry = self._replay_run(program.flat, n, carry)
            for nbytes, positions in program.held.items():
                gone = before[nbytes]
                kept = [b for b in live.get(nbytes, ()) if b not in gone]
                kept.extend(carry[-d][j] for d, j in positions)
                live[nbytes] = kept
            return carry
        finally:
            self.alias = alias

    def replay_trace(self, calls, handles, placed) -> None:
        """Requests recorded in order, made again through :meth:`alloc`, :meth:`free` and
        :meth:`realloc` (fast-forward's replay of an iteration's trace on the arena, in a
        loop the arena's build compiles). ``calls``: ``(position, kind, nbytes, arg)``
        each -- kind 0 an allocation (``arg``: its alignment), 1 a free of the block
        allocated at position ``arg``, 2 a realloc of that block (``arg``: ``(old
        nbytes, position)``); ``handles``: position -> block, the blocks made added and
        the ones freed taken out; ``placed``: a list that gets every block handed out,
        or None."""
        for i, kind, nbytes, arg in calls:
            if kind == 0:
                block = self.alloc(nbytes, arg)
            elif kind == 1:
                self.free(handles.pop(arg), nbytes)
                continue
            else:
                block = self.realloc(handles.pop(arg[1]), arg[0], nbytes)
            handles[i] = block
            if placed is not None:
                placed.append(block)

    def _replay_calls(self, template, carry) -> list:
        """One iteration of ``template`` through the public calls (carve runs present, or
        a recorder set)."""
        blocks = []
        for kind, nbytes, arg in template:
            if kind == "alloc":
                blocks.append(self.alloc(nbytes, arg))
            elif kind == "free":
                self.free(None if arg is None else (blocks if not arg[0] else carry[-arg[0]])[arg[1]],
                          nbytes)
            elif kind == "realloc":
                old, back, index = arg
                blocks.append(self.realloc((blocks if not back else carry[-back])[index], old,
                                           nbytes))
            elif kind == "alloc_many":
                self.alloc_many(nbytes, arg)
            else:
                self.free_many(nbytes, arg)
        return blocks

    def _replay_run(self, flat, n, carry):
        """``n`` iterations of a compiled program (:attr:`ReplayProgram.flat`), each
        placed as :meth:`alloc`, :meth:`free` and :meth:`realloc` would place its
        requests one by one (:meth:`_replay_step`), in a loop that the arena's build
        compiles (C ints, C calls). ``carry``: as :meth:`replay`'s (a list), returned
        after the ``n``-th iteration."""
        tcache = self.tcache
        count = len(flat)
        # the tcache bin each allocation takes from and each free mostly puts back into
        # (every bin is there from the start, never replaced), by request
        cache = [tcache.get(flat[i + 2]) if flat[i] == _ALLOC_HELD else
                 tcache.get(flat[i + 5]) if flat[i] == _FREE_HELD else None
                 for i in range(0, count, 6)]
        # the chunk size of each block of this iteration (``known``) and of the one before
        # (``before``) where a tcache bin gave it (the bin's size; 0: not known, the free
        # looks it up): at most one block a request
        known = array("q", bytes(8 * (count // 6)))
        before = array("q", bytes(8 * (count // 6)))
        # an iteration's blocks fill a list of as many places in order (one block per
        # allocating request), not one grown request by request: the list the carry
        # drops after each iteration is the next one's
        made = 0
        for i in range(0, count, 6):
            if flat[i] in _ALLOCATING:
                made += 1
        spare = [None] * made
        for _ in range(n):
            self._replay_step(flat, spare, carry, cache, known, before)
            carry.append(spare)
            spare = carry.pop(0)
            if len(spare) != made:
                spare = [None] * made
            known, before = before, known
        return carry

    def _replay_step(self, flat, blocks, carry, cache, known, before) -> None:
        """One iteration of :meth:`_replay_run`: its blocks put in ``blocks`` in order (a list
        of as many places, which the iteration fills from its start), their
        chunk sizes where a tcache bin gave them to ``known`` (``before``: the previous
        iteration's). The tcache's pop inline, the live lists of
        :attr:`ReplayProgram.held` sizes left alone, an allocation freed right away
        skipped while its tcache bin serves it (the chunk would pop off the bin and be
        pushed back); frees of held sizes through :meth:`_free_sized` (the bin their
        request asked for looked up once per replay), the other requests through
        :meth:`_replay_call`."""
        inuse, tcache_by = self.inuse, self._tcache_by
        count = len(flat)
        depth = len(carry)
        previous = carry[depth - 1] if depth else None
        i = 0
        j = 0                                       # the request's index: i // 6
        m = 0                                       # the blocks made so far
        while i < count:
            code = flat[i]
            if code == 0:                           # _ALLOC_HELD
                cached = cache[j]
                if cached:
                    if flat[i + 5]:                 # a neutral pair: left as it is
                        known[m] = 0
                        blocks[m] = cached[-1]
                        m += 1
                        i += 12
                        j += 2
                        continue
                    known[m] = flat[i + 2]
                    blocks[m] = cached.pop()
                else:
                    known[m] = 0
                    blocks[m] = self._int_malloc(flat[i + 2])
                m += 1
            elif code == 1:                         # _FREE_HELD
                a = flat[i + 3]
                b = flat[i + 4]
                if not a:
                    block = blocks[b]
                    size = known[b]
                elif a == 1:
                    block = previous[b]
                    size = before[b]
                else:
                    block = carry[depth - a][b]
                    size = 0
                if size:
                    pass
                elif type(block) is int:
                    size = inuse[block]
                else:
                    self._free_mapped(block)
                    i += 6
                    j += 1
                    continue
                if size == flat[i + 5]:             # the size its request asked for
                    self._free_sized(block, size, cache[j])
                else:
                    self._free_sized(block, size,
                                     tcache_by[size >> 4] if size <= TCACHE_MAX_CHUNK else None)
            else:
                block = self._replay_call(code, flat[i + 1], flat[i + 2], flat[i + 3],
                                          flat[i + 4], blocks, carry)
                if block is not None:               # an allocating request's block
                    known[m] = 0
                    blocks[m] = block
                    m += 1
            i += 6
            j += 1

    def _replay_call(self, code, nbytes, nb, a, b, blocks, carry):
        """A request of :meth:`_replay_run` (its five fields) that is neither an
        allocation nor a free of a held size: the arena's own calls. Returns the block an
        allocating request made (None: the request made none)."""
        if code == 2:                               # _ALIGNED_HELD
            return self._memalign(nb, a) if a > 2 * SIZE_SZ else self._malloc(nb)
        elif code == 3:                             # _ZEROED_HELD
            return self._int_malloc(nb)
        elif code == 4:                             # _REALLOC_HELD
            return self._resize((blocks if not a else carry[len(carry) - a])[b], nb)
        elif code == 5:                             # _ALLOC
            return self.alloc(nbytes, a)
        elif code == 6:                             # _FREE
            self.free((blocks if not a else carry[len(carry) - a])[b], nbytes)
        elif code == 7:                             # _FREE_NEWEST
            self.free(None, nbytes)
        elif code == 8:                             # _REALLOC
            return self.realloc((blocks if not a else carry[len(carry) - a])[b], nb, nbytes)
        elif code == 9:                             # _ALLOC_MANY
            self.alloc_many(nbytes, a)
        else:
            self.free_many(nbytes, a)
        return None

    def rebind(self, pairs) -> None:
        """Holders of blocks name chunks by the handles an exact run gave them: after a
        replay, ``pairs`` of ``(handle, chunk)`` say which chunk each such handle now
        means (frees and reallocs of the handle reach that chunk)."""
        alias = self.alias
        for handle, chunk in pairs:
            # an mmapped chunk's handle (a tuple; another of the same size is equal) is
            # the same chunk only by identity
            same = chunk == handle if type(handle) is int else chunk is handle
            if same:
                alias.pop(handle_key(handle), None)
            else:
                alias[handle_key(handle)] = chunk

    def chunk_of(self, handle):
        """The chunk ``handle`` names (see :meth:`rebind`)."""
        if not self.alias:
            return handle
        return self.alias.get(handle_key(handle), handle)

    # -- carve runs ---------------------------------------------------------------------
    def carves(self, nbytes: int, chunk=None) -> bool:
        """Whether a request of ``nbytes`` now would be carved from the top (no tcache,
        fastbin or bin chunk serves it, the unsorted bin is empty, no consolidation runs
        first, it is not mmapped), assuming the top may grow; or, with ``chunk`` (the
        address of a free chunk), split off the start of that chunk as the last
        remainder: a small request, ``chunk`` the only unsorted chunk and more than
        ``nb + MINSIZE`` long."""
        nb = chunk_size(nbytes)
        if nb <= TCACHE_MAX_CHUNK and self.tcache.get(nb):
            return False
        if nb <= MAX_FAST and self.fast.get(nb):
            return False
        if nb >= MIN_LARGE and self.nfast:
            return False
        if nb < MIN_LARGE and self.bins[nb >> 4]:
            return False
        if chunk is not None:
            return (nb < MIN_LARGE and chunk == self.last_remainder
                    and len(self.unsorted) == 1 and chunk in self.unsorted
                    and self.free_at[chunk] > nb + MINSIZE)
        if self.unsorted or self._largest_free() >= nb:
            return False
        return nb <= self.page and nbytes < self.mmap_threshold

    def carve_run(self, total: int, sizes, contents, pinned=None, tail=None,
                  chunk=None, chunks=0, borrowed=()) -> CarveRun:
        """Carve ``total`` bytes of chunks from the top in a row, as single requests would be,
        each of them carved (see :meth:`carves`) and none larger than a page. ``sizes``:
        the request sizes of the live blocks among them; ``contents``, ``pinned``: see
        :class:`CarveRun` (the caller sets the tcache and fastbins).

        In closed form: the heap grows as ``sysmalloc`` would at each request that no
        longer fits the top -- each growth leaves the break at the first page boundary
        at least ``top_pad`` past that request, which (with a page-multiple ``top_pad``
        and chunks of at most a page) is always ``top_pad`` plus one page past the
        previous break -- and the resident end follows the new top. The other chunks
        enter ``inuse`` and the live lists only when a free reaches one of them.

        With ``chunk`` (the last remainder, the only unsorted chunk, at least ``total +
        MINSIZE`` long, and every request small: see :meth:`carves`) they are split off
        that chunk instead; what is left stays the last remainder."""
        if chunk is not None:
            size = self.free_at[chunk]
            if size - total < MINSIZE:
                raise ValueError("carve_run: the chunk is too small")
            self._bin_remove(chunk)
            self._bin_insert(chunk + total, size - total)
            self.last_remainder = chunk + total
            start, end = chunk, chunk + total
        else:
            if self.top_pad % self.page or self.brk - self.top < MINSIZE:
                raise ValueError("carve_run needs a page-multiple top pad and a top chunk")
            start = self.top
            end = start + total
            over = end + MINSIZE - self.brk
            if over > 0:
                step = self.top_pad + self.page
                self.brk += -(-over // step) * step
            self.top = end
            self._touch(end + 2 * SIZE_SZ)
        run = CarveRun(start, end, contents, tuple(sizes), dict(pinned or {}), tail, chunks,
                       tuple(borrowed))
        self.inuse.update(run.pinned)
        for addr in run.borrowed:
            self._borrowed[addr] = run
        for nbytes in run.sizes:
            live = self.live.get(nbytes)
            if live is None:
                self.live[nbytes] = [run]
            else:
                live.append(run)
        i = bisect_right(self._run_starts, start)
        self._run_starts.insert(i, start)
        self.runs.insert(i, run)
        return run

    def _settle(self, block, nbytes):
        """Make the carve runs ready for a free of ``block`` (or of the newest ``nbytes``):
        a free by size whose newest block is in a run takes it from the run's end
        (returned, pinned: the caller frees that chunk); a free of a chunk still inside
        a run enters the run's chunks first."""
        if block is None:
            live = self.live.get(nbytes)
            while live and type(live[-1]) is CarveRun:
                run = live[-1]
                taken = run.taken.get(nbytes, 0)
                # a few frees take blocks from the run's end; more enter the whole run
                got = None if run.tail is None or taken >= TAIL_FREES else run.tail(nbytes, taken)
                if got:
                    addr, nb = got
                    self._borrowed.pop(addr, None)
                    run.taken[nbytes] = taken + 1
                    run.pinned[addr] = nb
                    self.inuse[addr] = nb
                    return addr
                if got is None and run.tail is not None and taken < TAIL_FREES:
                    live.pop()          # every block of that size left the run already
                else:
                    self._materialize(run)
        elif type(block) is int:
            if block not in self.inuse:
                i = bisect_right(self._run_starts, block) - 1
                if i >= 0 and block < self.runs[i].end:
                    self._materialize(self.runs[i])
            elif block in self._borrowed:
                self._materialize(self._borrowed[block])
        return None

    def _materialize(self, run) -> None:
        budget = self.chunk_budget
        if budget is not None and len(self.inuse) + run.chunks > budget:
            raise ArenaBudgetExceeded(
                f"memory budget exceeded: a free reached a block of a fast-forwarded loop, "
                f"and entering its {run.chunks} chunks one by one would hold more than "
                f"{budget} glibc arena chunks (raise --max-nodes)")
        i = self.runs.index(run)
        del self.runs[i], self._run_starts[i]
        for addr in run.borrowed:
            if self._borrowed.get(addr) is run:
                del self._borrowed[addr]
        chunks, placed = run.contents()
        inuse, pinned = self.inuse, run.pinned
        addr = run.start
        for at, nb in chunks:
            if at != addr:
                raise AssertionError("a carve run's chunks do not follow one another")
            if at not in pinned:
                inuse[at] = nb
            addr += nb
        if addr != run.end or set(placed) - set(run.sizes):
            raise AssertionError("a carve run's chunks do not fill its range")
        for nbytes in run.sizes:
            blocks = placed.get(nbytes, [])
            taken = run.taken.get(nbytes, 0)
            if taken:
                if blocks[-taken:] != [a for a in blocks[-taken:] if a in pinned]:
                    raise AssertionError("a carve run's taken blocks are not its newest")
                blocks = blocks[:-taken]
            live = self.live[nbytes]
            j = len(live) - 1
            while j >= 0 and live[j] is not run:
                j -= 1
            if j < 0:
                if blocks:
                    raise AssertionError("a carve run left a live list with blocks")
                continue
            live[j:j + 1] = blocks

    def materialize(self) -> None:
        """Enter every carve run's chunks one by one (tests compare arenas chunk by chunk)."""
        while self.runs:
            self._materialize(self.runs[-1])

    # -- what the rest of the simulator reads ---------------------------------------------
    def resident_bytes(self) -> int:
        page = self.page
        return -(-self.resident_end // page) * page + self.mapped

    def state(self) -> tuple:
        """The whole placement, for fast-forward's comparison of iterations: what decides
        where later requests land. Compared as glibc sees it: the order of a bin, a tcache
        bin and a fastbin counts (malloc takes from one end of each); the order in which
        this model's dicts were filled (free chunks by address, bins by size) does not.
        The live lists (which block a free by size takes) are left out: a carve run stands
        in them for its blocks, so they differ in form between an arena fast-forward carved
        and one exact mode filled block by block. Two iterations that end with the same
        chunks and bins but live blocks in another order would compare equal; the
        equivalence tests have not met one."""
        def stacks(by_size):
            return hash(frozenset((s, tuple(v)) for s, v in by_size.items() if v))
        return (self.brk, self.top, self.resident_end, self.mapped, self.mmap_threshold,
                self.nfast, hash(frozenset(self.free_at.items())), self.last_remainder,
                tuple(self.unsorted), hash(tuple((i, tuple(c)) for i, c in enumerate(self.bins) if c)),
                stacks(self.tcache), stacks(self.fast))


class PtmallocArena(_Arena):
    """The main arena plus its mmapped chunks; see the module docstring.

    A block is the chunk's address (an ``int``), or ``("mmap", size)`` for an
    mmapped chunk. ``fault`` (optional) is called with ``(bytes, mapped)`` when
    pages become resident: heap growth (``mapped=False``) or a new mapping
    (``mapped=True``); ``trim`` (optional) with ``(bytes, 1)`` when a trim gives the
    top's ``bytes`` back to the kernel.

    Examples
    --------
    >>> a = PtmallocArena()
    >>> x = a.alloc(1 << 20)             # above the initial mmap threshold: mmapped
    >>> a.free(x)                         # the threshold rises to its size
    >>> y = a.alloc(1 << 20); z = a.alloc(100)
    >>> isinstance(y, int), a.resident_bytes() // 1024
    (True, 1028)
    >>> a.free(y)                         # z sits between y and the top: no trim
    >>> a.brk // 1024, a.resident_bytes() // 1024
    (1156, 1028)
    >>> a.free(z); a.free(a.alloc(1 << 20))  # z parks in the tcache, y's chunk is reused
    >>> b = [a.alloc(1 << 20) for _ in range(3)]
    >>> a.resident_bytes() // 1024, a.trims
    (3076, 0)
    >>> for x in b: a.free(x)
    >>> a.trims, a.brk // 1024, a.resident_bytes() // 1024   # the top reached 2056 KiB
    (1, 1156, 1156)
    """


# the compiled build of this file (setup.py; the fields' types in its .pxd) in place
# of its classes when built from this very text; SIM_PURE_ARENA=1 keeps the Python
adopt_compiled(globals(), "sim.platform.ptmalloc", "_ptmalloc_c", "SIM_PURE_ARENA", "the arena")
