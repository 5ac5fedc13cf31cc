"""Heap.pairs, Heap.alloc_run and Heap.free_run (the heap's runs on a glibc arena: the
arena takes each request, the counters the run's sums) must leave the heap's counters
(allocations, live bytes and blocks, peak, large bytes), the arena chunk by chunk, its
live lists and the page faults as the same events one by one through alloc and free do;
and with a tap set, hand every event to it."""

import copy
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.platform.heap import Heap, HeapTap
from sim.platform.rss import Allocator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from arenastate import Heard, arena_state  # noqa: E402

SIZES = (8, 16, 24, 40, 72, 100, 184, 300, 500, 1000, 1016, 1030, 1100, 3000)


def heap():
    h = Heap(Allocator.from_classes("glibc-arena"))
    faults = []
    h.allocator.fault = lambda nbytes, mapped=False: faults.append((nbytes, mapped))
    return h, faults


def warmed(rng):
    """A heap whose arena holds a mix of live blocks, tcache and fastbin chunks and free
    chunks; the live blocks by size."""
    h, faults = heap()
    live = []
    for _ in range(rng.randint(0, 300)):
        if live and rng.random() < 0.45:
            nbytes, block = live.pop(rng.randrange(len(live)))
            h.free(nbytes, block)
        else:
            nbytes = rng.choice(SIZES)
            live.append((nbytes, h.alloc(nbytes)))
    return h, faults, live


def counters(h):
    return (h.allocs, h.live_bytes, h.live_blocks, h.peak_bytes, h.large_bytes)


def same(a, b, fa, fb):
    assert counters(a) == counters(b)
    assert arena_state(a._arena) == arena_state(b._arena)
    assert {k: v for k, v in a._arena.live.items() if v} == \
        {k: v for k, v in b._arena.live.items() if v}
    assert fa == fb


def twin(h, faults):
    other = copy.deepcopy(h)
    other_faults = list(faults)
    other.allocator.fault = lambda nbytes, mapped=False: other_faults.append((nbytes, mapped))
    return other, other_faults


@pytest.mark.parametrize("seed", range(30))
def test_pairs_equal_the_allocations_and_frees_one_by_one(seed):
    rng = random.Random(seed)
    h, faults, _ = warmed(rng)
    h.peak_bytes = h.live_bytes         # so that the run's own peak shows
    other, other_faults = twin(h, faults)
    sizes = np.array([rng.choice((0,) + SIZES[:rng.randint(1, len(SIZES))])
                      for _ in range(rng.randint(1, 200))], dtype=np.int64)
    h.pairs(sizes)
    for nbytes in sizes.tolist():
        if nbytes:
            other.free(nbytes, other.alloc(nbytes))
    same(h, other, faults, other_faults)


@pytest.mark.parametrize("seed", range(30))
def test_alloc_and_free_runs_equal_the_calls_one_by_one(seed):
    rng = random.Random(1000 + seed)
    h, faults, _ = warmed(rng)
    h.peak_bytes = h.live_bytes
    other, other_faults = twin(h, faults)
    runs = [(rng.choice(SIZES), rng.randint(1, 40)) for _ in range(rng.randint(1, 4))]
    made, expected = [], []
    for nbytes, count in runs:
        made.append(h.alloc_run(nbytes, count))
        expected.append(tuple(other.alloc(nbytes) for _ in range(count)))
        # something between the clone and its drop
        for x in (h, other):
            x.free(24, x.alloc(24))
    assert made == expected
    same(h, other, faults, other_faults)
    for (nbytes, _), blocks in zip(runs, made):
        h.free_run(nbytes, blocks)
    for (nbytes, _), blocks in zip(runs, expected):
        for block in blocks:
            other.free(nbytes, block)
    same(h, other, faults, other_faults)


class _Counting(HeapTap):
    __slots__ = ("events",)

    def __init__(self):
        self.events = []

    def alloc(self, heap, nbytes, align=0):
        self.events.append(("alloc", nbytes))
        return heap.untapped(heap.alloc, nbytes, align)

    def free(self, heap, nbytes, block=None):
        self.events.append(("free", nbytes))
        return heap.untapped(heap.free, nbytes, block)


def test_a_tapped_heap_hands_every_event_of_its_runs_to_the_tap():
    h, _ = heap()
    h.tap = tap = _Counting()
    h.pairs(np.array([24, 0, 24, 40], dtype=np.int64))
    blocks = h.alloc_run(100, 3)
    h.free_run(100, blocks)
    assert tap.events == [("alloc", 24), ("free", 24), ("alloc", 24), ("free", 24),
                          ("alloc", 40), ("free", 40)] + [("alloc", 100)] * 3 + \
        [("free", 100)] * 3


@pytest.mark.parametrize("seed", range(10))
def test_pairs_with_an_arena_recorder_tell_it_what_the_calls_one_by_one_do(seed):
    """A recorder on the arena (fast-forward's window recorder) hears every tcache read
    of the pairs: with one set, the pairs go one by one."""
    rng = random.Random(2000 + seed)
    h, faults, _ = warmed(rng)
    other, other_faults = twin(h, faults)
    h._arena.recorder, other._arena.recorder = Heard(), Heard()
    sizes = np.array([rng.choice(SIZES[:8]) for _ in range(rng.randint(1, 60))],
                     dtype=np.int64)
    h.pairs(sizes)
    for nbytes in sizes.tolist():
        other.free(nbytes, other.alloc(nbytes))
    same(h, other, faults, other_faults)
    assert h._arena.recorder.calls == other._arena.recorder.calls
