"""Two loop kinds of issue 39, written as a user writes them (experiments/loops/): an
inference forward on an autodiff device and a validation loss summed across training
steps. With fast-forward they give the rows of ``--exact`` on both profiles."""

import pytest

from sim import paths
from sim.engine.runner import run_cell
from sim.engine.workloads import load_workload
from sim.commands.bench import training_step
from sim.engine.simulation import Simulation
from sim.engine.profile import load_profile
from sim.burn.nn import Mlp
from sim.burn.tensor import Tensor

LOOPS = paths.ROOT / "experiments" / "loops"
PROFILES = ("m2max-macos", "linux-x86_64")


def _run(name, profile, sets, fast_forward):
    keep = []
    rows = run_cell(load_workload(str(LOOPS / name)), "default", profile=profile, sets=sets,
                    keep=keep, fast_forward=fast_forward)
    return rows, keep[0]


def _lru(sim):
    """The L2 model's LRU of the flex backend: chunk sizes in order, and for each chunk
    the node whose actions keep it (None: a parameter's, the input's, a freed one)."""
    cache = sim._backends["flex"].cache
    owner = {}
    for graph in sim.client.locator.live:
        if hasattr(graph, "server"):
            for node_id, step in graph.server.steps.items():
                if step.actions is not None:
                    for _, buf, _ in step.actions.explicit + step.actions.backup:
                        if buf is not None and buf.chunk is not None:
                            owner.setdefault(id(buf.chunk), node_id)
    return ([(c.nbytes, owner.get(id(c))) for c in cache.lru], cache.resident,
            {n: len(v) for n, v in cache.free.items() if v})


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("forwards", (40, 60, 400))
def test_inference_forwards_equal_exact_mode(profile, forwards):
    """The forwards are applied as a chain of members left unbuilt on both profiles (on
    glibc's arena each forward's requests replayed in order, the members built on the
    chunks the replay placed): exact mode's rows, time, peak, allocation calls, page
    faults and allocator state (on the arena every chunk, bin, tcache and fastbin entry)."""
    rows, sim = _run("infer.py", profile, {"forwards": forwards}, True)
    exact_rows, exact = _run("infer.py", profile, {"forwards": forwards}, False)
    assert sim.chain_applied > forwards // 2
    assert rows == exact_rows
    assert _ends(sim) == _ends(exact)
    assert sim.allocator.state() == exact.allocator.state()


@pytest.mark.parametrize("profile", PROFILES)
def test_a_backward_after_inference_forwards_frees_what_exact_mode_frees(profile):
    """A backward through the parameters after the loop builds the forwards' members and
    frees them with their activations; on glibc's arena each block goes back to the chunk
    exact mode frees, so the arena ends the same, chunk by chunk."""
    def run(fast_forward):
        sim = Simulation(load_profile(profile), fast_forward=fast_forward)
        ad = sim.device("flex").autodiff()
        model = Mlp(64, 64, 64, ad)
        x = Tensor.random((8, 64), ad)
        sim.repeat(100, lambda: model.forward(x.clone()).sum().into_scalar())
        kept = sim.heap.live_bytes
        model.forward(x.clone()).sum().backward()
        sim.repeat(20, lambda: model.forward(x.clone()).sum().into_scalar())
        return sim, kept
    sim, kept = run(True)
    exact, exact_kept = run(False)
    assert sim.chain_applied > 50
    assert kept == exact_kept
    assert _ends(sim) == _ends(exact)
    assert sim.allocator.state() == exact.allocator.state()


def _arena(sim):
    """A glibc arena whole (its carve runs entered): every in-use chunk and its size, the live blocks of each
    request size in order, the free chunks, bins, tcache bins and fastbins in order, the
    top, break, resident end, trims, last remainder and the bins' change count."""
    a = sim.heap._arena
    a.materialize()
    return (a.inuse, {n: v for n, v in a.live.items() if v}, a.free_at, list(a.unsorted),
            [(i, list(c)) for i, c in enumerate(a.bins) if c], a.binmap,
            {n: v for n, v in a.tcache.items() if v}, {n: v for n, v in a.fast.items() if v},
            a.top, a.brk, a.resident_end, a.trims, a.last_remainder, a.nfast, a.bin_changes)


def test_inference_forwards_shifted_on_glibcs_arena_equal_exact_mode():
    """1,500 forwards on glibc's arena: most are applied as windows that shift a recorded
    window's arena change by the top's advance (sim.engine.fastforward.arenawindow), and
    the arena is exact mode's chunk by chunk: in-use map, live lists, bins, break."""
    sets = {"forwards": 1500}
    rows, sim = _run("infer.py", "linux-x86_64", sets, True)
    exact_rows, exact = _run("infer.py", "linux-x86_64", sets, False)
    assert sim.arena_shifted > 1000
    assert rows == exact_rows
    assert _ends(sim) == _ends(exact)
    assert _arena(sim) == _arena(exact)


def test_windows_applied_at_other_tcache_lengths_equal_exact_mode(monkeypatch):
    """A recorded window is found where the tcache bins it reads hold more or fewer chunks
    than when it was recorded (never running dry, never filling: arenawindow._lengths);
    1,500 forwards apply some that way, and the arena is exact mode's chunk by chunk."""
    from sim.engine.fastforward import arenawindow
    longer = []
    apply = arenawindow._apply

    def noting(sim, pending, w, lo, d, more, walked):
        longer.append(any(more))
        return apply(sim, pending, w, lo, d, more, walked)
    monkeypatch.setattr(arenawindow, "_apply", noting)
    sets = {"forwards": 1500}
    rows, sim = _run("infer.py", "linux-x86_64", sets, True)
    exact_rows, exact = _run("infer.py", "linux-x86_64", sets, False)
    assert any(longer)
    assert rows == exact_rows
    assert _arena(sim) == _arena(exact)


def test_a_backward_after_shifted_forwards_frees_what_exact_mode_frees():
    """600 forwards, most of them shifted windows on glibc's arena, then a backward that
    frees every kept block the shifted windows placed, and 30 forwards more: the arena
    is exact mode's, chunk by chunk."""
    def run(fast_forward):
        sim = Simulation(load_profile("linux-x86_64"), fast_forward=fast_forward)
        ad = sim.device("flex").autodiff()
        model = Mlp(64, 64, 64, ad)
        x = Tensor.random((8, 64), ad)
        sim.repeat(600, lambda: model.forward(x.clone()).sum().into_scalar())
        model.forward(x.clone()).sum().backward()
        sim.repeat(30, lambda: model.forward(x.clone()).sum().into_scalar())
        return sim
    sim, exact = run(True), run(False)
    assert sim.arena_shifted > 300
    assert _ends(sim) == _ends(exact)
    assert _arena(sim) == _arena(exact)


def test_inference_forwards_past_the_l2s_first_eviction():
    """512 x 32 activations (64 KiB each) fill the 16-MiB LRU after about 45 forwards; the
    later forwards push the oldest kept activations out, which no forward touches again,
    and fast-forward goes on applying them: the LRU is exact mode's, chunk by chunk."""
    sets = {"forwards": 150, "features": 512, "batch": 32}
    rows, sim = _run("infer.py", "m2max-macos", sets, True)
    exact_rows, exact = _run("infer.py", "m2max-macos", sets, False)
    assert sim.chain_applied > 100
    assert rows == exact_rows
    lru = _lru(sim)
    assert lru == _lru(exact)
    assert lru[1] > exact._backends["flex"].cache.capacity - (64 << 10)
    assert sum(1 for _, node in lru[0] if node is not None) > 200


def _ends(sim):
    """What a run must end with, whatever fast-forward applied: simulated time, the heap's
    live bytes, blocks, peak and allocation calls, page faults, registered steps."""
    heap = sim.heap
    return (sim.work_ps, heap.live_bytes, heap.live_blocks, heap.peak_bytes, heap.allocs,
            sim.fault_bytes, sim.fault_mapped, sim.registered, sim.backwards)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("steps", (9, 30, 45, 100))
def test_summed_validation_loss_equals_exact_mode(profile, steps):
    """Each step's validation graph stays in the parameters' graph, which every training
    backward walks: fast-forward gives exact mode's rows, time, peak, allocation calls,
    page faults and allocator state (on glibc's arena every chunk, bin, tcache and
    fastbin entry) at several lengths (fewer steps than a probe needs, and more)."""
    rows, sim = _run("vloss.py", profile, {"steps": steps}, True)
    exact_rows, exact = _run("vloss.py", profile, {"steps": steps}, False)
    if profile == "m2max-macos" and steps >= 100:
        assert sim.chain_applied > steps // 3      # a chain (the bench's loop kind below)
    assert rows == exact_rows
    assert _ends(sim) == _ends(exact)
    assert sim.allocator.state() == exact.allocator.state()


def _summed_loss_run(profile, steps, fast_forward, then_backward=False):
    """The bench's loop kind "validation loss summed" (a 32-32-32 MLP, Adam, each step's
    validation mean added to a running total), ``steps`` steps; with ``then_backward`` one
    more step outside the loop and a backward through the running total (which reads
    every member of every step, those fast-forward built included)."""
    sim = Simulation(load_profile(profile), fast_forward=fast_forward)
    body, state = training_step(sim, "adam", validation_loss=True)
    sim.repeat(steps, body)
    if then_backward:
        body()
        state["total"].backward()
    return sim


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("steps", (20, 60, 130))
def test_the_bench_summed_validation_loss_equals_exact_mode(profile, steps):
    """Fast-forward of the summed validation loss (on m2max-macos a chain: each step's
    thirteen members, four of them the new parameters' RootSteps that the module holds,
    their entries partly in a graph the merge emptied, the steps before's RootSteps
    consumed by the training backward, whose passes grow with the chain) ends as exact
    mode does: time, heap, peak, allocation calls, page faults, allocator state. On
    glibc's arena it runs exactly."""
    sim = _summed_loss_run(profile, steps, True)
    exact = _summed_loss_run(profile, steps, False)
    assert _ends(sim) == _ends(exact)
    assert sim.allocator.state() == exact.allocator.state()
    if profile == "m2max-macos" and steps >= 60:
        assert sim.chain_applied > steps // 3
    if profile == "linux-x86_64":
        assert sim.chain_applied == 0


def test_the_summed_loss_on_glibcs_arena_is_probed_three_times(monkeypatch):
    """On glibc's arena every probe of the summed validation loss refuses for reasons the
    next steps share (its trace lost at the free of the step before's RootSteps, a
    backward, the chain's new entries): the first round ends after three such probes
    and no later round is probed while every step still runs a backward and grows the
    entries (it made 58 probes in 400 steps before, all refused). Exact mode's end."""
    from sim.engine.fastforward import repeat as ffrepeat
    probed = []
    probe = ffrepeat._probe

    def counted(sim, *args, **kwargs):
        probed.append(sim.loop_index)
        return probe(sim, *args, **kwargs)
    monkeypatch.setattr(ffrepeat, "_probe", counted)
    sim = _summed_loss_run("linux-x86_64", 200, True)
    assert probed == [0, 1, 2]
    exact = _summed_loss_run("linux-x86_64", 200, False)
    assert _ends(sim) == _ends(exact)
    assert sim.allocator.state() == exact.allocator.state()


@pytest.mark.parametrize("profile", PROFILES)
def test_a_backward_through_the_summed_loss_after_fast_forward(profile):
    """After the loop, one more step and a backward through the running total: every
    member of the chain is read, walked and freed (the fast-forwarded steps' too, the
    held parameters' nodes swapped to the newest ids), as in exact mode."""
    sim = _summed_loss_run(profile, 120, True, then_backward=True)
    exact = _summed_loss_run(profile, 120, False, then_backward=True)
    if profile == "m2max-macos":
        assert sim.chain_applied > 60
    assert _ends(sim) == _ends(exact)
    assert sim.allocator.state() == exact.allocator.state()


@pytest.mark.parametrize("then_backward", (False, True))
def test_the_summed_loss_batch_leaves_the_l2_as_exact_mode(then_backward):
    """A batch that builds the chain's members advances the L2 model's LRU over all its
    iterations at once (keptchain.advance_l2), then gives each new kept storage its
    chunk: the LRU is exact mode's chunk by chunk (sizes, order, the node whose actions
    keep each), as are its free lists, after the loop and after a backward through the
    running total that reads every member."""
    sim = _summed_loss_run("m2max-macos", 130, True, then_backward)
    exact = _summed_loss_run("m2max-macos", 130, False, then_backward)
    assert sim.chain_applied > 100
    lru = _lru(sim)
    assert lru == _lru(exact)
    # kept by the members' actions until the backward consumes them
    kept = sum(1 for _, node in lru[0] if node is not None)
    assert kept == 0 if then_backward else kept > 100
    assert _ends(sim) == _ends(exact)


@pytest.mark.parametrize("policy", ["burn-0.20-pre.1", "dedup-sweep", "periodic-sweep",
                                    "drop-release"])
def test_summed_validation_loss_under_other_policies(policy):
    """The chain's sweeps, passes and held parameters under policies that sweep otherwise
    or keep state (drop-release indexes node ids: it runs exactly): exact mode's rows."""
    sets = {"steps": 80}
    keep = []
    rows = run_cell(load_workload(str(LOOPS / "vloss.py")), "default", policy,
                    profile="m2max-macos", sets=sets, keep=keep)
    exact_rows = run_cell(load_workload(str(LOOPS / "vloss.py")), "default", policy,
                          profile="m2max-macos", sets=sets, fast_forward=False)
    if policy != "drop-release":
        assert keep[0].chain_applied > 20
    assert rows == exact_rows


@pytest.mark.parametrize("steps", (60, 250))
def test_a_batch_grows_the_chains_tables_as_exact_mode(steps):
    """The summed validation loss on m2max-macos: batches go on past the iterations in
    which the chain's steps, actions, key-set and statuses tables grow (a new block, the
    old one freed, at the skipped iteration's start: its other events are counted by size
    and the iterations after it gain more than the old block), so fewer iterations run
    exactly; time, heap, peak, allocation calls, page faults and allocator state are exact
    mode's."""
    sim = _summed_loss_run("m2max-macos", steps, True)
    exact = _summed_loss_run("m2max-macos", steps, False)
    assert sim.chain_grown > 0
    assert _ends(sim) == _ends(exact)
    assert sim.allocator.state() == exact.allocator.state()


def _settled_index(sim):
    """The chain's graph's index of settled nodes (:mod:`sim.burn.graph.settled`) and
    ``nodes`` table: ids, tops, outside ids in order, filtered, capacity."""
    locator = sim.client.locator
    graph = max((g for g in locator.live if getattr(g, "server", None) is not None),
                key=lambda g: len(g.server.memory_management.nodes))
    memory = graph.server.memory_management
    settled = memory.settled
    return (sorted(settled.ids), sorted(settled.tops), list(settled.outside),
            sorted(settled.filtered), memory.nodes_table.cap)


@pytest.mark.parametrize("steps", (60, 250))
def test_a_batch_grows_the_nodes_table_and_settles_its_members(steps):
    """The summed validation loss on m2max-macos: a batch grows the chain's ``nodes``
    table where exact mode does (its sweeps read the size exact mode's read: the table's
    highest count before the iteration's sweep decides which), and leaves the graph's
    settled nodes as the skipped backwards would (every member but the newest step's), so
    one batch runs from the probes to the loop's end; the sweeps' and passes' time is
    exact mode's to the last bit."""
    sim = _summed_loss_run("m2max-macos", steps, True)
    exact = _summed_loss_run("m2max-macos", steps, False)
    assert sim.chain_applied >= steps - 10
    assert _ends(sim) == _ends(exact)
    assert sim.allocator.state() == exact.allocator.state()
    assert repr(sim.timing.cleanup_ns) == repr(exact.timing.cleanup_ns)
    assert repr(sim.timing.bookkeeping_ns) == repr(exact.timing.bookkeeping_ns)
    assert _settled_index(sim) == _settled_index(exact)


def _maps(sim):
    """The locator's two BTreeMaps: keys in order, nodes, length and node shapes."""
    def shape(node):
        return None if node is None else (len(node.keys), None if node.edges is None
                                          else tuple(shape(c) for c in node.edges))
    locator = sim.client.locator
    return [(t.keys_in_order(), t.leaves, t.internals, t.length, shape(t.root))
            for t in (locator.graphs_tree, locator.keys_tree)]


@pytest.mark.parametrize("then_backward", (False, True))
def test_the_summed_loss_batch_churns_the_keys_map_on_its_keys(monkeypatch, then_backward):
    """The summed validation loss on m2max-macos: the locator's ``keys`` map is one root
    leaf that each step's inserts and removals never overflow, so the batch takes them on
    its keys alone (churn_root_leaf, one a skipped step) and replays only the ``graphs``
    map's operations; both maps (keys, nodes, shapes), the heap, peak, allocation calls,
    time and allocator state end as exact mode's, before and after a backward through
    the total."""
    from sim.burn.runtime import graph
    from sim.platform.btree import BTreeNodes
    churned = []

    class Counted(BTreeNodes):
        """The locator's maps, counting the batch's churns (a subclass: the compiled
        class's methods cannot be replaced)."""

        def churn_root_leaf(self, changes, start=0):
            done = super().churn_root_leaf(changes, start)
            churned.append(done)
            return done
    monkeypatch.setattr(graph, "BTreeNodes", Counted)
    sim = _summed_loss_run("m2max-macos", 130, True, then_backward)
    assert sum(churned) == sim.chain_applied > 100
    exact = _summed_loss_run("m2max-macos", 130, False, then_backward)
    assert _maps(sim) == _maps(exact)
    assert _ends(sim) == _ends(exact)
    assert sim.allocator.state() == exact.allocator.state()
