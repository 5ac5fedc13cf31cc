"""`sim run` runs its variants x policies as cells of the sweep's executor
(sim.commands.sweep.run_cells): a policy's run given an equivalent policy's rows where the
run proves them the same, on --jobs processes, with the rows, budgets and partial rows of
running every cell in turn."""

import pytest

from clirun import assert_one_error, run_cli
from sim.policies import POLICIES

#: two variants: one that finishes, one that samples then loops until a budget stops it
DONE_THEN_OVER = """
from sim.tensor import Tensor

VARIANTS = ("done", "over")


def run(sim, variant):
    a = Tensor.from_floats([1.0] * 8, sim.device("flex").autodiff())
    for step in range(1, 4):
        b = (a.clone() * 2.0 + a.clone()).sum()
        yield sim.sample(step, "step", rss=1.0 * step)
    while variant == "over":
        b = a.clone() + a.clone()
        yield sim.tick()
"""


def run_rows(capsys, *args):
    """``sim run ARGS --format csv``: (exit code, the rows' text, stderr lines)."""
    code, out, lines = run_cli(["run", *map(str, args), "--format", "csv"], capsys)
    return code, out, lines


@pytest.fixture(scope="module")
def quick_args():
    return ["adleak-rss", "-p", "all", "--set", "iterations=2000"]


def test_reused_rows_are_the_rows_every_policy_simulated_gives(capsys, quick_args, tmp_path):
    code, reused, lines = run_rows(capsys, *quick_args, "-j", "1")
    assert code == 0, lines
    code, simulated, lines = run_rows(capsys, *quick_args, "-j", "1", "--no-reuse")
    assert code == 0, lines
    assert reused == simulated
    policies = {line.split(",")[-2] for line in reused.splitlines()[1:]}
    assert {"burn-0.22.1", "skip-untracked", "dedup-sweep", "pytorch"} <= policies
    # the line that says what was written counts the runs given another policy's rows
    out = tmp_path / "rows.csv"
    code, _, lines = run_cli(["run", *quick_args, "-j", "1", "--out", str(out)], capsys)
    assert code == 0 and out.read_text() == reused
    assert len(lines) == 1 and "given an equivalent policy's rows" in lines[0], lines
    code, _, lines = run_cli(["run", *quick_args, "--no-reuse", "--out", str(out)], capsys)
    assert code == 0 and lines == [f"wrote {len(reused.splitlines()) - 1} rows to {out}"]


def test_two_jobs_give_the_rows_of_one(capsys, quick_args):
    one = run_rows(capsys, *quick_args, "-j", "1")
    two = run_rows(capsys, *quick_args, "-j", "2")
    assert one[0] == two[0] == 0 and one[1] == two[1]
    p10 = ["p10-ema", "-p", "all", "--set", "steps=20", "--set", "report_at=10,20"]
    two = run_rows(capsys, *p10, "-j", "2")
    one = run_rows(capsys, *p10, "-j", "1", "--no-reuse")
    assert one[0] == two[0] == 0 and one[1] == two[1]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_budget_keeps_the_rows_of_the_runs_before_it_whatever_the_jobs(tmp_path, capsys,
                                                                        jobs):
    """Every policy's `done` run comes before the first `over` run, which --max-ops stops:
    its error is the one line, and FILE.partial holds the rows of the runs before it in
    the order `sim run` gives them, then the rows it sampled, with one job or two (a
    later run that failed first does not decide), with reuse or without."""
    path = tmp_path / "over.py"
    path.write_text(DONE_THEN_OVER)
    partials = []
    for reuse in ([], ["--no-reuse"]):
        target = tmp_path / f"rows{len(partials)}.csv"
        code, _, lines = run_cli(["run", str(path), "-p", "all", "--max-ops", "3000",
                                  "-j", jobs, *reuse, "--out", str(target)], capsys)
        assert_one_error(code, lines, "budget", "rows sampled before it are in")
        assert not target.exists()
        partials.append((tmp_path / f"{target.name}.partial").read_text())
    assert partials[0] == partials[1]
    rows = partials[0].splitlines()[1:]
    done = [r for r in rows if ",done," in r]
    over = [r for r in rows if ",over," in r]
    assert rows == done + over
    assert {r.split(",")[-2] for r in done} == set(POLICIES)      # every built-in policy
    assert {r.split(",")[-2] for r in over} == {"burn-0.22.1"}  # the first over run's only
    code, printed, _ = run_rows(capsys, path, "-p", "all", "-v", "done", "-j", jobs)
    assert code == 0 and printed.splitlines()[1:] == done


def test_a_timeout_stops_the_run_with_two_jobs_as_with_one(tmp_path, capsys):
    path = tmp_path / "spin.py"
    path.write_text("""
from sim.tensor import Tensor

def run(sim, variant):
    a = Tensor.from_floats([1.0], sim.device("flex").autodiff())
    yield sim.tick()
    while True:
        pass
""")
    for jobs in ("1", "2"):
        code, printed, lines = run_cli(["run", str(path), "-p", "all", "--timeout", "0.5",
                                        "-j", jobs], capsys)
        assert_one_error(code, lines, "time budget exceeded: more than 0.5 s of wall time "
                                      "(raise --timeout)")
        assert printed == ""
