"""One node of a ``BTreeMap`` (:mod:`sim.platform.btree`): its keys and, for an internal
node, its child nodes.

A module of its own so that the node stays a Python object where the maps' code is
compiled (``setup.py``): it is a Rust object the locator's maps build (a ``LeafNode`` or
``InternalNode`` block), and ``sim bench`` counts the Rust objects an op builds by their
Python constructors (the event floor, :mod:`sim.commands.bench`).
"""

from __future__ import annotations

__all__ = ["TreeNode"]


class TreeNode:
    """A leaf (``edges`` None) or internal node: its keys in order, and its children."""

    __slots__ = ("keys", "edges")

    def __init__(self, keys, edges=None):
        self.keys = keys
        self.edges = edges
