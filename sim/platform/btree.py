"""Node structure of Rust's ``BTreeMap`` (B = 6), for the locator's two maps.

The GraphLocator keeps ``graphs: BTreeMap<NodeId, Arc<Graph>>`` and
``keys: BTreeMap<NodeId, HashSet<NodeId>>``. Their heap cost is one block per
tree node: a leaf holds up to 11 keys and values, an internal node also holds
12 child pointers. This module replays std's algorithms on the keys alone
(``library/alloc/src/collections/btree``: ``node.rs`` splitpoint, ``remove.rs``
merge / steal / pop_internal_level), so node counts are exact for any order of
inserts and removals:

* inserting into a full node splits it around ``splitpoint(edge)``; with node
  ids ascending (always inserted at the right end) the left half keeps 6 keys
  and 1 key moves up, so n keys occupy n / 6 nodes in all;
* a node left with fewer than 5 keys by a removal merges with a sibling when
  both fit in one node, else steals from it, preferring the left sibling;
* an empty map owns no node; the root leaf of a map emptied by removals stays.

Values are not stored: the simulated contents live in Python dicts.

Fast-forward appends long runs of ascending keys with :meth:`BTreeNodes.append_run`
in closed form: only the fill of the rightmost node at each level matters to an
append (the first split of a node holding ``c`` keys comes at insert ``12 - c``,
then every 7), so node counts and allocations are exact in O(levels). The keys
themselves are kept as runs and replayed into real nodes only when an operation
needs them (a removal, an insert that is not an append).
"""

from __future__ import annotations

from bisect import bisect_left

from .btree_node import TreeNode as _Node
from .compiled import adopt_compiled

__all__ = ["BTreeNodes", "TreeTap", "append_counts", "append_splits", "SPLIT_PERIOD"]

CAPACITY = 11
MIN_LEN = 5
#: keys of the new right node when an append of a new largest key splits a full node:
#: std's splitpoint at the last edge keeps 6 keys left, moves 1 up, and the 4 right of it
#: take the appended key (``_splitpoint(CAPACITY)``: middle 6, so 11 - 6 = 5)
SPLIT_RIGHT_KEYS = 5
#: appends of new largest keys between two splits of a rightmost node: a full node
#: splits, the new right one holds SPLIT_RIGHT_KEYS and takes 6 more before the next split
SPLIT_PERIOD = CAPACITY - SPLIT_RIGHT_KEYS + 1


def append_counts(fills, count) -> list:
    """The nodes ``count`` appends of new largest keys create in a tree whose rightmost
    nodes hold ``fills`` keys (leaf first; updated in place), in closed form: a list of
    ``(level, nodes)`` in the order the appends allocate them (a new root, then the
    splits of a level). A node holding ``c`` keys first splits at append ``12 - c``, then
    every 7 appends, each split leaving 5 keys in the new right node and sending one up."""
    made = []
    level = 0
    m = count
    while m > 0:
        if level == len(fills):
            fills.append(0)
            made.append((level, 1))
        c = fills[level]
        first_split = CAPACITY + 1 - c
        if m < first_split:
            fills[level] = c + m
            break
        rest = m - first_split
        splits = 1 + rest // SPLIT_PERIOD
        fills[level] = SPLIT_RIGHT_KEYS + rest % SPLIT_PERIOD
        made.append((level, splits))
        m = splits
        level += 1
    return made


def append_splits(fills, count) -> list:
    """The nodes ``count`` appends of new largest keys create in a tree whose rightmost
    nodes hold ``fills`` keys (leaf first; updated in place), one by one: ``(append,
    level)`` of each, in the order the appends create them (an append that splits the
    leaf and its parent creates the leaf's new right node first). What
    :meth:`BTreeNodes.append_allocs` gives append by append, in O(nodes created).

    >>> append_splits([10], 9)          # the leaf splits at its 2nd append, then every 7
    [(1, 0), (1, 1), (8, 0)]
    """
    made = []
    arrivals = range(count)             # the appends that reach the level
    level = 0
    while arrivals:
        if level == len(fills):
            made.append((arrivals[0], level))   # a new root holds the first one
            fills.append(1)
            arrivals = arrivals[1:]
            continue
        c = fills[level]
        first = CAPACITY - c
        if first >= len(arrivals):
            fills[level] = c + len(arrivals)
            break
        splits = arrivals[first::SPLIT_PERIOD]
        # the new right node holds SPLIT_RIGHT_KEYS, and each later arrival one more
        fills[level] = SPLIT_RIGHT_KEYS + (len(arrivals) - 1
                                           - (first + (len(splits) - 1) * SPLIT_PERIOD))
        made.extend((a, level) for a in splits)
        arrivals = splits
        level += 1
    made.sort()
    return made


def _splitpoint(edge_idx):
    """(middle kv index, insert into right?, index in that half) as in std's node.rs."""
    if edge_idx < 5:
        return 4, False, edge_idx
    if edge_idx == 5:
        return 5, False, edge_idx
    if edge_idx == 6:
        return 5, True, 0
    return 6, True, edge_idx - 7


class BTreeNodes:
    """Key structure and node allocations of one ``BTreeMap``.

    Parameters
    ----------
    heap : sim.platform.heap.Heap
        Receives one alloc / free per node created / destroyed.
    leaf_bytes, internal_bytes : int
        ``size_of`` of ``LeafNode<K, V>`` and ``InternalNode<K, V>``.

    Examples
    --------
    >>> from sim.platform.heap import Heap
    >>> from sim.platform.rss import Allocator
    >>> heap = Heap(Allocator.from_classes("glibc"))
    >>> tree = BTreeNodes(heap, 192, 288)
    >>> for k in range(10_000): _ = tree.insert(k)
    >>> tree.leaves + tree.internals       # ascending ids: n / 6 nodes
    1666
    >>> for k in range(10_000): _ = tree.remove(k)
    >>> tree.leaves, tree.internals, len(tree)
    (1, 0, 0)
    """

    __slots__ = ("heap", "leaf_bytes", "internal_bytes", "root", "leaves", "internals", "length",
                 "_last", "_runs", "_spine", "_max", "_real", "tap")

    def __init__(self, heap, leaf_bytes: int, internal_bytes: int):
        self.heap = heap
        self.leaf_bytes = leaf_bytes
        self.internal_bytes = internal_bytes
        self.root = None
        self.leaves = 0
        self.internals = 0
        self.length = 0
        # the rightmost leaf, for the common append of a new largest key (ids ascend)
        self._last = None
        # runs of keys appended in closed form and not materialized: (first, stride, count)
        self._runs = []
        self._spine = None
        self._max = None
        self._real = None
        #: a :class:`TreeTap` that sees every operation instead of the map (fast-forward's
        #: recorder), or None: the map does each operation itself
        self.tap = None

    def untapped(self, operation, *args):
        """``operation(*args)`` (one of this map's methods) done by the map itself, as if
        no tap were set: what a :class:`TreeTap` calls to pass an operation on."""
        tap, self.tap = self.tap, None
        try:
            return operation(*args)
        finally:
            self.tap = tap

    @property
    def appends_in_closed_form(self) -> bool:
        """Whether the map holds runs appended in closed form (:meth:`append_run`): an
        insert of a key above them all appends one more run."""
        return bool(self._runs)

    def __len__(self):
        return self.length

    @property
    def nbytes(self) -> int:
        """Bytes of all nodes."""
        return self.leaves * self.leaf_bytes + self.internals * self.internal_bytes

    def clone_nodes(self, heap, empty=False) -> tuple:
        """``BTreeMap::clone``: one block per node, allocated on ``heap`` (none for an
        ``empty`` map: its root leaf stays with the original). Returns ``(leaves,
        internals)``, what :meth:`drop_clone` frees; where ``heap``'s allocator places
        blocks one by one (a glibc arena), also the blocks' handles, so that the drop frees
        the clone's own nodes (by size it would free the newest blocks of the size, which
        the map's inserts since the clone may have made)."""
        if self.tap is not None:
            return self.tap.clone_nodes(self, heap, empty)
        clone = (0, 0) if empty else (self.leaves, self.internals)
        if heap.orders_frees and (clone[0] or clone[1]):
            return clone + (heap.alloc_run(self.leaf_bytes, clone[0]) +
                            heap.alloc_run(self.internal_bytes, clone[1]),)
        heap.alloc_many(self.leaf_bytes, clone[0])
        heap.alloc_many(self.internal_bytes, clone[1])
        return clone

    def drop_clone(self, heap, clone) -> None:
        """Drop of a clone made by :meth:`clone_nodes`: its blocks freed (leaves first, in
        the order they were allocated, then the internal nodes)."""
        if self.tap is not None:
            return self.tap.drop_clone(self, heap, clone)
        if len(clone) == 3:
            leaves, internals, blocks = clone
            heap.free_run(self.leaf_bytes, blocks[:leaves])
            heap.free_run(self.internal_bytes, blocks[leaves:])
            return
        heap.free_many(self.leaf_bytes, clone[0])
        heap.free_many(self.internal_bytes, clone[1])

    # -- allocation ---------------------------------------------------------
    def _new(self, keys, edges=None):
        # a node's free goes by size: fast-forward allocates the nodes of the appends it
        # applies in closed form or replays without handles (append_allocs), so a free
        # naming exact mode's nodes would free in another order than fast-forward's
        if edges is None:
            self.leaves += 1
            self.heap.alloc(self.leaf_bytes)
        else:
            self.internals += 1
            self.heap.alloc(self.internal_bytes)
        return _Node(keys, edges)

    def _free(self, node):
        if node.edges is None:
            self.leaves -= 1
            self.heap.free(self.leaf_bytes)
        else:
            self.internals -= 1
            self.heap.free(self.internal_bytes)

    # -- insert ---------------------------------------------------------------
    def insert(self, key) -> bool:
        """Insert ``key``; returns False (no structural change) if it was present."""
        if self.tap is not None:
            return self.tap.insert(self, key)
        if self._runs:
            if key > self._max:
                self.append_run(key, 1, 1)
                return True
            self.materialize()
        last = self._last
        if last is not None:
            keys = last.keys
            if keys and key > keys[-1] and len(keys) < CAPACITY:
                keys.append(key)
                self.length += 1
                return True
        node = self.root
        if node is None:
            self.root = self._last = self._new([key])
            self.length = 1
            return True
        node, i, path, found = self._search(node, key)
        if found:
            return False
        self.length += 1
        if len(node.keys) < CAPACITY:
            node.keys.insert(i, key)
            if i == len(node.keys) - 1 and all(p[1] == len(p[0].edges) - 1 for p in path):
                self._last = node
            return True
        was_last = node is self._last
        self._last = None
        mid, right_side, at = _splitpoint(i)
        right = self._new(node.keys[mid + 1:])
        up = node.keys[mid]
        del node.keys[mid:]
        (right if right_side else node).keys.insert(at, key)
        if was_last:
            self._last = right  # the new right half is now the rightmost leaf
        while path:
            parent, pi = path.pop()
            if len(parent.keys) < CAPACITY:
                parent.keys.insert(pi, up)
                parent.edges.insert(pi + 1, right)
                return True
            mid, right_side, at = _splitpoint(pi)
            new_right = self._new(parent.keys[mid + 1:], parent.edges[mid + 1:])
            new_up = parent.keys[mid]
            del parent.keys[mid:]
            del parent.edges[mid + 1:]
            target = new_right if right_side else parent
            target.keys.insert(at, up)
            target.edges.insert(at + 1, right)
            up, right = new_up, new_right
        self.root = self._new([up], [self.root, right])
        return True

    def insert_each(self, keys, start=0) -> None:
        """:meth:`insert` of each of ``keys`` (shifted by ``start``) in turn: a key above
        the rightmost leaf's, which has room, is appended there in the loop (insert's own
        fast path), any other goes through :meth:`insert`."""
        for key in keys:
            key += start
            last = self._last
            if last is not None and self.tap is None and not self._runs:
                held = last.keys
                if held and key > held[-1] and len(held) < CAPACITY:
                    held.append(key)
                    self.length += 1
                    continue
            self.insert(key)

    @staticmethod
    def _search(node, key):
        """Descend from ``node`` to ``key``: (node holding it or the leaf where it would go,
        its index there, the (node, edge index) path above, whether it was found)."""
        path = []
        while True:
            keys = node.keys
            i = bisect_left(keys, key)
            if i < len(keys) and keys[i] == key:
                return node, i, path, True
            if node.edges is None:
                return node, i, path, False
            path.append((node, i))
            node = node.edges[i]

    # -- remove ---------------------------------------------------------------
    def remove(self, key) -> bool:
        """Remove ``key``; returns False if it was absent."""
        if self.tap is not None:
            return self.tap.remove(self, key)
        if self._runs:
            if self._remove_from_runs(key):
                return True
            self.materialize()
        return self._remove(key, None)[0]

    def remove_after(self, key, finger):
        """:meth:`remove` of ``key`` right after a removal that returned ``finger`` (None:
        none): a key in the leaf of the removal before is found there without descending
        (:meth:`_remove`). Returns the finger for the next one."""
        if self.tap is not None or self._runs:
            self.remove(key)
            return None
        return self._remove(key, finger)[1]

    def churn_root_leaf(self, changes, start=0) -> bool:
        """:meth:`insert` (``True``) or :meth:`remove` (``False``) of each ``(inserted,
        key)`` of ``changes`` in turn, keys shifted by ``start``, done on the keys alone
        where the map is one root leaf that holds them all without overflowing: no node is
        made, split or freed then (a root leaf never merges, and stays when emptied), so
        the map's nodes and heap events are those of the operations one at a time.
        Returns False, changing nothing, where that does not hold (a tap, runs, no root,
        an internal root, more than ``CAPACITY`` keys at some point)."""
        root = self.root
        if self.tap is not None or self._runs or root is None or root.edges is not None:
            return False
        keys = set(root.keys)
        add, discard = keys.add, keys.discard
        for inserted, key in changes:
            if inserted:
                add(start + key)
                if len(keys) > CAPACITY:
                    return False
            else:
                discard(start + key)
        root.keys[:] = sorted(keys)
        self.length = len(keys)
        return True

    def _remove_from_runs(self, key) -> bool:
        """Remove ``key`` from the closed-form runs without materializing them, where it
        sits in the rightmost leaf and that leaf keeps at least ``MIN_LEN`` keys (or is the
        root): no node changes, the leaf's fill drops by one. Replaying the runs without
        the key later gives the same nodes: a split the key would have made one append
        earlier comes one append later, around the same keys (the rightmost leaf still
        takes at least one key after it, since it keeps ``MIN_LEN``). Returns False where
        that does not hold, or the key is not in a run (the caller materializes)."""
        spine = self._spine
        fill = spine[0]
        if fill <= MIN_LEN and len(spine) > 1:
            return False
        runs = self._runs
        after = 0                 # keys above ``key``: the rightmost leaf holds the last ``fill``
        for i in range(len(runs) - 1, -1, -1):
            first, stride, count = runs[i]
            last = first + stride * (count - 1)
            if key > last:
                return False      # between two runs, or above them all: not in a run
            if key >= first:
                if (key - first) % stride:
                    return False
                after += (last - key) // stride
                if after >= fill or (count == 1 and len(runs) == 1):
                    return False  # deeper than the leaf; or the last run key (keep a run)
                j = (key - first) // stride
                runs[i:i + 1] = [r for r in ((first, stride, j),
                                             (key + stride, stride, count - j - 1)) if r[2]]
                break
            after += count
            if after >= fill:
                return False
        else:
            return False
        spine[0] = fill - 1
        self.length -= 1
        first, stride, count = runs[-1]
        self._max = first + stride * (count - 1)
        return True

    def _remove(self, key, finger):
        """Remove ``key`` (runs materialized); returns (whether it was present, finger).

        ``finger``: ``(leaf, path)`` of the previous removal, valid while no node changed
        since (the leaf kept at least ``MIN_LEN`` keys, or is the root): a key within
        that leaf's range is found there without descending from the root, by the same
        path, so the result is the one a search would give (removals in ascending order,
        as a sweep makes them, mostly hit the leaf of the one before)."""
        if finger is not None:
            leaf, path = finger
            keys = leaf.keys
            if keys and keys[0] <= key <= keys[-1]:
                i = bisect_left(keys, key)
                if keys[i] != key:
                    return False, finger      # within a leaf's range, absent from the map
                self.length -= 1
                del keys[i]
                if len(keys) >= MIN_LEN or not path:
                    return True, finger
                self._last = None
                self._after_leaf_removal(leaf, path)
                return True, None
        node = self.root
        if node is None:
            return False, finger
        node, i, path, found = self._search(node, key)
        if not found:
            return False, finger
        self.length -= 1
        if node.edges is None:
            del node.keys[i]
            if len(node.keys) >= MIN_LEN or not path:
                # no node changed: the rightmost leaf (_last) is still the rightmost
                return True, (node, path)
            self._last = None
            self._after_leaf_removal(node, path)
            return True, None
        # internal kv: remove the in-order predecessor from its leaf, then put it in place
        self._last = None
        path.append((node, i))
        leaf = node.edges[i]
        while leaf.edges is not None:
            path.append((leaf, len(leaf.edges) - 1))
            leaf = leaf.edges[-1]
        predecessor = leaf.keys.pop()
        self._after_leaf_removal(leaf, path)
        holder = self.root
        while True:
            j = bisect_left(holder.keys, key)
            if j < len(holder.keys) and holder.keys[j] == key:
                holder.keys[j] = predecessor
                return True, None
            holder = holder.edges[j]

    def _after_leaf_removal(self, leaf, path):
        if len(leaf.keys) >= MIN_LEN or not path:
            return
        parent, pi = path.pop()
        if pi > 0:
            left = parent.edges[pi - 1]
            if len(left.keys) + 1 + len(leaf.keys) <= CAPACITY:
                self._merge(parent, pi - 1)
            else:
                self._steal_left(parent, pi - 1, 1)
        else:
            right = parent.edges[1]
            if len(leaf.keys) + 1 + len(right.keys) <= CAPACITY:
                self._merge(parent, 0)
            else:
                self._steal_right(parent, 0, 1)
        if not self._fix_node_and_affected_ancestors(parent, path):
            old = self.root
            self.root = old.edges[0]
            self._free(old)

    def _fix_node_and_affected_ancestors(self, node, path) -> bool:
        while True:
            n = len(node.keys)
            if n >= MIN_LEN:
                return True
            if not path:
                return n > 0
            parent, pi = path.pop()
            if pi > 0:
                left = parent.edges[pi - 1]
                if len(left.keys) + 1 + n <= CAPACITY:
                    self._merge(parent, pi - 1)
                    node = parent
                    continue
                self._steal_left(parent, pi - 1, MIN_LEN - n)
                return True
            right = parent.edges[1]
            if n + 1 + len(right.keys) <= CAPACITY:
                self._merge(parent, 0)
                node = parent
                continue
            self._steal_right(parent, 0, MIN_LEN - n)
            return True

    def _merge(self, parent, kv):
        left, right = parent.edges[kv], parent.edges[kv + 1]
        left.keys.append(parent.keys[kv])
        left.keys.extend(right.keys)
        if left.edges is not None:
            left.edges.extend(right.edges)
        del parent.keys[kv]
        del parent.edges[kv + 1]
        self._free(right)

    @staticmethod
    def _steal_left(parent, kv, count):
        left, right = parent.edges[kv], parent.edges[kv + 1]
        cut = len(left.keys) - count
        right.keys[0:0] = left.keys[cut + 1:] + [parent.keys[kv]]
        parent.keys[kv] = left.keys[cut]
        del left.keys[cut:]
        if left.edges is not None:
            right.edges[0:0] = left.edges[cut + 1:]
            del left.edges[cut + 1:]

    @staticmethod
    def _steal_right(parent, kv, count):
        left, right = parent.edges[kv], parent.edges[kv + 1]
        left.keys.append(parent.keys[kv])
        left.keys.extend(right.keys[:count - 1])
        parent.keys[kv] = right.keys[count - 1]
        del right.keys[:count]
        if left.edges is not None:
            left.edges.extend(right.edges[:count])
            del right.edges[:count]

    def remove_run(self, first, stride, count) -> None:
        """Remove the keys ``first, first + stride, ...`` (all present), in ascending order."""
        if self.tap is not None:
            return self.tap.remove_run(self, first, stride, count)
        self.remove_many([(first, stride, count)])

    def remove_many(self, items) -> None:
        """Remove keys in the given order: ints, or ``(first, stride, count)`` runs.

        When at most 10 keys remain the result does not depend on the order and
        is known without replaying: a tree whose root is internal holds at least
        11 keys (two children of 5 and a separator), so what is left is one root
        leaf; every other node is freed.
        """
        if self.tap is not None:
            return self.tap.remove_many(self, items)
        total = sum(item[2] if type(item) is tuple else 1 for item in items)
        if not total:
            return
        if self.length - total <= 10:
            remaining = self._keys_outside(items)
            if remaining is not None:
                self.heap.free_many(self.leaf_bytes, self.leaves - 1)
                self.heap.free_many(self.internal_bytes, self.internals)
                self.root = self._last = _Node(sorted(remaining))
                self.leaves, self.internals = 1, 0
                self.length = len(remaining)
                self._runs, self._spine, self._max, self._real = [], None, None, None
                return
        if self._runs:
            self.materialize()
        remove = self._remove
        finger = None
        for item in items:
            if type(item) is tuple:
                first, stride, count = item
                for key in range(first, first + stride * count, stride):
                    finger = remove(key, finger)[1]
            else:
                finger = remove(item, finger)[1]

    def _keys_outside(self, items):
        """Keys of the tree not among ``items`` if that is cheap to list (else None)."""
        ranges = [range(f, f + s * c, s) for f, s, c in (i for i in items if type(i) is tuple)]
        if sum(len(r) for r in ranges) > 5_000_000:
            return None
        removed = {item for item in items if type(item) is not tuple}
        for r in ranges:
            removed.update(r)
        out = []
        for first, stride, count in self._runs:
            last = first + stride * (count - 1)
            if any(first in r and last in r and stride % r.step == 0 for r in ranges):
                continue
            if count > 16:
                return None
            out.extend(k for k in range(first, last + 1, stride) if k not in removed)
        stack = [self.root] if self.root is not None else []
        while stack:
            node = stack.pop()
            out.extend(k for k in node.keys if k not in removed)
            if len(out) > 10:
                return None
            if node.edges is not None:
                stack.extend(node.edges)
        return out

    # -- closed-form appends ---------------------------------------------------------
    def append_run(self, first, stride, count, alloc=True) -> None:
        """Append keys ``first, first + stride, ...`` (``count`` of them, all above every key).

        ``alloc=False``: count the new nodes but leave their heap events to the caller
        (fast-forward replaying them one append at a time with :func:`append_allocs`)."""
        if self.tap is not None:
            return self.tap.append_run(self, first, stride, count, alloc)
        if count <= 0:
            return
        if not self._runs:
            self._spine = self._real_spine()
            self._real = (self.leaves, self.internals)
        self._runs.append((first, stride, count))
        self._max = first + stride * (count - 1)
        self.length += count
        for level, n in append_counts(self._spine, count):
            node_bytes = self.leaf_bytes if level == 0 else self.internal_bytes
            self._count_new(level, node_bytes, n, alloc)

    def append_ascending(self, first, stride, count) -> None:
        """Append keys ``first, first + stride, ...`` (``count``, all above every key) as
        that many inserts leave the map: its heap in closed form (:meth:`append_run`), its
        nodes real where it held no run before (so later inserts go one by one, as they
        would)."""
        had_runs = bool(self._runs)
        self.append_run(first, stride, count)
        if not had_runs:
            self.materialize()

    def append_nodes(self, first, stride, count) -> list:
        """Append keys ``first, first + stride, ...`` (``count``, all above every key, to
        a map that holds no run) as that many inserts leave the map, leaving the heap to
        the caller: returns ``(append, node bytes)`` of each node the inserts allocate, in
        their order (:func:`append_splits`)."""
        made = append_splits(self._real_spine(), count)
        heap, self.heap = self.heap, _MUTED
        try:
            self._append_keys(list(range(first, first + stride * count, stride)))
        finally:
            self.heap = heap
        leaf, internal = self.leaf_bytes, self.internal_bytes
        return [(at, internal if level else leaf) for at, level in made]

    def _count_new(self, level, node_bytes, n, alloc=True) -> None:
        if level == 0:
            self.leaves += n
        else:
            self.internals += n
        if alloc:
            self.heap.alloc_many(node_bytes, n)

    def fills(self) -> list:
        """Keys in the rightmost node of each level, leaf first (a copy): all an append of
        ascending keys depends on."""
        return list(self._spine) if self._runs else self._real_spine()

    def max_key(self):
        """The largest key, or None for an empty map."""
        if self._runs:
            return self._max
        node = self.root
        while node is not None and node.edges is not None:
            node = node.edges[-1]
        return node.keys[-1] if node is not None and node.keys else None

    def append_allocs(self, fills, alloc) -> list:
        """One append of a new largest key to a tree whose rightmost nodes hold ``fills``
        (updated in place), for fast-forward's replay of an iteration: calls ``alloc(nbytes)``
        for each node it creates, in the order :meth:`insert` creates them (the split
        leaf, the split parents, a new root); returns their sizes."""
        made = []
        level = 0
        while level == len(fills) or fills[level] == CAPACITY:
            nbytes = self.leaf_bytes if level == 0 else self.internal_bytes
            alloc(nbytes)
            made.append(nbytes)
            if level == len(fills):
                fills.append(1)         # a new root (or the first leaf) holds the key
                return made
            fills[level] = SPLIT_RIGHT_KEYS     # the full node splits: its new right one
            level += 1
        fills[level] += 1
        return made

    def _real_spine(self):
        fills = []
        node = self.root
        while node is not None:
            fills.append(len(node.keys))
            node = node.edges[-1] if node.edges is not None else None
        fills.reverse()
        return fills

    def materialize(self) -> None:
        """Replay the closed-form runs into real nodes (their heap is already counted)."""
        runs, self._runs = self._runs, []
        counts = (self.leaves, self.internals, self.length)
        heap = self.heap
        self.heap = _MUTED
        self.length -= sum(count for _, _, count in runs)
        self.leaves, self.internals = self._real
        try:
            for first, stride, count in runs:
                self._append_keys(list(range(first, first + stride * count, stride)))
        finally:
            self.heap = heap
        leaves, internals = self.leaves, self.internals
        self.leaves, self.internals, self.length = counts
        if (leaves, internals) != counts[:2]:
            raise AssertionError("closed-form B-tree counts differ from the replayed tree")
        self._spine = None

    def _append_keys(self, keys) -> None:
        """Insert ascending ``keys``, all above every key, node by node (a bulk append).

        The same splits as one insert at a time: a full rightmost node receiving
        one more key keeps 6 keys, sends the 7th up, and the new right node takes
        the other 4 and the new key; so each further 7 keys make one new node.
        """
        path = []
        node = self.root
        while node is not None:
            path.append(node)
            node = node.edges[-1] if node.edges is not None else None
        path.reverse()  # leaf first
        items = keys
        children = None
        level = 0
        while items:
            if level == len(path):
                if level == 0:
                    node = self._new([])
                else:
                    node = self._new([], [self.root])
                self.root = node
                path.append(node)
            node = path[level]
            promoted, right_nodes = [], []
            i, n = 0, len(items)
            while i < n:
                room = CAPACITY - len(node.keys)
                if room > 0:
                    node.keys.extend(items[i:i + room])
                    if children is not None:
                        node.edges.extend(children[i:i + room])
                    i += room
                    continue
                # full: split around key 6, the incoming key goes right
                keys_ = node.keys
                if node.edges is None:
                    right = self._new(keys_[7:] + [items[i]])
                else:
                    right = self._new(keys_[7:] + [items[i]], node.edges[7:] + [children[i]])
                    del node.edges[7:]
                promoted.append(keys_[6])
                del keys_[6:]
                right_nodes.append(right)
                node = path[level] = right
                i += 1
            items, children = promoted, right_nodes
            level += 1
        self._last = path[0] if path else None
        self.length += len(keys)

    # -- checks -----------------------------------------------------------------
    def keys_in_order(self):
        """All keys, in order (for tests)."""
        if self._runs:
            self.materialize()
        out = []

        def walk(node):
            if node.edges is None:
                out.extend(node.keys)
                return
            for k, child in zip(node.keys, node.edges):
                walk(child)
                out.append(k)
            walk(node.edges[-1])

        if self.root is not None:
            walk(self.root)
        return out


class TreeTap:
    """What a tapped map (:attr:`BTreeNodes.tap`) hands its operations to instead of
    doing them: ``insert``, ``remove``, ``remove_many``, ``remove_run``, ``append_run``,
    ``clone_nodes`` and ``drop_clone``, each called with the map first and the
    operation's arguments after. This base passes every operation on to the map
    (:meth:`BTreeNodes.untapped`); the operations one of them makes inside (a
    ``remove_run`` is a ``remove_many``, an insert above closed-form runs an
    ``append_run``) are the map's own. A map with no tap pays one attribute test per
    operation."""

    __slots__ = ()

    def insert(self, tree, key):
        return tree.untapped(tree.insert, key)

    def remove(self, tree, key):
        return tree.untapped(tree.remove, key)

    def remove_many(self, tree, items):
        return tree.untapped(tree.remove_many, items)

    def remove_run(self, tree, first, stride, count):
        return tree.untapped(tree.remove_run, first, stride, count)

    def append_run(self, tree, first, stride, count, alloc):
        return tree.untapped(tree.append_run, first, stride, count, alloc)

    def clone_nodes(self, tree, heap, empty):
        return tree.untapped(tree.clone_nodes, heap, empty)

    def drop_clone(self, tree, heap, clone):
        return tree.untapped(tree.drop_clone, heap, clone)


class _Muted:
    """A heap that ignores events (replaying nodes whose bytes were already counted)."""

    @staticmethod
    def alloc(nbytes):
        pass

    @staticmethod
    def free(nbytes, block=None):
        pass


_MUTED = _Muted()


# the compiled build of this file (setup.py; the fields' types in its .pxd) in place of
# its classes when built from this very text; SIM_PURE_BTREE=1 keeps the Python
adopt_compiled(globals(), "sim.platform.btree", "_btree_c", "SIM_PURE_BTREE", "the B-tree maps")
