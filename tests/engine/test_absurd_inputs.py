"""Inputs a simulation must refuse, each with one line that says why and where (issue 42,
items 5 and 6): absurd tensors, negative measurements of metrics that cannot be
negative, a workload named as a built-in, a bad yield, a use of a consumed tensor."""

from clirun import assert_one_error, run_cli

HEADER = "experiment,variant,phase,x,x_unit,metric,value,unit,note\n"


def workload(tmp_path, name, body):
    path = tmp_path / f"{name}.py"
    path.write_text(body)
    return path


def test_an_absurd_tensor_is_refused_naming_its_shape_and_the_limit(tmp_path, capsys):
    path = workload(tmp_path, "huge", "from sim.burn.tensor import Tensor\n"
                    "def run(sim, variant):\n"
                    "    t = Tensor.zeros([10**9, 10**9], sim.device('flex').autodiff())\n"
                    "    yield sim.sample(1, 'step', rss=sim.rss_bytes() / 1e6)\n")
    code, _, lines = run_cli(["run", str(path)], capsys)
    assert_one_error(code, lines, f"{path}:3:", "tensor shape [1000000000, 1000000000] has "
                     "1e+18 elements, more than the limit of 4,294,967,296 "
                     "(raise --max-elements)")
    # the flag raises the limit
    code, _, lines = run_cli(["run", str(path), "--max-elements", str(10**18)], capsys)
    assert code == 0, lines


def test_a_broadcast_or_matmul_beyond_the_limit_is_refused(tmp_path, capsys):
    path = workload(tmp_path, "outer", "from sim.burn.tensor import Tensor\n"
                    "def run(sim, variant):\n"
                    "    d = sim.device('flex')\n"
                    "    a = Tensor.zeros([100000, 1], d)\n"
                    "    b = Tensor.zeros([1, 100000], d)\n"
                    "    c = a.matmul(b) if variant == 'matmul' else a + b\n"
                    "    yield sim.tick()\n"
                    "VARIANTS = ('add', 'matmul')\n")
    for variant in ("add", "matmul"):
        code, _, lines = run_cli(["run", str(path), "-v", variant, "--max-elements", "1000000"],
                                 capsys)
        assert_one_error(code, lines, f"{path}:6:", "tensor shape [100000, 100000]",
                         "limit of 1,000,000")


def test_a_negative_measurement_of_a_metric_that_cannot_be_negative(tmp_path, capsys):
    path = tmp_path / "mine.csv"
    path.write_text(HEADER + "adleak-rss,flex,,100,k_iterations,rss,-3,MB,\n")
    code, _, lines = run_cli(["compare", "--measured", str(path), "--out",
                              str(tmp_path / "out")], capsys)
    assert_one_error(code, lines, f"{path}:2:", "rss -3.0 is negative")
    assert not (tmp_path / "out").exists()


def test_a_negative_change_is_a_measurement(tmp_path):
    from sim.analysis.compare import known_checker
    from sim.analysis.data import read_measured
    path = tmp_path / "mine.csv"
    path.write_text(HEADER + "adleak-count,flex.autodiff,after-loop,10000,iterations,"
                    "heap_bytes_delta,-16,B,\n")
    assert read_measured(path, known_checker())[0]["value"] == -16


def test_a_workload_file_named_as_a_built_in(tmp_path, capsys):
    path = workload(tmp_path, "mine", "EXPERIMENT = 'p10-ema'\n"
                    "def run(sim, variant):\n    yield sim.tick()\n")
    for args in (["run", str(path)], ["sweep", "-w", str(path), "--out", str(tmp_path / "o")]):
        code, _, lines = run_cli(args, capsys)
        assert_one_error(code, lines, f"{path}: the experiment name 'p10-ema' (EXPERIMENT) is "
                         "the built-in workload p10-ema's")
        assert "seeds-m2max" not in lines[0]
    # a file named after one is the same error
    path = workload(tmp_path, "adleak_rss", "def run(sim, variant):\n    yield sim.tick()\n")
    code, _, lines = run_cli(["run", str(path)], capsys)
    assert_one_error(code, lines, "'adleak-rss' (its file name)")


def test_a_workload_that_yields_a_number(tmp_path, capsys):
    path = workload(tmp_path, "y5", "def run(sim, variant):\n"
                    "    yield sim.tick()\n"
                    "    yield 5\n")
    code, _, lines = run_cli(["run", str(path)], capsys)
    assert_one_error(code, lines, f"{path}:3: the program yielded 5 (int)", "sim.tick()")


def test_use_of_a_tensor_a_module_consumed(tmp_path, capsys):
    path = workload(tmp_path, "used", "from sim.burn.tensor import Tensor, drop\n"
                    "from sim.burn.nn import Mlp\n"
                    "def run(sim, variant):\n"
                    "    ad = sim.device('flex').autodiff()\n"
                    "    model = Mlp(8, 8, 8, ad)\n"
                    "    x = Tensor.random([4, 8], ad)\n"
                    "    y = model.forward(x)\n"
                    "    z = x + 1.0\n"
                    "    yield sim.tick()\n")
    code, _, lines = run_cli(["run", str(path)], capsys)
    assert_one_error(code, lines, f"{path}:8: use of a dropped tensor: the [4, 8] tensor was "
                     f"taken by Mlp.forward at {path}:7, which consumed it",
                     "pass a .clone()")


def test_use_of_a_dropped_tensor(tmp_path, capsys):
    path = workload(tmp_path, "used", "from sim.burn.tensor import Tensor, drop\n"
                    "def run(sim, variant):\n"
                    "    x = Tensor.random([4, 8], sim.device('flex').autodiff())\n"
                    "    drop(x)\n"
                    "    z = x.relu()\n"
                    "    yield sim.tick()\n")
    code, _, lines = run_cli(["run", str(path)], capsys)
    assert_one_error(code, lines, f"{path}:5: use of a dropped tensor: the [4, 8] tensor was "
                     f"dropped (drop()) at {path}:4")


def test_a_sweep_takes_the_limit_too(tmp_path, capsys):
    path = workload(tmp_path, "wide", "EXPERIMENT = 'wide'\n"
                    "from sim.burn.tensor import Tensor\n"
                    "def run(sim, variant):\n"
                    "    t = Tensor.zeros([1000, 1000], sim.device('flex'))\n"
                    "    yield sim.sample(1, 'step', rss=sim.rss_bytes() / 1e6)\n")
    args = ["sweep", "-w", str(path), "-p", "burn-0.22.1", "--jobs", "1",
            "--out", str(tmp_path / "out")]
    code, _, lines = run_cli(args + ["--max-elements", "999999"], capsys)
    assert_one_error(code, [line for line in lines if not line.startswith("[")],
                     "wide/default/burn-0.22.1", "tensor shape [1000, 1000]",
                     "limit of 999,999")
    code, _, lines = run_cli(args, capsys)
    assert code == 0, lines
