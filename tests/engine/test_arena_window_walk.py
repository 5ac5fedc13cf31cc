"""A shifted window's walk over its top events (sim.engine.fastforward.arenawindow._walk)
takes each run of carves as its rising needs (_walk_plan) and gives the break, resident
end and trims that walking every event in order gives."""

import random
from types import SimpleNamespace

import pytest

from sim.engine.fastforward.arenawindow import _walk, _walk_plan
from sim.platform.ptmalloc import CONSOLIDATION_THRESHOLD, MINSIZE, SIZE_SZ

PAGE = 4096


def _event_by_event(arena, w, d):
    """The walk read off sysmalloc and systrim one top event at a time."""
    brk, resident, trim_from = arena.brk, arena.resident_end, arena.trim_from
    trims = trimmed = 0
    base = w.top0 + d
    for kind, rel, arg in w.events:
        top = base + rel
        if kind == 0:
            if brk - top < arg + MINSIZE:          # the top is too short: sysmalloc
                need = arg + arena.top_pad + MINSIZE - (brk - top)
                brk += -(-need // PAGE) * PAGE
            resident = max(resident, top + arg + 2 * SIZE_SZ)
        elif kind == 1:
            if brk - top >= CONSOLIDATION_THRESHOLD and brk - top >= arena.trim_threshold:
                area = brk - top - MINSIZE - 1
                if area > arena.top_pad:
                    extra = (area - arena.top_pad) // PAGE * PAGE
                    if extra:
                        brk -= extra
                        trims += 1
                        trimmed += extra
                        trim_from = resident
                        resident = min(resident, brk)
        else:
            size, nb, grew = arg
            if (size + brk - top >= nb + MINSIZE) != grew:
                return None
            if grew:
                resident = max(resident, top - size + nb + 2 * SIZE_SZ)
    return brk, resident, trims, trimmed, trim_from


def _events(rnd):
    """Top events of a window: carves that mostly walk the top up (sometimes from a lower
    top after a merge), merges into the top, an occasional realloc at the top."""
    events, top = [], 0
    for _ in range(rnd.randrange(1, 120)):
        r = rnd.random()
        if r < 0.8:
            nb = rnd.choice([32, 48, 80, 272, 1040, 4112, 16400, 65552])
            events.append((0, top, nb))
            top += nb
        elif r < 0.95:
            top = max(0, top - rnd.choice([32, 4112, 65552, 200_000]))
            events.append((1, top, None))
        else:
            size = rnd.choice([48, 4112])
            nb = size + rnd.choice([16, 4096, 70_000])
            events.append((2, top, (size, nb, rnd.random() < 0.5)))
    return tuple(events)


@pytest.mark.parametrize("seed", range(300))
def test_the_walk_by_runs_of_carves_is_the_walk_event_by_event(seed):
    rnd = random.Random(seed)
    events = _events(rnd)
    w = SimpleNamespace(top0=rnd.randrange(0, 1 << 20, 16), events=events, reach=None,
                        plan=_walk_plan(events))
    for _ in range(5):
        brk = w.top0 + rnd.choice([0, 1, 4096, 100_000, 300_000]) // PAGE * PAGE
        arena = SimpleNamespace(brk=brk + rnd.randrange(0, 3) * PAGE, page=PAGE,
                                resident_end=brk - rnd.randrange(0, 5) * PAGE,
                                trim_from=0, top_pad=rnd.choice([0, 128 * 1024]),
                                trim_threshold=rnd.choice([128 * 1024, 1 << 20]))
        d = rnd.choice([0, 16, 4096, 70_000])
        assert _walk(arena, w, d) == _event_by_event(arena, w, d)
