# Types for Cython's build of l2_cache.py (setup.py): a buffer's chunk and the L2's LRU as
# compiled classes with C fields, so that every forward op's touch and every buffer's
# claim and release read them without a Python attribute lookup. The semantics are
# l2_cache.py's alone; this file only says what type each field has (the byte counts stay
# Python objects).

cdef class Chunk:
    cdef public object nbytes, cache
    cdef object __weakref__

cdef class L2Cache:
    cdef public object capacity, lru, resident, hits, misses
    cdef public dict free
