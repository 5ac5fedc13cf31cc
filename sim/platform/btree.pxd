# Types for Cython's build of btree.py (setup.py): a map's state as the C fields
# of a compiled class, so that the locator's inserts (two per registered node: ``graphs``
# and ``keys``) read and write them without a Python attribute lookup. The semantics are
# btree.py's alone; this file only says what type each field has (every count stays a
# Python object: it holds whatever numbers btree.py and fast-forward give it). Its nodes
# stay Python objects (sim/platform/btree_node.py).

cdef class BTreeNodes:
    cdef public object heap, leaf_bytes, internal_bytes, root, leaves, internals, length
    cdef public object _spine, _max, _real, tap, _last
    cdef public list _runs
