"""A sweep gives a cell the rows of the cell of another policy only where the run proves
the policy could not have changed them (sim.policies.trace): the rows are those
simulating it gives, and a policy whose seam the run called is simulated."""

import json

import pytest

from clirun import run_cli
from sim.policies import POLICIES, Policy
from sim.policies.trace import NAME_READ, same_behaviour, traced
from sim.engine.runner import run_cell
from sim.commands.sweep import sweep

BASE = POLICIES["burn-0.22.1"]


class OnlyDetach(Policy):
    name = "only-detach"

    def detach(self, tensor):
        return Policy.detach(self, tensor)


class OwnInit(Policy):
    name = "own-init"

    def __init__(self, sim):
        super().__init__(sim)


class Flag(Policy):
    name = "flag"
    moves_operands = False


def test_identity_of_what_the_run_read_decides():
    assert same_behaviour({"after_backward", "on_register"}, BASE, OnlyDetach)
    assert not same_behaviour({"detach"}, BASE, OnlyDetach)      # its seam was called
    assert not same_behaviour(set(), BASE, OwnInit)              # another constructor
    assert not same_behaviour({"moves_operands"}, BASE, Flag)    # a flag read differs
    assert same_behaviour({"in_place"}, BASE, Flag)
    assert not same_behaviour({NAME_READ}, BASE, OnlyDetach)     # the run named its policy
    assert same_behaviour({"detach", NAME_READ}, BASE, BASE)


def test_a_traced_policy_records_each_name_once_and_behaves_as_its_class():
    reads = set()
    cls = traced(OnlyDetach, reads)
    policy = cls(object())
    assert reads == {"__init__"} and isinstance(policy, OnlyDetach)
    first = policy.in_place
    assert policy.in_place == first and "in_place" in reads
    assert policy.in_place("add") == OnlyDetach(None).in_place("add")
    assert policy.__dict__["in_place"] is not None          # later reads skip the record
    assert getattr(policy, "not_a_seam", None) is None and "not_a_seam" in reads


def test_a_run_reads_the_seams_it_meets():
    reads = set()
    run_cell("adleak-rss", "flex", sets={"iterations": "500"}, policy_reads=reads)
    assert "after_backward" not in reads and "detach" not in reads   # no backward, no detach
    assert "name" not in reads and NAME_READ not in reads            # the label is not a read
    reads = set()
    run_cell("p10-ema", "detach", sets={"steps": "5", "report_at": "5"}, policy_reads=reads)
    assert {"after_backward", "detach", "sgd_update", "framework"} <= reads


POLICIES_SMALL = ("burn-0.22.1", "skip-untracked", "detach-constant", "dedup-sweep",
                  "periodic-sweep")
SMALL = dict(workloads=("adleak-rss", "train-validate", "pit-infer"),
             policies=POLICIES_SMALL,
             sets=("iterations=2000", "steps=20", "validate_every=10", "report_every=10",
                   "samples=20", "forwards=20"),
             progress=False)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    shared = tmp_path_factory.mktemp("reuse")
    simulated = tmp_path_factory.mktemp("no-reuse")
    return (shared, sweep(out=shared, jobs=2, **SMALL),
            simulated, sweep(out=simulated, jobs=1, reuse=False, **SMALL))


def test_reused_cells_have_the_rows_simulation_gives(both):
    shared, info, simulated, plain = both
    assert plain["reused"] == {} and plain["computed"] == plain["cells"]
    assert len(info["reused"]) >= 10
    assert info["computed"] + len(info["reused"]) == info["cells"] == plain["cells"]
    for name in ("predicted.csv", "errors.csv"):
        assert (shared / name).read_bytes() == (simulated / name).read_bytes(), name


def test_only_policies_that_share_every_read_are_reused(both):
    _, info, _, _ = both
    run = json.loads((both[0] / "run.json").read_text())
    assert run["reused"] == info["reused"]
    for cell, source in info["reused"].items():
        workload, variant, policy = cell.split(" ")[0].split("/")
        assert source.split(" ")[0] == f"{workload}/{variant}/burn-0.22.1"
        # periodic-sweep has its own constructor: always simulated
        assert policy in ("skip-untracked", "detach-constant", "dedup-sweep")
    # the backward round calls after_backward: dedup-sweep is simulated there
    assert not any(c.startswith("adleak-rss/autodiff-backward-each-round/dedup-sweep")
                   for c in info["reused"])


def test_a_workload_that_reads_the_policy_name_is_simulated(tmp_path):
    workload = tmp_path / "named.py"
    workload.write_text(
        "PARAMS = {}\n\n\n"
        "def run(sim, variant):\n"
        "    yield sim.sample(0, 'step', rss=float(len(sim.policy_name)))\n")
    info = sweep(out=tmp_path / "out", workloads=(str(workload),),
                 policies=("burn-0.22.1", "skip-untracked"), progress=False)
    assert info["reused"] == {} and info["computed"] == 2


def test_the_command_line_says_how_many_cells_were_reused(tmp_path, capsys):
    args = ["sweep", "-w", "adleak-rss", "-p", "burn-0.22.1", "-p", "detach-constant",
            "--set", "iterations=1000", "-j", "1"]
    code, out, _ = run_cli(args + ["--out", str(tmp_path / "a")], capsys)
    assert code == 0 and "10 cells (5 simulated, 5 from an equivalent policy's run" in out
    code, out, _ = run_cli(args + ["--out", str(tmp_path / "b"), "--no-reuse"], capsys)
    assert code == 0 and "10 cells (10 simulated, 0 from an equivalent policy's run" in out


class WithProperty(Policy):
    name = "with-property"
    calls = 0

    @property
    def level(self):
        WithProperty.calls += 1
        return WithProperty.calls

    @classmethod
    def kind(cls):
        return cls.__name__


def test_properties_and_classmethods_are_recorded_and_properties_stay_computed():
    reads = set()
    policy = traced(WithProperty, reads)(object())
    assert policy.level != policy.level          # computed at every read, not cached
    assert policy.kind() == "WithProperty" and {"level", "kind"} <= reads
    assert not same_behaviour({"level"}, WithProperty, BASE)


def test_a_cell_waits_only_for_a_run_it_may_share():
    """may_share is what same_behaviour asks of every run (__init__ alike), so a sweep
    runs a cell at once where no earlier cell of its family can give it rows: the built-ins
    that define __init__ (and policy files, whose __init__ reports errors) never wait."""
    from sim.policies.trace import may_share
    shareable = {name for name, cls in POLICIES.items() if may_share(BASE, cls)}
    assert shareable == {"burn-0.22.1", "skip-untracked", "detach-constant", "dedup-sweep"}
    for a in POLICIES.values():
        for b in POLICIES.values():
            if not may_share(a, b):
                assert not same_behaviour(set(), a, b)
                assert not same_behaviour({"detach", "after_backward"}, a, b)
    assert not may_share(BASE, OwnInit) and may_share(BASE, OnlyDetach)
