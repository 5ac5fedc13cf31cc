"""Page faults: memory that becomes resident costs ``time.page_fault_ns`` per page."""

import pytest

from sim.commands.calibrate import _with
from sim.platform.rss import Allocator, TouchedPages
from sim.engine.simulation import Simulation
from sim.policies import POLICIES
from sim.engine.profile import load_profile
from sim.engine.runner import run_cell

MIB = 1 << 20


def test_a_fresh_mebibyte_faults_256_pages_and_retained_memory_none():
    profile = load_profile("linux-x86_64")
    pf = profile.time["page_fault_ns"]
    assert pf > 0 and Allocator.from_classes("glibc-arena").page_bytes == 4096
    sim = Simulation(profile)
    heap = sim.heap
    n = MIB - 24                       # an mmapped chunk of exactly 1 MiB: glibc maps the
    #                                    16-B-rounded chunk (n + 8) plus 8 B, page-rounded
    t0 = sim.work_ps
    block = heap.alloc(n)              # above the mmap threshold: fresh mapped pages
    assert sim.work_ps - t0 == round(256 * pf * 1000)
    heap.free(n, block)                # unmapped; glibc raises its mmap threshold
    t1 = sim.work_ps
    block = heap.alloc(n)              # now from the arena, which grows by 1 MiB
    assert sim.work_ps - t1 == round(256 * pf * 1000)
    heap.free(n, block)                # the arena keeps it resident
    t2 = sim.work_ps
    for _ in range(3):
        heap.free(n, heap.alloc(n))    # reuse of retained memory: no fault
    assert sim.work_ps == t2


def test_mapped_blocks_fault_again_after_every_unmap():
    faults = []
    a = Allocator.from_classes("macos")      # HUGE blocks (> 2 MiB): mapped, unmapped
    a.fault = lambda nbytes, mapped=False: faults.append((nbytes, mapped))
    for _ in range(2):
        a.free(4 * MIB, 1, a.alloc(4 * MIB))
    assert faults == [(4 * MIB, True)] * 2
    faults.clear()
    block = a.alloc(MIB)                     # LARGE: slices written once stay resident
    a.free(MIB, 1, block)
    a.alloc(MIB)
    assert faults == [(MIB, False)]


def test_touched_pages_fault_once():
    faults, text = [], []
    t = TouchedPages({"matmul": 65536})
    t.fault, t.text_fault = faults.append, text.append
    t.touch_code("matmul"); t.touch_code("matmul")
    t.touch_text("exe", 131072); t.touch_text("exe", 131072)
    t.touch_buffer("slab", 8192); t.touch_buffer("slab", 4096); t.touch_buffer("slab", 12288)
    assert faults == [8192, 4096] and text == [65536, 131072]


def test_text_faults_per_window():
    """A code path's text costs text_fault_ns per 64-KiB fault-around window, apart from
    the zero-fill faults of page_fault_ns."""
    profile = _with(load_profile("linux-x86_64"), {"time.page_fault_ns": 1000.0,
                                                   "time.text_fault_ns": 3000.0})
    sim = Simulation(profile)
    t0, f0 = sim.work_ps, sim.fault_ps
    sim.touched.touch_text("exe", 4 * 65536)
    assert sim.work_ps - t0 == 4 * 3000 * 1000 and sim.fault_ps == f0


def test_off_when_zero():
    profile = _with(load_profile("linux-x86_64"), {"time.page_fault_ns": 0.0})
    sim = Simulation(profile)
    t0 = sim.work_ps
    sim.heap.alloc(MIB)
    assert sim.work_ps == t0 and sim.allocator.fault is None


SMALL = {
    "adleak-rss": {"iterations": 3000},
    "adleak-count": {"iterations": 3000},
    "pit-infer": {"forwards": 10, "report_every": 5},
    "p10-ema": {"steps": 30, "report_at": "1,10,30"},
}
CASES = [("adleak-rss", v) for v in ("flex", "flex.autodiff", "a-tracked",
                                     "autodiff-backward-each-round", "without_autodiff")] + \
    [("adleak-count", "flex.autodiff"), ("pit-infer", "A-model-and-input-autodiff"),
     ("p10-ema", "detach"), ("p10-ema", "ema-only"), ("p10-ema", "without")]


@pytest.mark.parametrize("workload,variant", CASES)
def test_fast_forward_equals_exact_with_page_faults(workload, variant):
    sets = SMALL[workload]
    fast = run_cell(workload, variant, profile="linux-x86_64", sets=sets)
    exact = run_cell(workload, variant, profile="linux-x86_64", sets=sets, fast_forward=False)
    assert fast == exact


@pytest.mark.parametrize("policy", list(POLICIES))
def test_fast_forward_equals_exact_with_page_faults_under_every_policy(policy):
    sets = {"iterations": 2500, "rounds": 2}
    for variant in ("flex.autodiff", "a-tracked"):
        assert run_cell("adleak-rss", variant, policy, "linux-x86_64", sets=sets) == \
            run_cell("adleak-rss", variant, policy, "linux-x86_64", sets=sets,
                     fast_forward=False)


def test_heap_growth_pays_its_pages_first_writes_mapped_blocks_and_touched_pages_not():
    """``heap_page_write_ns`` per page the arena's growth makes resident (the small blocks
    carved from it written first), on top of ``page_fault_ns``; a freshly mapped block
    (written one page at a time by its user, no blocks carved) and a lazily touched buffer
    pay the fault only; reused memory pays nothing."""
    profile = _with(load_profile("linux-x86_64"), {"time.page_fault_ns": 1000.0,
                                                   "time.heap_page_write_ns": 500.0})
    sim = Simulation(profile)
    heap = sim.heap
    n = MIB - 24
    t0 = sim.work_ps
    block = heap.alloc(n)              # mapped: the fault only
    assert sim.work_ps - t0 == 256 * 1000 * 1000
    heap.free(n, block)
    t1 = sim.work_ps
    block = heap.alloc(n)              # the arena grows by 1 MiB: fault and first writes
    assert sim.work_ps - t1 == 256 * 1500 * 1000
    assert sim.heap_write_bytes == MIB
    heap.free(n, block)
    t2 = sim.work_ps
    heap.free(n, heap.alloc(n))        # reused: nothing
    assert sim.work_ps == t2
    sim.touched.touch_buffer("slab", 8192)
    assert sim.work_ps - t2 == 2 * 1000 * 1000 and sim.heap_write_bytes == MIB


def test_a_leaking_loop_pays_the_same_first_writes_fast_forwarded_or_exact():
    """op-cost's untracked add leaks ~1.1 KB an iteration on unpatched burn: the heap's
    growth pays heap_page_write_ns per page alike in a fast-forwarded and an exact run, and
    the profiles without the term predict what they did."""
    base = load_profile("amd-epyc-zen4")
    on = _with(base, {"time.heap_page_write_ns": 500.0})
    off = _with(base, {"time.heap_page_write_ns": 0.0})

    def times(profile, fast):
        rows = run_cell("op-cost", "untracked/add", "burn-0.22.1", profile,
                        {"iterations": "2000"}, observables=False, fast_forward=fast)
        return [r["value"] for r in rows]
    exact, fast = times(on, False), times(on, True)
    assert exact == pytest.approx(fast, rel=1e-9)
    zero = times(off, False)
    # ~0.29 pages an iteration, 500 ns each: ~145 ns (1.45e-4 ms) more per iteration
    for a, b in zip(exact, zero):
        assert 1.2e-4 < a - b < 1.7e-4


def test_a_page_faulted_again_after_a_trim_pays_no_first_writes():
    """Only the heap's growth past its highest resident size pays heap_page_write_ns: the
    pages a trim of the top gave back and a later request faults in again pay the fault
    (and the trim its trim_page_ns), as the heap-refault probe measured them."""
    profile = _with(load_profile("amd-epyc-zen4"), {"time.page_fault_ns": 1000.0,
                                                    "time.heap_page_write_ns": 500.0,
                                                    "time.trim_cycle_ns": 0.0,
                                                    "time.trim_page_ns": 0.0})
    sim = Simulation(profile)
    sim.page_fault(8 * 4096)
    assert sim.heap_write_bytes == 8 * 4096
    sim.trim(8 * 4096)
    t0 = sim.work_ps
    sim.page_fault(8 * 4096)           # the same pages again: the faults only
    assert sim.work_ps - t0 == 8 * 1000 * 1000 and sim.heap_write_bytes == 8 * 4096
    sim.page_fault(2 * 4096)           # past the highest: fault and first writes
    assert sim.work_ps - t0 == 8 * 1000 * 1000 + 2 * 1500 * 1000
