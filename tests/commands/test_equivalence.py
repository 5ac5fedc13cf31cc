"""`sim equivalence`: fast-forward against exact mode over workload x variant x policy x
profile, each cell run both ways and its rows compared."""

import csv

from clirun import assert_one_error, run_cli
from sim.commands import equivalence


def test_every_variant_policy_and_profile_is_a_cell():
    todo = equivalence.cells(["adleak-count"], ["burn-0.22.1", "skip-untracked"],
                             ["m2max-macos", "linux-x86_64"])
    assert len(todo) == 3 * 2 * 2
    # each workload at the probe's quick loop counts
    assert {cell[4]["iterations"] for cell in todo} == {1_000}


def test_a_cell_that_runs_the_same_both_ways(tmp_path, capsys):
    out = tmp_path / "eq.csv"
    code, stdout, _ = run_cli(["equivalence", "-w", "adleak-count", "-p", "burn-0.22.1",
                               "--profile", "linux-x86_64", "-j", "1", "--out", str(out)],
                              capsys)
    assert code == 0
    assert "3 cells: 3 same" in stdout
    rows = list(csv.DictReader(out.open()))
    assert [r["variant"] for r in rows] == ["flex", "flex.autodiff", "a-tracked"]
    assert {r["result"] for r in rows} == {"same"}
    assert all(int(r["rows"]) > 0 for r in rows)


def test_a_difference_names_its_first_row_and_fails(monkeypatch, capsys):
    from sim.engine import runner

    real = runner.run_cell

    def skewed(*args, fast_forward=True, **kw):
        rows = real(*args, fast_forward=fast_forward, **kw)
        if fast_forward:
            rows[-1] = {**rows[-1], "value": rows[-1]["value"] + 1}
        return rows
    monkeypatch.setattr(runner, "run_cell", skewed)
    row = equivalence.check_cell(("adleak-count", "flex", "burn-0.22.1", "m2max-macos",
                                  {"iterations": 100}))
    assert row["result"] == "differs"
    assert row["difference"].startswith(f"row {row['rows'] - 1} (")
    code, stdout, _ = run_cli(["equivalence", "-w", "adleak-count", "-p", "burn-0.22.1",
                               "--profile", "m2max-macos", "-j", "1"], capsys)
    assert code == 1
    assert "adleak-count flex -p burn-0.22.1 --profile m2max-macos: differs: row" in stdout


def test_a_cell_both_runs_refuse_is_refused_not_a_difference(monkeypatch):
    from sim.engine import runner
    from sim.errors import UserError

    def refuse(*args, **kw):
        raise UserError("no such device")
    monkeypatch.setattr(runner, "run_cell", refuse)
    row = equivalence.check_cell(("adleak-count", "flex", "burn-0.22.1", "m2max-macos", {}))
    assert (row["result"], row["difference"]) == ("refused", "no such device")


def test_an_unknown_workload_is_one_error_line(capsys):
    code, _, lines = run_cli(["equivalence", "-w", "no-such-workload"], capsys)
    assert_one_error(code, lines, "no-such-workload")


def test_a_run_over_its_time_budget_is_too_slow_not_a_difference(monkeypatch):
    from sim.engine import runner
    from sim.errors import LimitExceeded

    real = runner.run_cell

    def slow_exact(*args, fast_forward=True, **kw):
        if not fast_forward:
            raise LimitExceeded("workload.py:33: time budget exceeded: more than 1 s of wall "
                                "time (raise --timeout)")
        return real(*args, fast_forward=fast_forward, **kw)
    monkeypatch.setattr(runner, "run_cell", slow_exact)
    row = equivalence.check_cell(("adleak-count", "flex", "burn-0.22.1", "m2max-macos",
                                  {"iterations": 100}), timeout=1.0)
    assert (row["result"], row["difference"]) == ("too-slow", "exact over 1 s")


def test_each_difference_is_reported_as_it_is_found(monkeypatch):
    seen = []
    todo = equivalence.cells(["adleak-count"], ["burn-0.22.1"], ["m2max-macos"])
    rows = equivalence.check(todo, jobs=1, on_result=seen.append)
    assert seen == rows and len(rows) == 3


def test_a_stopped_run_keeps_its_cells_and_resume_checks_only_the_rest(monkeypatch, tmp_path,
                                                                        capsys):
    from sim.engine import runner

    out = tmp_path / "eq.csv"
    out.write_text("earlier\n")
    real = runner.run_cell
    calls = []

    def stop_at_third_cell(workload, variant, *args, **kw):
        calls.append(variant)
        if variant == "a-tracked":
            raise KeyboardInterrupt
        return real(workload, variant, *args, **kw)
    monkeypatch.setattr(runner, "run_cell", stop_at_third_cell)
    argv = ["equivalence", "-w", "adleak-count", "-p", "burn-0.22.1", "--profile",
            "m2max-macos", "-j", "1", "--out", str(out)]
    code, _, err = run_cli(argv, capsys)
    assert code == 130
    assert out.read_text() == "earlier\n"          # the previous result is intact
    partial = list(csv.DictReader(open(f"{out}.partial")))
    assert [r["variant"] for r in partial] == ["flex", "flex.autodiff"]
    assert "2 cells written to" in "\n".join(err)

    calls.clear()
    monkeypatch.setattr(runner, "run_cell", real)
    code, stdout, _ = run_cli(argv + ["--resume"], capsys)
    assert code == 0 and "3 cells: 3 same" in stdout
    rows = list(csv.DictReader(out.open()))
    assert [r["variant"] for r in rows] == ["flex", "flex.autodiff", "a-tracked"]
    assert rows[:2] == partial                   # kept as the stopped run wrote them
    assert not (tmp_path / "eq.csv.partial").exists()


def test_resume_without_out_is_one_error_line(capsys):
    code, _, lines = run_cli(["equivalence", "-w", "adleak-count", "--resume"], capsys)
    assert_one_error(code, lines, "--resume needs --out")
