# Types for Cython's build of ptmalloc.py (setup.py): the arena's state as C fields.
# The semantics are ptmalloc.py's alone; this file only says what type each field has.
# A field's type here must hold every value ptmalloc.py gives it (None stays `object`).

cimport cython

# glibc's constants (module globals of ptmalloc.py) as C integers: a comparison of a C-int
# size with one is a C comparison, not a boxed int against a looked-up global
cdef Py_ssize_t SIZE_SZ, MINSIZE, TCACHE_MAX_CHUNK, TCACHE_COUNT, MAX_FAST, MIN_LARGE
cdef Py_ssize_t CONSOLIDATION_THRESHOLD, NSMALLBINS, BIN_TABLE

# the binmap's walks (module functions, C only in the build)
@cython.locals(i=Py_ssize_t, other=Py_ssize_t)
cdef _binmap_mark(list binmap, Py_ssize_t idx)
@cython.locals(i=Py_ssize_t, other=Py_ssize_t)
cdef _binmap_unmark(list binmap, Py_ssize_t idx)
@cython.locals(i=Py_ssize_t, n=Py_ssize_t, other=Py_ssize_t)
cdef Py_ssize_t _binmap_after(list binmap, Py_ssize_t idx) except -1

# a named free's search of its size's live list (a module function, a C call in the build)
@cython.locals(n=Py_ssize_t, i=Py_ssize_t)
cdef bint _remove_newest(list live, block) except -1

# a request's chunk size and a chunk size's bin (module functions, C calls in the build)
cpdef chunk_size(nbytes)
cpdef bin_of(size)

# fast-forward's tap on the arena (ArenaReads): compiled, since the arena calls it several
# times a request while a window is recorded; its methods C calls from the arena
cdef class ArenaReads:
    cdef public Py_ssize_t top0, _top
    cdef public list events
    cdef public bint ok
    cdef public dict tcache, fast
    cdef public object _resizing
    @cython.locals(entry=list)
    cpdef took(self, Py_ssize_t size, Py_ssize_t n)
    @cython.locals(entry=list)
    cpdef parked(self, Py_ssize_t size, Py_ssize_t n)
    @cython.locals(entry=list)
    cpdef filled(self, Py_ssize_t size, Py_ssize_t n, Py_ssize_t now)
    @cython.locals(entry=list)
    cpdef fast_took(self, Py_ssize_t size, Py_ssize_t now)
    cpdef fast_parked(self, Py_ssize_t size, Py_ssize_t n)
    cpdef consolidated(self, arena)
    cpdef carved(self, arena, nb)
    cpdef merging(self, arena)
    cpdef merged(self, arena, merged)
    cpdef resizing(self, arena, size, nb)
    cpdef resized(self, arena)

cdef class _Arena:
    cdef public Py_ssize_t page, top_pad, brk, top, resident_end, mapped
    cdef public Py_ssize_t mmap_threshold, trim_threshold, trims, trimmed_bytes, trim_from
    cdef public Py_ssize_t nfast, bin_changes, _unsorted_dead, _tags
    cdef public bint dynamic
    cdef public object fault, trim, last_remainder, chunk_budget
    cdef public dict inuse, free_at, free_end, unsorted, live, alias, _borrowed
    # the tcache and the fastbins by size: dicts of lists, and the same lists by
    # ``size >> 4`` (the hot paths' lookup: a C index, no boxed size)
    cdef public dict tcache, fast
    cdef list _tcache_by, _fast_by
    # fast-forward's window recorder (None: nothing listens; see _Arena.__init__): typed,
    # so that the arena's calls to it are C calls (a Python subclass's methods still
    # take them)
    cdef public ArenaReads recorder
    cdef public list bins, binmap, runs, _run_starts

    # the arena's own calls between its methods (C calls when built; each still a Python
    # method, which a subclass or a test may replace)
    cpdef _bin_insert(self, addr, size)
    cpdef _bin_remove(self, addr)
    cpdef _unbin(self, addr, size)
    cpdef _largest_free(self)
    cpdef _large_place(self, addr, size)
    cpdef _split(self, addr, size, nb, remainder_is_last)
    @cython.locals(k=Py_ssize_t, changes=Py_ssize_t, below=Py_ssize_t,
                   inuse=dict, free_at=dict, free_end=dict, unsorted=dict, bins=list,
                   sbin=dict)
    cpdef _merge_run(self, list addrs, size)
    cpdef _consolidate(self)
    # the top's carve and the resident end it moves (every carve from the top: C ints)
    @cython.locals(page=Py_ssize_t, old=Py_ssize_t, new=Py_ssize_t)
    cpdef _touch(self, Py_ssize_t end)
    cpdef _grow(self, nb)
    @cython.locals(addr=Py_ssize_t)
    cpdef _from_top(self, Py_ssize_t nb)
    cpdef _systrim(self)
    cpdef _malloc(self, Py_ssize_t nb)
    @cython.locals(small=bint, count=Py_ssize_t, done=Py_ssize_t, taken=Py_ssize_t,
                   i=Py_ssize_t, idx=Py_ssize_t, size=Py_ssize_t, emptied=bint, bins=list,
                   binmap=list, free_at=dict, free_end=dict, inuse=dict, unsorted=dict,
                   sbin=dict, lbin=list)
    cpdef _int_malloc(self, Py_ssize_t nb)
    cpdef _mapped_size(self, nb)
    cpdef _large_fit(self, nb)
    cpdef _resize(self, block, nb)
    @cython.locals(size=Py_ssize_t, user=Py_ssize_t, start=Py_ssize_t)
    cpdef _memalign(self, Py_ssize_t nb, Py_ssize_t align)
    cpdef _free_mapped(self, block)
    # the public requests, which the replay's other requests call (C calls when built)
    cpdef alloc(self, nbytes, align=*)
    cpdef calloc(self, nbytes)
    # a run of requests of one size (Heap.alloc_run / free_run): C calls
    @cython.locals(i=Py_ssize_t, blocks=list)
    cpdef tuple alloc_each(self, nbytes, Py_ssize_t count)
    cpdef free_each(self, blocks, nbytes)
    cpdef free(self, block=*, nbytes=*)
    @cython.locals(size=Py_ssize_t)
    cpdef _free_chunk(self, addr)
    @cython.final
    cdef _free_split(self, addr, Py_ssize_t size)
    @cython.final
    cdef _free_sized(self, addr, Py_ssize_t size, list cached)
    @cython.locals(merged=Py_ssize_t, fast=list)
    cpdef _free_uncached(self, addr, Py_ssize_t size)

    # fast-forward's replay of a recorded trace (C calls to the public requests)
    @cython.locals(kind=Py_ssize_t)
    cpdef replay_trace(self, calls, dict handles, placed)

    # a recursion's requests (Heap.nested): C ints, C calls
    @cython.locals(i=Py_ssize_t, event=Py_ssize_t, nbytes=Py_ssize_t, live=Py_ssize_t,
                   peak=Py_ssize_t, allocs=Py_ssize_t, handles=list)
    cpdef tuple nested(self, list events)
    @cython.locals(i=Py_ssize_t, n=Py_ssize_t, event=Py_ssize_t, nbytes=Py_ssize_t,
                   live=Py_ssize_t, peak=Py_ssize_t, allocs=Py_ssize_t, nb=Py_ssize_t,
                   at=Py_ssize_t, held=Py_ssize_t, handles=list, tcache=dict, bins=list,
                   pending="long long[::1]", popped="long long[::1]")
    cpdef tuple _nested_folded(self, list events)
    @cython.locals(k=Py_ssize_t, at=Py_ssize_t, nbytes=Py_ssize_t, nb=Py_ssize_t)
    cpdef _unhold(self, list events, list handles, long long[::1] pending, Py_ssize_t held,
                  long long[::1] popped)

    # an address-free program (run_program): C ints, C calls
    cpdef Py_ssize_t run_program(self, long long[::1] flat) except -1
    @cython.locals(i=Py_ssize_t, k=Py_ssize_t, code="long long", a="long long",
                   b="long long", c="long long", body=Py_ssize_t, stop=Py_ssize_t,
                   live=list, short=Py_ssize_t)
    cpdef Py_ssize_t _run_span(self, long long[::1] flat, Py_ssize_t start,
                               Py_ssize_t end) except -1
    @cython.locals(j=Py_ssize_t, tcache=dict)
    cpdef bint _neutral(self, long long[::1] flat, Py_ssize_t start, Py_ssize_t end) except -1
    @cython.locals(at=Py_ssize_t, live=list)
    cpdef _free_rank(self, nbytes, Py_ssize_t rank)

    # the replay's loop over a program's requests (ReplayProgram.flat, C ints): C ints,
    # C calls
    @cython.locals(count=Py_ssize_t, cache=list, known="long long[::1]",
                   before="long long[::1]", made=Py_ssize_t, i=Py_ssize_t, spare=list)
    cpdef _replay_run(self, long long[::1] flat, n, list carry)
    @cython.locals(i=Py_ssize_t, j=Py_ssize_t, m=Py_ssize_t, count=Py_ssize_t,
                   depth=Py_ssize_t, code=Py_ssize_t, a=Py_ssize_t, b=Py_ssize_t,
                   size=Py_ssize_t, previous=list, inuse=dict, tcache_by=list, cached=list)
    @cython.final
    cdef _replay_step(self, long long[::1] flat, list blocks, list carry, list cache,
                      long long[::1] known, long long[::1] before)
    @cython.final
    cdef _replay_call(self, Py_ssize_t code, Py_ssize_t nbytes, Py_ssize_t nb, Py_ssize_t a,
                      Py_ssize_t b, list blocks, list carry)
