# Types for Cython's build of heap.py (setup.py): the heap's fields as C slots of a
# compiled class, so that every allocation and free (the exact engine's most frequent
# call) reads and writes them without a Python attribute lookup. The semantics are
# heap.py's alone; this file only says what type each field has. The counters stay
# Python objects (`object`): they hold whatever numbers heap.py and fast-forward give them.

cdef class Heap:
    cdef public object live_bytes, live_blocks, peak_bytes, allocs, large_bytes
    cdef public object allocator, _arena, tap, rehash
    # the allocator's size -> (zone, rounded) map and its zones' live bytes, high-water
    # marks and resident marks (shared with sim.platform.rss.Allocator)
    cdef public dict _small
    cdef public list _live, _high, _mark
