"""Outputs and checks a new user's walkthrough found wanting: an output path that is a
symbolic link or a device, a measured x unit refused before any cell runs (X_UNITS),
`sim accuracy` writing only between its markers, and `sim ... | head`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import assert_one_error, run_cli
from sim import paths
from sim.engine.workloads import load_workload

ROOT = paths.ROOT
HEADER = "experiment,variant,phase,x,x_unit,metric,value,unit,note\n"


# -- --out through a symbolic link, onto a device ----------------------------------------

def test_out_through_a_symlink_writes_its_target(tmp_path, capsys):
    target = tmp_path / "data" / "rows.csv"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    code, _, _ = run_cli(["run", "adleak-count", "-v", "flex", "--out", str(link)], capsys)
    assert code == 0
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert target.read_text().startswith("experiment,variant,")
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]


def test_dangling_symlink_into_a_missing_directory(tmp_path, capsys):
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "nodir" / "rows.csv")
    code, _, lines = run_cli(["run", "adleak-count", "-v", "flex", "--out", str(link)], capsys)
    assert_one_error(code, lines, "does not exist")


@pytest.mark.skipif(not os.access("/dev/null", os.W_OK), reason="/dev/null not writable")
def test_out_to_a_device_writes_it_in_place(capsys):
    code, _, _ = run_cli(["run", "adleak-count", "-v", "flex", "--out", "/dev/null"], capsys)
    assert code == 0
    assert Path("/dev/null").is_char_device()


def test_bench_json_errors_name_the_option(tmp_path, capsys):
    code, _, lines = run_cli(["bench", "--quick", "--json", str(tmp_path / "no" / "b.json")],
                             capsys)
    assert_one_error(code, lines, "--json ", "does not exist")


# -- measured x units checked before anything runs (X_UNITS) -----------------------------

def test_wrong_x_unit_of_a_builtin_is_refused_before_any_cell(tmp_path, capsys):
    measured = tmp_path / "m.csv"
    measured.write_text(HEADER + "adleak-rss,flex,,100,iterations,rss,2.5,MB,\n")
    out = tmp_path / "out"
    code, _, lines = run_cli(["compare", "--measured", str(measured), "--out", str(out)],
                             capsys)
    # one line, no progress bar: no cell ran
    assert_one_error(code, lines, f"{measured}:2: x_unit 'iterations' is wrong for "
                                  f"adleak-rss flex", "expected k_iterations")
    assert not out.exists()


def test_declared_x_units_by_phase():
    w = load_workload("train-validate")
    assert w.x_unit("train-validate", "train") == "step"
    assert w.x_unit("train-validate", "generate") == "samples"
    assert w.x_unit("train-validate", "other") is None
    assert load_workload("adleak-rss").x_unit("adleak-rss") == "k_iterations"


LOOP = """X_UNITS = {UNITS}

def run(sim, variant):
    yield sim.sample(1, "iterations", rss=1.0)
"""


def test_a_run_that_samples_another_unit_than_declared(tmp_path, capsys):
    path = tmp_path / "loop.py"
    path.write_text(LOOP.replace("{UNITS}", '{"loop": "step"}'))
    code, _, lines = run_cli(["run", str(path)], capsys)
    assert_one_error(code, lines, str(path), "X_UNITS declares x_unit 'step' for loop",
                     "sampled it in 'iterations'")


@pytest.mark.parametrize("units", ['"step"', '{"loop": 5}', '{"loop": {"train": 1}}'])
def test_malformed_x_units(tmp_path, capsys, units):
    path = tmp_path / "loop.py"
    path.write_text(LOOP.replace("{UNITS}", units))
    code, _, lines = run_cli(["run", str(path)], capsys)
    assert_one_error(code, lines, str(path), "X_UNITS must be")


def test_every_builtin_declares_its_x_units():
    from sim.engine.workloads import builtin_names
    for name in builtin_names():
        w = load_workload(name)
        assert all(w.x_unit(e) is not None or isinstance(w.x_units.get(e), dict)
                   for e in w.measured), name


# -- sim accuracy writes only between its markers ----------------------------------------

def test_accuracy_refuses_a_file_without_markers(tmp_path, capsys):
    path = tmp_path / "notes.csv"
    path.write_text("a,b\n1,2\n")
    code, _, lines = run_cli(["accuracy", "--readme", str(path)], capsys)
    assert_one_error(code, lines, str(path), "<!-- accuracy:begin -->")
    assert path.read_text() == "a,b\n1,2\n"


def test_accuracy_policies_from_needs_readme_and_an_existing_sweep(tmp_path, capsys):
    code, _, lines = run_cli(["accuracy", "--policies-from", str(tmp_path)], capsys)
    assert_one_error(code, lines, "--policies-from needs --readme")
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- accuracy:begin -->\n<!-- accuracy:end -->\n")
    code, _, lines = run_cli(["accuracy", "--readme", str(readme), "--policies-from",
                              str(tmp_path / "nope")], capsys)
    assert_one_error(code, lines, "--policies-from", "does not exist")
    code, _, lines = run_cli(["accuracy", "--readme", str(readme), "--policies-from",
                              str(tmp_path)], capsys)
    assert_one_error(code, lines, "report.md: no such file")
    assert readme.read_text() == "x\n<!-- accuracy:begin -->\n<!-- accuracy:end -->\n"


def test_update_readme_replaces_only_the_marked_block(tmp_path):
    from sim.commands.accuracy import BEGIN, END, update_readme
    readme = tmp_path / "README.md"
    readme.write_text(f"top\n{BEGIN}\nold\n{END}\nbottom\n")
    update_readme(readme, "new\n")
    assert readme.read_text() == f"top\n{BEGIN}\nnew\n{END}\nbottom\n"


# -- a reader that goes away -------------------------------------------------------------

def test_closed_stdout_is_not_an_error():
    """`sim policies | head -0`: the reader is gone before the first line; the command
    still ends with status 0 and says nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-c", "from sim.commands.cli import main; main()",
                             "policies"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    assert err == b""



@pytest.mark.parametrize("command,out", [
    (["run", "adleak-count", "-v", "flex", "--out"], "afile/deeper/rows.csv"),
    (["sweep", "-w", "adleak-count", "--out"], "afile/results"),
])
def test_out_below_a_file_says_the_file_is_in_the_way(tmp_path, capsys, command, out):
    (tmp_path / "afile").write_text("mine\n")
    code, _, lines = run_cli(command + [str(tmp_path / out)], capsys)
    assert_one_error(code, lines, f"{tmp_path / 'afile'} is a file, not a directory")
    assert (tmp_path / "afile").read_text() == "mine\n"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc")
def test_out_into_a_directory_that_takes_no_file_fails_before_the_run(capsys):
    """/proc passes the permission check; the probe file it refuses is caught up front."""
    code, _, lines = run_cli(["run", "adleak-count", "-v", "flex", "--out", "/proc/x.csv"],
                             capsys)
    assert_one_error(code, lines, "--out /proc/x.csv: cannot create a file in /proc")


def test_run_with_policy_all_runs_every_builtin_policy(capsys):
    """`sim run -p all`: each built-in policy in turn, its rows tagged in the policy column;
    burn-0.22.1's rows are those of a run under that policy alone."""
    import csv
    import io
    from sim.policies import POLICIES
    loop = str(paths.ROOT / "experiments" / "loops" / "vloss.py")
    args = ["run", loop, "--set", "steps=3", "--format", "csv"]
    code, out_all, _ = run_cli(args + ["-p", "all"], capsys)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out_all)))
    assert [r["policy"] for r in rows[::len(rows) // len(POLICIES)]] == list(POLICIES)
    code, out_one, _ = run_cli(args + ["-p", "burn-0.22.1"], capsys)
    assert code == 0
    assert [r for r in rows if r["policy"] == "burn-0.22.1"] == \
        list(csv.DictReader(io.StringIO(out_one)))
