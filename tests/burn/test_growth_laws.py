"""Growth laws come out of the mechanism: linear, stepwise at table thresholds,
quadratic sweep cost, flat where the real program is flat."""

from common import adleak_operands
from sim.platform.hashbrown import buckets_for, capacity_of
from sim.engine.simulation import Simulation
from sim.engine.runner import run_cell
from sim.burn.tensor import drop


def _loop(profile, tracked, n):
    sim = Simulation(profile, fast_forward=False)
    a, b = adleak_operands(sim.device("flex").autodiff(), tracked=tracked)
    heap = []
    for _ in range(n):
        drop(a.clone() + b.clone())
        locator = sim.client.locator
        trees = locator.graphs_tree.nbytes + locator.keys_tree.nbytes
        heap.append((sim.heap.live_bytes, trees))
    return sim, heap


def test_untracked_ops_grow_the_heap_linearly(profile):
    _, heap = _loop(profile, False, 42_000)
    for n in (7_000, 21_000, 42_000):
        per_op = (heap[n - 1][0] - heap[0][0]) / (n - 1)
        assert abs(per_op - 1079.2) < 1.0, (n, per_op)


def test_tracked_ops_step_exactly_at_hash_table_thresholds(profile):
    """Per-op growth (BTreeMap nodes aside) is constant except where a table must resize."""
    sim, heap = _loop(profile, True, 9_000)
    own = [total - trees for total, trees in heap]
    deltas = [b - a for a, b in zip(own, own[1:])]
    base = sorted(deltas)[len(deltas) // 2]
    assert base == 328  # Arc<Node> 104 + parents Vec 64 + Arc<NodeId> 24 + Add step 120 + 16
    jumps = {i + 2 for i, d in enumerate(deltas) if d != base}  # 1-based iteration
    # a's graph holds a's root + one node per op (steps, actions, nodes: i + 1 items after
    # op i), its leaves and a's key set one id per op (i items): a table resizes on the op
    # that takes it past a capacity (3, 7, 14, 28, 56, 112, ...)
    caps = set()
    buckets = 4
    while capacity_of(buckets) < 10_000:
        caps.add(capacity_of(buckets))
        buckets = buckets_for(capacity_of(buckets) + 1)
    expected = {c for c in caps if 1 < c < 9_000} | {c + 1 for c in caps if 1 < c + 1 < 9_000}
    assert jumps == expected, (sorted(jumps ^ expected)[:10])


def test_ema_chain_sweep_cost_is_quadratic_per_step():
    """Cumulative orphan-sweep time over the first s steps grows like s^3."""
    rows = run_cell("p10-ema", "detach", sets={"steps": 2000, "report_at": "500,1000,2000"})
    cleanup = {r["x"]: r["value"] for r in rows if r["metric"] == "cleanup_ms"}
    ratio = cleanup[2000] / cleanup[1000]
    assert 6.5 < ratio < 9.5, ratio
    dedup = run_cell("p10-ema", "detach", "dedup-sweep",
                     sets={"steps": 2000, "report_at": "500,1000,2000"})
    dedup_cleanup = {r["x"]: r["value"] for r in dedup if r["metric"] == "cleanup_ms"}
    # one visit per graph, but maybe_useful still scans the chain once per sweep (burn
    # keeps no count of live handles): linear per step, so the sum grows like s^2
    assert 3.5 < dedup_cleanup[2000] / dedup_cleanup[1000] < 4.5
    assert dedup_cleanup[2000] < cleanup[2000] / 20


def test_flat_where_the_program_is_flat():
    for variant in ("without", "target-without", "log"):
        rows = run_cell("p10-ema", variant, sets={"steps": 600, "report_at": "50,600"})
        ms = [r["value"] for r in rows if r["metric"] == "ms_per_step" and r["x"] > 1]
        assert max(ms) / min(ms) < 1.01, (variant, ms)
    for variant in ("flex", "without_autodiff"):
        rows = run_cell("adleak-rss", variant)
        rss = [r["value"] for r in rows if r["metric"] == "rss" and r["x"] > 0]
        assert max(rss) == min(rss), (variant, rss)
