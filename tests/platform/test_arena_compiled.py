"""The compiled arena (``setup.py`` has Cython build ``sim/platform/ptmalloc.py`` into
``sim.platform._ptmalloc_c``) must be the Python source's arena: the same requests give
the same blocks, and the same chunks, bins, tcache, fastbins, top, break, trims, page
faults and live lists; a replayed program (the compiled replay loop) the same.
Every other arena test runs on whichever arena ``sim.platform.ptmalloc`` adopted; these
compare the two side by side (skipped without the build)."""

import doctest
import importlib.util
import random
import sys
from pathlib import Path

import pytest

from sim.platform import ptmalloc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_arena_template_replay import one_by_one, random_template  # noqa: E402

COMPILED = ptmalloc.PtmallocArena.__module__ != ptmalloc.__name__
pytestmark = pytest.mark.skipif(not COMPILED, reason="the arena is not compiled here")

SIZES = (8, 16, 24, 40, 72, 100, 120, 200, 300, 500, 1000, 1030, 1100, 3000, 9000, 70000,
         200000, 1 << 20)


@pytest.fixture(scope="module")
def source():
    """``ptmalloc.py`` run as Python, under another name (so it adopts nothing)."""
    spec = importlib.util.spec_from_file_location("sim.platform._ptmalloc_source",
                                                  ptmalloc.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.PtmallocArena.__module__ == module.__name__
    return module


def arena_of(module):
    arena = module.PtmallocArena()
    faults = []
    arena.fault = lambda nbytes, mapped: faults.append((nbytes, mapped))
    return arena, faults


def snapshot(arena):
    """Every field of the arena that placement reads or writes, in order."""
    arena.materialize()
    return (arena.brk, arena.top, arena.resident_end, arena.mapped, arena.mmap_threshold,
            arena.trim_threshold, arena.trims, arena.trimmed_bytes, arena.trim_from, arena.nfast,
            arena.bin_changes, arena.last_remainder, tuple(arena.inuse.items()),
            tuple(arena.free_at.items()), tuple(arena.free_end.items()),
            tuple(arena.unsorted), tuple(arena.binmap),
            tuple(tuple(b.items()) if isinstance(b, dict) else tuple(b) for b in arena.bins),
            tuple((k, tuple(v)) for k, v in arena.tcache.items()),
            tuple((k, tuple(v)) for k, v in arena.fast.items()),
            tuple((k, tuple(v)) for k, v in arena.live.items()), tuple(arena.alias.items()),
            arena.resident_bytes(), arena.state())


#: request sizes only ever freed by size (no call names their blocks)
POOL = (56, 88, 152, 264, 600, 1500)


def random_calls(rng, count):
    """Calls of every kind: blocks of SIZES freed or reallocated by their place among
    those made, blocks of POOL freed by size (one, or several in a row)."""
    calls, live, pool = [], [], dict.fromkeys(POOL, 0)
    for _ in range(count):
        r = rng.random()
        if r < 0.4 or not any(live):
            nbytes = rng.choice(SIZES)
            calls.append(("alloc", nbytes, rng.choice([0] * 8 + [64, 4096, ptmalloc.ZEROED])))
            live.append(nbytes)
        elif r < 0.65 and any(live):
            i = rng.choice([j for j, size in enumerate(live) if size is not None])
            calls.append(("free", live.pop(i), i))
        elif r < 0.72 and any(live):
            i = rng.choice([j for j, size in enumerate(live) if size is not None])
            nbytes = rng.choice(SIZES)
            calls.append(("realloc", (live.pop(i), nbytes), i))
            live.append(nbytes)
        elif r < 0.8:
            nbytes = rng.choice(POOL)
            calls.append(("alloc", nbytes, 0))
            live.append(None)       # a place in run_calls' list, never named
            pool[nbytes] += 1
        elif r < 0.87:
            nbytes, k = rng.choice(POOL), rng.randint(1, 20)
            calls.append(("alloc_many", nbytes, k))
            pool[nbytes] += k
        else:
            nbytes = rng.choice(POOL)
            k = min(pool[nbytes], rng.randint(1, 5))
            if k:
                calls.append(("free_many", nbytes, k) if k > 1 else ("free_newest", nbytes, None))
                pool[nbytes] -= k
    return calls


def run_calls(arena, calls):
    """The calls on ``arena``; what each returned."""
    out, blocks = [], []
    for kind, nbytes, arg in calls:
        if kind == "alloc":
            blocks.append((nbytes, arena.alloc(nbytes, arg)))
            out.append(blocks[-1][1])
        elif kind == "free":
            size, block = blocks.pop(arg)
            arena.free(block, size)
        elif kind == "free_newest":
            arena.free(None, nbytes)
        elif kind == "realloc":
            old, new = nbytes
            size, block = blocks.pop(arg)
            blocks.append((new, arena.realloc(block, old, new)))
            out.append(blocks[-1][1])
        elif kind == "alloc_many":
            have = len(arena.live.get(nbytes, ()))
            arena.alloc_many(nbytes, arg)
            out.append(tuple(arena.live[nbytes][have:]))
        else:
            k = min(arg, len(arena.live.get(nbytes, ())))
            arena.free_many(nbytes, k)
            out.append(k)
    return out


@pytest.mark.parametrize("seed", range(30))
def test_compiled_calls_place_as_the_source(source, seed):
    rng = random.Random(seed)
    calls = random_calls(rng, rng.randint(50, 600))
    compiled, compiled_faults = arena_of(ptmalloc)
    python, python_faults = arena_of(source)
    expected = run_calls(python, calls)
    assert run_calls(compiled, calls) == expected
    assert snapshot(compiled) == snapshot(python)
    assert compiled_faults == python_faults


@pytest.mark.parametrize("seed", range(30))
def test_compiled_replay_places_as_the_source(source, seed):
    """A program replayed for up to 88 iterations in the compiled loop, then the same calls one
    by one, on arenas warmed by the same requests."""
    rng = random.Random(700 + seed)
    template = random_template(rng, rng.choice([0, 1, 2, 3]))
    n = rng.randint(1, 3) * 16 + rng.randint(0, 40)
    warm = random_calls(rng, rng.randint(0, 60))
    ends = []
    for module in (ptmalloc, source):
        arena, faults = arena_of(module)
        run_calls(arena, warm)
        program = module.PtmallocArena.compile(template)
        # iterations made one by one first (those before any carry skip the frees that
        # reach back past the first), as test_arena_template_replay's warm-up does
        carry = [[] for _ in range(program.depth)]
        for k in range(program.depth + 2):
            usable = tuple(e for e in template
                           if not (e[0] == "free" and e[2] is not None and e[2][0] > k))
            carry.append(one_by_one(arena, usable, carry))
            del carry[0]
        try:
            carry = arena.replay(program, n, carry)
        except (KeyError, IndexError, ValueError, TypeError):
            ends.append("refused")  # a template the arena cannot compile or replay
            continue
        ends.append((carry, snapshot(arena), faults))
    assert ends[0] == ends[1]


def test_compiled_module_doctests():
    """The doctests of ``ptmalloc.py`` on the compiled classes (pytest's doctest run of
    ``ptmalloc.py`` skips the classes the module adopted from the build)."""
    compiled = sys.modules[ptmalloc.PtmallocArena.__module__]
    result = doctest.testmod(compiled)
    assert result.attempted > 0 and result.failed == 0
