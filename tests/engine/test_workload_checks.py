"""A workload file's constants and a run's ``--set`` values are checked before anything
runs: each mistake is one error line naming the file and constant (or the key), exit 2,
never a traceback."""

import pytest

from clirun import assert_one_error, run_cli
from sim.engine.workloads import builtin_names, load_workload

RUN = 'def run(sim, variant):\n    yield sim.sample(0, "iterations", rss=1)\n'
RUN_K = 'def run(sim, variant, k):\n    yield sim.sample(0, "iterations", rss=1)\n'

# -- badly typed constants (item 1) ---------------------------------------------------------

CONSTANT_CASES = {
    "variants-int": ("VARIANTS = 5\n" + RUN, "VARIANTS must be", "not int 5"),
    "variants-string": ("VARIANTS = 'abc'\n" + RUN, "VARIANTS must be",
                        "not the string 'abc'"),
    "variants-empty": ("VARIANTS = ()\n" + RUN, "VARIANTS must be a non-empty"),
    "variants-repeated": ("VARIANTS = ('a', 'b', 'a')\n" + RUN, "VARIANTS names 'a' more"),
    "variants-empty-name": ("VARIANTS = ('a', '')\n" + RUN, "VARIANTS must be"),
    "params-int": ("PARAMS = 5\n" + RUN, "PARAMS must be a dict", "not int 5"),
    "params-list-default": ("PARAMS = {'k': [1, 2]}\n" + RUN_K, "PARAMS['k'] must be",
                            "int, float, bool or str"),
    "params-non-str-key": ("PARAMS = {1: 2}\n" + RUN, "PARAMS: parameter names"),
    "choices-int": ("PARAMS = {'k': 1}\nCHOICES = {'k': 5}\n" + RUN_K, "CHOICES names 'k'",
                    "with int 5"),
    "choices-not-a-dict": ("CHOICES = ('k',)\n" + RUN, "CHOICES must be a dict"),
    "choices-no-such-param": ("PARAMS = {'k': 1}\nCHOICES = {'j': (1,)}\n" + RUN_K,
                              "CHOICES names 'j', which is not a parameter"),
    "choices-default-outside": ("PARAMS = {'k': 1}\nCHOICES = {'k': (2, 3)}\n" + RUN_K,
                                "CHOICES names 'k'", "default 1 is not one of its choices"),
    "positive-no-such-param": ("POSITIVE = ('nosuch',)\n" + RUN, "POSITIVE names 'nosuch'",
                               "not a numeric parameter"),
    "positive-string-param": ("PARAMS = {'k': 'a'}\nPOSITIVE = ('k',)\n" + RUN_K,
                              "POSITIVE names 'k'"),
    "positive-bare-string": ("PARAMS = {'k': 1}\nPOSITIVE = 'k'\n" + RUN_K,
                             "POSITIVE must be", "not the string 'k'"),
    "experiment-empty": ("EXPERIMENT = ''\n" + RUN, "EXPERIMENT must be a non-empty string"),
    "experiment-int": ("EXPERIMENT = 7\n" + RUN, "EXPERIMENT must be", "not int 7"),
    "measured-string": ("MEASURED = 'x'\n" + RUN, "MEASURED must be", "not the string 'x'"),
    "measured-ints": ("MEASURED = (1, 2)\n" + RUN, "MEASURED must be"),
    "description-int": ("DESCRIPTION = 1\n" + RUN, "DESCRIPTION must be a string"),
    "sweep-string": ("SWEEP = 'no'\n" + RUN, "SWEEP must be True or False", "not str 'no'"),
    # run() must take what PARAMS declares (and need nothing else)
    "run-lacks-a-param": ("PARAMS = {'k': 1, 'j': 2}\n" + RUN_K,
                          "run(sim, variant, k) cannot be called",
                          "no parameter 'j', which PARAMS declares"),
    "run-needs-an-undeclared-param": ("PARAMS = {}\n" + RUN_K, "run(sim, variant, k)",
                                      "requires 'k', which PARAMS does not declare"),
}


@pytest.mark.parametrize("command", ["run", "sweep"])
@pytest.mark.parametrize("case", sorted(CONSTANT_CASES))
def test_badly_typed_constant(case, command, tmp_path, capsys):
    source, *fragments = CONSTANT_CASES[case]
    path = tmp_path / f"{case.replace('-', '_')}.py"
    path.write_text(source)
    out = tmp_path / "out"
    args = ([command, str(path), "--out", str(out)] if command == "run" else
            [command, "-w", str(path), "-p", "burn-0.22.1", "--out", str(out)])
    code, _, lines = run_cli(args, capsys)
    assert_one_error(code, lines, f"{path}: ", *fragments)
    assert not out.exists()


def test_good_constants_still_load(tmp_path, capsys):
    """Lists are as good as tuples; run() may take **params or defaults of its own."""
    path = tmp_path / "fine.py"
    path.write_text("EXPERIMENT = 'fine'\nVARIANTS = ['a', 'b']\nDESCRIPTION = 'fine'\n"
                    "PARAMS = {'k': 1, 'lr': 0.5, 'on': True, 'mode': 'x'}\n"
                    "POSITIVE = ['k', 'lr']\nCHOICES = {'mode': ['x', 'y']}\n"
                    "MEASURED = []\nSWEEP = False\n"
                    "def run(sim, variant, k, extra=3, **rest):\n"
                    "    yield sim.sample(k, 'iterations', rss=1)\n")
    code, out, lines = run_cli(["run", str(path), "-v", "b", "--set", "mode=y",
                                "--format", "csv"], capsys)
    assert code == 0, lines
    assert "fine,b," in out


def test_every_builtin_workload_loads(capsys):
    names = builtin_names()
    assert "p10-ema" in names and "pit-infer-flex" in names
    code, out, lines = run_cli(["list"], capsys)
    assert code == 0, lines
    assert all(name in out for name in names)
    # `sim sweep -w all` is the default set, not every workload: the list marks which
    marked = {line.split()[0] for line in out.splitlines() if line.endswith("  *")}
    assert marked == {n for n in names if load_workload(n).sweep}
    assert "p10-ema" in marked and "op-cost" not in marked


# -- --set values (item 2) -------------------------------------------------------------------

@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e999"])
def test_non_finite_float_is_rejected(value, capsys):
    code, _, lines = run_cli(["run", "p10-ema", "-v", "without", "--set", "steps=2",
                              "--set", f"lr={value}"], capsys)
    assert_one_error(code, lines, f"--set lr={value}: not a finite number")


def test_non_finite_float_is_rejected_by_sweep(tmp_path, capsys):
    out = tmp_path / "out"
    code, _, lines = run_cli(["sweep", "-w", "p10-ema", "-p", "burn-0.22.1", "--set",
                              "lr=1e-3,nan", "--out", str(out)], capsys)
    assert_one_error(code, lines, "--set lr=nan: not a finite number")
    assert not out.exists()


def test_repeated_set_key_is_an_error(tmp_path, capsys):
    out = tmp_path / "rows.csv"
    code, _, lines = run_cli(["run", "p10-ema", "-v", "without", "--set", "steps=1",
                              "--set", "steps=2", "--out", str(out)], capsys)
    assert_one_error(code, lines, "--set steps=2", "parameter 'steps' is already set",
                     "--set steps=1")
    assert not out.exists()


def test_sweep_still_adds_values_of_a_repeated_key():
    from sim.commands.sweep import parse_grid
    from sim.engine.workloads import load_workload
    grid = parse_grid(["steps=5", "steps=7,5"], [load_workload("p10-ema")])
    assert grid["p10-ema"] == [{"steps": 5}, {"steps": 7}]


REPORT_AT_CASES = {
    "": "expected at least one step number in 1..60",
    " , ": "expected at least one step number in 1..60",
    "0": "step 0 is outside 1..60",
    "1,-5": "step -5 is outside 1..60",
    "1,50,61": "step 61 is outside 1..60",
    "1,x": "expected comma-separated step numbers in 1..60",
}


@pytest.mark.parametrize("workload", ["p10-ema", "p10-ema-adam"])
@pytest.mark.parametrize("value", sorted(REPORT_AT_CASES))
def test_bad_report_at(workload, value, tmp_path, capsys):
    out = tmp_path / "rows.csv"
    code, _, lines = run_cli(["run", workload, "-v", "without", "--set", "steps=60",
                              "--set", f"report_at={value}", "--out", str(out)], capsys)
    assert_one_error(code, lines, f"--set report_at={value.strip()}:",
                     REPORT_AT_CASES[value])
    assert not out.exists()


@pytest.mark.parametrize("value, fragment", [("0,50", "step 0 is outside 1..20"),
                                             ("", "expected at least one step number"),
                                             ("1,x", "expected comma-separated step numbers")])
def test_bad_report_at_of_p10_ema_params(value, fragment, capsys):
    code, _, lines = run_cli(["run", "p10-ema-params", "-v", "detach/steps=20",
                              "--set", f"report_at={value}"], capsys)
    assert_one_error(code, lines, f"--set report_at={value}:", fragment)


def _steps(workload, variant, *sets):
    from sim.engine.runner import run_cell
    rows = run_cell(workload, variant, sets=dict(s.split("=", 1) for s in sets),
                    observables=False)
    return sorted({int(r["x"]) for r in rows if r["metric"] == "ms_per_step"})


def test_report_at_in_range_and_default_schedule():
    """Explicit steps in 1..steps are reported, plus the last; the default schedule (the
    probe's, for 2000 steps) is cut at a shorter run; p10-ema-params cuts its own."""
    assert _steps("p10-ema", "without", "steps=60", "report_at=1,50") == [1, 50, 60]
    assert _steps("p10-ema", "without", "steps=60", "report_at=60") == [60]
    assert _steps("p10-ema", "without", "steps=120") == [1, 50, 100, 120]
    assert _steps("p10-ema-adam", "without", "steps=60", "features=8",
                  "batch=4") == [1, 50, 60]
    assert _steps("p10-ema-params", "detach/steps=20", "features=8", "batch=4") == [1, 20]
    assert _steps("p10-ema-params", "detach/steps=20", "features=8", "batch=4",
                  "report_at=5,5000") == [5, 20]


def test_sweep_checks_every_cells_report_steps_before_any_runs(tmp_path, capsys):
    """A workload's ``check``: the grid point steps=20 cannot report at step 30, so the
    sweep stops before its first cell (no progress bar, no results directory)."""
    out = tmp_path / "out"
    code, _, lines = run_cli(["sweep", "-w", "p10-ema", "-p", "burn-0.22.1", "--set",
                              "steps=40,20", "--set", "report_at=1,30", "--out", str(out)],
                             capsys)
    assert_one_error(code, lines, "--set report_at=1,30: step 30 is outside 1..20")
    assert not out.exists()


def test_check_must_be_a_function(tmp_path, capsys):
    path = tmp_path / "w.py"
    path.write_text("check = 5\n" + RUN)
    code, _, lines = run_cli(["run", str(path)], capsys)
    assert_one_error(code, lines, str(path), "check must be a function")


def test_params_workloads_report_the_process_rss():
    """The long runs' replicas keep the simulated process's RSS (``rss_bytes``, whole pages)
    at every reported step beside ``ms_per_step``, and nothing else; ema-balanced's own
    workload samples it only when its params replica asks."""
    from sim.engine.runner import run_cell
    for workload, variant, last in (("p10-ema-params", "detach/steps=20", 20),
                                    ("ema-balanced-params", "detach/steps=500", 500)):
        rows = run_cell(workload, variant, sets={"features": "8", "batch": "4",
                                                 "report_at": "1,10"}, observables=False)
        assert {r["metric"] for r in rows} == {"ms_per_step", "rss_bytes"}
        rss = {int(r["x"]): r["value"] for r in rows if r["metric"] == "rss_bytes"}
        assert sorted(rss) == [1, 10, last]
        assert all(v > 0 and v % 4096 == 0 for v in rss.values())
    rows = run_cell("ema-balanced", "detach", sets={"steps": "10", "report_every": "5",
                                                    "features": "8", "batch": "4"},
                    observables=False)
    assert "rss_bytes" not in {r["metric"] for r in rows}


# -- a workload's metric named like a bookkeeping observable ---------------------------------

OBSERVABLE_NAMED = ("def run(sim, variant):\n"
                    "    yield sim.sample(0, 'iterations', rss=1, heap_bytes=5)\n")


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_metric_named_like_an_observable_is_one_error(command, tmp_path, capsys):
    """Every sample records the observables itself: a workload naming one in ``sim.sample``
    would print (and write) that row twice, once with its value and once with the model's;
    it is one error naming the line and the metric, and nothing is written."""
    path = tmp_path / "named.py"
    path.write_text(OBSERVABLE_NAMED)
    out = tmp_path / "out"
    out.mkdir()
    args = ([command, str(path), "--out", str(out / "rows.csv")] if command == "run" else
            [command, "-w", str(path), "-p", "burn-0.22.1", "--out", str(out)])
    code, _, lines = run_cli(args, capsys)
    # a sweep learns it only in the cell: its bar has drawn the cell before the error
    lines = [line for line in lines if not line.startswith("[")]
    assert_one_error(code, lines, f"{path}:2: ", "sim.sample(heap_bytes=...)",
                     "observables=False")
    assert not list(out.iterdir())


def test_observables_off_records_the_workloads_own_once(tmp_path, capsys):
    path = tmp_path / "own.py"
    path.write_text(OBSERVABLE_NAMED.replace("heap_bytes=5)", "heap_bytes=5, observables=False)"))
    csv = tmp_path / "rows.csv"
    code, _, lines = run_cli(["run", str(path), "--out", str(csv)], capsys)
    assert code == 0, lines
    rows = [line.split(",") for line in csv.read_text().splitlines()[1:]]
    assert [(r[5], r[6]) for r in rows] == [("rss", "1"), ("heap_bytes", "5")]


def test_the_observables_a_sample_records_are_the_declared_ones(tmp_path):
    from sim.engine.runner import run_cell
    from sim.units import OBSERVABLES
    path = tmp_path / "one.py"
    path.write_text(RUN)
    rows = run_cell(str(path), "default")
    assert tuple(r["metric"] for r in rows) == ("rss",) + OBSERVABLES


@pytest.mark.parametrize("value, said", [
    ("'abc'", "the value must be a number, not str 'abc'"),
    ("None", "the value must be a number, not NoneType"),
    ("float('nan')", "the value is nan; a sampled value must be a finite number"),
    ("float('inf')", "the value is inf; a sampled value must be a finite number"),
    ("-float('inf')", "the value is -inf; a sampled value must be a finite number"),
    ("True", "the value must be a number, not bool")])
def test_a_metric_value_that_is_not_a_number_is_one_error(value, said, tmp_path, capsys):
    """`sim run` wrote such a row (`rss,abc,MB`) that `sim compare` then refused to read
    back (new-user walkthrough, session 57): the run refuses it at the sample; a nan or an
    infinity is said as itself, not as 'not float nan' (review, session 57)."""
    path = tmp_path / "value.py"
    path.write_text(f"def run(sim, variant):\n    yield sim.sample(0, 'iterations', rss={value})\n")
    out = tmp_path / "rows.csv"
    code, _, lines = run_cli(["run", str(path), "--out", str(out)], capsys)
    assert_one_error(code, lines, f"{path}:2: ", f"metric rss: {said}")
    assert not out.exists()


@pytest.mark.parametrize("value", ["10 ** 400", "type('I', (int,), {})(10 ** 400)"])
def test_an_int_too_large_for_a_float_is_one_error(value, tmp_path, capsys):
    """An int past the largest float: `sim run` wrote it whole (a comparison reads it back
    as an infinity), and an int subclass gave 'raised OverflowError'; refused at the
    sample, as an infinity is, with no rows written."""
    path = tmp_path / "value.py"
    path.write_text(f"def run(sim, variant):\n    yield sim.sample(0, 'iterations', rss={value})\n")
    out = tmp_path / "rows.csv"
    code, _, lines = run_cli(["run", str(path), "--out", str(out)], capsys)
    assert_one_error(code, lines, f"{path}:2: ", "metric rss: the value must be a number",
                     "not I 1000" if "type" in value else "not int 1000")
    assert not out.exists()


def test_a_numpy_number_is_a_number(tmp_path):
    from sim.engine.runner import run_cell
    path = tmp_path / "np.py"
    path.write_text("import numpy as np\ndef run(sim, variant):\n"
                    "    yield sim.sample(0, 'iterations', rss=np.float32(2.5), "
                    "observables=False)\n")
    assert [r["value"] for r in run_cell(str(path), "default")] == [2.5]


def test_an_int_parameter_takes_a_whole_number_in_exponent_notation(capsys):
    """`--set iterations=1e6` was refused as `not a valid int` (walkthrough, session 59: the
    way a million is often written); a whole number in exponent notation is that int, the
    same rows as its digits, and a fraction says which forms an int takes."""
    args = ["run", "adleak-count", "-v", "flex", "--format", "csv", "--set"]
    code, digits, lines = run_cli(args + ["iterations=1000"], capsys)
    assert code == 0, lines
    code, exponent, lines = run_cli(args + ["iterations=1e3"], capsys)
    assert code == 0, lines
    assert exponent == digits and ",1000,iterations," in digits
    code, _, lines = run_cli(args + ["iterations=2.5"], capsys)
    assert_one_error(code, lines, "--set iterations=2.5: not a valid int (a whole number: "
                                  "1000000, 1_000_000 or 1e6)")
