"""The glibc arena model's placement as a comparable value, for tests that run one program
two ways (compacted or not, a settled-nodes index or a full walk) and ask for the same
heap, chunk for chunk."""

from sim.platform.ptmalloc import ArenaReads, _Arena


def arena_state(arena):
    """Chunks in use, free chunks, the tcache and fastbins (in order), the break and the
    top of ``arena`` (a :class:`~sim.platform.ptmalloc.PtmallocArena`, carve runs entered);
    ``()`` without one."""
    if arena is None:
        return ()
    arena.materialize()
    return (tuple(arena.inuse.items()), tuple(arena.free_at.items()),
            tuple((k, tuple(v)) for k, v in arena.tcache.items()),
            tuple((k, tuple(v)) for k, v in arena.fast.items()), arena.brk, arena.top)


class Heard(ArenaReads):
    """An arena tap that notes every call the arena makes to it, with its arguments other
    than the arena (the arena's ``recorder`` takes an
    :class:`~sim.platform.ptmalloc.ArenaReads`; each method here replaces its own)."""

    def __init__(self):
        self.calls = []

    def _note(self, name, *args):
        self.calls.append((name,) + tuple(a for a in args if not isinstance(a, _Arena)))

    def took(self, size, n):
        self._note("took", size, n)

    def parked(self, size, n):
        self._note("parked", size, n)

    def filled(self, size, n, now):
        self._note("filled", size, n, now)

    def fast_took(self, size, now):
        self._note("fast_took", size, now)

    def fast_parked(self, size, n):
        self._note("fast_parked", size, n)

    def consolidated(self, arena):
        self._note("consolidated")

    def carved(self, arena, nb):
        self._note("carved", nb)

    def merging(self, arena):
        self._note("merging")

    def merged(self, arena, merged):
        self._note("merged", merged)

    def resizing(self, arena, size, nb):
        self._note("resizing", size, nb)

    def resized(self, arena):
        self._note("resized")
