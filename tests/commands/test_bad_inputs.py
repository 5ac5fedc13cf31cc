"""The corpus of bad inputs: each gives one error line naming what is wrong, exit 2,
and leaves no partial output."""

import re
from pathlib import Path

import pytest

from clirun import assert_one_error, run_cli
from sim import paths


ROOT = paths.ROOT
PROFILE = (ROOT / "models" / "m2max-macos.toml").read_text()
META = '[meta]\nplatform = "macos-aarch64"\nburn_version = "0.22.1"\n'
HEADER = "experiment,variant,phase,x,x_unit,metric,value,unit,note\n"
GOOD_ROW = "adleak-rss,flex,,0,k_iterations,rss,2.2,MB,\n"


def no_partial_files(directory):
    leftovers = [p.name for p in Path(directory).rglob("*") if p.name.endswith(".tmp")]
    assert not leftovers, leftovers


# -- measured CSVs ---------------------------------------------------------------------

CSV_CASES = {
    "missing-column": ("experiment,variant,phase,x,x_unit,metric,value,note\n"
                       "adleak-rss,flex,,0,k_iterations,rss,2.2,\n", "missing column(s) unit"),
    "extra-column": (HEADER.strip() + ",colour\n" + GOOD_ROW.strip() + ",red\n",
                     "unknown column(s) colour"),
    "empty-file": ("", "empty file"),
    "header-only": (HEADER, "no data rows"),
    "semicolons": (HEADER.replace(",", ";") + GOOD_ROW.replace(",", ";"), "wrong delimiter"),
    "non-numeric-value": (HEADER + "adleak-rss,flex,,0,k_iterations,rss,lots,MB,\n",
                          ":2: value 'lots' is not a number"),
    "non-numeric-x": (HEADER + "adleak-rss,flex,,zero,k_iterations,rss,2.2,MB,\n",
                      ":2: x 'zero' is not a number"),
    "unknown-metric": (HEADER + "adleak-rss,flex,,0,k_iterations,vibes,2.2,MB,\n",
                       "unknown metric 'vibes'"),
    "wrong-unit": (HEADER + "adleak-rss,flex,,0,k_iterations,rss,2.2,GB,\n",
                   "unit 'GB' is wrong for metric rss"),
    "duplicate-key": (HEADER + GOOD_ROW + GOOD_ROW, ":3: duplicate observation"),
    "huge-value": (HEADER + "adleak-rss,flex,,0,k_iterations,rss,1e300,MB,\n", "out of range"),
    "nan-value": (HEADER + "adleak-rss,flex,,0,k_iterations,rss,nan,MB,\n", "out of range"),
    "negative-time": (HEADER + "p10-ema,detach,,50,step,ms_per_step,-1.2,ms,\n",
                      ":2: ms_per_step -1.2 is negative: a time is never below 0"),
    "unknown-experiment": (HEADER + "mystery,flex,,0,k_iterations,rss,2.2,MB,\n",
                           "unknown experiment 'mystery'"),
    "unknown-variant": (HEADER + "adleak-rss,gpu,,0,k_iterations,rss,2.2,MB,\n",
                        "unknown variant 'gpu' of adleak-rss"),
    "ragged-row": (HEADER + "adleak-rss,flex,,0,k_iterations,rss,2.2\n", "fields, the header has"),
    "duplicate-column": ("experiment,variant,phase,x,x_unit,metric,value,unit,note,unit\n"
                         + GOOD_ROW.strip() + ",MB\n", "duplicate column(s) unit"),
}


@pytest.mark.parametrize("case", sorted(CSV_CASES))
def test_malformed_measured_csv(case, tmp_path, capsys):
    text, fragment = CSV_CASES[case]
    path = tmp_path / f"{case}.csv"
    path.write_text(text)
    out = tmp_path / "out"
    code, _, lines = run_cli(["compare", "--measured", str(path), "--out", str(out)], capsys)
    assert_one_error(code, lines, str(path), fragment)
    assert not out.exists() or not any(out.iterdir())


def test_non_utf8_csv(tmp_path, capsys):
    path = tmp_path / "latin1.csv"
    path.write_bytes(HEADER.encode() + "adleak-rss,flex,,0,k_iterations,rss,2.2,MB,café\n"
                     .encode("latin-1"))
    code, _, lines = run_cli(["accuracy", "--measured", str(path)], capsys)
    assert_one_error(code, lines, "not UTF-8")


def test_missing_and_directory_csv(tmp_path, capsys):
    code, _, lines = run_cli(["accuracy", "--measured", str(tmp_path / "nope.csv")], capsys)
    assert_one_error(code, lines, "no such file")
    code, _, lines = run_cli(["accuracy", "--measured", str(tmp_path)], capsys)
    assert_one_error(code, lines, "is a directory")


# -- profiles ---------------------------------------------------------------------------------

PROFILE_CASES = {
    "missing-key": (PROFILE.replace("arc_node_bytes = 104\n", ""), "missing key layout.arc_node_bytes"),
    "wrong-type": (PROFILE.replace("arc_node_bytes = 104", 'arc_node_bytes = "big"'),
                   "layout.arc_node_bytes must be a number"),
    "float-for-int": (PROFILE.replace("arc_node_bytes = 104", "arc_node_bytes = 104.5"),
                      "must be an integer"),
    "negative-size": (PROFILE.replace("arc_node_bytes = 104", "arc_node_bytes = -104"),
                      "must not be negative"),
    "unknown-key": (PROFILE.replace("arc_node_bytes = 104", "arc_node_bytes = 104\nmystery = 1"),
                    "unknown key layout.mystery"),
    "malformed-toml": (PROFILE.replace("[layout]", "[layout"), "malformed TOML"),
    "missing-table": (PROFILE.replace("[pytorch]", "[pytorch-gone]"), "unknown table"),
    "bad-allocator": (PROFILE.replace('allocator = "macos"', 'allocator = "jemalloc"'),
                      "process.allocator must be one of"),
    "zero-rate": (PROFILE.replace("gflops = ", "gflops = 0.0 #", 1), "must be positive"),
    "sysfs-not-a-list": (PROFILE.replace("cache_entries = []", 'cache_entries = "index0"'),
                         "sysfs.cache_entries must be a list of strings"),
    # non-finite numbers, the [meta] and [calibration] records, unknown nested tables
    "inf-float": (PROFILE.replace("register_ns = 250.0", "register_ns = inf"),
                  "time.register_ns must be a finite number, got inf"),
    "minus-inf": (PROFILE.replace("register_ns = 250.0", "register_ns = -inf"),
                  "time.register_ns must be a finite number, got -inf"),
    "nan-float": (PROFILE.replace("gflops = 91.1366", "gflops = nan"),
                  "backend.flex.gflops must be a finite number, got nan"),
    "nan-rate-not-checked-by-positivity": (PROFILE.replace("gbps = 88.1013", "gbps = +nan"),
                                           "pytorch.gbps must be a finite number, got nan"),
    "inf-int": (PROFILE.replace("arc_node_bytes = 104", "arc_node_bytes = inf"),
                "layout.arc_node_bytes must be a finite number, got inf"),
    "huge-int": (PROFILE.replace("arc_node_bytes = 104", "arc_node_bytes = 1" + "0" * 400),
                 "layout.arc_node_bytes must be a finite number"),
    "no-meta": (PROFILE.replace(META, ""), "missing table [meta]"),
    "meta-not-a-table": ('meta = "x"\n' + PROFILE.replace(META, ""),   # before any table
                         "[meta] is not a table"),
    "meta-missing-key": (PROFILE.replace('burn_version = "0.22.1"\n', ""),
                         "missing key meta.burn_version"),
    "meta-unknown-key": (PROFILE.replace(META, META + 'cpu = "M2 Max"\n'),
                         "unknown key meta.cpu"),
    "meta-wrong-type": (PROFILE.replace('platform = "macos-aarch64"', "platform = 3"),
                        "meta.platform must be a string"),
    "calibration-unknown-key": (PROFILE.replace("\n[calibration]\n",
                                                '\n[calibration]\nnote = "by hand"\n'),
                                "unknown key calibration.note"),
    "calibration-misspelt-key": (PROFILE.replace("\nfitted = [", "\nfited = ["),
                                 "unknown key calibration.fited"),
    "calibration-not-a-list": (PROFILE.replace("\nfitted = [", "\nfitted = 3\nold = ["),
                               "unknown key calibration.old"),
    "calibration-wrong-type": (PROFILE.replace("\nfitted = [", "\nfitted = [3, "),
                               "calibration.fitted must be a list of strings"),
    "calibration-missing-key": (PROFILE.split("\npoints = [")[0] + "\n",
                                "missing key calibration.points"),
    "unknown-backend": (PROFILE.replace("[backend.metal]",
                                        "[backend.cuda]\ngflops = 1.0\n\n[backend.metal]"),
                        "unknown table [backend.cuda]"),
}


@pytest.mark.parametrize("case", sorted(PROFILE_CASES))
def test_malformed_profile(case, tmp_path, capsys):
    text, fragment = PROFILE_CASES[case]
    assert text != PROFILE      # the case's replacement found its text
    path = tmp_path / f"{case}.toml"
    path.write_text(text)
    out = tmp_path / "rows.csv"
    code, _, lines = run_cli(["run", "adleak-count", "--profile", str(path), "--out", str(out)],
                          capsys)
    assert_one_error(code, lines, str(path), fragment)
    assert not out.exists()
    no_partial_files(tmp_path)


def test_unknown_profile_name(capsys):
    code, _, lines = run_cli(["run", "adleak-count", "--profile", "cray-1"], capsys)
    assert_one_error(code, lines, "unknown profile 'cray-1'", "m2max-macos")


# -- command line ----------------------------------------------------------------------------

CLI_CASES = {
    "unknown-workload": (["run", "nope"], "unknown workload 'nope'"),
    "unknown-variant": (["run", "adleak-rss", "--variant", "gpu"], "unknown variant 'gpu'"),
    "unknown-policy": (["run", "adleak-rss", "--policy", "yolo"], "unknown policy 'yolo'"),
    "set-unknown-key": (["run", "adleak-rss", "--set", "colour=red"], "no parameter 'colour'"),
    "set-bad-value": (["run", "adleak-rss", "--set", "iterations=many"], "not a valid int"),
    "set-fraction": (["run", "adleak-rss", "--set", "iterations=1.5"],
                     "--set iterations=1.5: not a valid int (a whole number: 1000000, "
                     "1_000_000 or 1e6)"),
    "set-negative": (["run", "adleak-rss", "--set", "iterations=-5"], "must be > 0"),
    "set-zero": (["run", "adleak-rss", "--set", "rounds=0"], "must be > 0"),
    "set-no-equals": (["run", "adleak-rss", "--set", "iterations"], "expected KEY=VALUE"),
    "bad-format": (["run", "adleak-rss", "--format", "xml"], "--format"),
    "bad-max-ops": (["run", "adleak-rss", "--max-ops", "0"], "--max-ops"),
    "sweep-unknown-workload": (["sweep", "-w", "nope"], "unknown workload 'nope'"),
    "sweep-unknown-policy": (["sweep", "-p", "yolo"], "unknown policy 'yolo'"),
    "sweep-set-unknown-key": (["sweep", "-w", "adleak-rss", "--set", "colour=red,blue"], "colour"),
    "calibrate-unknown-param": (["calibrate", "--measured", str(ROOT / "experiments" / "measured"
                                                             / "seeds-m2max.csv"),
                                 "--fit", "time.warp_ns"], "not a profile parameter"),
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_bad_command_line(case, capsys):
    args, fragment = CLI_CASES[case]
    code, _, lines = run_cli(args, capsys)
    assert_one_error(code, lines, fragment)


def test_output_path_is_a_directory(tmp_path, capsys):
    code, _, lines = run_cli(["run", "adleak-count", "--out", str(tmp_path)], capsys)
    assert_one_error(code, lines, "is a directory")


def test_output_directory_missing(tmp_path, capsys):
    code, _, lines = run_cli(["run", "adleak-count", "--out", str(tmp_path / "no" / "x.csv")], capsys)
    assert_one_error(code, lines, "does not exist")


def test_output_parent_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, lines = run_cli(["run", "adleak-count", "--out", str(blocker / "x.csv")], capsys)
    assert_one_error(code, lines, f"{blocker} is a file, not a directory")


def test_sweep_out_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "results"
    blocker.write_text("x")
    code, _, lines = run_cli(["sweep", "-w", "adleak-count", "-p", "burn-0.22.1", "--out",
                           str(blocker)], capsys)
    assert_one_error(code, lines)
    assert blocker.read_text() == "x"


# -- user workload files -------------------------------------------------------------------------

WORKLOAD_CASES = {
    "syntax-error": ("def run(sim, variant:\n    pass\n", "syntax error at line 1"),
    "raises-on-load": ("raise RuntimeError('boom at import')\n", "RuntimeError"),
    "no-run": ("PARAMS = {}\n", "must define run"),
    "choices-default-outside": (
        "PARAMS = {'opt': 'sgd'}\nCHOICES = {'opt': ('adam',)}\n"
        "def run(sim, variant, opt):\n    yield sim.tick()\n",
        "CHOICES names 'opt'"),
    "raises-while-running": (
        "def run(sim, variant):\n    yield sim.tick()\n    {}['missing']\n",
        "raised KeyError"),
    # an exception whose innermost frame is the simulator's own code: the user's line, and
    # where inside the simulator (a bug to report, or an argument it does not check)
    "raises-inside-the-simulator": (
        "from sim.burn.tensor import Tensor\n"
        "def run(sim, variant):\n"
        "    a = Tensor.from_floats([1.0], sim.device('flex'))\n"
        "    b = a + 'x'\n"
        "    yield sim.tick()\n",
        ":4: workload raises-inside-the-simulator raised AttributeError: 'str' object has no "
        "attribute 'shape' (inside the simulator, sim/burn/tensor.py:"),
    "runs-forever-max-ops": (
        "from sim.burn.tensor import Tensor\n"
        "def run(sim, variant):\n"
        "    a = Tensor.from_floats([1.0], sim.device('flex').autodiff())\n"
        "    while True:\n"
        "        c = a.clone() + a.clone()\n"
        "        yield sim.tick()\n", "op budget exceeded"),
}


@pytest.mark.parametrize("case", sorted(WORKLOAD_CASES))
def test_bad_workload_file(case, tmp_path, capsys):
    source, fragment = WORKLOAD_CASES[case]
    path = tmp_path / f"{case.replace('-', '_')}.py"
    path.write_text(source)
    out = tmp_path / "rows.csv"
    code, _, lines = run_cli(["run", str(path), "--max-ops", "20000", "--out", str(out)], capsys)
    assert_one_error(code, lines, fragment)
    assert not out.exists()
    no_partial_files(tmp_path)


def test_a_workloads_own_exception_is_not_placed_inside_the_simulator(tmp_path, capsys):
    path = tmp_path / "own.py"
    path.write_text("def run(sim, variant):\n    yield sim.tick()\n    {}['missing']\n")
    code, _, lines = run_cli(["run", str(path), "--out", str(tmp_path / "rows.csv")], capsys)
    assert_one_error(code, lines, "own.py:3: workload own raised KeyError: 'missing'")
    assert "inside the simulator" not in lines[0]


def test_workload_running_forever_hits_the_timeout(tmp_path, capsys):
    path = tmp_path / "forever.py"
    path.write_text(
        "from sim.burn.tensor import Tensor\n"
        "def run(sim, variant):\n"
        "    a = Tensor.from_floats([1.0], sim.device('flex').autodiff()).require_grad()\n"
        "    while True:\n"
        "        c = a.clone() * 2.0\n"
        "        if sim.registered % 1000 == 0:\n"
        "            yield sim.tick()\n")
    code, _, lines = run_cli(["run", str(path), "--timeout", "1", "--max-ops", "10000000000"],
                          capsys)
    assert_one_error(code, lines, "time budget exceeded")


def test_missing_workload_file(tmp_path, capsys):
    code, _, lines = run_cli(["run", str(tmp_path / "ghost.py")], capsys)
    assert_one_error(code, lines, "no such workload file")


def test_memory_budget_stops_a_run(tmp_path, capsys):
    """Nodes held one by one (a loop fast-forward cannot compress) are bounded."""
    path = tmp_path / "hoard.py"
    path.write_text(
        "from sim.burn.tensor import Tensor\n"
        "def run(sim, variant):\n"
        "    a = Tensor.from_floats([1.0], sim.device('flex').autodiff())\n"
        "    kept = []\n"
        "    for i in range(100000):\n"
        "        kept.append(a.clone() + a.clone())\n"
        "        if i % 100 == 0:\n"
        "            yield sim.tick()\n")
    code, _, lines = run_cli(["run", str(path), "--max-nodes", "5000"], capsys)
    assert_one_error(code, lines, "memory budget exceeded")


def test_same_command_twice_gives_identical_files(tmp_path, capsys):
    outputs = []
    for name in ("a.csv", "b.csv"):
        out = tmp_path / name
        code, _, lines = run_cli(["run", "p10-ema", "--set", "steps=40", "--set", "report_at=1,20",
                               "--format", "csv", "--out", str(out)], capsys)
        assert code == 0, lines
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]


# -- what click refuses, in the project's words ----------------------------------------------

CLICK_CASES = {
    "unknown-command": (["frob"], "unknown command 'frob' (valid: accuracy, bench, "),
    "missing-argument": (["run"], "`sim run` needs WORKLOAD; `sim run --help` says"),
    "missing-option": (["measure"], "`sim measure` needs --out; "),
    "unknown-option": (["run", "adleak-rss", "--bogus"],
                       "--bogus: `sim run` has no such option (did you mean --jobs or --out?); "),
    "option-without-value": (["sweep", "-p"], "-p needs a value"),
    "extra-arguments": (["run", "a", "b", "c"], "`sim run` takes no arguments 'b', 'c'; "),
    "extra-argument-with-a-space": (["run", "a", "b c"], "`sim run` takes no argument 'b c'; "),
    "timeout-not-a-number": (["run", "adleak-rss", "--timeout", "abc"],
                             "--timeout abc: not a number"),
    "timeout-negative": (["run", "adleak-rss", "--timeout", "-1"], "--timeout -1: must be > 0"),
    "timeout-nan": (["run", "adleak-rss", "--timeout", "nan"], "--timeout nan: not a number"),
    "jobs-zero": (["sweep", "--jobs", "0"], "--jobs 0: must be >= 1"),
    "jobs-short-not-a-number": (["sweep", "-j", "x"], "--jobs x: not a whole number"),
    "format": (["run", "adleak-rss", "--format", "xml"], "--format xml: not one of table, csv, json"),
    "readme-missing": (["accuracy", "--readme", "/no/such/README.md"],
                       "--readme /no/such/README.md: does not exist"),
    "plot-of-a-file": (["plot", __file__], f"{__file__}: is a file, not a directory"),
}


@pytest.mark.parametrize("case", sorted(CLICK_CASES))
def test_what_click_refuses_is_one_line_in_the_projects_words(case, capsys):
    """click's own wording ("Invalid value for '--jobs' / '-j': 'x' is not a valid integer
    range.", "No such command 'frob'.") read unlike every other error of the project
    (session 57's list): the option and its value first, then what is wrong."""
    args, expected = CLICK_CASES[case]
    code, _, lines = run_cli(args, capsys)
    assert_one_error(code, lines, expected)
    assert not re.search(r"Invalid value|No such|Missing|is not in the range|range\.|"
                         r"Got unexpected|requires an argument", lines[0]), lines[0]


def test_every_help_names_numbers_in_the_same_words(capsys):
    """--help wrote click's "INTEGER RANGE ... [x>=1]" where the errors now say
    "--jobs 0: must be >= 1": "INTEGER ... [>= 1]"."""
    from sim.commands.cli import cli
    for name in cli.list_commands(None):
        code, out, lines = run_cli([name, "--help"], capsys)
        assert code == 0, (name, lines)
        assert "RANGE" not in out and "x>" not in out, (name, out)
