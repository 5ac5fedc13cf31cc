"""The heap events of probed iterations in order, for a glibc arena's replay of loops
that leave the bookkeeping as they found it (``steady``).

On a glibc arena no two steps of a training loop end in the same placement (see
docs/speed.md, *What bounds a general fast-forward*), so such a loop cannot be proven to
repeat by comparing arena states. What repeats is the iteration's *template*: its
requests in order, each free naming the allocation it frees (of this iteration or of one
a few iterations back, as a training step frees the parameters the step before made),
and its BTreeMap operations with keys relative to the iteration. :class:`ArenaTape`
records it; :func:`sim.engine.fastforward.repeat._apply` replays it through
:meth:`sim.platform.ptmalloc.PtmallocArena.replay` and rebinds the handles the live
objects hold to the chunks the replay gave them (:meth:`~sim.platform.ptmalloc.PtmallocArena.rebind`).
"""

from __future__ import annotations

from .arenarun import handle_key

__all__ = ["ArenaTape"]


class ArenaTape:
    """Heap events of consecutive probed iterations, frees naming their allocation.

    ``blocks[serial]`` holds the handles of the blocks iteration ``serial`` allocated,
    in order; ``at`` maps each live one (:func:`handle_key`) to ``(serial, index)``.
    A free of a block older than :data:`MAX_BACK` iterations, or of one no probed
    iteration allocated, leaves the iteration without a template; so does a free naming
    a block ``back`` iterations before when one of those iterations had another template
    (``templates[serial]``): the replay names the blocks of the iterations it carries by
    their index in the template, so each of them must have made its blocks in the same
    order (a window of the last four results frees, in the iteration after it fills, a
    block of an iteration that made two more or fewer before it)."""

    #: iterations back a free may name a block
    MAX_BACK = 8

    __slots__ = ("at", "blocks", "templates", "serial", "events", "trees", "base", "reach")

    def __init__(self):
        self.at = {}
        self.blocks = {}
        self.templates = {}
        #: the most iterations back a free has named a probed block
        self.reach = 0
        self.serial = 0
        self.events = None
        self.trees = None
        self.base = 0

    def begin(self, first_id: int) -> None:
        """A probed iteration starts; ``first_id``: the first node id it registers."""
        self.serial += 1
        self.blocks[self.serial] = []
        self.blocks.pop(self.serial - self.MAX_BACK - 1, None)
        self.templates.pop(self.serial - self.MAX_BACK - 1, None)
        self.events, self.trees, self.base = [], [], first_id

    def end(self):
        """The iteration's ``(template, tree operations)``, or None."""
        events, trees = self.events, self.trees
        self.events = self.trees = None
        if events is None or trees is None:
            return None
        events = tuple(events)
        self.templates[self.serial] = events
        depth = max((arg[0] if kind == "free" else arg[1] for kind, _, arg in events
                     if arg is not None and kind in ("free", "realloc")), default=0)
        if any(self.templates.get(self.serial - back) != events
               for back in range(1, depth + 1)):
            return None      # a carried iteration made its blocks otherwise
        return events, tuple(trees)

    def invalidate(self) -> None:
        self.events = None

    def _ref(self, block):
        """``(back, index)`` of a block being freed, or None (not from a recent probe)."""
        pos = self.at.pop(handle_key(block), None)
        if pos is None or self.serial - pos[0] > self.MAX_BACK:
            return None
        back = self.serial - pos[0]
        if back > self.reach:
            self.reach = back
        return back, pos[1]

    def _allocated(self, block) -> None:
        blocks = self.blocks[self.serial]
        self.at[handle_key(block)] = (self.serial, len(blocks))
        blocks.append(block)

    # every event is followed (which block each free names), whether or not the
    # iteration still has a template: the next one frees this one's blocks
    def alloc(self, block, nbytes: int, align: int) -> None:
        self._allocated(block)
        if self.events is not None:
            self.events.append(("alloc", nbytes, align))

    def free(self, block, nbytes: int) -> None:
        ref = None if block is None else self._ref(block)
        if self.events is None:
            return
        if ref is None and block is not None:
            self.events = None
        else:
            self.events.append(("free", nbytes, ref))

    def realloc(self, block, old_nbytes: int, new_block, nbytes: int) -> None:
        ref = None if block is None else self._ref(block)
        self._allocated(new_block)
        if self.events is None:
            return
        if ref is None:
            self.events = None
        else:
            self.events.append(("realloc", nbytes, (old_nbytes,) + ref))

    def many(self, kind: str, nbytes: int, count: int) -> None:
        if self.events is not None:
            self.events.append((kind, nbytes, count))

    def tree(self, index: int, op: str, keys) -> None:
        """A BTreeMap operation of the locator's tree ``index``, keys relative to the
        iteration's first id."""
        if self.trees is not None:
            self.trees.append((index, op, keys))

    def apply(self, arena, program, count: int) -> None:
        """``count`` iterations of ``program`` (:meth:`PtmallocArena.compile` of the
        template) right after the last probed one; the live blocks of the probed
        iterations the program reaches back to are rebound to the chunks the replay's last
        iterations gave the same allocations."""
        depth = program.depth
        chunk_of = arena.chunk_of
        held = [self.blocks[s] for s in range(self.serial - depth + 1, self.serial + 1)]
        carry = [[chunk_of(h) for h in blocks] for blocks in held]
        carry = arena.replay(program, count, carry)
        pairs = []
        for serial, index in self.at.values():
            back = self.serial - serial
            if back < depth:
                pairs.append((held[-1 - back][index], carry[-1 - back][index]))
        arena.rebind(pairs)
