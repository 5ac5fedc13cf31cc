"""Fast-forward gives the same observations as exact mode, and scales."""

import pytest

from sim.engine import Limits
from sim.policies import POLICIES
from sim.runner import run_cell

SMALL = {
    "adleak-rss": {"iterations": 3000},
    "adleak-count": {"iterations": 3000},
    "pit-infer": {"forwards": 10, "report_every": 5},
    "p10-ema": {"steps": 30, "report_at": "1,10,30"},
}

CASES = [(w, v) for w, vs in {
    "adleak-rss": ("flex", "flex.autodiff", "a-tracked", "autodiff-backward-each-round",
                   "without_autodiff"),
    "adleak-count": ("flex", "flex.autodiff", "a-tracked"),
    "pit-infer": ("A-model-and-input-autodiff", "B-valid-model-input-autodiff"),
    "p10-ema": ("detach", "ema-only"),
}.items() for v in vs]


@pytest.mark.parametrize("workload,variant", CASES)
def test_fast_forward_equals_exact_on_seed_workloads(workload, variant):
    sets = SMALL[workload]
    fast = run_cell(workload, variant, sets=sets)
    exact = run_cell(workload, variant, sets=sets, fast_forward=False)
    assert fast == exact


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("variant", ["flex.autodiff", "a-tracked", "autodiff-backward-each-round"])
def test_fast_forward_equals_exact_under_every_policy(policy, variant):
    sets = {"iterations": 2500, "rounds": 2}
    assert run_cell("adleak-rss", variant, policy, sets=sets) == \
        run_cell("adleak-rss", variant, policy, sets=sets, fast_forward=False)


def test_a_billion_iterations_in_closed_form():
    rows = run_cell("adleak-rss", "flex.autodiff", sets={"iterations": 250_000_000},
                    limits=Limits(max_ops=2 * 10 ** 9), observables=True)
    rss = [r["value"] for r in rows if r["metric"] == "rss"]
    steps = [b - a for a, b in zip(rss[1:], rss[2:])]
    # linear growth: every round adds the same bytes (to the printed precision)
    assert max(steps) - min(steps) < 0.01 * steps[0]
    entries = [r["value"] for r in rows if r["metric"] == "locator_entries"]
    assert entries[-1] == 10 ** 9
