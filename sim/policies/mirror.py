"""The mirror classes a policy may replace, the way a burn PR changes a method.

The simulation builds its burn objects from the policy's classes, as SimPy's
``PriorityResource`` sets ``PutQueue = SortedQueue``: the client from
``policy.GraphMutexClient``, the locator from ``policy.GraphLocator``, each graph's server
and memory management from ``policy.AutodiffServer`` and ``policy.GraphMemoryManagement``,
the backward's node cleaner and the orphan sweep from ``policy.GraphCleaner``. A fix that
changes what one of burn's methods does is a subclass of that class whose overriding
method is the patched method, beside the policy that names it::

    class DedupCleaner(GraphCleaner):
        def cleanup_orphaned_entries(self):
            ...                              # the body of the patched Rust function

    class DedupSweep(Policy):
        name = "dedup-sweep"
        GraphCleaner = DedupCleaner

Small changes keep using the policy's seams (:data:`sim.policies.SEAMS`).

Examples
--------
>>> from sim.policies import POLICIES
>>> replaced(POLICIES["dedup-sweep"])
{'GraphCleaner': ['cleanup_orphaned_entries', '_visit_once']}
>>> replaced(POLICIES["burn-0.22.1"])
{}
"""

from __future__ import annotations

from ..burn.runtime.graph import GraphCleaner, GraphLocator, GraphMutexClient
from ..burn.runtime.memory_management import GraphMemoryManagement
from ..burn.runtime.server import AutodiffServer

__all__ = ["MIRROR", "replaced", "overridden"]

#: the replaceable mirror classes: the policy attribute's name -> burn 0.22.1's class and
#: where it is in burn (``sim policies`` prints this)
MIRROR = {
    "GraphMutexClient": (GraphMutexClient, "runtime/graph.rs GraphMutexClient: register, "
                                           "backward"),
    "GraphLocator": (GraphLocator, "runtime/graph.rs GraphLocator: graphs, keys, select, "
                                   "merge, remove_entry"),
    "GraphCleaner": (GraphCleaner, "runtime/graph.rs GraphCleaner: clean, "
                                   "cleanup_orphaned_entries"),
    "AutodiffServer": (AutodiffServer, "runtime/server.rs AutodiffServer: register, "
                                       "backward, free_unused_roots"),
    "GraphMemoryManagement": (GraphMemoryManagement, "runtime/memory_management.rs "
                                                     "GraphMemoryManagement: register, "
                                                     "free_unavailable_nodes"),
}


def overridden(cls, name) -> list:
    """The methods (and ``__init__``) that the mirror class ``cls``, given for the policy
    attribute ``name``, defines in place of burn's class: those of its classes between
    itself and burn's, in its method order.

    >>> class Fix(GraphCleaner):
    ...     def cleanup_orphaned_entries(self): return 0
    >>> overridden(Fix, "GraphCleaner")
    ['cleanup_orphaned_entries']
    """
    base = MIRROR[name][0]
    names = []
    for klass in cls.__mro__:
        if klass is base or not issubclass(klass, base):
            continue
        for attr, value in vars(klass).items():
            if callable(getattr(value, "__func__", value)) and attr not in names and (
                    attr == "__init__" or not attr.startswith("__")):
                names.append(attr)
    return names


def replaced(policy) -> dict:
    """Policy attribute name -> the methods the policy class ``policy``'s mirror class
    changes, for each mirror class it replaces (empty for burn's)."""
    out = {}
    for name, (base, _) in MIRROR.items():
        cls = getattr(policy, name, base)
        if cls is not base:
            out[name] = overridden(cls, name)
    return out
