"""drop-release hands on a removed node's parents as the patch does: only its release path
makes a childless parent a leaf (and releases it if no handle holds it); a backward's
consumption and the sweeps lower the children counts only."""

import pytest

from sim.burn.runtime.memory_management import GraphMemoryManagement
from sim.engine.runner import run_cell


def _leaves_at_the_backwards_walk(monkeypatch, policy):
    """alloc-trace ``unrelated-backward-first`` (``x`` requires grad, ``(x * 2).sum()``,
    backward, x held throughout): the graph's nodes and leaves when the backward's
    ``free_unavailable_nodes`` starts, after the tape consumed ``x * 2``."""
    seen = []
    real = GraphMemoryManagement.free_unavailable_nodes

    def recording(self, *args, **kwargs):
        seen.append((sorted(self.nodes), sorted(self.leaves)))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(GraphMemoryManagement, "free_unavailable_nodes", recording)
    run_cell("alloc-trace", "unrelated-backward-first", policy, "linux-x86_64")
    return seen


def test_a_consumed_child_leaves_its_held_parent_as_it_was(monkeypatch):
    (nodes, leaves), = _leaves_at_the_backwards_walk(monkeypatch, "drop-release")
    x, loss = nodes              # x * 2 was consumed
    assert leaves == [loss]      # x is no leaf again: the walk starts from the loss only
    assert (nodes, leaves) == _leaves_at_the_backwards_walk(monkeypatch, "burn-0.22.1")[0]


@pytest.mark.parametrize("variant, allocs, frees", [("unrelated-backward-first", 92, 87),
                                                    ("unrelated-backward-second", 87, 87)])
def test_an_unrelated_backward_allocates_what_the_patched_burn_did(variant, allocs, frees):
    """alloc-trace on burn-autodiff 0.22.1 with the patch: the allocation and free calls
    of experiments/measured/linux-x86_64/patched/drop-release/alloc-trace.csv (90/85 and
    85/85 unpatched); 5 more of each before the policy followed the patch."""
    rows = run_cell("alloc-trace", variant, "drop-release", "linux-x86_64")
    got = {r["metric"]: r["value"] for r in rows if r["metric"] in ("alloc_calls", "free_calls")}
    assert got == {"alloc_calls": allocs, "free_calls": frees}


@pytest.mark.parametrize("policy, kept", [("burn-0.22.1", 1128), ("drop-release", 1176)])
def test_the_children_map_makes_each_graph_one_map_larger(policy, kept):
    """The patch's ``children`` map is a field of GraphMemoryManagement, so of the graph's
    ``Arc<Graph>`` block (320 B against 272 in the patched run's trace): alloc-trace
    ``require-grad`` keeps one graph, 48 B more on the patched burn (kept_bytes of
    experiments/measured/linux-x86_64/patched/{burn-0.22.1,drop-release}/alloc-trace.csv)."""
    rows = run_cell("alloc-trace", "require-grad", policy, "linux-x86_64")
    got = {r["value"] for r in rows if r["metric"] == "kept_bytes" and r["x"] == 1}
    assert got == {kept}


@pytest.mark.parametrize("policy, sizes", [
    ("burn-0.22.1", {"GraphMemoryManagement": 144, "AutodiffServer": 240, "Graph": 256,
                     "ArcInner<Graph>": 272}),
    ("drop-release", {"GraphMemoryManagement": 192, "AutodiffServer": 288, "Graph": 304,
                      "ArcInner<Graph>": 320}),
    ("drop-release+dedup-sweep", {"GraphMemoryManagement": 192, "AutodiffServer": 288,
                                  "Graph": 304, "ArcInner<Graph>": 320}),
])
def test_sizeof_predicts_the_structs_of_the_policy(policy, sizes):
    """The sizeof workload sizes the structs from the profile's layout as the policy's
    mirror classes lay it out (``GraphMemoryManagement.layout_of``): the patch's
    ``children`` map makes GraphMemoryManagement and every struct that holds it one std
    map (48 B) larger, as the sizeof probe built against the patch measures them
    (experiments/measured/linux-x86_64/patched/drop-release/sizeof.csv)."""
    got = {}
    for variant in sizes:
        rows = run_cell("sizeof", variant, policy, "amd-epyc-zen4", observables=False)
        got[variant] = next(r["value"] for r in rows if r["metric"] == "size_of")
    assert got == sizes
