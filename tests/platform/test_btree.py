"""The BTreeMap node model: closed-form appends and batched removals equal one-at-a-time."""

import random

import pytest

from sim.platform.btree import BTreeNodes
from sim.platform.heap import Heap
from sim.platform.rss import Allocator


def shape(node):
    return (len(node.keys), None if node.edges is None else tuple(shape(c) for c in node.edges))


def check_invariants(tree):
    """Every non-root node holds 5..11 keys; keys are sorted."""
    def walk(node, is_root):
        assert len(node.keys) <= 11
        if not is_root:
            assert len(node.keys) >= 5
        if node.edges is not None:
            assert len(node.edges) == len(node.keys) + 1
            for child in node.edges:
                walk(child, False)
    if tree.root is not None:
        walk(tree.root, True)
    keys = tree.keys_in_order()
    assert keys == sorted(keys)


@pytest.mark.parametrize("seed", range(40))
def test_fast_paths_match_one_key_at_a_time(seed):
    rnd = random.Random(seed)
    h1, h2 = Heap(Allocator.from_classes("glibc")), Heap(Allocator.from_classes("glibc"))
    a, b = BTreeNodes(h1, 192, 288), BTreeNodes(h2, 192, 288)
    nxt = 0
    for _ in range(30):
        r = rnd.random()
        if r < 0.5:
            n = rnd.choice([1, 2, 5, 11, 12, 13, 50, 200, 3000])
            stride = rnd.choice([1, 3])
            for k in range(nxt, nxt + stride * n, stride):
                a.insert(k)
            b.append_run(nxt, stride, n)
            nxt += stride * n
        elif r < 0.65 and nxt:
            k = rnd.randrange(nxt)
            a.remove(k)
            b.remove(k)
        elif r < 0.85:
            keys = a.keys_in_order()
            keep = set(rnd.sample(keys, min(len(keys), rnd.randrange(0, 30))))
            batch = [k for k in keys if k not in keep]
            for k in batch:
                a.remove(k)
            b.remove_many(batch)
        else:
            a.insert(nxt)
            b.insert(nxt)
            nxt += 1
        assert (a.leaves, a.internals, a.length) == (b.leaves, b.internals, b.length)
        assert (h1.live_bytes, h1.live_blocks) == (h2.live_bytes, h2.live_blocks)
    check_invariants(a)
    check_invariants(b)
    assert a.keys_in_order() == b.keys_in_order()
    if a.root is not None:
        assert shape(a.root) == shape(b.root)


def test_ascending_ids_give_one_node_per_six_keys():
    heap = Heap(Allocator.from_classes("glibc"))
    tree = BTreeNodes(heap, 192, 288)
    tree.append_run(0, 1, 6 * 10 ** 6)
    assert abs(tree.leaves + tree.internals - 10 ** 6) <= 2
    assert tree.leaves == 6 * 10 ** 6 // 7 + 1 or abs(tree.leaves - 6 * 10 ** 6 / 7) < 2


def test_an_append_split_leaves_split_right_keys_in_the_new_right_node():
    """The closed forms' SPLIT_RIGHT_KEYS and SPLIT_PERIOD are what one-at-a-time inserts
    of ascending keys (std's splitpoint at the last edge) leave in the rightmost leaf."""
    from sim.platform.btree import CAPACITY, SPLIT_PERIOD, SPLIT_RIGHT_KEYS
    tree = BTreeNodes(Heap(Allocator.from_classes("glibc")), 192, 288)
    for k in range(CAPACITY + 1):           # the 12th key splits the full root leaf
        tree.insert(k)
    assert [len(c.keys) for c in tree.root.edges] == [6, SPLIT_RIGHT_KEYS] == [6, 5]
    for k in range(CAPACITY + 1, CAPACITY + SPLIT_PERIOD):
        tree.insert(k)
    assert len(tree.root.edges) == 2        # six more appends fill the right leaf
    tree.insert(CAPACITY + SPLIT_PERIOD)
    assert [len(c.keys) for c in tree.root.edges] == [6, 6, SPLIT_RIGHT_KEYS]
    assert SPLIT_PERIOD == 7


class _Log:
    """A heap that only logs the sizes allocated, in order."""

    def __init__(self):
        self.sizes = []

    def alloc(self, nbytes, align=0):
        self.sizes.append(nbytes)

    def free(self, nbytes, block=None):
        self.sizes.append(-nbytes)


@pytest.mark.parametrize("start", [0, 1, 11, 12, 77, 500, 1330])
def test_append_allocs_replays_the_splits_of_inserts_in_order(start):
    """Fast-forward's replay of an append (a glibc arena needs each node's allocation at its
    place in the iteration) makes the same allocations, in the same order, as insert."""
    real, log = BTreeNodes(_Log(), 192, 288), _Log()
    for k in range(start):
        real.insert(k)
    fills = real.fills()
    real.heap.sizes.clear()
    per_key_real, per_key_replay = [], []
    for k in range(start, start + 3000):
        before = len(real.heap.sizes)
        real.insert(k)
        per_key_real.append(real.heap.sizes[before:])
        before = len(log.sizes)
        real.append_allocs(fills, log.alloc)
        per_key_replay.append(log.sizes[before:])
    assert per_key_replay == per_key_real
    assert fills == real.fills()
    assert any(len(sizes) == 2 for sizes in per_key_real)   # a leaf and an internal node split


@pytest.mark.parametrize("seed", range(24))
def test_batched_removals_take_the_leaf_of_the_last_one_as_a_search_would(seed):
    """remove_many goes to the leaf of the previous removal while no node changed since
    (a sweep removes ids in ascending order); the nodes, their keys and the heap are the
    ones removing the keys one at a time gives, in any order, absent keys included."""
    rnd = random.Random(seed)
    h1, h2 = Heap(Allocator.from_classes("macos")), Heap(Allocator.from_classes("macos"))
    a, b = BTreeNodes(h1, 192, 288), BTreeNodes(h2, 192, 288)
    n = rnd.choice([12, 100, 700, 4000])
    keys = list(range(n)) if seed % 2 else rnd.sample(range(5 * n), n)
    for k in keys:
        a.insert(k)
        b.insert(k)
    gone = rnd.sample(keys, rnd.randint(min(n // 2, n - 11), n - 11))
    if seed % 3 == 0:
        gone.sort()                       # ascending: mostly within the last leaf
    elif seed % 3 == 1:
        gone.sort(reverse=True)
    gone += [-1, 10 * n]                  # absent keys change nothing
    for k in gone:
        a.remove(k)
    b.remove_many(gone)
    assert (a.leaves, a.internals, a.length) == (b.leaves, b.internals, b.length)
    assert (h1.live_bytes, h1.live_blocks) == (h2.live_bytes, h2.live_blocks)
    check_invariants(b)
    assert a.keys_in_order() == b.keys_in_order()
    assert shape(a.root) == shape(b.root)


def _remove_near_the_end(seed):
    """A removal of one of the last keys appended in closed form (a backward freeing the
    nodes of the graph it ran, right after a fast-forwarded loop) leaves the runs
    unmaterialized where no node changes; the nodes, keys and heap, after more appends,
    removals and a materialization, are the ones inserting and removing one key at a
    time gives. Returns how many removals kept the runs."""
    rnd = random.Random(seed)
    h1, h2 = Heap(Allocator.from_classes("macos")), Heap(Allocator.from_classes("macos"))
    a, b = BTreeNodes(h1, 192, 288), BTreeNodes(h2, 192, 288)
    nxt = 0
    if seed % 2:
        for k in range(rnd.randrange(1, 40)):   # a real tree under the runs
            a.insert(k)
            b.insert(k)
            nxt += 1
    kept_closed = 0
    for _ in range(25):
        r = rnd.random()
        if r < 0.45:
            n = rnd.choice([1, 2, 3, 5, 7, 12, 40, 500])
            stride = rnd.choice([1, 2])
            for k in range(nxt, nxt + stride * n, stride):
                a.insert(k)
            b.append_run(nxt, stride, n)
            nxt += stride * n
        elif r < 0.9 and a.length:
            # one of the last dozen keys (present or not)
            k = nxt - 1 - rnd.randrange(12)
            runs = bool(b._runs)
            assert a.remove(k) == b.remove(k)
            kept_closed += runs and bool(b._runs)
        elif b._runs:
            b.materialize()
        assert (a.leaves, a.internals, a.length) == (b.leaves, b.internals, b.length)
        assert (h1.live_bytes, h1.live_blocks) == (h2.live_bytes, h2.live_blocks)
        assert a.fills() == b.fills()
        assert a.max_key() == b.max_key()
    check_invariants(b)           # materializes b: the replay must give a's nodes
    assert a.keys_in_order() == b.keys_in_order()
    if a.root is not None:
        assert shape(a.root) == shape(b.root)
    return kept_closed


@pytest.mark.parametrize("seed", range(40))
def test_removing_a_key_of_the_rightmost_leaf_keeps_the_closed_form_runs(seed):
    _remove_near_the_end(seed)


def test_the_closed_form_removal_is_taken():
    assert sum(_remove_near_the_end(seed) for seed in range(40)) > 40


def test_a_backward_after_a_fast_forwarded_loop_leaves_its_run_closed_form():
    """The two removals of the adleak backward-each-round pattern (the max key of a tree
    whose rightmost leaf keeps enough keys) do not materialize the 100,000-key run."""
    heap = Heap(Allocator.from_classes("macos"))
    tree = BTreeNodes(heap, 192, 288)
    tree.append_run(0, 1, 100_000)
    for k in range(100_000, 100_004):
        tree.insert(k)
    fills = tree.fills()
    assert fills[0] > 5
    assert tree.remove(100_003)
    assert tree._runs and tree.fills()[0] == fills[0] - 1 and tree.length == 100_003
    assert tree.max_key() == 100_002


def test_a_dropped_clone_frees_its_own_nodes_on_glibcs_arena():
    """``BTreeMap::clone`` then inserts that split the original, then the clone's drop: on
    a glibc arena the drop frees the clone's blocks, not the newest blocks of the size
    (the leaf the split just made), so every node of the original stays allocated."""
    heap = Heap(Allocator.from_classes("glibc-arena"))
    arena = heap.allocator.arena
    tree = BTreeNodes(heap, 192, 288)
    for k in range(8):
        tree.insert(k)
    root = arena.live[192][-1]
    clone = tree.clone_nodes(heap)
    copy = arena.live[192][-1]
    before = set(arena.inuse)
    for k in range(8, 20):
        tree.insert(k)          # the root leaf splits: a new leaf and an internal node
    made = set(arena.inuse) - before
    tree.drop_clone(heap, clone)
    parked = {chunk for bin_ in arena.tcache.values() for chunk in bin_}
    assert parked == {copy} and root not in parked and not parked & made
    assert heap.live_blocks == tree.leaves + tree.internals


class _ManyLog(_Log):
    """:class:`_Log` that also takes runs of one size (remove_many, append_run)."""

    def alloc_many(self, nbytes, count):
        self.sizes.extend([nbytes] * count)

    def free_many(self, nbytes, count):
        self.sizes.extend([-nbytes] * count)


@pytest.mark.parametrize("seed", range(60))
def test_a_root_leafs_churn_on_its_keys_equals_one_operation_at_a_time(seed):
    """churn_root_leaf: inserts and removals (present and absent keys, shifted by
    ``start``) on a map that is one root leaf give the keys, length, nodes and heap events
    of the operations one at a time where the leaf never holds more than 11 keys; where
    it would (a split), or the map is deeper, empty or holds closed-form runs, it changes
    nothing and says so."""
    rnd = random.Random(seed)
    a, b = BTreeNodes(_ManyLog(), 192, 288), BTreeNodes(_ManyLog(), 192, 288)
    n = rnd.choice([0, 1, 3, 5, 10, 11, 12, 30])
    for k in rnd.sample(range(40), n):
        a.insert(k)
        b.insert(k)
    if seed % 7 == 0:
        a.remove_many(a.keys_in_order())    # an emptied map: its root leaf stays
        b.remove_many(b.keys_in_order())
    start = rnd.choice([0, 5, 100])
    changes = [(rnd.random() < 0.5, rnd.randrange(-5, 45)) for _ in range(rnd.randrange(30))]
    a.heap.sizes.clear()
    b.heap.sizes.clear()
    before = (b.keys_in_order(), b.length, shape(b.root) if b.root else None)
    root_leaf = b.root is not None and b.root.edges is None
    done = b.churn_root_leaf(changes, start)
    for inserted, key in changes:
        (a.insert if inserted else a.remove)(start + key)
    one_leaf = a.leaves == 1 and a.internals == 0 and not a.heap.sizes
    assert done == (root_leaf and one_leaf)
    assert done or not root_leaf or a.heap.sizes    # refused: the leaf split
    if done:
        assert b.keys_in_order() == a.keys_in_order()
        assert (b.length, b.leaves, b.internals) == (a.length, a.leaves, a.internals)
        assert b.heap.sizes == a.heap.sizes == []
        check_invariants(b)
    else:
        assert (b.keys_in_order(), b.length, shape(b.root) if b.root else None) == before
        assert b.heap.sizes == []


def test_a_root_leafs_churn_refuses_closed_form_runs_and_an_internal_root():
    t = BTreeNodes(_ManyLog(), 192, 288)
    t.append_run(0, 1, 3)
    assert not t.churn_root_leaf([(True, 10)])
    t = BTreeNodes(_ManyLog(), 192, 288)
    for k in range(12):
        t.insert(k)
    assert not t.churn_root_leaf([(False, 3)])
    assert BTreeNodes(_ManyLog(), 192, 288).churn_root_leaf([(True, 1)]) is False


@pytest.mark.parametrize("seed", range(30))
def test_insert_each_equals_inserts_one_at_a_time(seed):
    """insert_each (a replayed run of inserts): the nodes, keys and heap events, in order,
    of insert called for each key, for appends (splits at every level included), keys
    inside the map, present keys, and a map holding closed-form runs."""
    rnd = random.Random(seed)
    a, b = BTreeNodes(_ManyLog(), 192, 288), BTreeNodes(_ManyLog(), 192, 288)
    n = rnd.choice([0, 3, 11, 60, 500])
    for k in range(0, 2 * n, 2):
        a.insert(k)
        b.insert(k)
    if seed % 5 == 0:
        a.append_run(2 * n, 1, 30)
        b.append_run(2 * n, 1, 30)
    for _ in range(8):
        start = rnd.choice([0, 1, 2 * n + 40])
        keys = ([start + i for i in range(rnd.randrange(1, 40))] if rnd.random() < 0.6
                else [rnd.randrange(-5, 2 * n + 80) for _ in range(rnd.randrange(1, 12))])
        for key in keys:
            a.insert(key)
        b.insert_each([k - 3 for k in keys], 3)
        assert b.heap.sizes == a.heap.sizes
        assert (b.leaves, b.internals, b.length) == (a.leaves, a.internals, a.length)
        assert b.keys_in_order() == a.keys_in_order()
    if a.root is not None and not a._runs:
        assert shape(a.root) == shape(b.root)
        check_invariants(b)


def test_group_inserts_keeps_the_order_of_the_operations():
    from sim.engine.fastforward.replay import group_inserts
    ops = ((0, "insert", 0), (0, "insert", 1), (1, "insert", 0), (0, "remove", 1),
           (0, "insert", 2), (1, "insert", 5), (1, "insert", 6), (1, "insert", 7),
           (0, "remove_many", ()))
    assert group_inserts(ops) == (
        (0, "insert_each", (0, 1)), (1, "insert", 0), (0, "remove", 1), (0, "insert", 2),
        (1, "insert_each", (5, 6, 7)), (0, "remove_many", ()))
