"""What a new user's first commands meet: a workload file's own measurements, a `sim
measure` directory, a wrong x unit, a bad scheduler address, a damaged results file,
the colours of their policies, and the lines the commands print."""

import csv
import time

import pytest

from clirun import assert_one_error, run_cli
from sim import paths
from sim.output import plot
from sim.policies import HOOKS, POLICIES, SEAMS, Policy

ROOT = paths.ROOT
HEADER = "experiment,variant,phase,x,x_unit,metric,value,unit,note\n"

# a user's loop that declares the experiment its measurements name
LEAK2 = """from sim.burn.tensor import Tensor, drop

PARAMS = {"iterations": 1000}
MEASURED = ("leak2",)


def run(sim, variant, iterations):
    ad = sim.device("flex").autodiff()
    a = Tensor.from_floats([1.0] * 16, ad)
    b = Tensor.from_floats([2.0] * 16, ad)
    sim.repeat(iterations, lambda: drop(a.clone() + b.clone()))
    yield sim.sample(iterations, "iterations", rss=sim.rss_bytes() / 1e6)
"""
LEAK2_ROW = "leak2,default,,1000,iterations,rss,4.0,MB,\n"

# what `sim measure` writes besides the measured CSVs (sim.analysis.data.TRACE_FILES)
TRACES = {
    "sizeof-alloc.csv": "sizeof-alloc,std HashMap,,1,len,alloc_bytes,24,B,\n",
    "alloc-trace-events.csv": "alloc-trace-events,first,op1,0,event,alloc_bytes,64,B,\n",
}


def errors_only(lines):
    """stderr without the progress bar's lines."""
    return [line for line in lines if not line.startswith("[")]


@pytest.fixture
def leak2(tmp_path):
    workload = tmp_path / "leak2.py"
    workload.write_text(LEAK2)
    measured = tmp_path / "leak2.csv"
    measured.write_text(HEADER + LEAK2_ROW)
    return workload, measured


def _error_rows(out):
    with open(out / "errors.csv", newline="") as fh:
        return list(csv.DictReader(fh))


# -- a workload file's MEASURED experiments (item 3) -------------------------------------

@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_measured_rows_of_a_workload_file(tmp_path, capsys, leak2, command):
    workload, measured = leak2
    out = tmp_path / "out"
    args = [command, "-w", str(workload), "--measured", str(measured), "--out", str(out)]
    if command == "sweep":
        args += ["-p", "burn-0.22.1"]
    code, stdout, err = run_cli(args, capsys)
    assert code == 0, err
    rows = _error_rows(out)
    assert [(r["experiment"], r["x"], r["status"]) for r in rows] == \
        [("leak2", "1000", "predicted")]


def test_experiment_of_no_workload_is_still_unknown(tmp_path, capsys, leak2):
    _, measured = leak2
    code, _, err = run_cli(["compare", "--measured", str(measured), "--out",
                            str(tmp_path / "out")], capsys)
    assert_one_error(code, err, f"{measured}:2: unknown experiment 'leak2'")


# -- a `sim measure` directory (item 4) --------------------------------------------------

def _measure_dir(tmp_path):
    directory = tmp_path / "meas"
    directory.mkdir()
    (directory / "leak2.csv").write_text(HEADER + LEAK2_ROW)
    for name, row in TRACES.items():
        (directory / name).write_text(HEADER + row)
    (directory / "measure-info.json").write_text("{}\n")
    return directory


@pytest.mark.parametrize("form", ["dir", "glob"])
def test_compare_a_measure_directory(tmp_path, capsys, leak2, form):
    workload, _ = leak2
    directory = _measure_dir(tmp_path)
    # "glob": what the shell makes of `--measured DIR/*.csv`
    given = ([str(directory)] if form == "dir"
             else [str(p) for p in sorted(directory.glob("*.csv"))])
    out = tmp_path / "out"
    code, stdout, err = run_cli(["compare", "-w", str(workload), "--out", str(out),
                                 "--measured"] + given, capsys)
    assert code == 0, err
    assert [r["experiment"] for r in _error_rows(out)] == ["leak2"]
    assert "1 figure -> " in stdout and "1 figures" not in stdout


def test_measured_files_skips_the_traces(tmp_path):
    from sim.analysis.compare import measured_files
    directory = _measure_dir(tmp_path)
    assert measured_files([directory]) == [directory / "leak2.csv"]
    assert measured_files([directory / n for n in sorted(TRACES)] +
                          [directory / "leak2.csv"]) == [directory / "leak2.csv"]


def test_directory_without_measured_csvs(tmp_path, capsys):
    directory = tmp_path / "empty"
    directory.mkdir()
    (directory / "sizeof-alloc.csv").write_text(HEADER + TRACES["sizeof-alloc.csv"])
    out = tmp_path / "out"
    code, _, err = run_cli(["compare", "--measured", str(directory), "--out", str(out)], capsys)
    assert_one_error(code, err, str(directory), "is a directory with no measured CSV files")
    assert not out.exists()


def test_compare_without_measurements(tmp_path, capsys):
    code, _, err = run_cli(["compare", "--out", str(tmp_path / "out")], capsys)
    assert_one_error(code, err, "--measured")


# -- a measured x unit that is not the workload's (item 5) -------------------------------

def test_wrong_x_unit_names_file_and_line(tmp_path, capsys, leak2):
    workload, _ = leak2
    measured = tmp_path / "units.csv"
    measured.write_text(HEADER + LEAK2_ROW + LEAK2_ROW.replace(",iterations,", ",k_iterations,")
                        .replace(",4.0,", ",4.1,").replace("1000", "1"))
    out = tmp_path / "out"
    code, _, err = run_cli(["compare", "-w", str(workload), "--measured", str(measured),
                            "--out", str(out)], capsys)
    assert_one_error(code, errors_only(err), f"{measured}:3: x_unit 'k_iterations' is wrong",
                     "expected iterations")
    assert not (out / "errors.csv").exists() and not (out / "predicted.csv").exists()


def test_check_x_units_leaves_unpredicted_rows_alone():
    from sim.analysis.compare import check_x_units
    from sim.analysis.data import DataError
    predicted = [{"experiment": "adleak-rss", "variant": "flex.autodiff", "phase": "",
                  "x_unit": "k_iterations"}]
    row = {"experiment": "adleak-rss", "variant": "flex.autodiff", "phase": "",
           "x_unit": "iterations", "_file": "m.csv", "_line": 2}
    with pytest.raises(DataError, match=r"m.csv:2: x_unit 'iterations' is wrong for "
                                        r"adleak-rss flex.autodiff \(expected k_iterations\)"):
        check_x_units([row], predicted)
    check_x_units([dict(row, variant="flex")], predicted)   # nothing predicts it: not checked


# -- a scheduler address that is none (item 2) -------------------------------------------

def test_a_scheduler_without_dask_says_how_to_install_it_from_the_checkout(tmp_path, capsys,
                                                                           monkeypatch):
    """Without dask, `--scheduler` said `pip install 'autodiff-sim[dask]'`, which finds no
    such package (autodiff-sim is not on PyPI; walkthrough, session 59). It names the
    command that installs the extra from this checkout into this environment (its
    Python by its path)."""
    import sys
    from sim.paths import ROOT
    monkeypatch.setitem(sys.modules, "dask.distributed", None)     # import fails
    code, _, err = run_cli(["sweep", "-w", "adleak-count", "-p", "burn-0.22.1",
                            "--scheduler", "tcp://127.0.0.1:1", "--out", str(tmp_path / "o")],
                           capsys)
    assert_one_error(code, err, f"--scheduler needs dask: {sys.executable} -m pip install -e "
                                f"'{ROOT}[dask]'")


def test_bad_scheduler_address_fails_fast(tmp_path, capsys):
    pytest.importorskip("distributed")
    out = tmp_path / "out"
    start = time.perf_counter()
    code, _, err = run_cli(["sweep", "-w", "adleak-count", "-p", "burn-0.22.1",
                            "--scheduler", "notanaddress", "--out", str(out)], capsys)
    assert_one_error(code, err, "--scheduler notanaddress: not a scheduler address")
    assert time.perf_counter() - start < 10
    assert not out.exists()   # item 8: a sweep that failed before any cell leaves no dir


# -- failed sweeps leave no empty directories (item 8) -----------------------------------

def test_failed_sweep_leaves_no_new_directories(tmp_path, capsys):
    workload = tmp_path / "broken.py"
    workload.write_text("def run(sim, variant):\n    yield sim.tick()\n    {}['missing']\n")
    out = tmp_path / "deep" / "out"
    code, _, err = run_cli(["sweep", "-w", str(workload), "-p", "burn-0.22.1", "--out",
                            str(out)], capsys)
    assert_one_error(code, errors_only(err), "raised KeyError")
    assert not (tmp_path / "deep").exists()


def test_failed_sweep_keeps_an_existing_directory(tmp_path, capsys):
    workload = tmp_path / "broken.py"
    workload.write_text("def run(sim, variant):\n    yield sim.tick()\n    {}['missing']\n")
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = run_cli(["sweep", "-w", str(workload), "-p", "burn-0.22.1", "--out",
                            str(out)], capsys)
    assert code == 2
    assert out.is_dir() and not any(out.iterdir())


# -- a damaged predicted.csv (item 7) ----------------------------------------------------

def test_plot_of_a_row_without_its_last_fields(tmp_path, capsys):
    from sim.analysis.data import PREDICTED_COLUMNS
    from sim.output.results import ERROR_COLUMNS
    out = tmp_path / "res"
    out.mkdir()
    (out / "predicted.csv").write_text(
        ",".join(PREDICTED_COLUMNS) + "\n"
        "leak2,default,,1000,iterations,rss,3.6,MB,,burn-0.22.1,m2max-macos\n"
        "leak2,default,,2000,iterations,rss,3.7,MB,\n")
    (out / "errors.csv").write_text(",".join(ERROR_COLUMNS) + "\n")
    code, _, err = run_cli(["plot", str(out)], capsys)
    assert_one_error(code, err, f"{out / 'predicted.csv'}:3: 9 fields, the header has 11")


# -- colours of policies outside the registry (item 6) -----------------------------------

def test_user_policies_get_colours_no_builtin_uses():
    builtin = {plot.policy_color(name) for name in POLICIES}
    assert len(builtin) == len(POLICIES)
    users = ["sweep-every-4", "my-fix", "another", "fix-3"]
    colors = plot.policy_colors(users + list(POLICIES))
    assert set(colors) == set(users)
    assert not set(colors.values()) & builtin
    assert len(set(colors.values())) == len(users)            # distinct from each other
    assert plot.policy_colors(list(reversed(users))) == colors   # deterministic
    # without a run's assignment (a figure drawn alone): still no built-in's colour
    plot.use_policy_colors({})
    assert plot.policy_color("sweep-every-4") not in builtin
    assert plot.policy_color("sweep-every-4") == plot.policy_color("sweep-every-4")
    plot.use_policy_colors(colors)
    try:
        assert [plot.policy_color(u) for u in users] == [colors[u] for u in users]
    finally:
        plot.use_policy_colors({})


# -- `sim policies` lists the seams (item 8) ---------------------------------------------

def test_policies_command_lists_the_seams(capsys):
    code, out, err = run_cli(["policies"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    for seam in list(SEAMS) + list(HOOKS):
        assert callable(getattr(Policy, seam)), seam
        assert any(line.split()[:1] == [seam] and len(line.split()) > 1 for line in lines), seam
    # the seams the module's docstring documents are the ones listed
    import sim.policies
    for seam in SEAMS:
        assert f"``{seam}``" in sim.policies.__doc__, seam


# -- a run() that is not a generator (item 8) --------------------------------------------

def test_run_that_is_not_a_generator(tmp_path, capsys):
    path = tmp_path / "plain.py"
    path.write_text("def run(sim, variant):\n    return 3\n")
    code, _, err = run_cli(["run", str(path)], capsys)
    assert_one_error(code, err, f"{path}: run() must be a generator (it returned int)")


# -- the sweep's last lines (item 8) -----------------------------------------------------

def test_sweep_summary_line(tmp_path, capsys, leak2):
    workload, measured = leak2
    out = str(tmp_path / "out") + "/"
    code, stdout, err = run_cli(["sweep", "-w", str(workload), "-p", "burn-0.22.1",
                                 "--measured", str(measured), "--out", out], capsys)
    assert code == 0, err
    first = stdout.splitlines()[0]
    assert first.startswith("1 cell (1 simulated, 0 from an equivalent policy's run, 0 cached), "
                            "1 figure -> "), first
    assert "//" not in first and first.endswith("/out/report.html"), first


# what the simulator refuses inside a run names the workload line that asked for it
REFUSED = {
    "device": ('dev = sim.device("cuda")', "unknown device 'cuda' (valid: flex, metal)"),
    "shapes": ("Tensor.zeros([4, 3], dev).matmul(Tensor.zeros([5, 7], dev))",
               "matmul shapes [4, 3] x [5, 7] do not match"),
    "metric": ('sim.sample(1, "step", memory_mb=3)', "unknown metric 'memory_mb' (valid: "),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refusal_inside_a_run_names_the_workload_line(tmp_path, capsys, case):
    statement, message = REFUSED[case]
    path = tmp_path / "mine.py"
    path.write_text("from sim.burn.tensor import Tensor\n\n\ndef run(sim, variant):\n"
                    '    dev = sim.device("flex").autodiff()\n'
                    f"    {statement}\n"
                    '    yield sim.sample(1, "step")\n')
    out = tmp_path / "rows.csv"
    code, _, err = run_cli(["run", str(path), "--out", str(out)], capsys)
    assert_one_error(code, err, f"{path}:6: {message}")
    assert not out.exists()
    if case == "metric":      # where a user finds the names with their units
        assert err[0].endswith("; docs/api.md, Metrics, gives each its unit)")
