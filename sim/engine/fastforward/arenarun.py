"""Fast-forward of a node-leaving loop on glibc's arena, in closed form.

A loop that leaves a node behind per iteration (``graphs`` and ``nodes`` effects of
:mod:`sim.engine.fastforward.repeat`) cannot hand a glibc arena its blocks size by size: each
request lands where the ones before it left room. But such a loop on the arena is
usually as regular as the loop itself. :func:`trace` replays one iteration's heap
events (the template fast-forward recorded) on the arena and names every chunk it
touches by where it came from instead of by its address:

* ``("c", k)``: the ``k``-th chunk the iteration carved from the top;
* ``("p", position)``: the chunk a tcache bin or fastbin held at that position
  (``(kind, chunk size, index)``) when the iteration began.

The iteration qualifies when it touched nothing else: no chunk from the bins, no
merge, trim or mmap, frees only of blocks it allocated, carves one after the other
at the top, the tcache and fastbins as long at its end as at its start, and every
append to a locator BTreeMap would carve its new nodes from the top too. Then
nothing ``malloc`` and ``free`` decide in later iterations depends on an address
(tcache and fastbins are last-in first-out stacks, the top grows by itself), so
every later iteration does the same with other addresses: it carves the same
requests in the same order (plus the BTreeMap nodes of the appends that split a
node, whose number :func:`~sim.platform.btree.append_counts` gives in closed form),
keeps the same allocations, and leaves at each tcache and fastbin position the
chunk its *wiring* names (a chunk carved by that iteration, or the one at another
position when it began). Where a BTreeMap leaf split takes a chunk from the tcache (a
tracked loop: ``analyse``'s temporary leaf parks one there each iteration), one
iteration does not restore the tcache, but a period of seven does (:func:`window`):
traced with ``leaves=True``, the period's split leaf is one of its own allocations.

:func:`advance` applies ``n`` such iterations in closed form: the carve addresses of
iteration ``i`` follow from the carves per iteration and the BTreeMap nodes before
it; the chunks the tcache and fastbins hold at the end follow the wiring back to the
iteration that carved them (a few steps); the rest is one
:class:`~sim.platform.ptmalloc.CarveRun` whose chunks and live blocks are worked out,
iteration by iteration, only if a free ever reaches one of them. The chunks its
iterations take from the tcache and fastbins and keep lie outside its range (the ones the
bins held when it began): the run stands for them in the live lists too, and names them
(:meth:`_Closed.borrowed`) so that a free of one enters the run. Tests compare the
arena chunk by chunk with exact mode.

All sizes are bytes; addresses are byte offsets from the heap's start.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter

from ...platform.btree import append_counts
from ...platform.ptmalloc import MINSIZE, chunk_size, handle_key

__all__ = ["ALLOC", "FREE", "ALLOC_MANY", "FREE_MANY", "INSERT", "REALLOC", "handle_key",
           "RunHandles",
           "Pattern", "trace", "advance"]

#: events of a replay template (see ``sim.engine.fastforward.repeat._Recorder``)
ALLOC, FREE, ALLOC_MANY, FREE_MANY, INSERT = range(5)
#: a realloc in a probe's trace of heap events (sim.engine.fastforward.repeat), after the kinds above
REALLOC = INSERT + 1


def _positions(arena) -> dict:
    """The chunks the tcache and fastbins hold: ``{(kind, chunk size, index): address}``."""
    out = {}
    for kind, bins in (("t", arena.tcache), ("f", arena.fast)):
        for size, chunks in bins.items():
            for i, addr in enumerate(chunks):
                out[(kind, size, i)] = addr
    return out


class Pattern:
    """One iteration on the arena with its addresses replaced by labels (module doc).

    ``events``: in order, ``("alloc", nbytes, label, kept, carved)`` for each
    allocation of the iteration's own (``kept``: still live at its end; ``carved``:
    this allocation carved the chunk) and ``("insert", tree)`` for each append to the
    locator's BTreeMap ``tree``; ``wiring``: ``{position: label}`` of the tcache and
    fastbins at its end; ``carves``: the request sizes it carved, in order; ``inserts``:
    its appends per tree; ``leaves``: see below.
    """

    def __init__(self, events, wiring, carves, inserts, leaves=()):
        #: request sizes of the BTreeMap leaves the iteration's own allocations split off
        #: (an iteration of :func:`trace` with ``leaves=True``); their other nodes follow
        #: from the append rule
        self.leaves = tuple(leaves)
        self.events = tuple(events)
        self.wiring = wiring
        self.carves = tuple(carves)
        self.inserts = tuple(inserts)
        #: bytes of chunks one iteration carves (its appends' nodes aside)
        self.stride = sum(map(chunk_size, carves))
        kept = [e[1] for e in events if e[0] == "alloc" and e[3]]
        self.kept_bytes = sum(kept)
        self.kept_blocks = len(kept)
        self.kept_sizes = sorted(set(kept))
        self.allocs = sum(1 for e in events if e[0] == "alloc")


def trace(heap, arena, template, fills, trees, leaves=False, allocated=None):
    """Replay one iteration of ``template`` on ``heap`` (its arena ``arena``), each append
    allocating the nodes its splits make (``fills``: the trees' rightmost fills, updated).

    ``leaves``: the leaves the appends split off are allocations of the iteration's own
    (labelled like the others, wherever they come from), not nodes of the append rule
    that must be carved: for an iteration spanning one leaf split of a period (see
    :func:`window`). Returns ``(pattern, made)``: the iteration's :class:`Pattern`, or
    None when it does not qualify (module doc), and the request sizes of the BTreeMap
    nodes it made. ``allocated`` (an empty list) receives the blocks of the template's
    allocations, in order, qualifying or not."""
    start = _positions(arena)
    label = {addr: ("p", pos) for pos, addr in start.items()}
    untouched = (arena.mapped, arena.mmap_threshold, arena.trim_threshold, arena.trims,
                 arena.top, arena.brk)
    binned = arena.bin_changes
    free_at = dict(arena.free_at)
    lengths = {n: (len(v), v[-1] if v else None) for n, v in arena.live.items()}
    before = (heap.live_bytes, heap.live_blocks)
    cursor = arena.top
    # where the iteration carves: "top" or "bin" (one bin chunk), the address its next
    # piece would start at, and (a bin chunk) where the chunk began
    source = [None, None, None]
    splits = [0]                # pieces split off the bin chunk (two bin changes each)
    ok = arena.brk - arena.top >= MINSIZE and arena.top_pad % arena.page == 0
    events, carves, made, rule, leaf_sizes = [], [], [], [], []
    # the template's allocations' blocks, in order (``allocated``: the caller's list)
    blocks = [] if allocated is None else allocated
    own = []             # the event of each of them
    first = [False]             # the next node an append makes is its leaf
    allocs = []          # [nbytes, address, event index or None (a node of an append)]
    live_now = {}        # address -> index in allocs of the live block allocated there
    inserts = [0] * len(trees)

    def alloc(nbytes, align=0, node=False):
        nonlocal cursor, ok
        block = heap.alloc(nbytes, align)
        if type(block) is not int or align:
            ok = False             # mmapped, or aligned (its placement reads addresses)
            return block
        kind, at, _ = source
        if block >= cursor:        # carved from the top
            carved = True
            if kind not in (None, "top") or block != cursor:
                ok = False
            source[0] = "top"
            cursor = block + chunk_size(nbytes)
        elif (kind == "bin" and block == at) or (kind is None and block in free_at):
            carved = True          # split off the start of the bin chunk carved from
            if kind is None:
                source[2] = block
            source[0], source[1] = "bin", block + chunk_size(nbytes)
            splits[0] += 1
        else:
            carved = False
        if carved:
            if chunk_size(nbytes) > arena.page:
                ok = False
            lab = ("s",) if node else ("c", len(carves))
            if not node:
                carves.append(nbytes)
            label[block] = lab
        else:
            lab = label.get(block)
            if lab is None or node:
                ok = False         # a chunk from the bins, or a node not carved
        live_now[block] = len(allocs)
        allocs.append((nbytes, block, None if node else len(events)))
        if not node:
            events.append(["alloc", nbytes, lab, False, carved])
        return block

    def node(nbytes):
        made.append(nbytes)
        if leaves and first[0]:
            leaf_sizes.append(nbytes)
            alloc(nbytes)
        else:
            rule.append(nbytes)
            alloc(nbytes, node=True)
        first[0] = False

    for kind, nbytes, arg in template:
        if kind == ALLOC:
            own.append(len(events))
            blocks.append(alloc(nbytes, arg))
        elif kind == FREE:
            block = blocks[arg] if arg >= 0 else None
            target = block
            if block is None:
                live = arena.live.get(nbytes)
                target = live[-1] if live else None
            if type(target) is not int or live_now.pop(target, None) is None:
                ok = False         # a block from before this iteration
            heap.free(nbytes, block)
        elif kind == INSERT:
            tree = trees[nbytes]
            chunk = source[1] if source[0] == "bin" else None
            if not (arena.carves(tree.internal_bytes, chunk) and
                    (leaves or arena.carves(tree.leaf_bytes, chunk))):
                ok = False
            first[0] = True
            tree.append_allocs(fills[nbytes], node)
            # after the leaf (an allocation of the pattern's own with ``leaves``): the
            # rule's nodes come after it
            events.append(("insert", nbytes))
            inserts[nbytes] += 1
        else:
            ok = False             # bulk events: placed size by size
            (heap.alloc_many if kind == ALLOC_MANY else heap.free_many)(nbytes, arg)
    if not ok:
        return None, made
    if source[0] == "bin":
        # the chunk carved from is the only change to the bins: what is left of it
        first = source[2]
        left = free_at.pop(first) - (source[1] - first)
        free_at[source[1]] = left
        if (left < MINSIZE or arena.free_at != free_at or
                arena.bin_changes - binned != 2 * splits[0] or
                (arena.mapped, arena.mmap_threshold, arena.trim_threshold, arena.trims,
                 arena.top, arena.brk) != untouched):
            return None, made
    elif cursor != arena.top or arena.bin_changes != binned or (
            arena.mapped, arena.mmap_threshold, arena.trim_threshold,
            arena.trims) != untouched[:4]:
        return None, made
    end = _positions(arena)
    if end.keys() != start.keys():
        return None, made
    wiring = {pos: label.get(addr) for pos, addr in end.items()}
    if any(lab is None or lab[0] == "s" for lab in wiring.values()):
        return None, made
    kept = {}
    for i in sorted(live_now.values()):
        nbytes, block, event = allocs[i]
        kept.setdefault(nbytes, []).append(block)
        if event is not None:
            events[event][3] = True
    for nbytes, live in arena.live.items():
        old, last = lengths.get(nbytes, (0, None))
        if live[old:] != kept.get(nbytes, []) or (old and live[old - 1] is not last):
            return None, made
    if set(kept) - set(arena.live):
        return None, made
    pattern = Pattern([tuple(e) for e in events], wiring, carves, inserts, leaf_sizes)
    #: the event of each of the template's allocations (a leaf of ``leaves`` is none)
    pattern.own = tuple(own)
    #: the bin chunk the next iteration carves from (what is left of this one's), or
    #: None: the top
    pattern.chunk = source[1] if source[0] == "bin" else None
    if (heap.live_bytes - before[0], heap.live_blocks - before[1]) != (
            pattern.kept_bytes + sum(rule), pattern.kept_blocks + len(rule)):
        return None, made
    return pattern, made


def window(template, period):
    """``period`` iterations of ``template`` as one (its frees' alloc indices shifted)."""
    allocs = sum(1 for kind, _, _ in template if kind == ALLOC)
    out = []
    for i in range(period):
        for kind, nbytes, arg in template:
            if kind == FREE and arg >= 0:
                arg += i * allocs
            out.append((kind, nbytes, arg))
    return tuple(out)


class _Appends:
    """The BTreeMap nodes a run of appends to one tree makes, in closed form."""

    def __init__(self, tree, fills, leaves=False):
        self.fills = tuple(fills)
        self.size = (tree.leaf_bytes, tree.internal_bytes)
        # the leaves are the pattern's own allocations: count internal nodes only
        self.first = 1 if leaves else 0

    def nodes(self, count) -> Counter:
        """Request sizes of the nodes the first ``count`` appends make."""
        out = Counter()
        for level, n in append_counts(list(self.fills), count):
            if level >= self.first:
                out[self.size[level > 0]] += n
        return out

    def made(self, index) -> list:
        """Request sizes of the nodes append ``index`` makes, in allocation order (the
        split leaf, then internal nodes)."""
        before, after = self.nodes(index), self.nodes(index + 1)
        leaf, internal = self.size
        if self.first:
            return [internal] * (after[internal] - before[internal])
        if leaf == internal:
            return [leaf] * (sum(after.values()) - sum(before.values()))
        return [leaf] * (after[leaf] - before[leaf]) + \
            [internal] * (after[internal] - before[internal])


class _Closed:
    """``n`` iterations of a pattern from a start address and tcache/fastbin state, in
    closed form: where iteration ``i`` puts its chunks, and what it leaves behind."""

    def __init__(self, pattern, trees, fills, start, state, n):
        self.pattern = pattern
        self.trees = trees
        self.fills = [list(f) for f in fills]
        self.appends = [_Appends(tree, f, bool(pattern.leaves)) for tree, f in zip(trees, fills)]
        self.start = start
        self.state = state
        self.n = n

    def consumed(self, m):
        """The bytes the first ``m`` iterations carve, and the request sizes of their
        appends' nodes (a Counter)."""
        nodes = Counter()
        for a, k in zip(self.appends, self.pattern.inserts):
            nodes.update(a.nodes(m * k))
        return m * self.pattern.stride + sum(chunk_size(s) * k for s, k in nodes.items()), nodes

    def layout(self, i):
        """Iteration ``i``'s blocks in allocation order, ``(request size, address or label,
        kept)`` (a label for chunks it did not carve), and its carves' addresses."""
        p = self.pattern
        inserts = p.inserts
        addr = self.start + self.consumed(i)[0]
        seen = [0] * len(inserts)
        blocks, carves = [], []
        for ev in p.events:
            if ev[0] == "insert":
                t = ev[1]
                for s in self.appends[t].made(i * inserts[t] + seen[t]):
                    blocks.append((s, addr, True))
                    addr += chunk_size(s)
                seen[t] += 1
                continue
            _, nbytes, lab, kept, carved = ev
            if carved:
                carves.append(addr)
                blocks.append((nbytes, addr, kept))
                addr += chunk_size(nbytes)
            else:
                blocks.append((nbytes, lab, kept))
        return blocks, carves

    def resolve(self, lab, i):
        """The address of the chunk ``lab`` names in iteration ``i``.

        ``("p", pos)`` names what sat at tcache/fastbin position ``pos`` when iteration
        ``i`` began: what the wiring put there in iteration ``i - 1``, and so on back to a
        carve of an earlier iteration or to the state the run began with. Where the
        positions only trade chunks among themselves (the wiring permutes them: frees
        that come in another order than the allocations), the walk goes round a cycle
        and is shortened by whole turns."""
        wiring = self.pattern.wiring
        seen = {}       # position -> its index in ``path``
        path = []
        while lab[0] == "p":
            src = lab[1]
            if i == 0 or wiring[src] == lab:
                return self.state[src]  # there when the run began (or never moved)
            if src in seen:
                # round a cycle of positions back to ``src``: ``i`` more steps end at the
                # start of the run, ``i`` modulo the cycle's length along it
                k = seen[src]
                return self.state[path[k + i % (len(path) - k)]]
            seen[src] = len(path)
            path.append(src)
            i -= 1
            lab = wiring[src]
        return self.layout(i)[1][lab[1]]

    def borrowed(self, start, end) -> tuple:
        """The chunks outside ``start`` to ``end`` (the run's range) that its iterations
        take from the tcache and fastbins and keep: chunks the bins held when the run began
        (an earlier iteration's transients), live blocks of the run whose frees must enter
        it first. Followed through the wiring, position by position, until no chunk of the
        start is left in the bins or their arrangement repeats (from then on the chunks of
        the start only trade places, no iteration keeps one)."""
        p = self.pattern
        taking = [ev[2][1] for ev in p.events
                  if ev[0] == "alloc" and ev[3] and ev[2][0] == "p"]
        if not taking:
            return ()
        wiring = p.wiring
        # position -> the position at the start whose chunk sits there (None: the run's)
        now = {pos: pos for pos in self.state}
        kept, seen = [], set()
        for i in range(self.n):
            if i == 10_000:
                kept = list(self.state)     # not settled: every chunk of the start
                break
            kept.extend(src for src in (now.get(pos) for pos in taking) if src is not None)
            now = {pos: None if lab[0] == "c" else now.get(lab[1])
                   for pos, lab in wiring.items()}
            arrangement = frozenset((pos, src) for pos, src in now.items() if src is not None)
            if not arrangement or arrangement in seen:
                break
            seen.add(arrangement)
        return tuple(addr for addr in (self.state[src] for src in kept)
                     if not start <= addr < end)

    def final(self):
        """The tcache and fastbins after the last iteration, ``{position: address}``."""
        return {pos: self.resolve(lab, self.n - 1) for pos, lab in self.pattern.wiring.items()}

    def tail(self, nbytes, j):
        """The ``j``-th newest live block of ``nbytes`` the run made (0: the newest), as
        ``(address, chunk size)``, None when it made fewer, False when that block lies
        too far back to find in closed form (then the run is entered)."""
        i = self.n - 1
        while i >= 0:
            if i < self.n - 10_000:
                return False
            blocks, _ = self.layout(i)
            mine = [b for b in blocks if b[0] == nbytes and b[2]]
            if j < len(mine):
                addr = mine[len(mine) - 1 - j][1]
                if type(addr) is tuple:
                    addr = self.resolve(addr, i)
                return addr, chunk_size(nbytes)
            j -= len(mine)
            i -= 1
        return None

    def contents(self, wanted=()):
        """The run's chunks and live blocks, iteration by iteration (a free reached one),
        the tcache and fastbins it leaves, and per iteration the blocks of the events
        ``wanted`` (indices into the pattern's events, in that order)."""
        p = self.pattern
        tails = [list(f) for f in self.fills]
        cursor = self.start
        chunks, placed, sizes = [], {}, []
        add_chunk = chunks.append
        # the events compiled once: (request size, chunk size, carved, from this
        # iteration's carves, carve index or tcache/fastbin position, where a kept block
        # goes) or, for an append, (None, tree)
        events = []
        for ev in p.events:
            if ev[0] == "insert":
                events.append((None, ev[1]))
                continue
            _, nbytes, lab, kept, is_carve = ev
            events.append((nbytes, chunk_size(nbytes), is_carve, lab[0] == "c", lab[1],
                           placed.setdefault(nbytes, []).append if kept else None))
        rows, wanted = [], tuple(wanted)
        picks = [(e, wanted.index(e)) for e in range(len(events)) if e in wanted]
        wiring = [(pos, lab[0] == "c", lab[1]) for pos, lab in p.wiring.items()]
        now = dict(self.state)
        for _ in range(self.n):
            carved = []
            row = [None] * len(wanted)
            at_event = []
            for ev in events:
                nbytes = ev[0]
                if nbytes is None:
                    sizes.clear()
                    self.trees[ev[1]].append_allocs(tails[ev[1]], sizes.append)
                    if p.leaves and sizes:
                        del sizes[0]        # the leaf: one of the pattern's allocations
                    for s in sizes:
                        add_chunk((cursor, chunk_size(s)))
                        placed.setdefault(s, []).append(cursor)
                        cursor += chunk_size(s)
                    if picks:
                        at_event.append(None)
                    continue
                _, nb, is_carve, is_c, at, keep = ev
                if is_carve:
                    addr = cursor
                    add_chunk((cursor, nb))
                    cursor += nb
                    carved.append(addr)
                else:
                    addr = carved[at] if is_c else now[at]
                if keep is not None:
                    keep(addr)
                if picks:
                    at_event.append(addr)
            if picks:
                for e, i in picks:
                    row[i] = at_event[e]
                rows.append(row)
            now = {pos: carved[at] if is_c else now[at] for pos, is_c, at in wiring}
        return chunks, placed, now, rows


def advance(arena, pattern, trees, fills, n):
    """Up to ``n`` more iterations of ``pattern`` on ``arena`` in closed form, right after
    the iteration :func:`trace` took it from (``fills``: the trees' rightmost fills then).

    Sets the tcache and fastbins to the chunks the last iterations leave there and
    carves the rest as one :class:`~sim.platform.ptmalloc.CarveRun`, from the top or from
    the bin chunk the pattern carves from (as many iterations as leave at least
    ``MINSIZE`` of it; from the top, while fastbins hold chunks, as many as fit before
    the heap must grow, which would consolidate them). Returns ``(iterations, nodes,
    closed)``: how many were applied, the request sizes of the BTreeMap nodes their
    appends made (a Counter) and the iterations' closed form (``closed.contents``),
    or None, changing nothing (not one iteration fits)."""
    chunk = pattern.chunk
    start = arena.top if chunk is None else chunk
    closed = _Closed(pattern, trees, fills, start, _positions(arena), n)
    consumed = closed.consumed
    room = None
    if chunk is not None:
        room = arena.free_at[chunk] - MINSIZE
    elif arena.nfast:
        # a request the top no longer holds would consolidate the fastbins before the
        # heap grows (_malloc): stop before the first growth
        room = arena.brk - arena.top - MINSIZE
    if room is not None:
        if consumed(n)[0] > room:
            lo, hi = 0, n                  # consumed(lo) fits, consumed(hi) does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if consumed(mid)[0] <= room else (lo, mid)
            n = lo
        if not n:
            return None
        closed.n = n
    final = closed.final()
    total, nodes = consumed(n)
    end = start + total
    pinned = {}
    for pos, addr in final.items():
        if start <= addr < end:
            pinned[addr] = pos[1]

    def contents():
        chunks, placed, now, _ = closed.contents()
        if now != final:
            raise AssertionError("a carve run's tcache differs from its closed form")
        return chunks, placed

    for kind, bins in (("t", arena.tcache), ("f", arena.fast)):
        for size, chunks in bins.items():
            chunks[:] = [final[(kind, size, i)] for i in range(len(chunks))]
    sizes = set(pattern.kept_sizes) | {s for s, k in nodes.items() if k}
    per = sum(1 for ev in pattern.events if ev[0] == "alloc" and ev[4])
    run = arena.carve_run(total, sorted(sizes), contents, pinned, closed.tail, chunk,
                          n * per + sum(nodes.values()), closed.borrowed(start, end))
    assert run.end == end
    return n, nodes, closed


class RunHandles:
    """The blocks of a fast-forwarded run's members on the arena
    (:class:`~sim.burn.graph.runs.NodeRun` ``handles``), from where each iteration of the
    loop put its allocations: ``slots``, per member an iteration leaves, the index among
    the iteration's allocations of each of its blocks (-1: a block freed by size).
    Iterations are added in order, replayed (their blocks listed: :meth:`replayed`) or
    in closed form (:meth:`carved`: worked out for all of them when a member's blocks
    are first asked for)."""

    def __init__(self, slots):
        self.slots = slots
        #: the allocations the members' blocks are, by index
        self.wanted = sorted({a for slot in slots for a in slot if a >= 0})
        self.iterations = 0
        self._firsts = []       # first iteration of each segment
        self._segments = []     # a list of blocks per iteration, or [closed, period, rows]

    def replayed(self, blocks) -> None:
        """One more iteration, its allocations' ``blocks`` in order."""
        self._firsts.append(self.iterations)
        self._segments.append(blocks)
        self.iterations += 1

    def carved(self, closed, n, period=1) -> None:
        """``n`` repetitions of ``closed``'s pattern, each ``period`` iterations long."""
        self._firsts.append(self.iterations)
        self._segments.append((closed, period, []))
        self.iterations += n * period

    def _iteration(self, it):
        """Iteration ``it``'s allocations' blocks, by index (those of ``wanted`` at least)."""
        k = bisect_right(self._firsts, it) - 1
        segment = self._segments[k]
        if type(segment) is list:
            return segment
        closed, period, rows = segment
        own = closed.pattern.own
        per = len(own) // period
        if not rows:
            rows.extend(closed.contents([own[t * per + a] for t in range(period)
                                         for a in self.wanted])[3])
        rep, t = divmod(it - self._firsts[k], period)
        row = rows[rep]
        blocks = [None] * per
        w = len(self.wanted)
        for j, a in enumerate(self.wanted):
            blocks[a] = row[t * w + j]
        return blocks

    def __getitem__(self, m):
        it, k = divmod(m, len(self.slots))
        blocks = self._iteration(it)
        return tuple(None if a < 0 else blocks[a] for a in self.slots[k])
