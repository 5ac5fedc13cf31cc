"""`sim calibrate` fits what it is asked to, including a parameter sitting near zero."""

import csv

from sim import paths
from sim.commands.calibrate import _with, calibrate
from sim.analysis.data import read_measured
from sim.engine.profile import load_profile
from sim.engine.runner import run_cell

ROOT = paths.ROOT


def _step1_ms(tmp_path, value):
    """The measured points of one CSV: p10-ema without's step-1 ms/step = ``value``."""
    path = tmp_path / "m.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["experiment", "variant", "phase", "x", "x_unit", "metric", "value",
                    "unit", "note"])
        w.writerow(["p10-ema", "without", "", 1, "step", "ms_per_step", value, "ms", ""])
    return read_measured(path)


def test_a_parameter_fitted_to_zero_can_be_fitted_again(tmp_path):
    """A multiplicative probe of a parameter at ~0 moves nothing; the fit falls back to an
    additive step instead of refusing the parameter (the Linux profile's warm-up)."""
    profile = _with(load_profile("m2max-macos"), {"time.process_warmup_ns": 1e-5})
    rows = run_cell("p10-ema", "without", profile=profile,
                    sets={"steps": 3, "report_at": "1,3"})
    point = next(r for r in rows if r["metric"] == "ms_per_step" and r["x"] == 1)
    # 0.2 ms more than the model gives with no warm-up: the warm-up should take it
    measured = _step1_ms(tmp_path, point["value"] + 0.2)
    new, table = calibrate(measured, profile, ["time.process_warmup_ns"], echo=lambda *_: None)
    assert abs(new.time["process_warmup_ns"] - 2e5) < 2e3
    assert all(r["ok"] for r in table if r["status"] == "fitted")


def test_a_parameter_no_fitted_point_depends_on_is_refused(tmp_path):
    """Fitting the Metal kernel cache size on a Flex time point: one clear error."""
    import pytest
    from sim.errors import UserError
    profile = load_profile("m2max-macos")
    with pytest.raises(UserError, match="no fitted point depends on it"):
        calibrate(_step1_ms(tmp_path, 1.4), profile, ["backend.metal.kernel_bytes"],
                  echo=lambda *_: None)


def test_fresh_forgets_the_base_profiles_calibration_record(tmp_path):
    """A staged calibration adds to the base profile's [calibration] record; ``fresh``
    starts a new one, so a parameter no longer fitted does not stay listed."""
    profile = load_profile("m2max-macos")
    rows = run_cell("p10-ema", "without", profile=profile, sets={"steps": 3, "report_at": "1,3"})
    point = next(r for r in rows if r["metric"] == "ms_per_step" and r["x"] == 1)
    measured = _step1_ms(tmp_path, point["value"])
    quiet = dict(echo=lambda *_: None)
    staged, _ = calibrate(measured, profile, ["time.process_warmup_ns"], **quiet)
    fresh, _ = calibrate(measured, profile, ["time.process_warmup_ns"], fresh=True, **quiet)
    old = profile.data["calibration"]
    assert set(staged.data["calibration"]["fitted"]) == set(old["fitted"])
    assert fresh.data["calibration"] == {
        "fitted": ["time.process_warmup_ns"], "points": ["p10-ema/without//1/ms_per_step"],
        "quick_points": [],
        "fitted_on": {"time.process_warmup_ns": ["p10-ema/without//1/ms_per_step"]}}
    assert staged.data["calibration"]["fitted_on"] == fresh.data["calibration"]["fitted_on"]


def test_the_record_says_which_points_each_parameter_was_fitted_on():
    """``fitted_on``: each parameter with the points of the call that last fitted it; a
    refit replaces its entry, and a point only it was fitted on leaves ``points`` (when
    every listed parameter has an entry; an older record keeps such points)."""
    from sim.commands.calibrate import _record
    first = _record({}, ["a.x", "a.y"], ["p1", "p2"], set())
    assert first["fitted_on"] == {"a.x": ["p1", "p2"], "a.y": ["p1", "p2"]}
    second = _record(first, ["a.z"], ["p3"], set())
    assert second["points"] == ["p1", "p2", "p3"]
    refit = _record(_record(second, ["a.x"], ["p4"], set()), ["a.z"], ["p5"], set())
    assert refit["fitted"] == ["a.x", "a.y", "a.z"]
    assert refit["fitted_on"] == {"a.x": ["p4"], "a.y": ["p1", "p2"], "a.z": ["p5"]}
    assert refit["points"] == ["p1", "p2", "p4", "p5"]       # p3: only a.z's, refitted
    legacy = _record({"fitted": ["a.x", "a.y"], "points": ["p1", "p2"]}, ["a.x"], ["p4"],
                     {"p2"})
    assert legacy["points"] == ["p1", "p4"]                  # p2 moved: dropped
    assert legacy["fitted_on"] == {"a.x": ["p4"]}
    # quick_points: the record's points fitted on a quick run, in its order; kept where
    # every point's run is known (fresh, or a base that keeps it), not on a legacy base
    quick = _record({"fitted": ["a.x"], "points": ["p1", "p2"], "quick_points": ["p2"]},
                    ["a.y"], ["p3", "p4"], {"p1"}, {"p2", "p4"})
    assert quick["points"] == ["p2", "p3", "p4"] and quick["quick_points"] == ["p2", "p4"]
    assert _record({}, ["a.x"], ["p1", "p2"], set(), {"p2"})["quick_points"] == ["p2"]
    assert "quick_points" not in legacy


def test_iteration_limit_is_reported(tmp_path):
    """A fit cut short by --max-iterations says so; with room it converges to the point."""
    profile = _with(load_profile("m2max-macos"), {"time.process_warmup_ns": 1e3})
    measured = _step1_ms(tmp_path, 3.0)   # ~1.6 ms of warm-up: far from 1 us
    lines = []
    short, _ = calibrate(measured, profile, ["time.process_warmup_ns"], echo=lines.append,
                         max_iterations=1)
    assert any("stopped at --max-iterations 1" in str(line) for line in lines)
    lines.clear()
    full, table = calibrate(measured, profile, ["time.process_warmup_ns"], echo=lines.append,
                            max_iterations=20)
    assert not any("stopped at --max-iterations" in str(line) for line in lines)
    assert all(r["ok"] for r in table if r["status"] == "fitted")
    assert full.time["process_warmup_ns"] > short.time["process_warmup_ns"]


def test_coordinate_steps_move_an_independent_parameter_when_the_joint_step_fails():
    # a baseline-like parameter whose point depends on it alone: its own Gauss-Newton
    # step (in log space) lands on the measured value; a parameter with no handle stays
    import numpy as np
    from sim.analysis.fit import coordinate_steps as _coordinate_steps

    def evaluate(v):
        return np.array([np.log(v["base"] / 2.0), 0.3])
    current = {"base": 1.0, "other": 5.0}
    r0 = evaluate(current)
    jac = np.array([[1.0, 0.0], [0.0, 0.0]])
    values, r1 = _coordinate_steps(current, r0, jac, [True, True], ["base", "other"], evaluate)
    assert abs(values["base"] - 2.0) < 1e-9 and values["other"] == 5.0
    assert abs(r1[0]) < 1e-9
    # nothing to gain: no move
    values, r1 = _coordinate_steps(values, r1, jac, [True, True], ["base", "other"], evaluate)
    assert r1 is None


def test_the_cli_shows_each_iterations_progress_on_stderr(tmp_path):
    """A fit of many parameters runs for minutes: stderr names each simulation's purpose
    while stdout keeps the report."""
    from click.testing import CliRunner

    from sim.commands.cli import cli
    _step1_ms(tmp_path, 1.5)
    out = tmp_path / "fit.toml"
    result = CliRunner().invoke(cli, [
        "calibrate", "--measured", str(tmp_path / "m.csv"), "--profile", "m2max-macos",
        "--fit", "time.process_warmup_ns", "--max-iterations", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    err = result.stderr
    assert "simulations (iteration 1)" in err and "d/d time.process_warmup_ns" in err
    assert "iteration 1: rms relative error" in result.stdout
    assert "simulations" not in result.stdout and out.exists()


def test_set_gives_the_fitted_cells_a_workload_parameter():
    """``--set steps=500``: the workloads that have the key run with it, the others as
    they are; a key no simulated workload has is one error line."""
    import pytest
    from sim.commands.calibrate import _with_sets
    from sim.errors import UserError
    cells = [("p10-ema", "detach", "burn-0.22.1"), ("op-cost", "plain/add", "burn-0.22.1")]
    quick = {"op-cost": {"iterations": "10"}}
    got = _with_sets(quick, cells, {"steps": "500"})
    assert got == {"op-cost": {"iterations": "10"}, "p10-ema": {"steps": "500"}}
    assert quick == {"op-cost": {"iterations": "10"}}            # not changed in place
    assert _with_sets(quick, cells, {}) is quick
    with pytest.raises(UserError, match="--set no_such_key: no simulated workload"):
        _with_sets(quick, cells, {"no_such_key": "1"})
