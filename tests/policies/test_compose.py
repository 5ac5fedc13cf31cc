"""Policies compose (``-p a+b``): each member's seams apply, where they meet the order is
the one both patches applied to burn would give, and a conflict is one error line."""

import pytest

from clirun import run_cli
from sim.errors import UserError
from sim.paths import EXPERIMENTS
from sim.policies import (HOOKS, POLICIES, SEAMS, get_policy, known_policy, policy_file,
                          policy_rank)
from sim.policies.compose import changes, extends, overrides
from sim.output.report import smallest_combination
from sim.engine.runner import run_cell


def _values(rows, metric, phase=None):
    return [(r["variant"], r["phase"], r["x"], r["value"]) for r in rows
            if r["metric"] == metric and (phase is None or r["phase"] == phase)]


def test_a_composition_has_every_members_seam_and_a_name_of_its_own():
    cls = get_policy("skip-untracked+drop-release")
    assert cls.name == "skip-untracked+drop-release"
    assert cls.members == ("skip-untracked", "drop-release")
    assert issubclass(cls, POLICIES["skip-untracked"]) and issubclass(cls, POLICIES["drop-release"])
    assert get_policy("skip-untracked+drop-release") is cls      # made once per process
    assert known_policy(cls.name) is cls and policy_file(cls.name) is None
    assert policy_rank(cls.name) > policy_rank("pytorch")
    assert not cls.semantic_change and get_policy("detach-constant+dedup-sweep").semantic_change


def test_an_extending_override_runs_before_the_one_that_replaces_the_seam():
    # drop-release's after_backward releases its deferred nodes, then runs the sweep, which
    # dedup-sweep replaces: in either order of the names, both happen
    drop, dedup = POLICIES["drop-release"], POLICIES["dedup-sweep"]
    for name in ("drop-release+dedup-sweep", "dedup-sweep+drop-release"):
        cls = get_policy(name)
        assert cls.after_backward is drop.after_backward
        assert cls.cleanup_orphaned_entries is dedup.cleanup_orphaned_entries
    # both add to on_register (super()): each one's counting runs, in either order
    for name in ("periodic-sweep+drop-release", "drop-release+periodic-sweep"):
        assert get_policy(name).on_register.__qualname__.endswith(".on_register")

    class Replaces(POLICIES["burn-0.22.1"]):
        name = "replaces-after-backward"

        def after_backward(self, client):
            client.cleanup_orphaned_entries()
    # an extending override is ordered before the replacing one, whatever the names' order
    from sim.policies.compose import compose
    mro = compose([Replaces, drop], [*SEAMS, *HOOKS]).__mro__
    assert mro.index(drop) < mro.index(Replaces)
    assert extends(POLICIES["drop-release"], "after_backward")
    assert changes(POLICIES["dedup-sweep"], "cleanup_orphaned_entries")
    assert not overrides(POLICIES["dedup-sweep"], "cleanup_orphaned_entries")  # not the seam
    assert not overrides(POLICIES["dedup-sweep"], "after_backward")


@pytest.mark.parametrize("name, message", [
    ("skip-untracked+burn-0.20-pre.1", "both replace the seam register_untracked"),
    ("dedup-sweep+burn-0.20-pre.1", "bypasses the seam cleanup_orphaned_entries"),
    ("burn-0.22.1+dedup-sweep", "the reference every fix changes"),
    ("pytorch+drop-release", "not a fix of burn"),
    ("dedup-sweep+dedup-sweep", "named twice"),
    ("dedup-sweep+", "empty name"),
    ("dedup-sweep+no-such-fix", "unknown policy 'no-such-fix'"),
])
def test_what_cannot_be_composed_is_an_error(name, message):
    with pytest.raises(UserError, match=message):
        get_policy(name)


def test_cli_conflict_is_one_line(capsys):
    code, out, err = run_cli(["run", "adleak-count", "-v", "flex.autodiff",
                              "-p", "skip-untracked+burn-0.20-pre.1"], capsys)
    assert code == 2 and out == "" and len(err) == 1
    assert err[0].startswith("sim: error: policies skip-untracked and burn-0.20-pre.1")


def test_each_member_acts_where_the_other_does_not():
    sets = {"iterations": "2000"}
    both = run_cell("adleak-count", "flex.autodiff", "skip-untracked+drop-release", sets=sets)
    skip = run_cell("adleak-count", "flex.autodiff", "skip-untracked", sets=sets)
    assert _values(both, "heap_blocks_delta") == _values(skip, "heap_blocks_delta")
    both = run_cell("adleak-count", "a-tracked", "skip-untracked+drop-release", sets=sets)
    drop = run_cell("adleak-count", "a-tracked", "drop-release", sets=sets)
    assert _values(both, "heap_blocks_delta") == _values(drop, "heap_blocks_delta")
    assert all(r["policy"] == "skip-untracked+drop-release" for r in both)


def test_the_ema_sweep_is_deduplicated_under_drop_release_too():
    sets = {"steps": "60", "report_at": "20,40,60"}
    base = run_cell("p10-ema", "detach", "drop-release", sets=sets)
    dedup = run_cell("p10-ema", "detach", "dedup-sweep", sets=sets)
    both = run_cell("p10-ema", "detach", "drop-release+dedup-sweep", sets=sets)

    def cleanup(rows):
        return sum(r["value"] for r in rows if r["metric"] == "cleanup_ms")
    # the chain is reachable: drop-release keeps it; dedup-sweep's sweep is the cheap one
    assert cleanup(both) == pytest.approx(cleanup(dedup), rel=0.05)
    assert cleanup(both) < 0.8 * cleanup(base)


def test_periodic_sweep_counts_every_registration_once_beside_drop_release():
    sets = {"iterations": "70000"}
    rows = run_cell("adleak-count", "a-tracked", "periodic-sweep+drop-release", sets=sets)
    drop = run_cell("adleak-count", "a-tracked", "drop-release", sets=sets)
    assert _values(rows, "heap_blocks_delta") == _values(drop, "heap_blocks_delta")


def test_smallest_combination_prefers_fewer_fixes_then_the_order_given():
    removes = {"a": {1, 2}, "b": {2, 3}, "c": {1, 3}, "d": {4}}
    assert smallest_combination(removes, ["a", "b", "c", "d"]) == (("a", "b", "d"), {1, 2, 3, 4})
    assert smallest_combination({}, []) == ((), set())


def test_sweep_with_a_composition_and_a_file_member_in_workers(tmp_path):
    import json
    from sim.commands.sweep import sweep
    example = EXPERIMENTS / "policies" / "sweep_every_4.py"
    name = f"skip-untracked+{example}"
    out = tmp_path / "out"
    info = sweep(["adleak-count"], ["burn-0.22.1", "skip-untracked+drop-release", name],
                 out=out, jobs=2, progress=False)
    assert info["policies"] == ["burn-0.22.1", "skip-untracked+drop-release",
                                "skip-untracked+sweep-every-4"]
    text = (out / "predicted.csv").read_text()
    assert ",skip-untracked+drop-release,m2max-macos" in text
    assert ",skip-untracked+sweep-every-4,m2max-macos" in text     # its file, in a worker
    report = (out / "report.md").read_text()
    assert "`skip-untracked+drop-release`" in report
    run = json.loads((out / "run.json").read_text())
    assert run["policies"][-1] == "skip-untracked+sweep-every-4"
