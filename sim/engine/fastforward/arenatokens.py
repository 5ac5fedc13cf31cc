"""An iteration's requests to glibc's arena as an address-free program, and templates of
how such programs grow from one iteration to the next (issue 39: the summed validation
loss on linux-x86_64, whose every step asks the arena for more than the step before).

A request is a *token*: ``("A", nbytes, align)`` an allocation, ``("F", nbytes, rank)``
a free of the live block of ``nbytes`` ranked ``rank`` from the newest (0: the newest;
the arena's live lists of a size are in allocation order), ``("R", nbytes, old, rank)``
the block of ``old`` bytes so ranked grown (or shrunk) to ``nbytes``. No token names an
address or a handle, so a program recorded at one step can be made at another wherever
its sizes' live lists hold what it frees.

:func:`compress` writes runs as single items: ``("FS", nbytes, rank, count)``,
``count`` frees of consecutive blocks oldest first (ranks ``rank``, ``rank - 1``, ...:
a map's cloned nodes dropped in allocation order), ``("REP", count, body)``, a body
of items made ``count`` times over (the walk's descent, the pass's pairs of clone and
drop), and with ``fold`` ``("N", calls, peak, depths, body)``, a run that frees every
block it allocates through the tcache alone: it leaves the arena as it found it
wherever its bins hold its depths, so only its counts matter there. A program's numbers
(sizes, ranks, counts) then change from step to step while its *shape* (the items'
kinds and nesting) stays: :func:`fit` takes the programs of
three steps of one shape whose every number moves by a fixed amount a step, and
:meth:`Template.at` writes the program of a later step.

:func:`flatten` compiles a program for
:meth:`sim.platform.ptmalloc.PtmallocArena.run_program` (C ints, a loop the arena's
build compiles) and says what it does to the heap's counters, which follow from the
program alone: allocation calls, live bytes and blocks, and the highest rise of live
bytes above its start. :class:`TokenLog` logs a simulation's requests as tokens (a
measurement's or a test's, not fast-forward's recorder).

Examples
--------
>>> items = compress([("A", 24, 0), ("F", 24, 0)] * 3 + [("A", 8, 0)])
>>> items
[('REP', 3, (('A', 24, 0), ('F', 24, 0))), ('A', 8, 0)]
>>> program = flatten(items)
>>> program.allocs, program.live, program.blocks, program.peak
(4, 8, 1, 24)
>>> t = fit([compress([("A", 16, 0)] * n + [("F", 16, 3)]) for n in (3, 4, 5)])
>>> t.at(2)
[('REP', 7, (('A', 16, 0),)), ('F', 16, 3)]
"""
from __future__ import annotations

from array import array
from typing import NamedTuple

import numpy as np

from ...platform.ptmalloc import TCACHE_MAX_CHUNK, chunk_size

__all__ = ["TokenLog", "runs_of", "compress", "flatten", "Flat", "shape_of", "expand",
           "Template", "fit"]

ALLOC, FREE, FREE_RUN, REALLOC, REPEAT, DEPTH, NEUTRAL = range(7)


def _free_runs(tokens) -> list:
    """``tokens`` with each run of frees of one size whose ranks fall by one a free (the
    blocks freed oldest first) as one ``FS`` item."""
    out, i, n = [], 0, len(tokens)
    while i < n:
        t = tokens[i]
        if t[0] == "F":
            j = i + 1
            while (j < n and tokens[j][0] == "F" and tokens[j][1] == t[1]
                   and tokens[j][2] == t[2] - (j - i)):
                j += 1
            if j - i >= 2:
                out.append(("FS", t[1], t[2], j - i))
                i = j
                continue
        out.append(t)
        i += 1
    return out


def _repeats(items, widest) -> list:
    """``items`` with each run of a body (of at most ``widest`` items) made twice or more
    in a row as one ``REP`` item, the shortest body first, bodies compressed alike."""
    out, i, n = [], 0, len(items)
    while i < n:
        for width in range(1, min(widest, (n - i) // 2) + 1):
            if (items[i] == items[i + width]
                    and items[i:i + width] == items[i + width:i + 2 * width]):
                count = 2
                body = items[i:i + width]
                while items[i + count * width:i + (count + 1) * width] == body:
                    count += 1
                inner = tuple(_repeats(body, widest)) if width > 1 else tuple(body)
                out.append(("REP", count, inner))
                i += count * width
                break
        else:
            out.append(items[i])
            i += 1
    return out


def _balanced(tokens, i, served) -> int:
    """The end of the longest run of ``tokens`` from ``i`` that frees every block it
    allocates, each chunk size last-in-first-out, through the tcache alone (plain
    allocations of sizes it holds, each one ``served`` by its bin where that is given,
    every free the newest block of its size); ``i`` where none is."""
    stacks, open_, end = {}, 0, i
    for j in range(i, len(tokens)):
        t = tokens[j]
        if t[0] == "A":
            nb = chunk_size(t[1])
            if t[2] or nb > TCACHE_MAX_CHUNK or (served is not None and not served[j]):
                break
            stacks.setdefault(nb, []).append(t[1])
            open_ += 1
        elif t[0] == "F":
            stack = stacks.get(chunk_size(t[1]))
            if t[2] != 0 or not stack or stack[-1] != t[1]:
                break
            stack.pop()
            open_ -= 1
        else:
            break
        if open_ == 0:
            end = j + 1
    return end


def _fold(tokens, keep, served) -> list:
    """``tokens`` with each longest balanced run (:func:`_balanced`) as one ``N`` item:
    ``("N", allocations, peak, ((chunk size, depth), ...), body)``, the run's
    allocation calls, the most live bytes it rises to, and the most chunks of each size
    it holds at once; ``body``: its tokens where ``keep``, else None."""
    out, i, n = [], 0, len(tokens)
    while i < n:
        end = _balanced(tokens, i, served)
        if end == i:
            out.append(tokens[i])
            i += 1
            continue
        run = tokens[i:end]
        allocs, _, _, peak = _compile(run, array("q"))
        depths = tuple(sorted(_depths(run).items()))
        out.append(("N", allocs, peak, depths, tuple(run) if keep else None))
        i = end
    return out


def compress(tokens, widest: int = 32, fold: bool = False, keep: bool = True,
             served=None) -> list:
    """The items of ``tokens`` (see the module doc): runs of frees oldest first, then
    repeated bodies of at most ``widest`` items. ``fold``: each balanced run the
    tcache serves first as one ``N`` item (its tokens kept where ``keep``; ``served``:
    for each token, whether the tcache served it when it was made, where known: a run
    with an allocation it did not serve is not folded)."""
    tokens = list(tokens)
    if fold:
        tokens = _fold(tokens, keep, served)
    return _repeats(_free_runs(tokens), widest)


class Flat(NamedTuple):
    """A program compiled for ``run_program`` and its effect on the heap's counters:
    allocation calls, live bytes and blocks it adds, and the most live bytes rise above
    the start at any point."""
    flat: array
    allocs: int
    live: int
    blocks: int
    peak: int


def _depths(body):
    """Per chunk size, the most blocks of it a body holds at once, where the body frees
    every block it allocates, each chunk size last-in-first-out, all through the tcache
    (plain allocations of sizes it holds; every free the newest block of its size);
    else None."""
    stacks, most = {}, {}

    def walk(items) -> bool:
        for item in items:
            kind = item[0]
            if kind == "A":
                nb = chunk_size(item[1])
                if item[2] or nb > TCACHE_MAX_CHUNK:
                    return False
                stack = stacks.setdefault(nb, [])
                stack.append(item[1])
                if len(stack) > most.get(nb, 0):
                    most[nb] = len(stack)
            elif kind == "F":
                stack = stacks.get(chunk_size(item[1]))
                if item[2] != 0 or not stack or stack[-1] != item[1]:
                    return False
                stack.pop()
            elif kind in ("REP", "N"):
                inner = _depths(item[2]) if kind == "REP" else dict(item[3])
                if inner is None:
                    return False
                for nb, d in inner.items():
                    held = len(stacks.get(nb, ())) + d
                    if held > most.get(nb, 0):
                        most[nb] = held
            else:
                return False
        return True
    if not walk(body) or any(stacks.values()):
        return None
    return most


def _compile(items, out) -> tuple:
    """Append ``items``' tokens to ``out``; return ``(allocs, live, blocks, peak)``."""
    allocs = live = blocks = peak = 0
    for item in items:
        kind = item[0]
        if kind == "A":
            out.extend((ALLOC, item[1], item[2], 0))
            allocs += 1
            blocks += 1
            live += item[1]
            peak = max(peak, live)
        elif kind == "F":
            out.extend((FREE, item[1], item[2], 0))
            blocks -= 1
            live -= item[1]
        elif kind == "FS":
            out.extend((FREE_RUN, item[1], item[2], item[3]))
            blocks -= item[3]
            live -= item[1] * item[3]
        elif kind == "R":
            out.extend((REALLOC, item[1], item[2], item[3]))
            live += item[1] - item[2]
            peak = max(peak, live)
        elif kind == "N":
            head = len(out)
            out.extend((NEUTRAL, len(item[3]), 0, 0))
            for nb, d in item[3]:
                out.extend((DEPTH, nb, d, 0))
            if item[4] is not None:
                _compile(item[4], out)
                out[head + 2] = (len(out) - head) // 4 - 1 - len(item[3])
            allocs += item[1]
            peak = max(peak, live + item[2])
        else:
            count, body = item[1], item[2]
            head = len(out)
            out.extend((REPEAT, 0, count, 0))
            depths = _depths(body)
            if depths is not None:
                for nb, d in sorted(depths.items()):
                    out.extend((DEPTH, nb, d, 0))
            a, l, b, p = _compile(body, out)
            out[head + 1] = (len(out) - head) // 4 - 1
            out[head + 3] = len(depths) if depths is not None else -1
            if count > 0:
                peak = max(peak, live + p + (count - 1) * l if l > 0 else live + p)
            allocs += a * count
            live += l * count
            blocks += b * count
    return allocs, live, blocks, peak


def flatten(items) -> Flat:
    """``items`` (:func:`compress`) compiled for ``run_program``, with their effect on
    the heap's counters (:class:`Flat`)."""
    out = array("q")
    allocs, live, blocks, peak = _compile(items, out)
    return Flat(out, allocs, live, blocks, peak)


def shape_of(items, folded=None) -> tuple:
    """``(shape, numbers)`` of a program: the items' kinds and nesting (a ``REP`` as
    ``("REP", body's shape)``, an ``N`` as ``("N", its chunk sizes)``), and their numbers
    in order (sizes, alignments, ranks, counts; an ``N``'s calls, peak and depths).
    ``folded``: a list that gets, for each ``N``'s count of calls, its place in
    ``numbers`` and whether the ``N`` stands outside any ``REP``."""
    numbers = []

    def walk(items, depth):
        shape = []
        for item in items:
            if item[0] == "REP":
                numbers.append(item[1])
                shape.append(("REP", walk(item[2], depth + 1)))
            elif item[0] == "N":
                if folded is not None:
                    folded.append((len(numbers), depth == 0))
                numbers.extend((item[1], item[2]))
                numbers.extend(d for _, d in item[3])
                shape.append(("N", tuple(nb for nb, _ in item[3])))
            else:
                shape.append(item[0])
                numbers.extend(item[1:])
        return tuple(shape)
    return walk(items, 0), numbers


_WIDTH = {"A": 2, "F": 2, "FS": 3, "R": 3}


def expand(shape, numbers) -> list:
    """The items of ``shape`` with ``numbers`` (the inverse of :func:`shape_of`)."""
    numbers = iter(numbers)

    def build(shape):
        items = []
        for kind in shape:
            if type(kind) is tuple and kind[0] == "N":
                allocs, peak = next(numbers), next(numbers)
                items.append(("N", allocs, peak,
                              tuple((nb, next(numbers)) for nb in kind[1]), None))
            elif type(kind) is tuple:
                count = next(numbers)
                items.append(("REP", count, tuple(build(kind[1]))))
            else:
                items.append((kind,) + tuple(next(numbers) for _ in range(_WIDTH[kind])))
        return items
    return build(shape)


class Template(NamedTuple):
    """A program whose numbers move by ``step`` each iteration: ``numbers`` those of the
    last iteration fitted. Where it is ``loose``, the counts of calls of its folded runs
    (``N``) are the last iteration's and only their sum moves by a fixed amount
    (``calls``, ``calls_step``), put on the last ``N`` outside any ``REP``: a folded run
    that finds its bins deep enough changes no chunk however many calls it holds, so
    which of them holds how many of the calls does not matter while every one holds
    one, and ``run_program`` says where one found its bins short."""
    shape: tuple
    numbers: np.ndarray
    step: np.ndarray
    loose: tuple = ()
    calls: int = 0
    calls_step: int = 0

    def at(self, j: int) -> list:
        """The program ``j`` iterations after the last one fitted, or None where a number
        would leave its range (a count or size below 0, a folded run without calls)."""
        numbers = self.numbers + j * self.step
        if numbers.size and numbers.min() < 0:
            return None
        if not self.loose:
            return expand(self.shape, numbers.tolist())
        numbers = numbers.tolist()
        items = expand(self.shape, numbers)
        short = self.calls + j * self.calls_step - flatten(items).allocs
        if short:
            outside = [at for at, top in self.loose if top]
            if not outside or numbers[outside[-1]] + short < 1:
                return None
            numbers[outside[-1]] += short
            items = expand(self.shape, numbers)
        return items


def fit(programs, loose: bool = False):
    """A :class:`Template` of consecutive programs (items, oldest first; at least three),
    or None where their shapes differ or a number does not move by one fixed amount from
    each to the next (``loose``: the folded runs' counts of calls only in their sum)."""
    folded = []
    shapes = [shape_of(p, folded if i == 0 else None) for i, p in enumerate(programs)]
    if len(shapes) < 3 or any(s != shapes[0][0] for s, _ in shapes):
        return None
    rows = np.array([n for _, n in shapes], dtype=np.int64)
    steps = np.diff(rows, axis=0)
    if not loose or not folded:
        if not (steps == steps[-1]).all():
            return None
        return Template(shapes[0][0], rows[-1], steps[-1])
    free = np.zeros(rows.shape[1], dtype=bool)
    free[[at for at, _ in folded]] = True
    if not (steps[:, ~free] == steps[-1, ~free]).all():
        return None
    calls = [flatten(p).allocs for p in programs]
    if len({b - a for a, b in zip(calls, calls[1:])}) != 1:
        return None
    step = np.where(free, 0, steps[-1])
    return Template(shapes[0][0], rows[-1], step, tuple(folded), calls[-1],
                    calls[-1] - calls[-2])


def _rank(live, block) -> int:
    """``block``'s rank from the newest in the live list ``live``; 0 where it is not
    there (an anonymous free took it: the arena frees the newest block left)."""
    for i in range(len(live) - 1, -1, -1):
        if live[i] == block:
            return len(live) - 1 - i
    return 0


class TokenLog:
    """A glibc arena whose requests are logged as tokens while ``log`` is a list:
    ``(part, token, served)``, ``part`` what ``tag`` returns when the request is made,
    ``served`` whether the tcache held a chunk for a plain allocation. Everything else
    goes to the arena. Its ``alias`` reads as set, so that the heap's shortcuts (a walk's
    pairs, a clone's frees reordered, a recursion's compiled run) make their requests
    one by one through it; the arena's own alias table is untouched.

    Put it in the heap's place of the arena (``sim.heap._arena``) for a measurement or
    a test; it is not fast-forward's recorder."""
    alias = {None: None}

    def __init__(self, arena, tag=lambda: None):
        self.__dict__.update(arena=arena, log=None, tag=tag)

    def __getattr__(self, name):
        return getattr(self.arena, name)

    def __setattr__(self, name, value):
        setattr(self.arena, name, value)

    def alloc(self, nbytes, align=0):
        if self.log is not None:
            cached = self.arena.tcache.get(chunk_size(nbytes))
            self.log.append((self.tag(), ("A", nbytes, align), bool(cached) and not align))
        return self.arena.alloc(nbytes, align)

    def free(self, block=None, nbytes=None):
        if self.log is not None:
            rank = 0 if block is None else _rank(self.arena.live[nbytes], block)
            self.log.append((self.tag(), ("F", nbytes, rank), False))
        self.arena.free(block, nbytes)

    def realloc(self, block, old_nbytes, nbytes):
        if self.log is not None:
            rank = _rank(self.arena.live[old_nbytes], block)
            self.log.append((self.tag(), ("R", nbytes, old_nbytes, rank), False))
        return self.arena.realloc(block, old_nbytes, nbytes)

    def alloc_each(self, nbytes, count):
        return tuple(self.alloc(nbytes, 0) for _ in range(count))

    def free_each(self, blocks, nbytes):
        for block in blocks:
            self.free(block, nbytes)

    def nested(self, events):
        handles, live, peak, allocs = [], 0, 0, 0
        for i, event in enumerate(events):
            if event > 0:
                live += event
                peak = max(peak, live)
                allocs += 1
                handles.append(self.alloc(event, 0))
            else:
                live -= events[i + event]
                self.free(handles[i + event], events[i + event])
                handles.append(None)
        return allocs, peak


def runs_of(log, keep: bool = True, unfolded=()) -> list:
    """A :class:`TokenLog`'s log as runs of one part each, ``[(part, items)]``, each run
    compressed with its balanced runs folded (their tokens kept where ``keep``) but for
    the parts in ``unfolded``."""
    runs = []
    for part, token, served in log:
        if not runs or runs[-1][0] != part:
            runs.append((part, [], []))
        runs[-1][1].append(token)
        runs[-1][2].append(served)
    return [(part, compress(tokens, fold=part not in unfolded, keep=keep, served=served))
            for part, tokens, served in runs]
