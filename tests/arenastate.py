"""The glibc arena model's placement as a comparable value, for tests that run one program
two ways (compacted or not, a settled-nodes index or a full walk) and ask for the same
heap, chunk for chunk."""


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
