"""Fast-forward of a policy's own state (sim.engine.fastforward.seams): no policy defines a
fast-forward hook; the engine records what an iteration's seams do to the policy's fields,
replays it for the skipped iterations, and finds where the policy would act by running
the seams dry. Each test compares fast-forward with exact mode."""

from pathlib import Path

import pytest

from sim.burn.graph.runs import NodeRun
from sim.engine.runner import run_cell

pytestmark = pytest.mark.usefixtures("fresh_policy_registry")

EXAMPLE = Path(__file__).resolve().parents[2] / "experiments" / "policies" / "sweep_every_4.py"

#: a counter on the policy's client, reset where it acts (periodic-sweep's patch, every
#: 1,000 registrations): the dry runs find the registration that sweeps
EVERY_1000 = '''
from sim.burn.runtime.graph import GraphMutexClient
from sim.policies import Policy


class CountingClient(GraphMutexClient):
    def __init__(self, sim):
        super().__init__(sim)
        self.since = 0

    def register(self, rc, step):
        super().register(rc, step)
        self.since += 1
        if self.since >= 1000:
            self.since = 0
            self.sim.policy.cleanup_orphaned_entries(self)


class SweepEvery1000(Policy):
    name = "sweep-every-1000"
    GraphMutexClient = CountingClient
'''

#: a counter on the policy object that never resets, and a list of the ids it saw: the
#: policy acts on the counter's value (a threshold), and the list grows by the ids of each
#: iteration's untracked nodes
THRESHOLD = '''
from sim.policies import Policy


class LateSweep(Policy):
    name = "late-sweep"

    def __init__(self, sim):
        super().__init__(sim)
        self.untracked = 0
        self.seen = []

    def register_untracked(self, client, rc, step, device):
        client.register(rc, step)
        self.untracked += 1
        self.seen.append(rc.id)
        if self.untracked == 2345:
            client.cleanup_orphaned_entries()
'''


#: a counter that never resets, acted on every 500th time (a period far longer than the
#: iterations the dry runs would try one by one: solved from the traced ``%``)
MODULO = '''
from sim.policies import Policy


class Every500th(Policy):
    name = "every-500th"

    def __init__(self, sim):
        super().__init__(sim)
        self.untracked = 0

    def register_untracked(self, client, rc, step, device):
        client.register(rc, step)
        self.untracked += 1
        if self.untracked % 500 == 0:
            client.cleanup_orphaned_entries()
'''


def _both(workload, variant, policy, sets, profile="m2max-macos"):
    kept_ff, kept_exact = [], []
    ff = run_cell(workload, variant, policy, profile=profile, sets=sets, keep=kept_ff)
    exact = run_cell(workload, variant, policy, profile=profile, sets=sets,
                     fast_forward=False, keep=kept_exact)
    return ff, exact, kept_ff[0], kept_exact[0]


@pytest.mark.parametrize("profile", ["m2max-macos", "linux-x86_64"])
def test_a_client_counter_sweeps_where_exact_mode_does(tmp_path, profile):
    path = tmp_path / "every_1000.py"
    path.write_text(EVERY_1000)
    sets = {"iterations": 1250}
    ff, exact, fast, slow = _both("adleak-rss", "flex.autodiff", str(path), sets, profile)
    assert ff == exact
    assert fast.client.since == slow.client.since
    if profile == "m2max-macos":
        assert fast.ff_applied["graphs"] > 4000


def test_a_threshold_on_a_counter_that_never_resets(tmp_path):
    path = tmp_path / "late.py"
    path.write_text(THRESHOLD)
    sets = {"iterations": 1250}
    ff, exact, fast, slow = _both("adleak-rss", "flex.autodiff", str(path), sets)
    assert ff == exact
    assert fast.policy.untracked == slow.policy.untracked == 5000
    # the ids of the skipped iterations live in the runs fast-forward built
    ids = [i for item in fast.policy.seen
           for i in (item.ids if isinstance(item, NodeRun) else (item,))]
    assert ids == slow.policy.seen
    assert fast.ff_applied["graphs"] > 4000


def test_a_period_longer_than_the_dry_runs_tried_one_by_one(tmp_path):
    path = tmp_path / "every_500th.py"
    path.write_text(MODULO)
    sets = {"iterations": 1250}
    ff, exact, fast, slow = _both("adleak-rss", "flex.autodiff", str(path), sets)
    assert ff == exact
    assert fast.ff_applied["graphs"] > 4000


@pytest.mark.parametrize("profile", ["m2max-macos", "linux-x86_64"])
def test_the_example_policy_sweeps_every_fourth_backward_as_exact_mode(profile):
    sets = {"steps": 120, "report_at": "1,50,120"}
    ff, exact, fast, slow = _both("p10-ema", "detach", str(EXAMPLE), sets, profile)
    assert ff == exact
    assert fast.policy.backwards == slow.policy.backwards == 120


def test_periodic_sweep_counts_as_exact_mode():
    sets = {"iterations": 35_000}
    ff, exact, fast, slow = _both("adleak-rss", "flex.autodiff", "periodic-sweep", sets)
    assert ff == exact
    assert fast.client.registered_since_sweep == slow.client.registered_since_sweep
    assert fast.ff_applied["graphs"] > 139_000


def test_burn_0_20_keeps_its_untracked_ids_as_runs():
    sets = {"iterations": 5000}
    ff, exact, fast, slow = _both("adleak-rss", "flex.autodiff", "burn-0.20-pre.1", sets)
    assert ff == exact
    assert fast.policy.ids == slow.policy.ids
    assert fast.policy.table.cap == slow.policy.table.cap
    assert any(isinstance(item, NodeRun) for item in fast.policy.untracked_nodes)


@pytest.mark.parametrize("workload", ["p10-ema", "ema-balanced"])
def test_drop_release_indexes_the_chain_it_did_not_register(workload):
    """A chain's members are built in closed form (no registration passes through the
    client): the client's children counts and its index of nodes by id are those of exact
    mode, replayed from the probed iteration's changes with the skipped iterations' ids."""
    sets = ({"steps": 200, "report_at": "1,100,200"} if workload == "p10-ema"
            else {"steps": 200, "report_every": 100})
    ff, exact, fast, slow = _both(workload, "detach", "drop-release", sets)
    assert ff == exact
    assert fast.chain_applied > 80
    assert fast.client.children == slow.client.children
    assert sorted(fast.client.rcs) == sorted(slow.client.rcs)
    assert all(rc.id == node_id for node_id, rc in fast.client.rcs.items())
