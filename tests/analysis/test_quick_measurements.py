"""Rows of `sim measure --quick` (the probes' loop counts cut ~10x) compare against runs
with the probes' quick parameters (a workload's QUICK), and a comparison written into
its measurements' directory does not read its own output the next time."""

import pytest

from clirun import assert_one_error, run_cli
from sim.analysis.compare import quick_params
from sim.analysis.data import QUICK_NOTE, DataError, measured_quick
from sim.engine.workloads import builtin_names, load_workload

HEADER = "experiment,variant,phase,x,x_unit,metric,value,unit,note,platform,burn_version,probe\n"
#: two rows of a real `sim measure --quick --probe adleak-count` (this machine, 2026-12-05)
QUICK_ROWS = (
    "adleak-count-fresh,flex.autodiff,after-loop,1000,iterations,heap_bytes_delta,1111520,B,"
    f"{QUICK_NOTE},linux-x86_64,0.22.1,adleak-count --quick\n"
    "adleak-count-fresh,flex.autodiff,after-loop,1000,iterations,heap_blocks_delta,8334,"
    f"blocks,{QUICK_NOTE},linux-x86_64,0.22.1,adleak-count --quick\n")


def row(probe="", note=""):
    return {"experiment": "adleak-count-fresh", "variant": "flex", "probe": probe,
            "note": note}


def test_a_quick_row_is_known_by_its_probe_or_its_note():
    assert measured_quick(row(probe="adleak-count --quick"))
    assert measured_quick(row(note=f"counting allocator; {QUICK_NOTE}"))
    assert not measured_quick(row(probe="adleak-count", note="counting allocator"))


def test_quick_params_are_the_workloads_quick():
    assert quick_params([row(probe="adleak-count --quick")]) == {
        "adleak-count-fresh": {"iterations": 1000}}
    assert quick_params([row(probe="adleak-count")]) == {}
    with pytest.raises(DataError, match="mix `sim measure --quick` runs and full ones"):
        quick_params([row(probe="adleak-count --quick"), row(probe="adleak-count")])


def test_every_quick_parameter_is_a_parameter_the_workload_accepts():
    declared = {name: load_workload(name).quick for name in builtin_names()}
    assert declared["adleak-rss"] == {"iterations": 10_000}
    assert declared["p10-ema"] == {"steps": 200}
    assert declared["adleak-count-params"] == {"ops": "quick"}
    for name, quick in declared.items():
        w = load_workload(name)
        for variant in w.variants:
            w.resolve(variant, {k: str(v) for k, v in quick.items()})


def test_quick_rows_are_predicted_with_the_probes_loop_counts(tmp_path, capsys):
    measured = tmp_path / "measured"
    measured.mkdir()
    (measured / "adleak-count.csv").write_text(HEADER + QUICK_ROWS)
    code, _, err = run_cli(["compare", "--measured", str(measured), "--profile",
                            "linux-x86_64", "--out", str(measured)], capsys)
    assert code == 0, err
    report = (measured / "report.md").read_text()
    assert "**2 of 2 points within tolerance**" in report
    assert "`adleak-count-fresh` iterations=1000" in report
    # again into the same directory: its predicted.csv and errors.csv are not measurements
    code, _, err = run_cli(["compare", "--measured", str(measured), "--profile",
                            "linux-x86_64", "--out", str(measured)], capsys)
    assert code == 0, err
    assert "**2 of 2 points within tolerance**" in (measured / "report.md").read_text()


def test_an_unpredicted_point_names_the_x_its_series_was_predicted_at(tmp_path, capsys):
    path = tmp_path / "full.csv"
    path.write_text(HEADER + QUICK_ROWS.replace(QUICK_NOTE, "").replace(
        "adleak-count --quick", "adleak-count"))
    code, _, err = run_cli(["compare", "--measured", str(path), "--profile", "linux-x86_64",
                            "--out", str(tmp_path / "out")], capsys)
    assert code == 0, err
    errors = (tmp_path / "out" / "errors.csv").read_text()
    assert "no prediction at this point: predicted at iterations 10000" in errors


def test_mixed_quick_and_full_rows_of_one_workload(tmp_path, capsys):
    path = tmp_path / "mixed.csv"
    full = QUICK_ROWS.splitlines(keepends=True)[1].replace(QUICK_NOTE, "").replace(
        "adleak-count --quick", "adleak-count").replace(",1000,", ",10000,")
    path.write_text(HEADER + QUICK_ROWS.splitlines(keepends=True)[0] + full)
    code, _, err = run_cli(["compare", "--measured", str(path), "--out",
                            str(tmp_path / "out")], capsys)
    assert_one_error(code, err, "adleak-count-fresh mix `sim measure --quick` runs and "
                                "full ones")
    assert not (tmp_path / "out").exists()


def test_an_interrupted_comparison_leaves_the_run_before_as_it_was(tmp_path, capsys,
                                                                   monkeypatch):
    import sim.output.results
    measured = tmp_path / "quick.csv"
    measured.write_text(HEADER + QUICK_ROWS)
    out = tmp_path / "out"
    code, _, err = run_cli(["compare", "--measured", str(measured), "--out", str(out),
                            "--profile", "linux-x86_64"], capsys)
    assert code == 0, err
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert {"predicted.csv", "errors.csv", "run.json", "report.md", "report.html"} <= set(before)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(sim.output.results, "render", interrupted)
    code, _, err = run_cli(["compare", "--measured", str(measured), "--out", str(out)], capsys)
    assert code == 130 and err[-1] == "sim: error: interrupted", err
    # the new run's data, figures, report and run.json were written aside: the files of
    # the linux-x86_64 run are as it left them, nothing else is there
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [".cache"]
    monkeypatch.undo()
    code, _, err = run_cli(["compare", "--measured", str(measured), "--out", str(out)], capsys)
    assert code == 0, err
    assert "Profile: `m2max-macos`" in (out / "report.md").read_text()


def test_a_sweep_with_quick_measurements_runs_their_workload_with_quick(tmp_path, capsys):
    measured = tmp_path / "quick.csv"
    measured.write_text(HEADER + QUICK_ROWS)
    out = tmp_path / "out"
    code, _, err = run_cli(["sweep", "-w", "adleak-count-fresh", "-p", "burn-0.22.1",
                            "--measured", str(measured), "--profile", "linux-x86_64",
                            "--out", str(out)], capsys)
    assert code == 0, err
    report = (out / "report.md").read_text()
    assert "**2 of 2 points within tolerance**" in report
    assert "`adleak-count-fresh` iterations=1000" in report
