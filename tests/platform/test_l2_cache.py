"""The L2 residency model (sim/platform/l2_cache.py) and its time term."""

import pytest

from sim.platform.l2_cache import L2Cache

MiB = 1 << 20


def test_hit_miss_accounting_and_capacity():
    c = L2Cache(2 * MiB)
    a, b = c.claim(MiB), c.claim(MiB)
    assert c.touch((a,)) == MiB          # fresh chunk: write-allocate miss
    assert c.touch((b,)) == MiB
    assert c.touch((a, a)) == 0          # in-place op: input and output hit together
    assert c.hits == 2 * MiB and c.misses == 2 * MiB
    t = c.claim(MiB)
    assert c.touch((t,)) == MiB          # evicts b, the least recently used
    assert c.resident == 2 * MiB
    assert c.touch((b,)) == MiB and c.touch((t,)) == 0
    big = c.claim(4 * MiB)               # larger than the L2: never resident
    assert c.touch((big,)) == 4 * MiB and c.touch((big,)) == 4 * MiB
    assert c.resident <= c.capacity


def test_freed_chunk_is_reused_lifo_with_its_residency():
    c = L2Cache(2 * MiB)
    a = c.claim(MiB)
    c.touch((a,))
    a.release()
    b = c.claim(MiB)
    assert b is a and c.touch((b,)) == 0     # the allocator hands back the chunk just freed
    assert c.claim(2 * MiB) is not a         # another size: a fresh chunk


def test_cyclic_working_set_above_capacity_always_misses():
    # p10-ema's ema-only pattern: ema in place, t = w*0.01 (allocated), ema += t, drop t
    def run():
        c = L2Cache(2 * MiB)
        ema, w = c.claim(MiB), c.claim(MiB)
        c.touch((ema,)); c.touch((w,))
        per_step = []
        for _ in range(5):
            m = c.touch((ema, ema))
            t = c.claim(MiB)
            m += c.touch((w, t))
            m += c.touch((ema, t, ema))
            t.release()
            per_step.append(m)
        return per_step
    first = run()
    assert first == run()                    # deterministic
    assert len(set(first[1:])) == 1 and first[-1] > 0
    big = L2Cache(16 * MiB)                  # the M2 Max's L2: everything stays resident
    ema, w = big.claim(MiB), big.claim(MiB)
    big.touch((ema,)); big.touch((w,))
    t = big.claim(MiB); big.touch((t,)); t.release()
    for _ in range(3):
        t = big.claim(MiB)
        assert big.touch((ema, ema)) + big.touch((w, t)) + big.touch((ema, t, ema)) == 0
        t.release()


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        L2Cache(0)


def test_ema_only_time_depends_on_l2_size():
    from sim.engine.profile import load_profile
    from sim.engine.runner import run_cell

    def ms(profile):
        rows = run_cell("p10-ema", "ema-only", "burn-0.22.1", profile, observables=False)
        return [r["value"] for r in rows if r["metric"] == "ms_per_step" and r["x"] == 100][0]

    p = load_profile("linux-x86_64")
    small = ms(p)
    p.process.l2_bytes = 64 * MiB            # everything resident
    large = ms(p)
    assert small > large * 1.3
