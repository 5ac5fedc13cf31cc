"""glibc's main arena placed chunk by chunk (sim.platform.ptmalloc, profile linux-x86_64)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenastate import Heard
from common import adleak_operands, tiny_backward
from sim.platform.ptmalloc import PtmallocArena, chunk_size
from sim.engine.simulation import Simulation
from sim.policies import POLICIES
from sim.engine.profile import ProfileError, load_profile
from sim.engine.runner import run_cell

KIB, MIB = 1024, 1 << 20


def test_chunk_sizes_follow_request2size():
    assert [chunk_size(n) for n in (1, 24, 25, 100, 1048576)] == [32, 32, 48, 112, 1048592]


def test_tcache_then_fastbins_hold_small_chunks_without_merging():
    a = PtmallocArena()
    blocks = [a.alloc(24) for _ in range(9)]
    for b in blocks:
        a.free(b)
    assert len(a.tcache[32]) == 7 and len(a.fast[32]) == 2 and not a.free_at
    # LIFO: the last chunk parked in the tcache is the next one handed out
    assert a.alloc(24) == blocks[6]


def test_neighbours_merge_and_best_fit_splits():
    a = PtmallocArena()
    x, y, z = a.alloc(2000), a.alloc(2000), a.alloc(100)
    a.free(x)
    a.free(y)                                   # merged with x: one free chunk of 4032 B
    assert a.free_at == {x: 4032}
    w = a.alloc(1500)                           # best fit splits it; the rest stays free
    assert w == x and a.free_at == {x + chunk_size(1500): 4032 - chunk_size(1500)}
    del z


def test_a_pinned_top_is_not_trimmed_and_a_free_top_is():
    a = PtmallocArena()
    a.free(a.alloc(MIB))                        # mmapped; thresholds rise (trim: 2056 KiB)
    assert a.mmap_threshold == 1052672 and a.trim_threshold == 2 * 1052672
    big = [a.alloc(MIB) for _ in range(2)]
    pin = a.alloc(100)                          # carved after them: pins the top
    for b in big:
        a.free(b)
    assert a.trims == 0 and a.resident_bytes() >= 2 * MIB
    a.free(pin)                                 # parked in the tcache: still pinning
    assert a.trims == 0
    c = a.alloc(2 * MIB)                        # fits the two freed chunks merged
    d = a.alloc(MIB)                            # from the top, after the pin
    a.free(d)                                   # borders the top: top < threshold
    assert a.trims == 0
    e = [a.alloc(MIB), a.alloc(MIB)]
    for b in e:
        a.free(b)                               # top >= 2056 KiB: trimmed to its pad
    assert a.trims == 1 and a.brk - a.top < 132 * KIB
    assert a.resident_bytes() == -(-a.brk // 4096) * 4096
    del c


def test_memalign_parks_its_tail_in_the_tcache_next_to_the_block():
    """posix_memalign(128, 132096) (gemm's pack buffer) takes nb + 128 + 32 B and frees the
    176-B tail into the tcache: freed, the block cannot merge with what follows it (the
    Linux trace: the next MiB lands 132,288 B after the pack buffer's start)."""
    a = PtmallocArena()
    a.free(a.alloc(MIB))                        # the thresholds rise: MiBs in the arena
    a.alloc(100)                                # a 112-B chunk: the next user pointer is
    staging = a.alloc(MIB)                      #   128-B aligned, as in the trace
    a.alloc(MIB)                                # the staged output, kept
    a.free(staging)
    pack = a.alloc(132096, 128)
    assert pack == staging and (pack + 16) % 128 == 0
    assert a.tcache[176] == [pack + chunk_size(132096)]
    a.free(pack)
    assert a.alloc(MIB) != pack                 # the freed pack chunk is too small alone


def _fill_tcache(a, nbytes):
    """Seven freed chunks of ``nbytes``' size in the tcache (later frees go past it)."""
    blocks = [a.alloc(nbytes) for _ in range(7)]
    for b in blocks:
        a.free(b)


def test_consolidated_fastbin_chunks_are_taken_oldest_first_from_their_small_bin():
    """Found by replaying a real process (experiments/probes/arena_replay.py): two 64-B
    chunks freed past a full tcache sit in a fastbin; a large request consolidates them
    into the unsorted bin (newest first) and sorts them into the 64-B small bin; a 48-B
    request then takes that bin's back, the one freed last, where best fit took the
    older one."""
    a = PtmallocArena()
    x, gap1, y, gap2 = a.alloc(48), a.alloc(100), a.alloc(48), a.alloc(100)
    _fill_tcache(a, 48)
    a.free(x)
    a.free(y)
    assert a.fast[64] == [x, y]
    a.alloc(40000)                      # consolidates, sorts the unsorted bin
    assert not a.fast.get(64) and not a.unsorted
    assert a.alloc(34) == y


def test_a_small_request_splits_the_last_remainder_before_a_better_fit():
    """The unsorted bin's only chunk is the last remainder: a small request splits it even
    though a bin holds a chunk that fits it more closely."""
    a = PtmallocArena()
    big, g1, small, g2 = a.alloc(4000), a.alloc(16), a.alloc(200), a.alloc(16)
    _fill_tcache(a, 200)
    a.free(small)                       # a 208-B chunk: unsorted, then its small bin
    a.free(big)                         # 4016 B, unsorted
    first = a.alloc(500)                # sorts both, splits the 4016-B chunk
    assert first == big and a.last_remainder == big + chunk_size(500)
    assert list(a.unsorted) == [a.last_remainder]
    second = a.alloc(80)
    assert second == big + chunk_size(500)    # from the remainder, not the 208-B chunk
    assert small in a.free_at


def test_calloc_and_realloc_skip_the_tcache_and_realloc_grows_in_place():
    a = PtmallocArena()
    b = a.alloc(40)
    a.free(b)                           # parked in the tcache
    assert a.tcache[48] == [b]
    c = a.calloc(40)                    # glibc 2.36's calloc does not look into it
    assert c != b and a.tcache[48] == [b]
    d = a.alloc(100)                    # the last chunk before the top
    assert a.realloc(d, 100, 1000) == d  # grows into the top
    e = a.alloc(100)
    f = a.realloc(d, 1000, 5000)        # e is in the way: a new chunk, d freed
    assert f != d and a.tcache[chunk_size(1000)] == [d]


def test_sgd_trims_in_some_steps_and_adam_in_every_one(monkeypatch):
    """p10-ema without: after an SGD step the top sits right at the 2056 KiB trim
    threshold, so whether a step trims depends on the run (the order of frees follows
    burn's randomly seeded HashSets): six real runs of 50 steps trimmed 12, 16, 21, 28,
    29 and 41 times (malloc-log, 2026-12-01), the recorded run `malloc-logs/p10-ema-without`
    in every step from step 4 (47); the model, like the recorded run. Adam's temporaries
    push the top over in every step, about twice (real: 198 trims in 100 steps), and
    what is given back faults in again."""
    trims = []
    systrim = PtmallocArena._systrim

    def spy(self):
        before = self.trimmed_bytes
        systrim(self)
        if self.trimmed_bytes > before:
            trims[-1].append(self.trimmed_bytes - before)
    monkeypatch.setattr(PtmallocArena, "_systrim", spy)
    for optimizer in ("sgd", "adam"):
        trims.append([])
        run_cell("p10-ema", "without", profile="linux-x86_64",
                 sets={"steps": 50, "report_at": "2,50", "optimizer": optimizer})
    sgd, adam = trims
    assert 12 <= len(sgd) <= 47
    assert len(adam) >= 90 and all(t >= 1.9 * MIB for t in adam)


def test_mallopt_turns_the_dynamic_thresholds_off():
    a = PtmallocArena(trim_threshold=64 * MIB)
    a.free(a.alloc(MIB))
    assert a.mmap_threshold == 128 * KIB          # not raised: every MiB is mmapped again
    b = a.alloc(MIB)
    assert type(b) is tuple
    c = PtmallocArena(trim_threshold=64 * MIB, mmap_threshold=32 * MIB)
    blocks = [c.alloc(MIB) for _ in range(4)]
    for b in blocks:
        c.free(b)
    assert c.trims == 0 and c.resident_bytes() >= 4 * MIB


def test_a_mallopt_key_needs_the_arena(tmp_path):
    text = open(load_profile("m2max-macos").path).read()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("malloc_trim_threshold_bytes = 0",
                                "malloc_trim_threshold_bytes = 1048576"))
    with pytest.raises(ProfileError, match="malloc_trim_threshold_bytes .*glibc-arena"):
        load_profile(str(bad))


def _steady(optimizer, **mallopt):
    """Steady step of p10-ema without (ms) and the arena's trims per step."""
    from sim.commands.calibrate import _with
    profile = load_profile("linux-x86_64")
    if mallopt:
        profile = _with(profile, {f"process.malloc_{k}_bytes": v for k, v in mallopt.items()})
    rows = run_cell("p10-ema", "without", profile=profile,
                    sets={"steps": 20, "report_at": "1,10,20", "optimizer": optimizer})
    return {r["x"]: r["value"] for r in rows if r["metric"] == "ms_per_step"}[20]


def test_adam_trims_the_top_every_step_and_raising_the_threshold_stops_it():
    """Adam's temporaries leave more than the 2056 KiB trim threshold at the top of the heap
    after every step: it is given back and faulted in again by the next step (the Linux
    probe: 3.2-3.9 ms per step; with MALLOC_TRIM_THRESHOLD_=64 MiB and
    MALLOC_MMAP_THRESHOLD_=32 MiB, 2.1 ms)."""
    default = _steady("adam")
    fixed = _steady("adam", trim_threshold=64 * MIB, mmap_threshold=32 * MIB)
    assert fixed < default * 0.75


def test_arena_profile_fast_forward_equals_exact():
    sets = {"steps": 30, "report_at": "1,10,30"}
    for variant in ("without", "detach"):
        assert run_cell("p10-ema", variant, profile="linux-x86_64", sets=sets) == \
            run_cell("p10-ema", variant, profile="linux-x86_64", sets=sets,
                     fast_forward=False)


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("variant", ["flex.autodiff", "a-tracked", "autodiff-backward-each-round"])
def test_arena_fast_forward_of_leak_loops_equals_exact(policy, variant):
    """Loops that leave nodes behind are fast-forwarded under the arena by replaying each
    iteration's heap events in order (the BTreeMaps' splits at their places): the same
    rows as exact mode, under every policy."""
    sets = {"iterations": 2000, "rounds": 2}
    assert run_cell("adleak-rss", variant, policy, profile="linux-x86_64", sets=sets) == \
        run_cell("adleak-rss", variant, policy, profile="linux-x86_64", sets=sets,
                 fast_forward=False)


def _arena_after_leak_loop(fast_forward, tracked):
    from sim.burn.tensor import drop
    sim = Simulation(load_profile("linux-x86_64"), fast_forward=fast_forward)
    dev = sim.device("flex").autodiff()
    a, b = adleak_operands(dev, tracked=tracked)
    states, runs, carved = [], 0, []
    for _ in range(2):
        sim.repeat(3000, lambda: drop(a.clone() + b.clone()))
        runs += sum(r.count for r in sim.client.locator.live if type(r).__name__ == "NodeRun")
        arena = sim.allocator.arena
        carved.append(len(arena.runs))
        arena.materialize()          # the carve runs' chunks, one by one, for the comparison
        states.append((dict(arena.inuse), dict(arena.free_at),
                       {n: list(v) for n, v in arena.tcache.items()},
                       {n: list(v) for n, v in arena.fast.items()},
                       arena.brk, arena.top, arena.resident_end, arena.trims,
                       {n: list(v) for n, v in arena.live.items()},
                       sim.heap.live_bytes, sim.heap.live_blocks, sim.heap.peak_bytes,
                       sim.work_ps, sim.fault_ps))
        tiny_backward(dev)
    return states, runs, carved


@pytest.mark.parametrize("tracked", [False, True])
def test_arena_fast_forward_places_every_chunk_where_exact_mode_does(tracked):
    """Closed form (carve runs) for the untracked loop, and for the tracked one by periods
    of 7 iterations (its split leaf takes the chunk analyse's temporary leaf left in the
    tcache, the next iteration carves a new one) between its table resizes: every chunk
    at the same address as in exact mode, bins, tcache and heap counters alike."""
    fast, runs, carved = _arena_after_leak_loop(True, tracked)
    exact, _, _ = _arena_after_leak_loop(False, tracked)
    assert fast == exact
    if not tracked:
        assert runs > 2 * 2900           # the loops were fast-forwarded
        assert carved[0] == 1            # the first in closed form (the second finds the
        #                                  backward's freed chunks in the bins: replayed)
    else:
        assert carved[0] > 3             # a carve run between each two table resizes


def test_frees_by_size_and_by_block_agree_on_the_block_count():
    sim = Simulation(load_profile("linux-x86_64"))
    heap = sim.heap
    named = heap.alloc(64)
    heap.alloc(64)
    heap.free(64)                 # anonymous: takes the newest block of 64 B (named's twin)
    heap.free(64, named)
    assert heap.live_blocks == 0 and sim.allocator.arena.live[64] == []


def test_the_arena_counts_against_the_memory_budget():
    """Exact mode and the replay keep every chunk the arena places: a leak loop longer
    than the budget stops with a clear error instead of exhausting the machine; a carve
    run does not hold its chunks one by one, so fast-forward passes the same loop."""
    from sim.engine.simulation import LimitExceeded, Limits
    sets, limits = {"iterations": 100_000}, Limits(max_live_nodes=20_000)
    with pytest.raises(LimitExceeded, match="glibc arena model holds more than 80000 chunks"):
        run_cell("adleak-rss", "flex.autodiff", profile="linux-x86_64", sets=sets,
                 limits=limits, fast_forward=False)
    rows = run_cell("adleak-rss", "flex.autodiff", profile="linux-x86_64", sets=sets,
                    limits=limits)
    assert [r["value"] for r in rows if r["metric"] == "rss"][-1] > 480


def _arena_after_frees_by_size(fast_forward, sizes):
    from sim.burn.tensor import drop
    sim = Simulation(load_profile("linux-x86_64"), fast_forward=fast_forward)
    a, b = adleak_operands(sim.device("flex").autodiff())
    sim.repeat(5000, lambda: drop(a.clone() + b.clone()))
    arena = sim.allocator.arena
    runs = len(arena.runs)
    for nbytes in sizes:            # frees that name no block: the newest of that size
        sim.heap.free(nbytes)
    still = len(arena.runs)
    sim.repeat(50, lambda: drop(a.clone() + b.clone()))
    arena.materialize()
    state = (dict(arena.inuse), dict(arena.free_at),
             {n: list(v) for n, v in arena.tcache.items()},
             {n: list(v) for n, v in arena.fast.items()},
             arena.brk, arena.top, arena.resident_end,
             {n: list(v) for n, v in arena.live.items()},
             sim.heap.live_bytes, sim.heap.live_blocks, sim.heap.peak_bytes, sim.work_ps)
    return state, runs, still


@pytest.mark.parametrize("sizes", [[24, 104, 104, 272, 192, 544, 24, 24], [24] * 20])
def test_frees_by_size_take_a_carve_runs_newest_blocks_where_exact_mode_does(sizes):
    """A free that names no block takes the newest live block of its size: from a carve
    run, its last iterations' block (a BTreeMap leaf from the last split), without
    entering the run (past 16 such frees of one size the run is entered); the arena
    then equals exact mode's chunk by chunk."""
    fast, runs, still = _arena_after_frees_by_size(True, sizes)
    exact, _, _ = _arena_after_frees_by_size(False, sizes)
    assert runs == 1                     # closed form
    assert still == (1 if len(sizes) < 16 else 0)   # the frees entered the run or not
    assert fast == exact


def test_a_free_naming_a_block_a_carve_run_took_from_the_tcache_enters_the_run():
    """A carve run's iterations may keep a chunk they took from the tcache, outside the
    run's range (an earlier iteration's transient): the run stands for it in the live
    list, so a free naming it enters the run first and frees that chunk, as exact mode
    does (it used to find the block in no live list and free the newest of its size)."""
    def arena_with(carved):
        a = PtmallocArena()
        a.alloc(24)
        x = a.alloc(24)
        a.free(x, 24)                   # parked in the tcache
        if carved:
            start = a.top
            a.tcache[32].clear()        # the run took it (the caller sets the tcache)
            a.carve_run(32, [24], lambda: ([(start, 32)], {24: [x, start]}),
                        borrowed=(x,))
            assert len(a.runs) == 1
        else:
            assert a.alloc(24) == x     # the tcache's chunk, then one from the top
            a.alloc(24)
        a.free(x, 24)
        assert not a.runs
        return (dict(a.inuse), {n: list(v) for n, v in a.tcache.items() if v}, a.top,
                {n: list(v) for n, v in a.live.items()})

    assert arena_with(True) == arena_with(False)


def test_a_billion_untracked_adds_on_the_arena_are_one_carve_run():
    """Issue 7's scale on the Linux profile: 10^9 iterations of the adleak loop in closed
    form, 1111.2 B and 8.333 blocks per op kept (the probe's adleak-count figures), the
    break just past the top, and only the last iterations' chunks held one by one."""
    from sim.engine.simulation import Limits
    from sim.burn.tensor import drop
    sim = Simulation(load_profile("linux-x86_64"), limits=Limits(max_ops=10 ** 12))
    a, b = adleak_operands(sim.device("flex").autodiff())
    heap, arena = sim.heap, sim.allocator.arena
    base = (heap.live_bytes, heap.live_blocks)
    n = 10 ** 9
    sim.repeat(n, lambda: drop(a.clone() + b.clone()))
    assert sim.arena_replayed == 0 and sim.arena_carved > n - 20
    assert (heap.live_bytes - base[0]) / n == pytest.approx(1111.2, abs=0.05)
    assert (heap.live_blocks - base[1]) / n == pytest.approx(8 + 1 / 3, abs=1e-3)
    assert len(arena.inuse) < 1000 and len(arena.runs) == 1
    assert arena.top < arena.brk <= arena.top + 128 * 1024 + 8192
    assert sim.rss_bytes() > 1.2e12


def _arena_state(a):
    # the unsorted bin in order, each chunk with its size (the one free_at holds)
    assert all(a.free_at[addr] == size for addr, size in a.unsorted.items())
    return (dict(a.inuse), dict(a.free_at),
            list(a.unsorted.items()), {i: list(v) for i, v in enumerate(a.bins) if v}, a.last_remainder,
            {s: list(v) for s, v in a.tcache.items() if v},
            {s: list(v) for s, v in a.fast.items() if v}, a.nfast, a.top, a.brk,
            a.resident_end, a.trims, a.trimmed_bytes, a.mapped, a.mmap_threshold,
            {s: list(v) for s, v in a.live.items()})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["alloc", "free", "many", "free_many"]),
                          st.sampled_from([24, 100, 200, 544, 640, 1000, 2000, 5000, 70000]),
                          st.integers(1, 400)), min_size=5, max_size=60))
def test_bulk_requests_and_frees_place_chunks_as_single_ones_do(ops):
    """alloc_many (pieces of the top or of the last remainder in one step) and free_many
    (a run of blocks merged in one step) leave the arena exactly as single requests and
    frees, bins and their order included."""
    bulk, single = PtmallocArena(), PtmallocArena()
    for op, nbytes, k in ops:
        if op == "alloc":
            bulk.alloc(nbytes)
            single.alloc(nbytes)
        elif op == "many":
            bulk.alloc_many(nbytes, k)
            for _ in range(k):
                single.alloc(nbytes)
        else:
            live = single.live.get(nbytes, [])
            k = min(k if op == "free_many" else 1, len(live))
            if op == "free" and live:
                block = live[(k * 7919) % len(live)]   # a named free of some live block
                bulk.free(block, nbytes)
                single.free(block, nbytes)
                continue
            bulk.free_many(nbytes, k)
            for _ in range(k):
                single.free(None, nbytes)
        assert _arena_state(bulk) == _arena_state(single)


def test_state_compares_placement_not_the_order_dicts_were_filled():
    """Fast-forward compares arena states between iterations (PtmallocArena.state): two
    arenas whose chunks, bins, tcache and live lists are the same compare equal however
    their free chunks were entered; a tcache bin in another order (the next request would
    get another chunk) does not."""
    sizes = (1100, 50, 1300, 50, 1500, 50)

    def arena(order):
        a = PtmallocArena()
        blocks = [a.alloc(n) for n in sizes]
        a.alloc(50)                           # keeps the last large chunk off the top
        for i in order:
            a.free(blocks[i], sizes[i])      # three free chunks, none adjacent
        return a, blocks
    one, blocks = arena((0, 2, 4))
    two, _ = arena((4, 0, 2))
    assert list(one.free_at) != list(two.free_at) and one.free_at == two.free_at
    # the unsorted bin keeps the order: sort it, each chunk into a large bin of its own
    one.alloc(3000)
    two.alloc(3000)
    assert one.state() == two.state()
    three, _ = arena((0, 2, 4))
    three.alloc(3000)
    three.free(blocks[1], 50)
    three.free(blocks[3], 50)
    four, _ = arena((0, 2, 4))
    four.alloc(3000)
    four.free(blocks[3], 50)
    four.free(blocks[1], 50)
    assert three.state() != four.state()      # the tcache hands out another chunk first


def test_chunks_merged_out_of_the_unsorted_bin_keep_its_order():
    """A free that merges a chunk already in the unsorted bin takes it out from the
    middle; the merged chunk enters at the front. Sorting then starts from the oldest
    chunk still there, however many were taken out, and a pass that stops at an exact
    fit leaves the chunks after it in their order."""
    a = PtmallocArena()
    pairs = []
    for _ in range(100):
        first, second = a.alloc(2000), a.alloc(1100)
        a.alloc(24)                     # keeps the pair from the next one and the top
        pairs.append((first, second))
    for first, _ in pairs:
        a.free(first)                   # 2016-B chunks, unsorted, oldest first
    for first, second in reversed(pairs):
        a.free(second)                  # merges with the chunk below: 3136 B, newest
    assert list(a.unsorted) == [first for first, _ in reversed(pairs)]
    # an exact fit: the oldest merged chunk, the last one freed first
    assert a.alloc(chunk_size(2000) + chunk_size(1100) - 8) == pairs[-1][0]
    assert list(a.unsorted) == [first for first, _ in reversed(pairs[:-1])]


def test_exact_fits_take_the_unsorted_bins_oldest_chunks_one_by_one():
    """Requests each served by an exact fit from a long unsorted bin stop its pass at once:
    each takes the oldest chunk left, and the places they leave at the front of the bin's
    dict are dropped when they outnumber the chunks (the bin is built afresh, in order)."""
    a = PtmallocArena()
    blocks = []
    for _ in range(300):
        blocks.append(a.alloc(3000))
        a.alloc(24)                     # keeps each chunk from its neighbours and the top
    for block in blocks:
        a.free(block)                   # the unsorted bin, oldest first
    assert list(a.unsorted) == blocks
    for k, block in enumerate(blocks[:250]):
        assert a.alloc(3000) == block
        assert list(a.unsorted) == blocks[k + 1:]
    assert a._unsorted_dead < 250


def test_the_arenas_tap_hears_where_it_reads_a_bins_length_or_its_break():
    """The recorder is told every tcache bin length a request or free reads, a fastbin
    read, each carve from the top and each free merged into the top; the arena places
    every chunk as it does without one."""
    def run(tap):
        a = PtmallocArena()
        a.recorder = tap
        x = a.alloc(24)                  # tcache bin 32 empty: a carve from the top
        a.free(x)                        # parked in the tcache
        y = a.alloc(24)                  # taken from it
        big = a.alloc(2000)              # past the tcache: carved
        a.free(big)                      # merged into the top
        a.free(y)
        return a
    tap = Heard()
    heard, plain = run(tap), run(None)
    assert heard.state() == plain.state()
    names = [c[0] for c in tap.calls]
    assert names[:4] == ["took", "fast_took", "carved", "parked"]
    assert ("took", 32, 1) in tap.calls and ("parked", 32, 0) in tap.calls
    assert "merged" in names and names.count("carved") == 2
