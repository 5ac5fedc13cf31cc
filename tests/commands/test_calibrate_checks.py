"""`sim calibrate` keeps its record honest and checks its inputs before the fit: the base's
fitted points a refit moves are no longer called fitted, --out is checked up front
(existing files need --force), fitted parameters are labelled [fitted] and [layout] ones
refused, the header names the new profile, and the table and errors read plainly."""

import csv
import shutil
import tomllib
from pathlib import Path

import pytest

from clirun import assert_one_error, run_cli
from sim import paths
from sim.commands.calibrate import _mark_fitted, calibrate, select_points
from sim.analysis.data import read_measured
from sim.errors import UserError
from sim.engine.profile import load_profile
from sim.engine.runner import run_cell

ROOT = paths.ROOT
BASE = ROOT / "models" / "m2max-macos.toml"
QUIET = dict(echo=lambda *_: None, warn=lambda *_: None)


def _csv(path, rows):
    """A measured CSV of ``rows`` (experiment, variant, phase, x, x_unit, metric, value,
    unit); returns its path."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["experiment", "variant", "phase", "x", "x_unit", "metric", "value",
                    "unit", "note"])
        for row in rows:
            w.writerow(list(row) + [""])
    return path


def _predicted(workload, variant, x, metric="ms_per_step"):
    """The base profile's prediction of one point."""
    rows = run_cell(workload, variant, profile=load_profile("m2max-macos"))
    return next(r["value"] for r in rows if r["metric"] == metric and r["x"] == x)


def _rss_csv(tmp_path, value=2.3):
    """adleak-rss flex's RSS before the loop (MB): the cheapest point to fit
    process.baseline_rss_bytes on."""
    return _csv(tmp_path / "rss.csv", [("adleak-rss", "flex", "", 0, "k_iterations", "rss",
                                        value, "MB")])


# -- 1. the base's fitted points a refit moves ---------------------------------------------

def test_base_points_a_refit_moves_are_named_and_no_longer_fitted(tmp_path, capsys):
    """scan_node_ns refitted on the user's own detach point moves the base's detach//200
    and //500 (fitted on the seeds, not in this CSV): a warning on stderr names both, and
    the written record drops them; the base's other points stay fitted."""
    measured = _csv(tmp_path / "mine.csv",
                    [("p10-ema", "detach", "", 1000, "step", "ms_per_step", 5.2, "ms")])
    out = tmp_path / "mine.toml"
    code, stdout, err = run_cli(["calibrate", "--measured", str(measured),
                                 "--fit", "time.scan_node_ns",
                                 "--points", "p10-ema/detach/*/1000/*", "--out", str(out)],
                                capsys)
    assert code == 0, err
    warnings = [line for line in err if line.startswith("sim: warning:")]
    assert len(warnings) == 1
    assert "2 point(s)" in warnings[0]
    assert "p10-ema/detach//200/ms_per_step" in warnings[0]
    assert "p10-ema/detach//500/ms_per_step" in warnings[0]
    record = tomllib.loads(out.read_text())["calibration"]
    assert "p10-ema/detach//200/ms_per_step" not in record["points"]
    assert "p10-ema/detach//500/ms_per_step" not in record["points"]
    assert "p10-ema/detach//1000/ms_per_step" in record["points"]
    assert "adleak-rss/flex//0/rss" in record["points"]
    assert "time.scan_node_ns" in record["fitted"]


def test_only_moved_base_points_not_in_this_fit_are_dropped(tmp_path):
    """baseline_rss_bytes refitted on the user's adleak-rss//0 (a base point too: fitted
    again here) moves the base's adleak-rss//100 (fitted for the elementwise text): that
    one is named and dropped; points it does not move stay; a fresh record has no base
    points to warn about."""
    measured = read_measured(_rss_csv(tmp_path))
    warnings = []
    new, _ = calibrate(measured, "m2max-macos", ["process.baseline_rss_bytes"],
                       echo=lambda *_: None, warn=warnings.append)
    assert len(warnings) == 1 and "1 point(s)" in warnings[0]
    assert "adleak-rss/flex//100/rss 2.5 MB -> 2.6 MB" in warnings[0]
    assert "adleak-rss/flex//0/rss" in new.data["calibration"]["points"]   # this fit's now
    assert "adleak-rss/flex//100/rss" not in new.data["calibration"]["points"]
    assert "pit-infer/build//0/host_heap_delta" in new.data["calibration"]["points"]
    warnings.clear()
    calibrate(measured, "m2max-macos", ["process.baseline_rss_bytes"], fresh=True,
              echo=lambda *_: None, warn=warnings.append)
    assert warnings == []


# -- 2, 3. --out checked before the fit ------------------------------------------------------

def _no_simulation(monkeypatch):
    """Make any simulation of the fit an error: a check that runs first is up front."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("simulated before the --out check")
    monkeypatch.setattr("sim.commands.calibrate.run_cells", refuse)


def test_an_existing_file_that_is_not_the_base_needs_force(tmp_path, capsys, monkeypatch):
    other = tmp_path / "linux.toml"
    shutil.copy(ROOT / "models" / "linux-x86_64.toml", other)
    before = other.read_bytes()
    args = ["calibrate", "--measured", str(_rss_csv(tmp_path)),
            "--fit", "process.baseline_rss_bytes", "--out", str(other)]
    with monkeypatch.context() as m:
        _no_simulation(m)
        code, _, lines = run_cli(args, capsys)
    assert_one_error(code, lines, str(other), "--force")
    assert other.read_bytes() == before
    code, _, lines = run_cli(args + ["--force"], capsys)
    assert code == 0, lines
    assert tomllib.loads(other.read_text())["meta"]["platform"] == "macos-aarch64"


def test_the_base_profile_itself_may_be_rewritten(tmp_path, capsys):
    base = tmp_path / "base.toml"
    shutil.copy(BASE, base)
    code, _, lines = run_cli(["calibrate", "--measured", str(_rss_csv(tmp_path)),
                              "--profile", str(base), "--fit", "process.baseline_rss_bytes",
                              "--out", str(base)], capsys)
    assert code == 0, lines
    assert load_profile(base).get("process.baseline_rss_bytes") > 2199024


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")
def test_an_unwritable_out_directory_is_refused_before_the_fit(tmp_path, capsys, monkeypatch):
    """/proc takes no new file, even for root (whom os.access lets write anywhere): the
    check creates a temporary file there, before anything is simulated."""
    _no_simulation(monkeypatch)
    code, _, lines = run_cli(["calibrate", "--measured", str(_rss_csv(tmp_path)),
                              "--fit", "process.baseline_rss_bytes",
                              "--out", "/proc/x.toml"], capsys)
    assert_one_error(code, lines, "--out /proc/x.toml", "cannot create a file in /proc")


def test_the_write_check_leaves_nothing_behind(tmp_path):
    from sim.commands.calibrate import check_out
    check_out(tmp_path / "new.toml", BASE)
    assert list(tmp_path.iterdir()) == []


# -- 4. labels ------------------------------------------------------------------------------

def test_a_fitted_parameters_label_becomes_fitted(tmp_path):
    """An exclusive comment block's [guess] becomes [fitted]; a key sharing its block with
    others gets its own `# [fitted]` (the block still documents the others)."""
    base = tmp_path / "base.toml"
    text = BASE.read_text()
    text = text.replace("# ns once per process at its first backward (lazy statics, "
                        "first-touch)     [fitted]",
                        "# ns once per process at its first backward (lazy statics, "
                        "first-touch)     [guess]")
    text = text.replace("# GFLOP/s of matmul, GB/s of elementwise traffic, ns per op launch"
                        "           [fitted]",
                        "# GFLOP/s of matmul, GB/s of elementwise traffic, ns per op launch"
                        "           [guess]")
    assert text.count("[guess]") == BASE.read_text().count("[guess]") + 2
    base.write_text(text)
    step1 = _predicted("p10-ema", "without", 1)
    step50 = _predicted("p10-ema", "without", 50)
    measured = read_measured(_csv(tmp_path / "m.csv", [
        ("p10-ema", "without", "", 1, "step", "ms_per_step", step1 * 1.05, "ms"),
        ("p10-ema", "without", "", 50, "step", "ms_per_step", step50 * 1.01, "ms")]))
    out = tmp_path / "new.toml"
    calibrate(measured, str(base), ["time.process_warmup_ns", "backend.flex.op_overhead_ns"],
              out=out, fresh=True, **QUIET)
    lines = out.read_text().split("\n")
    warmup = next(i for i, line in enumerate(lines) if line.startswith("process_warmup_ns ="))
    assert lines[warmup - 1].endswith("[fitted]")
    overhead = next(line for line in lines if line.startswith("op_overhead_ns ="))
    assert overhead.endswith("# [fitted]")
    gflops = next(i for i, line in enumerate(lines) if line.startswith("gflops ="))
    assert lines[gflops - 1].endswith("[guess]")      # still what gflops and gbps rest on


def test_mark_fitted_keeps_a_comment_after_the_value():
    lines = ["[time]", "# ns per thing [guess]", "a_ns = 1.0", "b_ns = 2.0  # [source] x"]
    _mark_fitted(lines, 3)
    assert lines[3] == "b_ns = 2.0  # [fitted] x"
    _mark_fitted(lines, 2)    # shares the block with b_ns
    assert lines[1] == "# ns per thing [guess]" and lines[2] == "a_ns = 1.0  # [fitted]"


@pytest.mark.parametrize("param", ["layout.arc_node_bytes", "layout.group_width",
                                   "backend.flex.primitive_bytes"])
def test_a_layout_parameter_is_refused(param, tmp_path, capsys, monkeypatch):
    _no_simulation(monkeypatch)
    code, _, lines = run_cli(["calibrate", "--measured", str(_rss_csv(tmp_path)),
                              "--fit", param], capsys)
    assert_one_error(code, lines, f"--fit {param}", "[layout]")


# -- 5. header -------------------------------------------------------------------------------

def test_the_header_names_the_new_profile_its_base_and_inputs(tmp_path):
    csv_path = _rss_csv(tmp_path)
    measured = read_measured(csv_path)
    texts = []
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        out = tmp_path / sub / "mine.toml"
        calibrate(measured, "m2max-macos", ["process.baseline_rss_bytes"], out=out,
                  sources=["my/rss.csv"], **QUIET)
        texts.append(out.read_text())
    assert texts[0] == texts[1]                       # deterministic: no date
    head = texts[0].split("\n[meta]")[0]
    first = " ".join(line.lstrip("# ") for line in head.split("\n")[:4])
    assert first.startswith("Profile mine: written by `sim calibrate` from base profile "
                            "m2max-macos (models/m2max-macos.toml)")
    assert "my/rss.csv" in first and "process.baseline_rss_bytes" in first
    assert "# Profile m2max-macos" not in head
    assert "# Base profile m2max-macos: Apple M2 Max" in head
    # calibrated again from it: the header is replaced, not stacked
    again = tmp_path / "again.toml"
    calibrate(measured, str(tmp_path / "a" / "mine.toml"), ["process.baseline_rss_bytes"],
              out=again, sources=["my/rss.csv"], **QUIET)
    head = again.read_text().split("\n[meta]")[0]
    assert head.count("written by `sim calibrate`") == 1 and "# Profile again:" in head


# -- 6. nothing to gain ----------------------------------------------------------------------

def test_a_parameter_the_points_hardly_depend_on_is_refused(tmp_path):
    """The sweep's fixed cost per call is 0.002 % of p10-ema without's step 1, which the
    base already predicts: the fit would move it on nothing (500 -> 470 ns)."""
    value = _predicted("p10-ema", "without", 1)
    measured = read_measured(_csv(tmp_path / "m.csv", [
        ("p10-ema", "without", "", 1, "step", "ms_per_step", value, "ms")]))
    with pytest.raises(UserError, match="hardly depend on it"):
        calibrate(measured, "m2max-macos", ["time.sweep_fixed_ns"], **QUIET)


def test_values_stay_when_the_first_step_gains_nothing(tmp_path):
    value = _predicted("p10-ema", "without", 1)
    measured = read_measured(_csv(tmp_path / "m.csv", [
        ("p10-ema", "without", "", 1, "step", "ms_per_step", value * (1 + 2e-6), "ms")]))
    lines = []
    new, _ = calibrate(measured, "m2max-macos", ["time.process_warmup_ns"],
                       echo=lines.append, warn=lambda *_: None)
    assert new.get("time.process_warmup_ns") == load_profile("m2max-macos").get(
        "time.process_warmup_ns")
    assert any("values are kept" in str(line) for line in lines)


# -- 7, 8. the table and the last line ------------------------------------------------------

def test_panic_and_unpredicted_points_read_plainly(tmp_path):
    measured = read_measured(_csv(tmp_path / "m.csv", [
        ("p10-ema", "without", "", 1, "step", "ms_per_step", 1.4, "ms"),
        ("p10-ema", "detach", "", 7, "step", "ms_per_step", 1.0, "ms"),
        ("p10-ema", "target", "", 2, "step", "panic", 1, "event")]))
    lines = []
    calibrate(measured, "m2max-macos", ["time.process_warmup_ns"],
              points=["p10-ema/without//1/*"], echo=lines.append, warn=lambda *_: None)
    text = "\n".join(map(str, lines))
    assert "nan" not in text
    panic = next(line for line in lines if str(line).startswith("p10-ema/target//2/panic"))
    assert "panic at step 2" in panic and "panic at step 3" in panic
    missing = next(line for line in lines if str(line).startswith("p10-ema/detach//7/"))
    assert "no prediction" in missing and "unpredicted" in missing
    assert "OUT OF TOLERANCE" not in missing
    assert str(lines[-1]).strip().startswith("not written (no --out)")


# -- 9. selectors ---------------------------------------------------------------------------

def test_a_selector_with_too_few_fields_says_the_form(tmp_path, capsys):
    code, _, lines = run_cli(["calibrate", "--measured", str(ROOT / "experiments" / "measured"
                                                             / "seeds-m2max.csv"),
                              "--fit", "time.scan_node_ns", "--points", "p10-ema/detach/500"],
                             capsys)
    assert_one_error(code, lines, "--points p10-ema/detach/500", "3 field(s)",
                     "experiment/variant/phase/x/metric", "p10-ema/detach//500/ms_per_step")


def test_every_selector_must_match():
    measured = read_measured(ROOT / "experiments" / "measured" / "seeds-m2max.csv")
    assert len(select_points(measured, ["p10-ema/detach//500/*"])) == 2
    with pytest.raises(UserError, match="p10-ema/detach//5000/ms_per_step: no measured point"):
        select_points(measured, ["p10-ema/detach//500/*", "p10-ema/detach//5000/ms_per_step"])
    # a variant may hold '/': its points have more than 5 fields and still match
    rows = [{"experiment": "adleak-count-params", "variant": "untracked/size=16",
             "phase": "after-loop", "x": 1000.0, "metric": "ns_per_op"}]
    assert select_points(rows, ["adleak-count-params/untracked/size=16/*/1000/*"]) == rows


def _release_row(value, tag):
    return {"experiment": "mechanism-cost", "variant": "release",
            "phase": "release-minus-plain", "x": 250.0, "x_unit": "iterations",
            "metric": "ns_per_op", "value": value, "unit": "ns", "note": "",
            "burn_version": tag}


def test_a_fix_only_parameter_is_fitted_on_its_patch_less_unpatched_burn(tmp_path):
    """time.drop_release_node_ns: drop-release's rows (burn_version 0.22.1+drop-release)
    are fitted to drop-release's predictions, on what the patch adds over unpatched burn
    (a handle's own drop, 58 ns here, is charged elsewhere by the model)."""
    from sim.commands.calibrate import _split_point, measured_policy, policy_point
    patched = [_release_row(358.0, "0.22.1+drop-release")]
    unpatched = [_release_row(58.0, "0.22.1")]
    assert measured_policy(patched) == "drop-release"
    assert measured_policy(unpatched) == "burn-0.22.1"
    with pytest.raises(UserError, match="fit them to -p drop-release"):
        measured_policy(patched, "skip-untracked")
    with pytest.raises(UserError, match="different builds"):
        measured_policy(patched + unpatched)
    point = policy_point("drop-release", "mechanism-cost/release/release-minus-plain/250/ns_per_op")
    assert _split_point(point) == ("drop-release",
                                   "mechanism-cost/release/release-minus-plain/250/ns_per_op")
    assert _split_point("sizeof/burn_autodiff::NodeId//0/size_bytes")[0] == "burn-0.22.1"
    out = tmp_path / "fitted.toml"
    new, _ = calibrate(patched, "linux-x86_64", ["time.drop_release_node_ns"], out=str(out),
                       against=unpatched, sets={"release_reps": "1"}, fresh=True, **QUIET)
    assert new.get("time.drop_release_node_ns") == pytest.approx(300.0, rel=1e-3)
    record = tomllib.loads(out.read_text())["calibration"]
    assert "drop-release:mechanism-cost/release/release-minus-plain/250/ns_per_op" in \
        record["points"]
    with pytest.raises(UserError, match="unpatched burn has no measured point"):
        calibrate(patched, "linux-x86_64", ["time.drop_release_node_ns"],
                  against=[dict(unpatched[0], x=500.0)], **QUIET)


def test_the_base_points_check_runs_a_workloads_quick_loop_where_it_predicts_them(monkeypatch):
    """The check of the base's recorded points (the ones this fit's measured rows do not
    predict) runs each workload with its QUICK loop counts when that run predicts every
    recorded point of it, else as the workload's defaults: adleak-rss's text points at 0
    and 10 thousand iterations from its quick 10,000 iterations (not 100,000), p10-ema's
    step 500 from a full run (its quick run stops at 200)."""
    from sim.commands.calibrate import _earlier_predictions
    calls = []

    def fake_run_cells(cells, profile, jobs=1, quick=None):
        quick = quick or {}
        calls.append((profile, cells[0][0], dict(quick.get(cells[0][0], {}))))
        last = {"adleak-rss": (10, 100), "p10-ema": (200, 2000)}[cells[0][0]][
            cells[0][0] not in quick]
        metric = "text_rss_delta" if cells[0][0] == "adleak-rss" else "ms_per_step"
        return [{"experiment": w, "variant": v, "phase": "", "x": x, "metric": metric,
                 "value": 1.0, "policy": p} for w, v, p in cells for x in (0, 10, 200, 500)
                if x <= last]
    monkeypatch.setattr("sim.commands.calibrate.run_cells", fake_run_cells)
    points = ["adleak-rss/flex//0/text_rss_delta", "adleak-rss/flex//10/text_rss_delta",
              "p10-ema/without//500/ms_per_step"]
    cells = [("adleak-rss", "flex", "burn-0.22.1"), ("p10-ema", "without", "burn-0.22.1")]
    before, after, checked = _earlier_predictions(points, cells, "before", "after", 1)
    assert checked == set(points[:2])            # adleak-rss's: on its quick run
    assert calls == [("before", "adleak-rss", {"iterations": 10_000}),
                     ("after", "adleak-rss", {"iterations": 10_000}),
                     ("before", "p10-ema", {"steps": 200}),      # step 500 missing: full
                     ("before", "p10-ema", {}), ("after", "p10-ema", {})]
    assert {(r["experiment"], r["x"]) for r in before} == {(r["experiment"], r["x"])
                                                             for r in after}
    assert ("p10-ema", 500) in {(r["experiment"], r["x"]) for r in after}


def test_a_base_point_of_a_fitted_cell_its_run_does_not_predict_is_still_checked(
        monkeypatch):
    """A recorded point of a cell this fit's measured rows run too, but at an x their run
    does not reach (p10-ema's step 500 where this fit's rows are quick, 200 steps), is
    checked on a run that predicts it (a full one), not skipped as predicted by neither
    profile; a recorded point the fit's own run predicts is not run again."""
    from sim.commands.calibrate import _base_point_rows
    calls = []

    def fake_run_cells(cells, profile, jobs=1, quick=None):
        quick = quick or {}
        calls.append((profile, cells[0][0], dict(quick.get(cells[0][0], {}))))
        last = 200 if cells[0][0] in quick else 2000
        return [{"experiment": w, "variant": v, "phase": "", "x": x,
                 "metric": "ms_per_step", "value": 1.0, "policy": p}
                for w, v, p in cells for x in (0, 200, 500) if x <= last]
    monkeypatch.setattr("sim.commands.calibrate.run_cells", fake_run_cells)
    cells = [("p10-ema", "without", "burn-0.22.1")]
    fitted = fake_run_cells(cells, "before", quick={"p10-ema": {"steps": 200}})
    calls.clear()
    points = ["p10-ema/without//200/ms_per_step", "p10-ema/without//500/ms_per_step"]
    before, after, _ = _base_point_rows(points, fitted, "before", "after", 1)
    assert ("p10-ema", 500) in {(r["experiment"], r["x"]) for r in before}
    assert ("p10-ema", 500) in {(r["experiment"], r["x"]) for r in after}
    assert [c[:2] for c in calls if not c[2]] == [("before", "p10-ema"), ("after", "p10-ema")]
    calls.clear()
    assert _base_point_rows(points[:1], fitted, "before", "after", 1) == ([], [], set())
    assert calls == []


def _fake_chain_runs(calls):
    """A run_cells stand-in whose quick run (a chain of 200) predicts the same rounds as the
    full one (a chain of 2,000) at another value, as backward-cost's does."""
    def fake_run_cells(cells, profile, jobs=1, quick=None):
        quick = quick or {}
        calls.append((profile, dict(quick.get(cells[0][0], {}))))
        value = 2.0 if cells[0][0] in quick else 1.0
        return [{"experiment": w, "variant": v, "phase": "forward", "x": x,
                 "metric": "ms_per_step", "value": value, "policy": p}
                for w, v, p in cells for x in (1, 2, 3)]
    return fake_run_cells


def test_a_base_point_is_checked_on_the_run_its_record_says_it_was_fitted_on(monkeypatch):
    """`_earlier_predictions` assumed a quick run's rows equal a full run's where both have
    them (session 57's list); backward-cost's do not (its QUICK shortens the chain, not a
    loop along x: ms per step 0.3-4 % apart at the same round, linux-x86_64). The record
    keeps ``quick_points``, the points fitted on a quick run; each base point is checked on
    its own run: a full-run point on the full run though the quick run predicts it too."""
    from sim.commands.calibrate import _earlier_predictions
    calls = []
    monkeypatch.setattr("sim.commands.calibrate.run_cells", _fake_chain_runs(calls))
    full_point = "backward-cost/mul_scalar/forward/3/ms_per_step"
    quick_point = "backward-cost/relu/forward/3/ms_per_step"
    cells = [("backward-cost", "mul_scalar", "burn-0.22.1"),
             ("backward-cost", "relu", "burn-0.22.1")]
    before, after, checked = _earlier_predictions([full_point, quick_point], cells, "before",
                                                  "after", 1, quick_points=[quick_point])
    assert checked == {quick_point}
    assert sorted((r["variant"], r["value"]) for r in before) == [("mul_scalar", 1.0),
                                                                  ("relu", 2.0)]
    assert len(after) == 2
    assert calls == [("before", {}), ("after", {}),
                     ("before", {"chain": 200}), ("after", {"chain": 200})]
    # a record without quick_points: the quick run where it predicts every point, and the
    # points it checked on the quick run said so
    calls.clear()
    before, _, checked = _earlier_predictions([full_point], cells, "before", "after", 1)
    assert checked == {full_point} and [r["value"] for r in before] == [2.0]


def test_a_base_point_the_fits_run_has_at_the_other_length_is_checked_on_its_own(
        monkeypatch):
    """A base point of a cell this fit runs too, recorded as fitted on a full run, where
    this fit's run is quick: checked on a full run, not on the fit's quick one."""
    from sim.commands.calibrate import _base_point_rows
    calls = []
    fake = _fake_chain_runs(calls)
    monkeypatch.setattr("sim.commands.calibrate.run_cells", fake)
    quick = {"backward-cost": {"chain": 200}}
    fitted = fake([("backward-cost", "mul_scalar", "burn-0.22.1")], "before", quick=quick)
    calls.clear()
    point = "backward-cost/mul_scalar/forward/3/ms_per_step"
    before, _, on_quick = _base_point_rows([point], fitted, "before", "after", 1,
                                           quick_points=[], quick=quick)
    assert [r["value"] for r in before] == [1.0] and on_quick == set()
    assert calls == [("before", {}), ("after", {})]
    calls.clear()       # recorded as quick: the fit's own run checks it
    assert _base_point_rows([point], fitted, "before", "after", 1, quick_points=[point],
                            quick=quick) == ([], [], {point})
    assert calls == []
