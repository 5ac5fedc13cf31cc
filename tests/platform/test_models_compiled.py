"""The compiled B-tree maps and L2 model (``setup.py`` has Cython build
``sim/platform/btree.py`` into ``sim.platform._btree_c`` and ``sim/platform/l2_cache.py``
into ``sim.platform._l2_cache_c``, their fields' types in the ``.pxd`` beside each) must be
the Python sources': the same operations give the same keys, node counts, heap events,
hits, misses and residency. Every other test runs on whichever classes the modules
adopted; this compares the two side by side (skipped without the build)."""

import importlib.util
import random

import pytest

from sim.platform import btree, l2_cache
from sim.platform.heap import Heap
from sim.platform.rss import Allocator


def _source(module):
    """``module``'s file run as Python, under another name (so it adopts nothing)."""
    name = module.__name__.replace(".platform.", ".platform._source_")
    spec = importlib.util.spec_from_file_location(name, module.__file__)
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    return source


def _compiled(cls, module):
    return cls.__module__ != module.__name__


def _keys(tree):
    """Every key of ``tree``'s nodes, level by level, and its node counts."""
    out, level = [], [tree.root] if tree.root is not None else []
    while level:
        out.append([list(node.keys) for node in level])
        level = [child for node in level for child in (node.edges or ())]
    return out, tree.leaves, tree.internals, len(tree)


def run_tree(module, seed):
    """Random inserts (mostly ascending, as the locator's ids), removals one by one and
    many at a time, a map's clone and its drop, on a map of ``module`` over a glibc arena:
    the map's keys, its counts and the heap after each operation."""
    rng = random.Random(seed)
    heap = Heap(Allocator.from_classes("glibc-arena"))
    tree = module.BTreeNodes(heap, 192, 288)
    keys, states, next_key = set(), [], 1
    for _ in range(600):
        r = rng.random()
        if r < 0.55:
            key = next_key if rng.random() < 0.9 else rng.randrange(1, next_key + 1)
            next_key = max(next_key, key) + rng.choice((1, 1, 2))
            tree.insert(key)
            keys.add(key)
        elif r < 0.8 and keys:
            key = rng.choice(sorted(keys))
            tree.remove(key)
            keys.discard(key)
        elif r < 0.86 and keys:
            going = rng.sample(sorted(keys), rng.randint(1, min(8, len(keys))))
            tree.remove_many(sorted(going))
            keys.difference_update(going)
        else:
            tree.drop_clone(heap, tree.clone_nodes(heap))
        states.append((_keys(tree), heap.live_bytes, heap.live_blocks, heap.allocs))
    return states


@pytest.mark.skipif(not _compiled(btree.BTreeNodes, btree), reason="btree.py is not compiled")
@pytest.mark.parametrize("seed", range(4))
def test_compiled_btree_is_the_source(seed):
    assert run_tree(btree, seed) == run_tree(_source(btree), seed)


def run_cache(module, seed):
    """Random claims, touches (an op's inputs then its output, a chunk listed twice) and
    releases on an L2 of ``module``: what each touch missed, the hits, misses and resident
    bytes after it."""
    rng = random.Random(seed)
    cache = module.L2Cache(1 << 20)
    live, out = [], []
    for _ in range(500):
        r = rng.random()
        if r < 0.4 or not live:
            live.append(cache.claim(rng.choice((1 << 12, 1 << 16, 3 << 16, 1 << 18))))
        elif r < 0.85:
            chunks = rng.sample(live, min(len(live), rng.randint(1, 3)))
            if rng.random() < 0.2:
                chunks.append(chunks[0])
            out.append(cache.touch(chunks))
        else:
            live.pop(rng.randrange(len(live))).release()
        out.append((cache.hits, cache.misses, cache.resident, len(cache.lru)))
    return out


@pytest.mark.skipif(not _compiled(l2_cache.L2Cache, l2_cache),
                    reason="l2_cache.py is not compiled")
@pytest.mark.parametrize("seed", range(3))
def test_compiled_l2_is_the_source(seed):
    assert run_cache(l2_cache, seed) == run_cache(_source(l2_cache), seed)


@pytest.mark.skipif(not _compiled(l2_cache.L2Cache, l2_cache),
                    reason="l2_cache.py is not compiled")
def test_compiled_l2_functions_are_the_source():
    """The module's cost functions, compiled with it, give the source's floats bit for bit."""
    source = _source(l2_cache)
    for nbytes in (1 << 10, 3 << 18, 1 << 20, 5 << 20, 40 << 20):
        assert l2_cache.set_miss_fraction(nbytes, 1 << 20, 16) == \
            source.set_miss_fraction(nbytes, 1 << 20, 16)
        assert l2_cache.touched_pages(37, 1000, 420.0) == source.touched_pages(37, 1000, 420.0)
