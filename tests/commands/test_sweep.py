"""`sim sweep`, `sim compare`, `sim plot`: outputs, determinism, cache and resume, bad input.

Loops are shrunk with --set so that every sweep here takes seconds.
"""

import csv
import json
import subprocess
import sys

import pytest

from sim import paths
from sim.commands.sweep import compare, sweep

SEED = paths.ROOT / "experiments" / "measured" / "seeds-m2max.csv"
SMALL = dict(workloads=("adleak-rss", "p10-ema"), policies=("burn-0.22.1", "drop-release"),
             sets=("iterations=2000", "steps=60", "report_at=1,50,60"), progress=False)


def cli(*args):
    """Run the `sim` command line in a fresh process: (exit code, stdout, stderr)."""
    proc = subprocess.run([sys.executable, "-c", "from sim.commands.cli import main; main()", *args],
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep-j1")
    info = sweep(out=out, jobs=1, **SMALL)
    return out, info


def test_sweep_writes_every_output(swept):
    out, info = swept
    for name in ("predicted.csv", "errors.csv", "run.json", "report.md", "report.html",
                 "adleak-rss.png", "p10-ema.png", "summary.png"):
        assert (out / name).stat().st_size > 0, name
    predicted = read_csv(out / "predicted.csv")
    assert list(predicted[0]) == ["experiment", "variant", "phase", "x", "x_unit", "metric",
                                  "value", "unit", "note", "policy", "profile", "params"]
    assert {r["policy"] for r in predicted} == {"burn-0.22.1", "drop-release", "pytorch"}
    # the measured pytorch rows need the pytorch policy's cells: added, not selected
    assert {r["experiment"] for r in predicted if r["policy"] == "pytorch"} == {"p10-ema-pytorch"}
    errors = read_csv(out / "errors.csv")
    seed = [r for r in read_csv(SEED) if r["experiment"].startswith(("adleak-rss", "p10-ema"))]
    assert len(errors) == len(seed)            # every measured point, none dropped
    statuses = {e["status"] for e in errors}
    assert "unpredicted" in statuses           # x = 2000 steps is past the shrunk loop
    assert statuses <= {"fitted", "predicted", "unpredicted"}
    report = (out / "report.md").read_text()
    assert "Not predicted" in report and "![" in report and "drop-release" in report
    assert '<img src="summary.png"' in (out / "report.html").read_text()
    run = json.loads((out / "run.json").read_text())
    # adleak-rss 5 + p10-ema 7 variants (log-no-ema: the Linux probe's log mode), x 2
    # policies, + 2 pytorch cells for the p10-ema-pytorch rows
    assert run["cells"] == info["cells"] == 26 and run["computed"] == 26


def test_jobs_2_gives_byte_identical_data(swept, tmp_path):
    out, _ = swept
    sweep(out=tmp_path, jobs=2, **SMALL)
    for name in ("predicted.csv", "errors.csv"):
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes(), name


def test_rerun_reuses_the_cache_and_resumes(swept):
    out, info = swept
    before = (out / "predicted.csv").read_bytes()
    again = sweep(out=out, jobs=1, **SMALL)
    assert (again["cached"], again["computed"]) == (info["cells"], 0)
    assert (out / "predicted.csv").read_bytes() == before
    # an interrupted sweep: some cells never finished, the rest are reused
    cache = next((out / ".cache").iterdir())
    for path in sorted(cache.glob("*.json"))[:5]:
        path.unlink()
    resumed = sweep(out=out, jobs=1, **SMALL)
    assert (resumed["cached"], resumed["computed"]) == (info["cells"] - 5, 5)
    assert (out / "predicted.csv").read_bytes() == before


def test_exact_sweep_gives_the_same_rows_cached_apart(swept):
    """--exact: every loop iteration simulated; the same predicted.csv as fast-forward,
    the report says so, and its cells are not the fast-forwarded ones' cache entries."""
    out, info = swept
    before = (out / "predicted.csv").read_bytes()
    exact = sweep(out=out, jobs=1, exact=True, **SMALL)
    assert (exact["cached"], exact["computed"]) == (0, info["cells"])
    assert (out / "predicted.csv").read_bytes() == before
    assert "Exact mode (`--exact`)" in (out / "report.md").read_text()
    assert json.loads((out / "run.json").read_text())["exact"] is True
    again = sweep(out=out, jobs=1, **SMALL)     # the fast-forwarded cells: still cached
    assert again["cached"] == info["cells"] and "Exact mode" not in (
        out / "report.md").read_text()


def test_force_recomputes(tmp_path):
    small = dict(workloads=("adleak-count",), policies=("burn-0.22.1",),
                 sets=("iterations=500",), progress=False)
    first = sweep(out=tmp_path, **small)
    forced = sweep(out=tmp_path, force=True, **small)
    assert first["computed"] == forced["computed"] == forced["cells"] == 3


def test_set_grid_gives_one_curve_per_point(tmp_path):
    info = sweep(out=tmp_path, workloads=("p10-ema",), policies=("burn-0.22.1",),
                 sets=("steps=20,40", "report_at=1,10"), progress=False)
    predicted = read_csv(tmp_path / "predicted.csv")
    assert {r["params"] for r in predicted} == {"steps=20 report_at=1,10",
                                                "steps=40 report_at=1,10"}
    assert info["grid"] == {"steps": ["20", "40"], "report_at": ["1,10"]}
    detach = [r for r in predicted if r["variant"] == "detach" and r["policy"] == "burn-0.22.1"
              and r["metric"] == "ms_per_step"]
    assert sorted(float(r["x"]) for r in detach) == [1, 1, 10, 10, 20, 40]


def test_plot_redraws_without_simulating(swept):
    out, _ = swept
    (out / "p10-ema.png").unlink()
    (out / "report.html").unlink()
    code, stdout, stderr = cli("plot", str(out))
    assert code == 0, stderr
    assert (out / "p10-ema.png").exists() and (out / "report.html").exists()


def test_compare_seed_csv(tmp_path):
    info = compare([SEED], workloads=("adleak-count",), out=tmp_path, progress=False)
    assert info["cells"] == 3                  # only the cells the CSV needs
    errors = read_csv(tmp_path / "errors.csv")
    assert len(errors) == 14 and all(e["ok"] == "true" for e in errors)
    assert (tmp_path / "adleak-count.png").exists()


@pytest.mark.parametrize("content, expected", [
    ("experiment,variant,x\nadleak-rss,flex,1\n", "missing column(s)"),
    ("experiment,variant,phase,x,x_unit,metric,value,unit,note\n"
     "adleak-rss,flex,,0,k_iterations,rss,2.2,GB,\n", "unit 'GB' is wrong"),
    ("experiment,variant,phase,x,x_unit,metric,value,unit,note\n"
     "adleak-rss,flex,,zero,k_iterations,rss,2.2,MB,\n", "is not a number"),
    ("experiment,variant,phase,x,x_unit,metric,value,unit,note\n"
     "no-such-workload,flex,,0,k_iterations,rss,2.2,MB,\n", "unknown experiment"),
])
def test_compare_malformed_csv_fails_in_one_line(tmp_path, content, expected):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    out = tmp_path / "out"
    code, stdout, stderr = cli("compare", "--measured", str(bad), "--out", str(out))
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sim: error: ") and expected in lines[0]
    assert f"{bad}:" in lines[0]               # names the file (and line)
    assert not (out / "predicted.csv").exists()


@pytest.mark.parametrize("args, expected", [
    (["-w", "adleak-rss", "--set", "steps=10"], "no selected workload has a parameter 'steps'"),
    (["-w", "adleak-rss", "--set", "iterations=ten"], "not a valid int"),
    (["-w", "adleak-rss", "--set", "iterations=0"], "must be > 0"),
    (["-w", "nope"], "unknown workload 'nope'"),
    (["-p", "nope"], "unknown policy 'nope'"),
])
def test_sweep_bad_arguments_fail_in_one_line(tmp_path, args, expected):
    code, _, stderr = cli("sweep", "--out", str(tmp_path / "out"), *args)
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], stderr


def test_dask_cluster_gives_the_same_data(swept, tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    out, _ = swept
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        info = sweep(out=tmp_path, scheduler=cluster.scheduler_address, **SMALL)
    assert info["computed"] == info["cells"]
    for name in ("predicted.csv", "errors.csv"):
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes(), name


class _Terminal:
    """A stderr that says it is a terminal, keeping what is written to it."""

    def __init__(self):
        self.text = ""

    def isatty(self):
        return True

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def test_a_terminal_is_told_the_figures_are_being_drawn(swept, monkeypatch):
    """After the bar's "done" the figures and the report take seconds: a terminal gets
    one line saying so before them; a pipe (or progress off) gets nothing."""
    out, _ = swept
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    sweep(out=out, jobs=1, **dict(SMALL, progress=True))
    assert "drawing the figures and the report ...\n" in terminal.text
    terminal.text = ""
    sweep(out=out, jobs=1, **SMALL)
    assert "drawing the figures" not in terminal.text
