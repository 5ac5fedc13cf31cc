"""A trim of the glibc arena's top (sim.platform.ptmalloc's ``_systrim``) calls the arena's
``trim`` callback with the bytes it gave back; a simulation charges ``trim_cycle_ns`` per trim
and ``trim_page_ns`` per page given back where the arena trims, on the cumulative count and
bytes (any split sums alike), exactly as fast-forward's replays of the arena do; a profile
with both at 0 charges nothing and sets no callback."""

import pytest

from sim.commands.calibrate import _with
from sim.engine.profile import load_profile
from sim.engine.runner import run_cell
from sim.engine.simulation import Simulation
from sim.platform.ptmalloc import PtmallocArena


def test_a_trim_reports_the_bytes_it_gives_back():
    # mallopt as the heap-refault probe sets it: nothing mmapped, trim at 128 KiB
    arena = PtmallocArena(trim_threshold=128 << 10, mmap_threshold=64 << 20)
    given = []
    arena.trim = lambda nbytes, count: given.append((nbytes, count))
    keep = arena.alloc(100)
    big = arena.alloc(600 << 10)          # from the top: the break grows past it
    assert given == [] and arena.trims == 0
    arena.free(big)                       # merged into the top, above the trim threshold
    assert arena.trims == 1 and len(given) == 1
    nbytes, count = given[0]
    assert count == 1 and nbytes == arena.trimmed_bytes and nbytes % 4096 == 0
    assert nbytes >= 400 << 10            # down to the top pad (128 KiB)
    arena.free(keep)


def _sim(cycle, page):
    return Simulation(_with(load_profile("amd-epyc-zen4"),
                            {"time.trim_cycle_ns": cycle, "time.trim_page_ns": page}))


def test_the_charge_is_per_trim_and_per_page_and_splits_alike():
    sim = _sim(8000.0, 200.0)
    assert sim.allocator.arena.trim is not None
    before = sim.current.pending_ps
    sim.trim(16 * 4096)
    assert sim.current.pending_ps - before == 8000_000 + 16 * 200_000
    other = _sim(8000.0, 200.0)
    other.trim(10 * 4096, 2)              # two trims at once, as an arena window applies them
    one = _sim(8000.0, 200.0)
    one.trim(3 * 4096)
    one.trim(7 * 4096)
    assert other.trim_ps == one.trim_ps == 2 * 8000_000 + 10 * 200_000
    assert (other.trims_charged, other.trim_bytes) == (2, 10 * 4096)


def test_no_parameter_no_callback():
    """No trim cost and no heap_page_write_ns (whose high-water mark the trims lower): no
    callback; with heap_page_write_ns alone the trims are followed and cost nothing."""
    no_writes = {"time.heap_page_write_ns": 0.0}
    assert Simulation(_with(_sim(0.0, 0.0).profile, no_writes)).allocator.arena.trim is None
    assert Simulation(load_profile("linux-x86_64")).allocator.arena.trim is None
    sim = _sim(0.0, 0.0)
    assert sim.allocator.arena.trim is not None
    before = sim.current.pending_ps
    sim.trim(16 * 4096)
    assert sim.current.pending_ps == before


def _ms(profile, variant, fast_forward=True):
    rows = run_cell("p10-ema", variant, "burn-0.22.1", profile,
                    {"steps": "200", "report_at": "1,50,100,200"}, observables=False,
                    fast_forward=fast_forward)
    return {(r["x"], r["metric"]): r["value"] for r in rows}


@pytest.mark.parametrize("variant", ["without", "log-no-ema"])
def test_fast_forward_charges_the_trims_exact_mode_does(variant):
    """p10-ema's `without` and `log-no-ema` trim the arena's top in most steps: with the trim
    charged, every row fast-forward gives equals exact mode's, and the steps that trim cost
    more than with no charge."""
    base = load_profile("amd-epyc-zen4")
    off = _with(base, {"time.trim_cycle_ns": 0.0, "time.trim_page_ns": 0.0})
    on = _with(base, {"time.trim_cycle_ns": 8000.0, "time.trim_page_ns": 200.0})
    charged = _ms(on, variant)
    assert charged == _ms(on, variant, fast_forward=False)
    free = _ms(off, variant)
    assert {k for k in free} == {k for k in charged}
    slower = [k for k in free if k[1] == "ms_per_step" and charged[k] > free[k]]
    assert len(slower) >= 2
    assert all(charged[k] >= free[k] for k in free if k[1] == "ms_per_step")
