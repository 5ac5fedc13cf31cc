"""The compiled heap (``setup.py`` has Cython build ``sim/platform/heap.py`` into
``sim.platform._heap_c``, its fields' types in ``heap.pxd``) must be the Python source's
heap: the same events give the same counters (live bytes and blocks, allocations, peak,
large bytes), the same zone state of the allocator behind it, and the same blocks from a
glibc arena. Every other test runs on whichever heap ``sim.platform.heap`` adopted; this
compares the two side by side (skipped without the build)."""

import importlib.util
import random

import pytest

from sim.platform import heap
from sim.platform.rss import Allocator

COMPILED = heap.Heap.__module__ != heap.__name__
pytestmark = pytest.mark.skipif(not COMPILED, reason="the heap is not compiled here")

SIZES = (8, 16, 24, 40, 72, 100, 184, 272, 1000, 3000, 70000, 200000)


@pytest.fixture(scope="module")
def source():
    """``heap.py`` run as Python, under another name (so it adopts nothing)."""
    spec = importlib.util.spec_from_file_location("sim.platform._heap_source", heap.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.Heap.__module__ == module.__name__
    return module


def state(h):
    a = h.allocator
    arena = a.arena
    return (h.live_bytes, h.live_blocks, h.allocs, h.peak_bytes, h.large_bytes, tuple(a.live),
            tuple(a.high), tuple(a.mark),
            None if arena is None else (arena.brk, arena.top, tuple(sorted(arena.inuse.items()))))


def run(module, allocator, seed):
    """Random events of every kind the exact engine makes, on a new heap of ``module``:
    the state after each."""
    rng = random.Random(seed)
    h = module.Heap(Allocator.from_classes(allocator))
    faults = []
    h.allocator.fault = lambda *event: faults.append(event)
    live, states = [], []
    for _ in range(400):
        r = rng.random()
        if r < 0.45 or not live:
            nbytes = rng.choice(SIZES)
            live.append((nbytes, h.alloc(nbytes)))
        elif r < 0.8:
            nbytes, block = live.pop(rng.randrange(len(live)))
            h.free(nbytes, block)
        elif r < 0.88:
            sizes = [rng.choice(SIZES) for _ in range(rng.randint(1, 5))]
            live.extend(zip(sizes, h.alloc_row(sizes)))
        elif r < 0.94:
            i = rng.randrange(len(live))
            old, block = live[i]
            nbytes = rng.choice(SIZES)
            live[i] = (nbytes, h.realloc(old, nbytes, block))
        elif r < 0.96:
            h.transient(rng.choice(SIZES), rng.randint(1, 4))
        else:
            other(h, rng, live)
        states.append(state(h))
    return states, faults


def other(h, rng, live):
    """One of the heap's rarer calls: a run of one size allocated or freed (a map's nodes),
    a nested run that frees all it allocates (a recursion's clones), pairs each freed before
    the next (a walk's clones), a block libc takes and gives back."""
    kind = rng.randrange(5)
    if kind == 0:
        nbytes = rng.choice(SIZES)
        live.extend((nbytes, block) for block in h.alloc_run(nbytes, rng.randint(1, 6)))
    elif kind == 1:
        nbytes = rng.choice([n for n, _ in live])
        mine = [i for i, (n, _) in enumerate(live) if n == nbytes]
        going = set(rng.sample(mine, rng.randint(1, len(mine))))
        h.free_run(nbytes, [live[i][1] for i in sorted(going)])
        live[:] = [item for i, item in enumerate(live) if i not in going]
    elif kind == 2:
        events, open_ = [], []
        for _ in range(rng.randint(2, 12)):
            if open_ and rng.random() < 0.4:
                events.append(open_.pop() - len(events))
            else:
                open_.append(len(events))
                events.append(rng.choice(SIZES))
        while open_:
            events.append(open_.pop() - len(events))
        h.nested(events)
    elif kind == 3:
        h.pairs([rng.choice((0,) + SIZES) for _ in range(rng.randint(1, 8))])
    else:
        nbytes = rng.choice(SIZES)
        h.libc_free(nbytes, h.libc_alloc(nbytes, zeroed=rng.random() < 0.5))


@pytest.mark.parametrize("allocator", ["macos", "glibc", "glibc-arena"])
@pytest.mark.parametrize("seed", range(3))
def test_compiled_heap_is_the_source(source, allocator, seed):
    assert run(heap, allocator, seed) == run(source, allocator, seed)


def test_a_closed_heap_changes_nothing():
    h = heap.Heap(Allocator.from_classes("macos"))
    h.alloc(24)
    h.close()
    h.alloc(100)
    h.free(24)
    assert (h.closed, h.live_bytes, h.live_blocks) == (True, 24, 1)
