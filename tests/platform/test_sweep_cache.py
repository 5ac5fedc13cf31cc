"""The orphan sweep's cache model (sim.platform.l2_cache.set_miss_fraction, Timing.sweep)."""

import pytest

from sim.platform.l2_cache import set_miss_fraction
from sim.platform.hashbrown import TableLayout
from sim.platform.timing import Timing
from sim.engine.runner import run_cell

MiB = 1 << 20


def test_miss_fraction_switches_at_the_cache_size():
    c, w = 2 * MiB, 16
    fractions = [set_miss_fraction(f * c, c, w) for f in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 8.0)]
    assert fractions == sorted(fractions)                       # monotone in the working set
    assert fractions[0] < 1e-4 and fractions[1] < 0.01          # resident well below the size
    assert 0.45 < fractions[3] < 0.6                            # about half at the size
    assert fractions[4] > 0.95 and fractions[-1] == pytest.approx(1.0)
    # the switch scales with the capacity: same fractions at 16 MiB for 8x the bytes
    assert set_miss_fraction(8 * 0.75 * c, 8 * c, w) == pytest.approx(fractions[2])
    assert set_miss_fraction(MiB, 0, w) == 0.0                  # capacity 0: not modelled


class _Table:
    def __init__(self, buckets):
        self.layout = TableLayout(32, 8, 16)
        self.buckets = buckets


class _Memory:
    """What Timing.sweep_live/sweep_dead read of a graph."""

    def __init__(self, n, referenced, buckets):
        self.n, self.referenced, self.nodes_table = n, referenced, _Table(buckets)
        self.nodes = {}         # node id -> (its key's Arc, parents): see _placed_keys

    def node_count(self):
        return self.n


class _Sim:
    def __init__(self):
        self.charged = 0.0

    def charge(self, ns, *args):
        self.charged += ns


PARAMS = {"sweep_fixed_ns": 0.0, "sweep_copy_entry_ns": 0.0, "sweep_visit_ns": 0.0,
          "scan_node_ns": 1.0, "root_check_node_ns": 10.0, "sweep_free_ns": 0.0,
          "sweep_l2_read_ns": 0.0, "sweep_l3_read_ns": 5.0, "sweep_dram_read_ns": 0.0}
L2 = (2 * MiB, 16)   # the host core's L2 (profile [process] l2_bytes, l2_ways)


def _caches(l2=L2, l1d=(48 << 10, 12), l3=(0, 0)):
    return (l1d, l2, l3)


def _live_sweep_ns(n, buckets, params=PARAMS, l2=L2):
    sim = _Sim()
    t = Timing(sim, params, _caches(l2))
    memory = _Memory(n, 1, buckets)
    scanned = n * (n + 1) / 2                     # n entries x mean prefix (n + 1) / 2
    t.sweep_live(memory, n)
    t.sweep(entries=n, visits=n, scanned=scanned, freed=0)
    return sim.charged, scanned


def test_cache_term_is_zero_below_and_full_above_the_l2():
    # 4k keys (256 KiB of lines + a 4096-bucket table): resident, only scan_node_ns
    ns, scanned = _live_sweep_ns(4000, 4096)
    assert ns == pytest.approx(scanned * 1.0, rel=1e-3)
    # 200k keys (12.8 MB of lines): nearly every read of the prefix misses
    ns, scanned = _live_sweep_ns(200_000, 262_144)
    assert ns / scanned > 1.0 + 5.0 * 0.95
    # off when the profile has no L2 size
    ns, scanned = _live_sweep_ns(200_000, 262_144, l2=(0, 16))
    assert ns == pytest.approx(scanned)


def test_dead_graph_reads_are_root_checks_and_deterministic():
    sim = _Sim()
    t = Timing(sim, PARAMS, _caches())
    memory = _Memory(1000, 0, 2048)
    t.sweep_dead(memory)                           # maybe_useful + free_unused_roots: 2 x 1000
    t.sweep(entries=1, visits=1, scanned=2000, freed=1)
    assert sim.charged == pytest.approx(1000 * 1.0 + 1000 * 10.0)
    again = _Sim()
    t2 = Timing(again, PARAMS, _caches())
    t2.sweep_dead(memory)
    t2.sweep(entries=1, visits=1, scanned=2000, freed=1)
    assert again.charged == sim.charged
    assert t._sweep_sets == []                     # records are consumed by the sweep


def test_tracked_sweep_stays_quadratic_and_per_read_cost_grows_past_the_l2():
    """The unrelated backward after n tracked ops: sweep work ~n^2 (n entries x n/2 keys);
    per key read constant while the graph fits the L2, higher once it does not."""
    rows = run_cell("adleak-count-params", "tracked/size=16", profile="linux-x86_64",
                    sets={"ops": "2000,4000,8000,64000,128000"})
    t = {r["x"]: r["value"] for r in rows
         if r["metric"] == "backward_ms" and r["phase"] == "after-unrelated-backward"}
    assert 3.6 < t[4000] / t[2000] < 4.4 and 3.6 < t[8000] / t[4000] < 4.4
    per_read = {n: t[n] / (n * n / 2) for n in t}
    assert per_read[64000] > 1.2 * per_read[8000]              # past 2 MiB of prefix
    assert per_read[128000] >= per_read[64000] * 0.99          # never cheaper with size
    assert 3.6 < t[128000] / t[64000] < 5.0                     # still ~n^2 at the top


def test_fast_forward_equals_exact_with_the_cache_term_active():
    sets = {"ops": "40000"}
    fast = run_cell("adleak-count-params", "interleaved/size=16", profile="linux-x86_64",
                    sets=sets)
    exact = run_cell("adleak-count-params", "interleaved/size=16", profile="linux-x86_64",
                     sets=sets, fast_forward=False)
    assert fast == exact


def test_sweep_time_is_deterministic():
    sets = {"ops": "30000"}
    a = run_cell("adleak-count-params", "merge-persistent/size=16", profile="linux-x86_64",
                 sets=sets)
    b = run_cell("adleak-count-params", "merge-persistent/size=16", profile="linux-x86_64",
                 sets=sets)
    assert a == b


# -- the data TLB (Timing's fourth ``caches`` entry) ----------------------------------------

def test_page_miss_fraction_is_zero_within_the_reach_and_one_past_a_set_more():
    from sim.platform.l2_cache import page_set_miss_fraction
    reach, ways = 3072 * 4096, 8
    assert page_set_miss_fraction(3072 * 4096, reach, ways) == 0.0       # consecutive pages
    assert 0.0 < page_set_miss_fraction(3200 * 4096, reach, ways) < 1.0
    assert page_set_miss_fraction(3456 * 4096, reach, ways) == 1.0       # ways + 1 a set
    assert page_set_miss_fraction(1 << 30, 0, ways) == 0.0               # not modelled


def test_pages_read_many_times_a_pass_miss_less_than_a_cyclic_scan():
    from sim.platform.l2_cache import page_set_miss_fraction
    reach, ways = 3072 * 4096, 8
    # one read a page a pass: every read of an overfull set misses (the probe's rows)
    assert page_set_miss_fraction(4096 * 4096, reach, ways, 1.0) == 1.0
    assert (page_set_miss_fraction(3264 * 4096, reach, ways, 1.0)
            == page_set_miss_fraction(3264 * 4096, reach, ways))
    # ~10 keys a page read in hash order: a page's reads are close enough together that
    # most hit; many reads a page tend to the random-access miss rate 1 - ways / pages a set
    fractions = [page_set_miss_fraction(4096 * 4096, reach, ways, r) for r in (1, 2, 10, 1e6)]
    assert fractions == sorted(fractions, reverse=True)
    q = ways * 4096 / 3072
    assert fractions[-1] == pytest.approx(1 - ways / q, rel=0.02)
    # nothing misses inside the reach, however the reads fall
    assert page_set_miss_fraction(3000 * 4096, reach, ways, 10.0) == 0.0


class _Heap:
    def __init__(self):
        self.live_bytes, self.large_bytes = 0, 0


class _TlbSim(_Sim):
    def __init__(self):
        super().__init__()
        self.heap = _Heap()


class _TlbTable(_Table):
    def __init__(self, buckets):
        super().__init__(buckets)
        self.born = None


TLB_PARAMS = dict(PARAMS, sweep_l3_read_ns=0.0, sweep_tlb_read_ns=6.0)


def _tlb_sweep_ns(n, spacing_bytes, tlb=(3072 * 4096, 8)):
    """ns of a sweep over a live graph of ``n`` keys (one live) that grew from 100 keys while
    the heap kept ``spacing_bytes`` of small blocks per key."""
    sim = _TlbSim()
    t = Timing(sim, TLB_PARAMS, _caches(l2=(0, 0), l1d=(0, 0)) + (tlb,))
    memory = _Memory(100, 1, 128)
    memory.nodes_table = _TlbTable(128)
    t.sweep_live(memory, 100)                      # first read: the graph's mark
    t.sweep(entries=100, visits=100, scanned=0, freed=0)
    memory.n = n
    sim.heap.live_bytes += spacing_bytes * (n - 100)
    sim.heap.large_bytes += 1 << 30                # tensor data elsewhere: not among the keys
    sim.heap.live_bytes += 1 << 30
    sim.charged = 0.0
    scanned = n * (n + 1) / 2
    t.sweep_live(memory, n)
    t.sweep(entries=n, visits=n, scanned=scanned, freed=0)
    return sim.charged, scanned


class _Key:
    """A node's Arc<NodeId> as the sweep's TLB model reads it: its block's address."""

    def __init__(self, block):
        self._block = block


def _placed_sweep_ns(addresses, tlb=(3072 * 4096, 8), params=TLB_PARAMS):
    """ns of a sweep over a live graph (one live key) whose keys the allocator placed at
    ``addresses``; the heap's kept bytes say nothing (the addresses decide)."""
    sim = _TlbSim()
    t = Timing(sim, params, _caches(l2=(0, 0), l1d=(0, 0)) + (tlb,))
    n = len(addresses)
    memory = _Memory(n, 1, 1 << 15)
    memory.nodes_table = _TlbTable(1 << 15)
    memory.nodes = {i: (_Key(a), ()) for i, a in enumerate(addresses)}
    scanned = n * (n + 1) / 2
    t.sweep_live(memory, n)
    t.sweep(entries=n, visits=n, scanned=scanned, freed=0)
    return sim.charged, scanned


def test_tlb_pages_come_from_where_the_allocator_put_the_keys():
    # 20k keys 10 to a 4-KiB page: 2,000 pages, inside the TLB's reach
    ns, scanned = _placed_sweep_ns([(i // 10) * 4096 + 32 * (i % 10) for i in range(20_000)])
    assert ns == pytest.approx(scanned, rel=1e-6)
    # the same keys 2 to a page: 10,000 pages, most of a long prefix's reads walk the table
    ns2, _ = _placed_sweep_ns([(i // 2) * 4096 + 32 * (i % 2) for i in range(20_000)])
    assert ns2 / scanned > 1.0 + 6.0 * 0.3
    # a key without an address (not placed one by one) falls back to the heap's bytes,
    # which here kept nothing: no spread, no TLB term
    ns3, _ = _placed_sweep_ns([None] * 20_000)
    assert ns3 == pytest.approx(scanned, rel=1e-6)


def test_tlb_term_follows_the_pages_the_keys_span():
    # 20k keys 64 B apart span 313 pages: the TLB holds them, only scan_node_ns
    ns, scanned = _tlb_sweep_ns(20_000, 64)
    assert ns == pytest.approx(scanned, rel=1e-6)
    # 20k keys 4 KiB apart: one page each, 6.5x the TLB's reach; most reads of a prefix
    # long enough to outgrow it pay the page walk
    ns, scanned = _tlb_sweep_ns(20_000, 4096)
    assert 1.0 + 6.0 * 0.5 < ns / scanned < 1.0 + 6.0
    # off without a TLB in the profile
    ns, scanned = _tlb_sweep_ns(20_000, 4096, tlb=(0, 0))
    assert ns == pytest.approx(scanned, rel=1e-6)


def test_where_the_key_pages_fall_does_not_matter():
    # 2,400 pages of 10 keys each and the table's ~270, under the reach of 3,072: nothing
    # misses, whether the pages are consecutive or leave holes in their span (the sweep-scan
    # probe's tlbr rows: pages filling 63 % of their span miss as consecutive pages do)
    even = [(i // 10) * 4096 + 32 * (i % 10) for i in range(24_000)]
    ns, scanned = _placed_sweep_ns(even)
    assert ns == pytest.approx(scanned, rel=1e-6)
    pages = [p for p in range(8_000) if (p // 384) % 2 == 0 or p % 384 < 192][:2_400]
    holes = [pages[i // 10] * 4096 + 32 * (i % 10) for i in range(24_000)]
    assert _placed_sweep_ns(holes)[0] == pytest.approx(ns, rel=1e-12)


#: the AMD EPYC's measured curves, two points each (sim.platform.l2_cache.TlbMissCurve)
CURVE = dict(sweep_tlb_miss_reads=[1.0, 10.0], sweep_tlb_miss_reach=[[0.9, 1.3], [0.9, 1.3]],
             sweep_tlb_miss=[[0.1, 0.7], [0.02, 0.2]])


def test_tlb_misses_follow_the_measured_curve():
    from sim.platform.l2_cache import TlbMissCurve
    curve = TlbMissCurve(CURVE["sweep_tlb_miss_reads"], CURVE["sweep_tlb_miss_reach"],
                         CURVE["sweep_tlb_miss"])
    # keys ten to a page miss less than one to a page, and more as the pages outgrow the reach
    assert curve(1.1, 10.0) < curve(1.1, 1.0)
    assert curve(1.1, 10.0) == pytest.approx(0.11)
    assert curve(0.45, 10.0) == pytest.approx(0.01)          # from no miss at no pages
    assert curve(5.0, 10.0) == 0.2 and curve(1.1, 1e6) == curve(1.1, 10.0)
    # the sweep charges the curve's misses, not the LRU formula's (none below the reach)
    # (2,800 key pages and a 1-MiB table: about the reach, where a prefix's pages hold fewer
    # keys than ten, read nearer the one-a-page curve)
    keys = [(i // 10) * 4096 + 32 * (i % 10) for i in range(28_000)]
    with_curve, scanned = _placed_sweep_ns(keys, params=dict(TLB_PARAMS, **CURVE))
    assert 1.0 + 6.0 * 0.01 < with_curve / scanned < 1.0 + 6.0 * 0.15
    assert _placed_sweep_ns(keys)[0] == pytest.approx(scanned, rel=1e-6)


def test_key_pages_are_counted_once_and_follow_the_map():
    from sim.platform.timing import _KeyPages
    sim = _TlbSim()
    t = Timing(sim, TLB_PARAMS, _caches(l2=(0, 0), l1d=(0, 0)) + ((3072 * 4096, 8),))
    memory = _Memory(0, 1, 1 << 10)
    memory.nodes = {i: (_Key(i * 1000), ()) for i in range(100)}

    def fresh():
        pages = {rc._block // 4096 for rc, _ in memory.nodes.values()}
        return len(pages) * 4096 / len(memory.nodes)

    assert t._key_spacing(memory, 100) == fresh()
    counted = t._key_pages[id(memory)]
    for i in range(100, 130):                       # appended keys: counted on top
        memory.nodes[i] = (_Key(i * 5000), ())
    assert t._key_spacing(memory, 130) == fresh() and t._key_pages[id(memory)] is counted
    memory.nodes.pop(3)                             # a key gone, one more appended
    memory.nodes[130] = (_Key(7), ())
    assert t._key_spacing(memory, 130) == fresh() and t._key_pages[id(memory)] is not counted
    # two keys' Arcs swapped (fast-forward's chain tip), then told: counted afresh
    a, b = memory.nodes[10], memory.nodes[130]
    memory.nodes[10], memory.nodes[130] = (b[0], a[1]), (a[0], b[1])
    memory.nodes[131] = (_Key(131 * 5000), ())
    t.keys_moved(memory)
    assert t._key_spacing(memory, 131) == fresh()
    assert isinstance(t._key_pages[id(memory)], _KeyPages)
