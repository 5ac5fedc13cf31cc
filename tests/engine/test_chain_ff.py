"""Fast-forward of loops that grow a chain (sim.engine.fastforward.chainrun): an EMA kept across training
steps, a running value updated from a tracked tensor. Applied in closed form, they give
the CSV exact mode gives, row for row, under every policy that allows it."""

import pytest

import sim.engine.fastforward.chainrun as chainrun
from sim.engine.simulation import Simulation
from sim.engine.profile import load_profile
from sim.engine.runner import run_cell
from sim.burn.tensor import Tensor

# several report intervals, each one a loop of its own; the chain's tables resize at
# 14, 28, 56, ... nodes, 112, 224, 448, 896 of them inside these 300 steps
STEPS = {"steps": 300, "report_at": "1,50,100,200,300"}


def _counted(monkeypatch):
    applied = []
    original = chainrun.apply_chain

    def apply(sim, effect, count, *replay):
        done = original(sim, effect, count, *replay)
        applied.append(done)
        return done
    monkeypatch.setattr(chainrun, "apply_chain", apply)
    import sim.engine.fastforward.repeat as ff
    monkeypatch.setattr(ff, "apply_chain", apply)
    return applied


@pytest.mark.parametrize("policy", ["burn-0.22.1", "dedup-sweep", "periodic-sweep",
                                    "skip-untracked", "burn-0.20-pre.1"])
def test_the_ema_chain_in_closed_form_equals_exact_mode(policy, monkeypatch):
    applied = _counted(monkeypatch)
    fast = run_cell("p10-ema", "detach", policy, sets=STEPS)
    assert sum(applied) > 200          # most steps were applied in closed form
    exact = run_cell("p10-ema", "detach", policy, sets=STEPS, fast_forward=False)
    assert fast == exact


@pytest.mark.parametrize("variant,sets", [
    ("ema-only", {"steps": 2000}),
    ("detach", {**STEPS, "optimizer": "adam"}),
])
def test_other_chains_in_closed_form_equal_exact_mode(variant, sets, monkeypatch):
    applied = _counted(monkeypatch)
    fast = run_cell("p10-ema", variant, sets=sets)
    assert sum(applied) > 0
    assert fast == run_cell("p10-ema", variant, sets=sets, fast_forward=False)


def test_the_arena_runs_the_chain_exactly(monkeypatch):
    """On glibc's arena every chunk's place depends on every event: no closed form."""
    applied = _counted(monkeypatch)
    sets = {"steps": 40, "report_at": "40"}
    fast = run_cell("p10-ema", "detach", profile="linux-x86_64", sets=sets)
    assert sum(applied) == 0
    assert fast == run_cell("p10-ema", "detach", profile="linux-x86_64", sets=sets,
                            fast_forward=False)


def _accumulator(sim, inner=1):
    """``acc = acc * 0.5 + c * 0.5`` each iteration (``c`` a leaf that requires grad, from
    before the loop), after ``inner`` unrelated backwards (a loop of their own if more
    than one) whose sweeps scan the chain. Returns ``(body, state, p)``: the iteration,
    its state (``acc``, ``c``) and the unrelated leaf."""
    dev = sim.device("flex").autodiff()
    c = Tensor.random((4, 4), dev).require_grad()
    p = Tensor.random((4, 4), dev).require_grad()
    state = {"acc": c * 1.0, "c": c}

    def backward():
        (p.clone() * 2.0).sum().backward()

    def body():
        if inner == 1:
            backward()
        else:
            sim.repeat(inner, backward)
        state["acc"] = (state["acc"].move() * 0.5).move() + (c.clone().move() * 0.5).move()
    return body, state, p


def _running_value(fast_forward, steps=400, policy="burn-0.22.1"):
    """The accumulator over ``steps`` iterations in 4 loops, then dropped, then one more
    backward's sweep (under drop-release the drop frees the chain)."""
    sim = Simulation(load_profile("m2max-macos"), policy=policy, fast_forward=fast_forward)

    def program(sim):
        body, state, p = _accumulator(sim)
        for _ in range(4):
            sim.repeat(steps // 4, body)
            # with the observables: heap bytes and blocks, graphs, nodes, entries, time
            yield sim.sample(sim.registered, "step", rss=sim.rss_bytes() / 1e6)
        del state["acc"]
        yield sim.sample(sim.registered, "step", phase="dropped", rss=sim.rss_bytes() / 1e6)
        (p.clone() * 2.0).sum().backward()
        yield sim.sample(sim.registered, "step", phase="swept", rss=sim.rss_bytes() / 1e6)
    rows = sim.run(lambda s: program(s), {})
    return rows, sim


@pytest.mark.parametrize("policy", ["burn-0.22.1", "drop-release", "dedup-sweep"])
def test_a_running_value_with_an_outside_parent(policy, monkeypatch):
    """Also what happens to the chain afterwards: the value dropped, then swept."""
    applied = _counted(monkeypatch)
    fast, sim = _running_value(True, policy=policy)
    assert sum(applied) > 250 and sim.chain_applied == sum(applied)
    exact, _ = _running_value(False, policy=policy)
    assert fast == exact
    # the sweep scans the chain once per entry: the time per step grows; dedup-sweep's one
    # visit per graph still scans it once (maybe_useful up to the first live handle: burn
    # keeps no count of live handles), so its time per step grows too, linearly
    t = [r["value"] for r in fast if r["metric"] == "sim_time_ms" and not r["phase"]]
    assert t[3] - t[2] > 1.01 * (t[1] - t[0])
    # ``c`` is alive and in the chain's graph: burn's sweep keeps the whole graph, while
    # drop-release frees the chain from its children counts when the value drops
    nodes = [r["value"] for r in fast if r["metric"] == "live_nodes"]
    assert nodes[3] > 1000
    assert nodes[-1] == (1 if policy == "drop-release" else nodes[3])


def test_the_live_end_moves_with_the_tensor():
    """After a closed-form batch the kept tensor holds the chain's newest node (its id is
    the largest of the graph, its order the longest chain), which the next op extends."""
    sim = Simulation(load_profile("m2max-macos"))
    body, state, _ = _accumulator(sim)
    gc_off = __import__("gc")
    gc_off.disable()
    try:
        sim.repeat(200, body)
    finally:
        gc_off.enable()
    assert sim.chain_applied > 100
    acc = state["acc"]
    graph = sim.client.locator.graphs[acc.node.id]
    memory = graph.server.memory_management
    assert acc.node.id == max(memory.nodes)
    assert acc.node.order == max(s.node.order for s in graph.server.steps.values())
    assert memory.leaves == {acc.node.id} and acc.rc.strong == 2
    assert graph.server.steps[acc.node.id].node is acc.node
    # every step's parent nodes are the nodes its node names
    for node_id, step in graph.server.steps.items():
        ids = [pid for pid, _ in step.node.parents]
        assert [n.id for n in step.parent_nodes if n is not None] == ids


def _nested(fast_forward):
    """A chain loop whose body holds a loop of its own (five backwards per update)."""
    sim = Simulation(load_profile("m2max-macos"), fast_forward=fast_forward)

    def program(sim):
        body, _, _ = _accumulator(sim, inner=5)
        sim.repeat(150, body)
        yield sim.sample(sim.registered, "step", rss=sim.rss_bytes() / 1e6)
    return sim.run(lambda s: program(s), {})


def test_a_chain_loop_around_a_loop():
    assert _nested(True) == _nested(False)


@pytest.mark.parametrize("policy", ["burn-0.22.1", "drop-release", "dedup-sweep",
                                    "periodic-sweep", "burn-0.20-pre.1"])
def test_a_chain_that_keeps_storages_in_closed_form_equals_exact_mode(policy, monkeypatch):
    """ema-balanced ``detach``: Balanced checkpointing keeps each step's detached weight
    (1 MiB, a LARGE block) in the chain's actions, with a retro-forward per member; the
    iteration's heap events are replayed and its members built on them."""
    applied = _counted(monkeypatch)
    sets = {"steps": 300, "report_every": 100}
    fast = run_cell("ema-balanced", "detach", policy, sets=sets)
    # drop-release: the graph's children table doubles as the chain grows, and each growth
    # is an iteration the closed form does not apply
    assert sum(applied) > (150 if policy == "drop-release" else 200)
    assert fast == run_cell("ema-balanced", "detach", policy, sets=sets, fast_forward=False)


@pytest.mark.parametrize("policy", ["burn-0.22.1", "dedup-sweep"])
def test_a_chain_of_small_kept_storages_filling_the_l2(policy, monkeypatch):
    """16-KiB weights: each step's detached weight is a small block the module holds until
    the next SGD step, and its chunk joins the L2 model's LRU (16 MiB: a thousand steps to
    fill), touched once more by the next step's forward."""
    applied = _counted(monkeypatch)
    sets = {"steps": 400, "report_every": 100, "features": 64}
    fast = run_cell("ema-balanced", "detach", policy, sets=sets)
    assert sum(applied) > 250
    assert fast == run_cell("ema-balanced", "detach", policy, sets=sets, fast_forward=False)


def _kept(fast_forward):
    """Every storage the chain's actions keep after an ema-balanced run: the member holding
    it, the node it saves, its holders, whether its L2 chunk is in the LRU, its bytes and
    its block (segment, slices)."""
    keep = []
    rows = run_cell("ema-balanced", "detach", sets={"steps": 120, "report_every": 120},
                    keep=keep, fast_forward=fast_forward)
    sim = keep[0]
    graph = max((g for g in sim.client.locator.live if hasattr(g, "server")),
                key=lambda g: g.entries)
    out = []
    for node_id, step in sorted(graph.server.steps.items()):
        if step.actions is not None:
            for saved, buf, _ in step.actions.explicit + step.actions.backup:
                if buf is not None:
                    out.append((node_id, saved, buf.holders,
                                buf.chunk is not None and buf.chunk in buf.chunk.cache.lru,
                                buf._token[0], buf._token[1]))
    return rows, out, sim


def test_the_kept_storages_sit_where_exact_mode_puts_them():
    """A warm-up longer than the probes (the L2 model's LRU filling with kept weights)
    is probed again later: the one loop is fast-forwarded, and every kept storage has
    exact mode's block, holders and L2 residency."""
    rows, kept, sim = _kept(True)
    assert sim.chain_applied > 30
    exact_rows, exact_kept, _ = _kept(False)
    assert rows == exact_rows
    assert len(kept) == 121 and kept == exact_kept
    assert sum(resident for _, _, _, resident, _, _ in kept) >= 8


@pytest.mark.parametrize("policy", ["burn-0.22.1", "dedup-sweep", "periodic-sweep",
                                    "burn-0.20-pre.1"])
def test_nodes_kept_off_older_nodes_in_closed_form_equal_exact_mode(policy, monkeypatch):
    """train-validate ``autodiff``: each validation batch and generated sample adds eight
    nodes to the parameters' graph, off the parameters' nodes only, whose actions keep
    the activations (new small blocks, their L2 chunks joining the LRU every iteration)
    and the input's and a weight's storages (older: one more holder each time)."""
    applied = _counted(monkeypatch)
    fast = run_cell("train-validate", "autodiff", policy)
    assert sum(applied) > 300
    assert fast == run_cell("train-validate", "autodiff", policy, fast_forward=False)


def _after_generation(fast_forward):
    """The L2 model's LRU (chunk sizes in order, and which storage of the parameters'
    graph holds each chunk), its free lists and every storage's holders after
    train-validate ``autodiff``'s generation."""
    keep = []
    run_cell("train-validate", "autodiff", sets={"steps": 50, "samples": 200},
             keep=keep, fast_forward=fast_forward)
    sim = keep[0]
    cache = sim._backends["flex"].cache
    owner = {}
    for graph in sim.client.locator.live:
        if not hasattr(graph, "server"):
            continue
        for node_id, step in sorted(graph.server.steps.items()):
            if step.actions is not None:
                for k, (_, buf, _) in enumerate(step.actions.explicit + step.actions.backup):
                    if buf is not None:
                        owner.setdefault(id(buf.chunk), (node_id, k, buf.holders))
    lru = [(c.nbytes, owner.get(id(c))) for c in cache.lru]
    free = {n: [owner.get(id(c)) for c in v] for n, v in cache.free.items() if v}
    return lru, free, cache.resident, sim


def test_the_lru_grows_as_in_exact_mode():
    lru, free, resident, sim = _after_generation(True)
    assert sim.chain_applied > 100
    assert (lru, free, resident) == _after_generation(False)[:3]
    assert sum(1 for _, o in lru if o is not None) > 200     # the kept activations' chunks


@pytest.mark.parametrize("policy,checkpointing", [
    ("burn-0.22.1", "disabled"), ("dedup-sweep", "disabled")])
def test_a_chain_counts_the_allocation_calls_exact_mode_makes(policy, checkpointing,
                                                              monkeypatch):
    """The heap's count of allocation calls (a workload's ``alloc_calls_delta``): the
    closed form built the members' blocks and replayed the BTreeMaps' operations, but the
    iteration's transients (operands, outputs, shapes) and its orphan sweeps' clones of
    the map went uncounted (an EMA with a backward per step counted 2,984 calls in 40
    steps against exact mode's 5,536). Found by tests/engine/test_ff_programs.py."""
    applied = _counted(monkeypatch)

    def run(fast_forward):
        sim = Simulation(load_profile("m2max-macos"), policy=policy, fast_forward=fast_forward)
        dev = sim.device("flex").autodiff(checkpointing)
        a = Tensor.from_floats([1.0] * 16, dev).require_grad()
        b = Tensor.from_floats([2.0] * 16, dev)
        state = {"ema": b.clone().detach()}

        def step():
            (a.clone() * b.clone()).sum().backward()
            state["ema"] = state["ema"] * 0.9 + a.clone().detach() * 0.1
        sim.repeat(200, step)
        out = (sim.heap.allocs, sim.heap.live_bytes, sim.heap.live_blocks, sim.work_ps)
        sim.heap.close()
        return out

    fast = run(True)
    assert checkpointing != "disabled" or sum(applied) > 150
    assert fast == run(False)


def test_a_replayed_chain_counts_its_sweeps_clones_of_the_map(monkeypatch):
    """ema-balanced ``detach`` (the iteration's events replayed, the sweeps' clones of the
    map left out of them as transients that grow): 36,677 allocation calls in 120 steps
    with fast-forward against exact mode's 39,740, the clones' nodes uncounted."""
    applied = _counted(monkeypatch)
    sets = {"steps": 120, "report_every": 60}
    counts = []
    for fast_forward in (True, False):
        keep = []
        run_cell("ema-balanced", "detach", sets=sets, keep=keep, fast_forward=fast_forward)
        counts.append(keep[0].heap.allocs)
    assert sum(applied) > 40
    assert counts[0] == counts[1]
