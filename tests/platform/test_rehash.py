"""A hash table's growth moves its items (sim.platform.hashbrown.RawTable._resize): the heap's
``rehash`` callback gets the items each growth moves, and a simulation charges
``rehash_item_ns`` each where the table grows, exactly as fast-forward's batches do."""

import pytest

from sim.commands.calibrate import _with
from sim.engine.profile import load_profile
from sim.engine.runner import run_cell
from sim.platform.hashbrown import RawTable, TableLayout
from sim.platform.heap import Heap
from sim.platform.rss import Allocator


def _table():
    heap = Heap(Allocator.from_classes("glibc"))
    moved = []
    heap.rehash = moved.append
    return RawTable(TableLayout(8, 8, 16), heap), heap, moved


def test_a_growth_reports_the_items_it_moves():
    table, heap, moved = _table()
    for n in range(1, 15):
        table.fit(n)
    # one insert at a time: a full table moves its capacity (3, 7; the first block moves none)
    assert moved == [3, 7] and table.buckets == 16
    table.grow_to(100)
    assert moved[2:] == [14, 28, 56] and table.cap == 112
    table.reserve(60, 100)       # 60 items held, room for 100 more: 60 move
    assert moved[-1] == 60
    assert table.cap == 224
    table.reinsert(224)          # a full table grows on an insert of a key it has
    assert moved[-1] == 224


def test_no_callback_no_charge_and_clone_moves_nothing():
    heap = Heap(Allocator.from_classes("glibc"))
    table = RawTable(TableLayout(8, 8, 16), heap)
    table.grow_to(50)            # no callback set: nothing to call
    moved = []
    heap.rehash = moved.append
    copy = table.clone()         # hashbrown clones Copy slots as bytes: no rehash
    copy.drop()
    table.drop()
    assert moved == []


def _time(profile, fast_forward=True, **sets):
    rows = run_cell("op-cost", "tracked/add", "burn-0.22.1", profile,
                    {k: str(v) for k, v in sets.items()}, observables=False,
                    fast_forward=fast_forward)
    return {float(r["x"]): r["value"] for r in rows if r["metric"] == "ms_per_step"}


def test_op_costs_tracked_block_pays_the_items_its_tables_move():
    """op-cost's tracked add at 2,000 iterations: its graph's five tables (8, 8, 24, 32 and
    56-B slots) grow from 2,048 to 4,096 buckets in the block at x = 1,000, moving 5 x 1,792
    items; the other blocks none (the 1,024-bucket growths are in the warm-up). Fast-forward
    (its chain batches grow the tables where exact mode does) charges the same."""
    base = load_profile("amd-epyc-zen4")
    a = _time(_with(base, {"time.rehash_item_ns": 0.0}), iterations=2000)
    b = _time(_with(base, {"time.rehash_item_ns": 10.0}), iterations=2000)
    block = 500
    extra = {x: (b[x] - a[x]) * 1e6 * block for x in a}     # ns per block
    assert extra[1000.0] == pytest.approx(5 * 1792 * 10.0, abs=1.0)
    assert extra[1500.0] == pytest.approx(0.0, abs=1e-6)
    assert extra[2000.0] == pytest.approx(0.0, abs=1e-6)
    assert extra[500.0] == pytest.approx(0.0, abs=1e-6)
    assert _time(_with(base, {"time.rehash_item_ns": 10.0}), False, iterations=2000) == b


def test_a_dry_run_keeps_a_growths_rehash_to_itself():
    """A policy's seam run dry by fast-forward (sim.engine.fastforward.seams._Absorbing) may
    grow a table of its own: its rehash goes into the dry run's record, not to the
    simulation's timing (which the dry run has swapped out), and the callback is back after
    it."""
    from sim.engine.fastforward.seams import _Absorbing
    from sim.engine.simulation import Simulation
    sim = Simulation(_with(load_profile("amd-epyc-zen4"), {"time.rehash_item_ns": 10.0}))
    callback = sim.heap.rehash
    assert callback is not None
    before = sim.timing.bookkeeping_ns
    out = []
    table = RawTable(TableLayout(8, 8, 16), sim.heap)
    with _Absorbing(sim, out):
        table.grow_to(100)
    assert [e for e in out if e[0] == "rehash"] == [("rehash", n) for n in (3, 7, 14, 28, 56)]
    assert sim.heap.rehash is callback and sim.timing.bookkeeping_ns == before
