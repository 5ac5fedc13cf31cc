"""A fix written as the burn PR would be: a policy replaces a mirror class with a subclass
whose method is the patched one (sim.policies.mirror); the simulation builds its objects
from the policy's classes, compositions chain the subclasses, and the sweep's reuse of
runs sees the replaced methods."""

import pytest

from clirun import assert_one_error, run_cli
from sim.burn.runtime.graph import GraphCleaner, GraphMutexClient
from sim.engine.profile import load_profile
from sim.engine.runner import run_cell
from sim.engine.simulation import Simulation
from sim.errors import UserError
from sim.policies import POLICIES, get_policy, replaced
from sim.policies.dedup_sweep import DedupCleaner
from sim.policies.drop_release import DropReleaseMemory
from sim.policies.periodic_sweep import PeriodicSweepClient
from sim.policies.trace import same_behaviour

pytestmark = pytest.mark.usefixtures("fresh_policy_registry")

BASE = POLICIES["burn-0.22.1"]

# dedup-sweep restated by a user: its GraphCleaner, named by a policy of their own
RESTATED = '''
from sim.policies import Policy
from sim.policies.dedup_sweep import DedupCleaner

class Mine(Policy):
    name = "{name}"
    GraphCleaner = DedupCleaner
'''

# a GraphCleaner of a user's own: replaces cleanup_orphaned_entries (no super())
NO_SWEEP = '''
from sim.burn.runtime.graph import GraphCleaner
from sim.policies import Policy

class NoSweepCleaner(GraphCleaner):
    __slots__ = ()

    def cleanup_orphaned_entries(self):
        return 0

class NoSweep(Policy):
    name = "{name}"
    GraphCleaner = NoSweepCleaner
'''

# another one that only adds to clean() with super(): composes with either
COUNTING = '''
from sim.burn.runtime.graph import GraphCleaner
from sim.policies import Policy

class CountingCleaner(GraphCleaner):
    __slots__ = ()

    def clean(self, node_id):
        super().clean(node_id)

class Counting(Policy):
    name = "counting"
    GraphCleaner = CountingCleaner
'''


def _values(rows):
    return [(r["experiment"], r["variant"], r["phase"], r["x"], r["metric"], r["value"])
            for r in rows]


def test_the_simulation_builds_its_mirror_objects_from_the_policys_classes():
    profile = load_profile("m2max-macos")
    sim = Simulation(profile, policy="periodic-sweep")
    assert type(sim.client) is PeriodicSweepClient
    sim = Simulation(profile, policy="burn-0.22.1")
    assert type(sim.client) is GraphMutexClient
    assert POLICIES["dedup-sweep"].GraphCleaner is DedupCleaner
    assert POLICIES["drop-release"].GraphMemoryManagement is DropReleaseMemory
    assert replaced(POLICIES["dedup-sweep"]) == {
        "GraphCleaner": ["cleanup_orphaned_entries", "_visit_once"]}
    assert replaced(BASE) == {}


def test_a_file_that_names_a_builtin_fixs_class_gives_its_numbers(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(RESTATED.format(name="my-dedup"))
    sets = {"steps": 60}
    mine = run_cell("p10-ema", "detach", str(path), sets=sets)
    builtin = run_cell("p10-ema", "detach", "dedup-sweep", sets=sets)
    assert _values(mine) == _values(builtin)
    burn = run_cell("p10-ema", "detach", "burn-0.22.1", sets=sets)
    assert _values(mine) != _values(burn)


def test_two_policies_replacing_one_method_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "nosweep.py"
    path.write_text(NO_SWEEP.format(name="no-sweep"))
    with pytest.raises(UserError, match=r"policies no-sweep and dedup-sweep both replace the "
                                        r"method GraphCleaner\.cleanup_orphaned_entries"):
        get_policy(f"{path}+dedup-sweep")
    code, out, err = run_cli(["run", "adleak-count", "-v", "flex.autodiff",
                              "-p", f"dedup-sweep+{path}"], capsys)
    assert out == ""
    assert_one_error(code, err, "both replace the method GraphCleaner.cleanup_orphaned_entries")


def test_distinct_methods_of_one_class_compose_into_one_subclass(tmp_path):
    path = tmp_path / "counting.py"
    path.write_text(COUNTING)
    cls = get_policy(f"dedup-sweep+{path}")
    cleaner = cls.GraphCleaner
    assert issubclass(cleaner, DedupCleaner) and issubclass(cleaner, GraphCleaner)
    assert cleaner.cleanup_orphaned_entries is DedupCleaner.cleanup_orphaned_entries
    assert cleaner.clean.__qualname__ == "CountingCleaner.clean"
    sets = {"steps": 30}
    assert (_values(run_cell("p10-ema", "detach", cls.name, sets=sets))
            == _values(run_cell("p10-ema", "detach", "dedup-sweep", sets=sets)))
    # distinct classes: each member's own
    both = get_policy("periodic-sweep+dedup-sweep")
    assert both.GraphMutexClient is PeriodicSweepClient and both.GraphCleaner is DedupCleaner


def test_a_file_whose_mirror_class_is_not_burns_subclass_is_an_error(tmp_path, capsys):
    path = tmp_path / "bad.py"
    path.write_text("from sim.policies import Policy\n\n"
                    "class Bad(Policy):\n    name = 'bad'\n    GraphLocator = dict\n")
    code, out, err = run_cli(["policies", str(path)], capsys)
    assert_one_error(code, err, "GraphLocator = dict must be a subclass of",
                     "sim.burn.runtime.graph.GraphLocator")


def test_the_reuse_of_runs_sees_replaced_methods():
    dedup = POLICIES["dedup-sweep"]
    # a run that built a cleaner for a backward but never swept: dedup-sweep's run is its
    assert same_behaviour({"GraphCleaner.__init__", "GraphCleaner.clean"}, BASE, dedup)
    assert not same_behaviour({"GraphCleaner.cleanup_orphaned_entries"}, BASE, dedup)
    # every run builds the client: a policy with a client of its own never shares
    assert not same_behaviour(set(), BASE, POLICIES["periodic-sweep"])
    # what a run records: the mirror methods it called, once each
    reads = set()
    run_cell("adleak-rss", "flex.autodiff", "burn-0.22.1", sets={"iterations": 2000},
             policy_reads=reads)
    assert "GraphMutexClient.register" in reads and "GraphLocator.select" in reads
    assert "GraphCleaner.cleanup_orphaned_entries" not in reads
    assert same_behaviour(reads, BASE, dedup)
    reads = set()
    run_cell("p10-ema", "detach", "burn-0.22.1", sets={"steps": 5}, policy_reads=reads)
    assert "GraphCleaner.cleanup_orphaned_entries" in reads
    assert not same_behaviour(reads, BASE, dedup)
