"""Heap.nested: a run of allocations and frees that frees every block it allocates (a
recursion's clones, as burn's unavailable_propagation makes them) places the same chunks
on glibc's arena as the same events made one by one, and counts alike (allocation calls,
peak, live bytes and blocks)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from arenastate import arena_state
from sim.engine.profile import load_profile
from sim.engine.simulation import Simulation

LINUX = load_profile("linux-x86_64")

#: a recursion: enter a frame (its clone's bytes, 0 for none) or leave the newest one
STEPS = st.lists(st.one_of(st.sampled_from([0, 16, 32, 48, 200, 1200]), st.just(None)),
                 max_size=120)


def _events(steps) -> list:
    """The run's events: bytes allocated (> 0), or a free as the distance back (< 0)."""
    events, open_ = [], []
    for step in [*steps, *[None] * len(steps)]:
        if step is None:
            if open_:
                at = open_.pop()
                if at is not None:
                    events.append(at - len(events))
        else:
            open_.append(len(events) if step else None)
            if step:
                events.append(step)
    return events


def _heap_after(events, nested):
    sim = Simulation(LINUX, fast_forward=False)
    heap = sim.heap
    # a used arena: chunks of the run's sizes in the tcache, fastbins and bins
    kept = [heap.alloc(n) for n in (16, 32, 48, 200, 1200, 16, 32, 4000) * 3]
    for n, block in list(zip((16, 32, 48, 200, 1200, 16, 32, 4000) * 3, kept))[::2]:
        heap.free(n, block)
    if nested:
        heap.nested(events)
    else:
        handles = []
        for i, event in enumerate(events):
            if event > 0:
                handles.append(heap.alloc(event))
            else:
                heap.free(events[i + event], handles[i + event])
                handles.append(None)
    return (heap.live_bytes, heap.live_blocks, heap.allocs, heap.peak_bytes,
            arena_state(sim.allocator.arena))


@settings(max_examples=60, deadline=None)
@given(steps=STEPS)
def test_a_nested_run_places_what_its_events_place(steps):
    events = _events(steps)
    assert _heap_after(events, True) == _heap_after(events, False)


def test_a_deep_run_goes_past_the_tcache():
    """Twenty frames of 32-B clones: the first 7 from the tcache, the rest from the arena,
    freed deepest first; the same chunks as one by one."""
    events = [32] * 20 + [-(2 * k + 1) for k in range(20)]
    assert _heap_after(events, True) == _heap_after(events, False)


def test_units_the_tcache_serves_between_frees_past_it():
    """The unwinding of a deep recursion: each frame's small clones (which the tcache
    serves and takes back, so the arena leaves them out) between the frees of the
    frames' chunks past the tcache (which go to the fastbin); and a unit that outgrows
    its bin half way (its first allocations then made before the one the bin cannot
    serve). The same arena and counts as one by one."""
    unit = [16, 32, None, 16, None, None, 32, None]
    steps = [32] * 12
    for _ in range(12):
        steps += unit + [None]
    deep = [48] * 9 + [None] * 9
    events = _events(steps + [32] + deep + [None])
    assert _heap_after(events, True) == _heap_after(events, False)
    assert (_heap_after(events, True)[2] - _heap_after([], True)[2]
            == sum(1 for e in events if e > 0))
