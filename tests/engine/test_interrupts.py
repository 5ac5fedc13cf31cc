"""Ctrl-C and budgets of the ``sim`` command, in real processes (issue 42, items 1-4).

Each interrupted command runs as its own process group, as at a terminal, where Ctrl-C
signals the command and its worker processes alike. The command is made to wait at a
known point (a patched function writes a file, then sleeps) before the test sends
SIGINT, so that where the interrupt lands is not left to timing.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from clirun import HEARTBEAT, assert_one_error, run_cli

from sim import paths

ROOT = paths.ROOT

#: the issue's bound: an interrupted command exits within this many seconds
EXIT_WITHIN_S = 2.0


def start(args, patch, ready, tmp_path):
    """``sim ARGS`` in a process group of its own, with ``patch`` (Python source) run
    before the command; returns the process once ``ready`` exists (the patch writes it)."""
    code = textwrap.dedent("""
        import os, sys, time
        sys.argv = ["sim"] + sys.argv[1:]
        READY = os.environ["SIM_TEST_READY"]

        def ready_then_wait(*args, **kwargs):
            open(READY, "w").close()
            time.sleep(120)
        """) + textwrap.dedent(patch) + "\nfrom sim.commands.cli import main\nmain()\n"
    env = dict(os.environ, SIM_TEST_READY=str(ready), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    end = time.monotonic() + 120
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > end:
            out, err = proc.communicate(timeout=10) if proc.poll() is not None else ("", "")
            os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
            pytest.fail(f"never got to the point to interrupt: {err[-2000:]}")
        time.sleep(0.02)
    return proc


def interrupt(proc):
    """Ctrl-C to the process group; returns (exit code, seconds to exit, stderr lines
    but the progress bar's and heartbeat's). Fails if a process of the group is left."""
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("hung after Ctrl-C")
    took = time.monotonic() - sent
    end = time.monotonic() + 5
    while True:     # the workers are terminated and joined: none of the group is left
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        if time.monotonic() > end:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("a worker process outlived the interrupted command")
        time.sleep(0.05)
    lines = [line for line in err.splitlines()
             if line.strip() and not line.startswith("[") and not HEARTBEAT.match(line)]
    return proc.returncode, took, lines, err


def assert_interrupted(code, took, lines, err):
    assert code == 130, err
    assert lines == ["sim: error: interrupted"], err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert took < EXIT_WITHIN_S, (took, err)


def snapshot(out):
    return {p.name: p.read_bytes() for p in Path(out).iterdir() if p.is_file()}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A complete small sweep (one workload, two policies, two figures)."""
    out = tmp_path_factory.mktemp("sweep") / "out"
    proc = subprocess.run([sys.executable, "-m", "sim.commands.cli", "sweep", "-w", "adleak-count",
                           "-p", "burn-0.22.1", "-p", "skip-untracked", "--jobs", "2",
                           "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


FIGURE_WAITS = """
import sim.output.plot
sim.output.plot.workload_figure = sim.output.plot.summary_figure = ready_then_wait
"""


def test_ctrl_c_while_a_sweep_draws_its_figures(results, tmp_path):
    before = snapshot(results)
    assert {"report.md", "report.html", "run.json", "predicted.csv"} <= set(before)
    # every cell is cached: the sweep goes straight to its figures, drawn by 2 processes
    proc = start(["sweep", "-w", "adleak-count", "-p", "burn-0.22.1", "-p", "skip-untracked",
                  "--jobs", "2", "--out", str(results)], FIGURE_WAITS, tmp_path / "ready",
                 tmp_path)
    assert_interrupted(*interrupt(proc))
    assert snapshot(results) == before          # the complete results before it, intact
    assert not (results / ".staging").exists()


def test_ctrl_c_while_plot_draws(results, tmp_path):
    before = snapshot(results)
    proc = start(["plot", str(results), "--jobs", "1"], FIGURE_WAITS, tmp_path / "ready",
                 tmp_path)
    assert_interrupted(*interrupt(proc))
    assert snapshot(results) == before


def test_ctrl_c_while_a_sweep_runs_its_cells(results, tmp_path):
    before = snapshot(results)
    cells = sorted(p.name for p in (results / ".cache").rglob("*.json"))
    proc = start(["sweep", "-w", "adleak-count", "-p", "burn-0.22.1", "-p", "skip-untracked",
                  "--jobs", "2", "--force", "--out", str(results)],
                 "import sim.engine.runner\nsim.engine.runner.run_cell = ready_then_wait\n",
                 tmp_path / "ready", tmp_path)
    assert_interrupted(*interrupt(proc))
    assert snapshot(results) == before
    assert sorted(p.name for p in (results / ".cache").rglob("*.json")) == cells


OP_LOOP = """
import os
from sim.burn.tensor import Tensor

def run(sim, variant):
    ad = sim.device("flex").autodiff()
    a = Tensor.from_floats([1.0] * 16, ad)
    b = Tensor.from_floats([2.0] * 16, ad)
    n = 0
    while True:                     # ops, each output dropped at once (Tensor.__del__)
        c = a.clone() + b.clone()
        del c
        n += 1
        if n == 3000:
            open(os.environ["SIM_TEST_READY"], "w").close()
        if n % 50_000 == 0:
            yield sim.tick()
"""


@pytest.mark.parametrize("attempt", range(3))
def test_ctrl_c_during_a_long_run_of_ops(tmp_path, attempt):
    # where in an op the interrupt lands varies: a tensor's drop (__del__) or its
    # constructor used to swallow it, or print "Exception ignored ... _strides"
    path = tmp_path / "ops.py"
    path.write_text(OP_LOOP)
    out = tmp_path / "rows.csv"
    proc = start(["run", str(path), "--out", str(out), "--max-nodes", "100000000"], "",
                 tmp_path / "ready", tmp_path)
    time.sleep(0.1 * attempt)
    assert_interrupted(*interrupt(proc))
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))


PURE_PYTHON = """
from sim.burn.tensor import Tensor

def run(sim, variant):
    a = Tensor.from_floats([1.0], sim.device("flex").autodiff())
    yield sim.tick()
    while True:
        pass
"""


def test_timeout_stops_a_workload_looping_in_pure_python(tmp_path, capsys):
    path = tmp_path / "spin.py"
    path.write_text(PURE_PYTHON)
    start_s = time.monotonic()
    code, _, lines = run_cli(["run", str(path), "--timeout", "0.5"], capsys)
    took = time.monotonic() - start_s
    assert_one_error(code, lines, "time budget exceeded: more than 0.5 s of wall time "
                                  "(raise --timeout)")
    assert f"{path}:7:" in lines[0] or f"{path}:8:" in lines[0], lines   # the loop's line
    assert took < 30     # it stops (the bound of 1 s past the budget is the alarm's design)


def test_timeout_stops_a_loop_of_ops_with_its_own_message(tmp_path):
    # a subprocess: the run is the command's own, as a user's is
    path = tmp_path / "ops.py"
    path.write_text(OP_LOOP)
    env = dict(os.environ, SIM_TEST_READY=str(tmp_path / "ready"))
    proc = subprocess.run([sys.executable, "-m", "sim.commands.cli", "run", str(path), "--timeout", "1",
                           "--max-nodes", "100000000"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env)
    lines = [line for line in proc.stderr.splitlines() if not HEARTBEAT.match(line)]
    assert_one_error(proc.returncode, lines, "time budget exceeded", "raise --timeout")
    assert "interrupted" not in proc.stderr


def test_an_interrupt_past_the_budget_is_reported_as_an_interrupt(monkeypatch):
    """The budget is checked as the workload yields; an interrupt raised in the workload
    once the budget had passed used to be replaced by the budget's error."""
    import threading
    from sim.engine import simulation
    from sim.engine.simulation import Limits
    monkeypatch.setattr(simulation._WallBudget, "arm", lambda self: None)  # no alarm
    from sim.engine.runner import run_cell
    from sim.engine.workloads import load_workload

    class Late:
        name = "late"
        variants = ("v",)
        path = Path("late.py")

        def resolve(self, variant, sets):
            return {}

        def run(self, sim, variant):
            yield sim.tick()
            time.sleep(0.1)
            raise KeyboardInterrupt

        def check_x_units(self, rows):
            pass

    caught = []

    def target():     # only the checks keep the budget
        try:
            run_cell(Late(), "v", limits=Limits(max_wall_s=0.01))
        except BaseException as exc:
            caught.append(exc)
    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    assert load_workload("adleak-count")      # the module loads; the check is below
    assert len(caught) == 1 and isinstance(caught[0], KeyboardInterrupt), caught


def test_a_tensor_whose_constructor_was_interrupted_drops_quietly():
    """An interrupt inside ``Tensor.__init__`` drops the half-built handle: its drop
    used to print "Exception ignored in ... Tensor._release ... AttributeError"."""
    import gc
    from sim.engine.simulation import Simulation
    from sim.engine.profile import load_profile
    from sim.burn.tensor import Tensor
    sim = Simulation(load_profile("m2max-macos"))
    device = sim.device("flex").autodiff()
    unraisable = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        for built in range(1, 4):    # the slots a constructor set before it was stopped
            half = Tensor.__new__(Tensor)
            for name, value in [("device", device), ("shape", (1,)), ("prim", None)][:built]:
                setattr(half, name, value)
            del half
            gc.collect()
    finally:
        sys.unraisablehook = hook
    assert unraisable == []


def test_a_failed_cell_waits_for_the_figure_warm_up(tmp_path, monkeypatch, capsys):
    """Issue 42, item 4: a failed cell ended the process while the thread that warms up
    matplotlib was still importing it; at the C exit, after the interpreter's teardown,
    ft2font's static table of Python objects (its enum types) dropped the last reference
    to one of them without a thread state, and the process aborted (exit 134, "Fatal
    Python error: PyThreadState_Get", gdb: tupledealloc from ~unordered_map in
    ft2font.so under __run_exit_handlers), about one run in 60. The sweep now joins that
    thread on every way out but an interrupt (whose exit skips the C exit handlers)."""
    import threading
    import sim.commands.sweep
    joined = []

    class Recorded(sim.commands.sweep._FigureWarmUp):
        def start(self):
            self.thread = threading.Thread(target=time.sleep, args=(0.3,))
            self.thread.start()

        def join(self):
            super().join()
            joined.append(not self.thread.is_alive())
    monkeypatch.setattr(sim.commands.sweep, "_FigureWarmUp", Recorded)
    code, _, lines = run_cli(["sweep", "-w", "adleak-rss", "-p", "burn-0.22.1", "--set",
                              "iterations=" + "1" + "0" * 30, "--jobs", "2",
                              "--out", str(tmp_path / "out")], capsys)
    assert_one_error(code, [line for line in lines if not line.startswith("[")],
                     "op budget exceeded")
    assert joined == [True]


def test_the_failing_sweep_of_item_4_exits_2(tmp_path):
    """The command of item 4 in a process of its own: one line, exit 2 (it aborted with
    134 about once in 60 runs; `sim` runs of it are in the report of the fix)."""
    proc = subprocess.run([sys.executable, "-m", "sim.commands.cli", "sweep", "-w", "adleak-rss", "-p",
                           "burn-0.22.1", "--set", "iterations=" + "1" + "0" * 30,
                           "--out", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("[")]
    assert_one_error(proc.returncode, lines, "op budget exceeded")
    assert "Fatal Python error" not in proc.stderr


SAMPLED_THEN_OVER = """
from sim.burn.tensor import Tensor

def run(sim, variant):
    a = Tensor.from_floats([1.0], sim.device("flex").autodiff())
    for step in (1, 2):
        yield sim.sample(step, "step", rss=1.0 * step)
    while True:
        b = a.clone() + a.clone()
        yield sim.tick()
"""


@pytest.mark.parametrize("out", ["rows.csv", "rows.json"])
def test_a_budget_keeps_the_rows_sampled_before_it_beside_out(tmp_path, capsys, out):
    """A run stopped by a budget (--max-ops here, --timeout alike) wrote nothing: the rows
    it had sampled were lost (new-user walkthrough, session 58). They go to OUT.partial,
    in --out's format, and the error line says so; OUT itself is never written."""
    path = tmp_path / "over.py"
    path.write_text(SAMPLED_THEN_OVER)
    target = tmp_path / out
    code, _, lines = run_cli(["run", str(path), "--max-ops", "2000", "--out", str(target)],
                             capsys)
    assert_one_error(code, lines, "budget", f"the 18 rows sampled before it are in "
                                            f"{target}.partial")
    assert not target.exists()
    text = (tmp_path / f"{out}.partial").read_text()
    assert text.count('"rss"' if out.endswith("json") else ",rss,") == 2
    # without --out, nothing is written anywhere
    code, printed, lines = run_cli(["run", str(path), "--max-ops", "2000"], capsys)
    assert_one_error(code, lines, "budget")
    assert printed == ""
    assert "partial" not in lines[0]


def test_a_complete_run_removes_the_partial_rows_of_an_earlier_stopped_one(tmp_path, capsys):
    """`sim run ... --out FILE` stopped by a budget leaves FILE.partial; a later run that
    writes FILE whole left it beside FILE, as if the two were one run's (session 58's
    list). The complete run removes it and says so on its one line; a run writing FILE
    with no FILE.partial beside it says only what it wrote."""
    path = tmp_path / "over.py"
    path.write_text(SAMPLED_THEN_OVER)
    target = tmp_path / "rows.csv"
    code, _, lines = run_cli(["run", str(path), "--max-ops", "2000", "--out", str(target)],
                             capsys)
    assert code == 2 and (tmp_path / "rows.csv.partial").is_file()
    args = ["run", "adleak-count", "--set", "iterations=100", "--out", str(target)]
    code, _, lines = run_cli(args, capsys)
    assert code == 0 and target.is_file()
    assert not (tmp_path / "rows.csv.partial").exists()
    assert lines == [f"wrote 70 rows to {target}; removed {target}.partial (an earlier "
                     f"run's, stopped by a budget)"]
    code, _, lines = run_cli(args, capsys)
    assert code == 0 and lines == [f"wrote 70 rows to {target}"]


NOTHING_SAMPLED = """
from sim.burn.tensor import Tensor

def run(sim, variant):
    a = Tensor.from_floats([1.0], sim.device("flex").autodiff())
    while True:
        b = a.clone() + a.clone()
        yield sim.tick()
"""


def test_a_budget_with_no_rows_says_an_older_partial_is_not_its_own(tmp_path, capsys):
    """A run stopped before it sampled anything writes no FILE.partial; an earlier stopped
    run's FILE.partial stays (a stop leaves earlier results alone) and read as this run's
    (session 59's list). The error line says whose it is; without one it says nothing of it."""
    target = tmp_path / "rows.csv"
    args = ["run", str(tmp_path / "none.py"), "--max-ops", "2000", "--out", str(target)]
    (tmp_path / "none.py").write_text(NOTHING_SAMPLED)
    code, _, lines = run_cli(args, capsys)
    assert_one_error(code, lines, "budget")
    assert "partial" not in lines[0] and not (tmp_path / "rows.csv.partial").exists()
    (tmp_path / "over.py").write_text(SAMPLED_THEN_OVER)
    run_cli(["run", str(tmp_path / "over.py"), "--max-ops", "2000", "--out", str(target)],
            capsys)
    before = (tmp_path / "rows.csv.partial").read_text()
    code, _, lines = run_cli(args, capsys)
    assert_one_error(code, lines, "budget", f"no rows were sampled before it ({target}.partial "
                                            f"is an earlier run's)")
    assert (tmp_path / "rows.csv.partial").read_text() == before and not target.exists()


def test_a_budget_stopping_a_loop_at_its_jump_back_names_a_line_not_none():
    """`sim run grow.py --timeout 8` said `grow.py:None: time budget exceeded` once in
    two (walkthrough, session 58): the alarm landed on the loop's jump back, an
    instruction with no line. The frame gets the line before it."""
    from sim.userfile import line_before

    def run(sim, variant, iterations):
        y = 1
        for i in range(iterations):
            y = y * 1.0001
            if i % 100000 == 0:
                yield y
    code = run.__code__
    lines = {n for _, _, n in code.co_lines() if n is not None}
    lineless = [start for start, _, n in code.co_lines() if n is None and start > 0]
    for offset in lineless:
        assert line_before(code, offset) in lines
    assert line_before(code, 0) in lines | {None}


def test_a_sweep_timeout_stops_a_cell_past_it_and_keeps_the_finished_cells(tmp_path, capsys):
    """`sim sweep` had no time budget (`sim run --timeout` only): a user's slow cell could
    only be interrupted (walkthrough, session 58). `--timeout S` stops the cell past S with
    one error line; the cells finished before it stay cached, nothing else is written."""
    path = tmp_path / "spin.py"
    path.write_text(PURE_PYTHON)
    out = tmp_path / "out"
    code, _, lines = run_cli(["sweep", "-w", "adleak-count", "-w", str(path), "-p",
                              "burn-0.22.1", "-j", "1", "--timeout", "0.5", "--out", str(out)],
                             capsys)
    lines = [line for line in lines if not line.startswith("[")]
    assert_one_error(code, lines, "spin/default/burn-0.22.1: ",
                     "time budget exceeded: more than 0.5 s of wall time (raise --timeout)")
    assert sorted(p.name for p in out.iterdir()) == [".cache"]
    assert len(list(out.glob(".cache/*/*.json"))) == 3      # adleak-count's variants


HOLDS_200_NODES = """
from sim.burn.tensor import Tensor

def run(sim, variant):
    a = Tensor.from_floats([1.0], sim.device("flex").autodiff()).require_grad()
    keep = []
    for i in range(200):
        keep.append(a * 2.0)
        yield sim.tick()
"""


@pytest.mark.parametrize("command", ["sweep", "compare"])
def test_sweep_and_compare_take_the_time_and_memory_budgets_of_run(tmp_path, capsys, command):
    """`sim compare` had no --timeout, and neither it nor `sim sweep` a memory budget
    (`sim run --max-nodes` only; session 58's list): each cell now runs within
    `--timeout S` and `--max-nodes N`, a cell past either stops the command with one
    error line naming the cell."""
    for name, text, budget, message in (
            ("spin", PURE_PYTHON, ["--timeout", "0.5"],
             "time budget exceeded: more than 0.5 s of wall time (raise --timeout)"),
            ("hold", HOLDS_200_NODES, ["--max-nodes", "50"],
             "memory budget exceeded: more than 50 live simulated nodes held individually")):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        if command == "sweep":
            args = ["sweep", "-w", str(path), "-p", "burn-0.22.1"]
        else:
            measured = tmp_path / f"{name}.csv"
            measured.write_text("experiment,variant,phase,x,x_unit,metric,value,unit,note\n"
                                f"{name},default,,1,step,rss,1,MB,\n")
            args = ["compare", str(measured), "-w", str(path)]
        code, _, lines = run_cli(args + ["-j", "1", *budget, "--out", str(tmp_path / name)],
                                 capsys)
        lines = [line for line in lines if not line.startswith("[")]
        assert_one_error(code, lines, f"{name}/default/burn-0.22.1: ", message)
        assert not (tmp_path / name / "predicted.csv").exists()


def _in_a_thread(call):
    """``call()`` in a thread other than the main one (as a dask worker runs a cell);
    returns what it returned or raised. Fails if it has not ended after 60 s (the thread,
    a daemon, is left to spin)."""
    import threading
    result = {}

    def target():
        try:
            result["value"] = call()
        except BaseException as exc:    # noqa: BLE001 - handed to the test
            result["error"] = exc
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the run outside the main thread did not stop"
    return result


def test_a_timeout_stops_a_pure_python_loop_outside_the_main_thread(tmp_path):
    """A dask worker runs cells in its threads, where the budget's alarm (SIGALRM) never
    rings: `sim sweep --timeout S --scheduler ...` did not stop a workload looping in its
    own Python code (session 58's list). A timer thread raises the budget's error there,
    at the workload's line, as the alarm does in the main thread."""
    from sim.engine.runner import run_cell
    from sim.engine.simulation import Limits
    from sim.errors import LimitExceeded
    path = tmp_path / "spin.py"
    path.write_text(PURE_PYTHON)
    result = _in_a_thread(lambda: run_cell(str(path), "default", limits=Limits(max_wall_s=0.3)))
    exc = result.get("error")
    assert isinstance(exc, LimitExceeded), result
    assert str(exc).startswith((f"{path}:7: ", f"{path}:8: ")), str(exc)
    assert str(exc).endswith("time budget exceeded: more than 0.3 s of wall time "
                             "(raise --timeout)")


def test_a_thread_run_within_its_budget_leaves_no_alarm_behind():
    """A run outside the main thread that ends within its budget: its rows, as in the main
    thread, and no error raised in the thread afterwards (the timer is stopped)."""
    import threading
    from sim.engine.runner import run_cell
    from sim.engine.simulation import Limits
    plain = run_cell("adleak-count", "flex.autodiff", sets={"iterations": 100})

    def call():
        rows = run_cell("adleak-count", "flex.autodiff", sets={"iterations": 100},
                        limits=Limits(max_wall_s=0.5))
        time.sleep(1.0)     # past the budget: an alarm left behind would raise here
        return rows
    before = threading.active_count()
    result = _in_a_thread(call)
    assert "error" not in result, result
    assert result["value"] == plain
    assert threading.active_count() <= before


SPIN_30_S = """
import time

def run(sim, variant):
    yield sim.tick()
    end = time.monotonic() + 30
    while time.monotonic() < end:
        pass
    raise RuntimeError("not stopped within 30 s")
"""


def test_a_sweep_timeout_holds_on_a_dask_scheduler(tmp_path, capsys, monkeypatch):
    """`sim sweep --timeout` with `--scheduler`: the cell that loops in its own Python code
    on a dask worker's thread stops with the budget's one error line, as with --jobs."""
    import logging
    distributed = pytest.importorskip("dask.distributed")
    # the worker's own log of the failed task (on a user's cluster, in the worker's log)
    monkeypatch.setattr(logging.getLogger("distributed.worker"), "disabled", True)
    path = tmp_path / "spin.py"
    path.write_text(SPIN_30_S)    # without the alarm: its own error after 30 s
    # the worker's threads in this process, reached as a user's cluster is: over tcp
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  protocol="tcp://", dashboard_address=None) as cluster:
        code, _, lines = run_cli(["sweep", "-w", str(path), "-p", "burn-0.22.1",
                                  "--scheduler", cluster.scheduler_address,
                                  "--timeout", "0.5", "--out", str(tmp_path / "out")], capsys)
    lines = [line for line in lines if not line.startswith("[")]
    assert_one_error(code, lines, "spin/default/burn-0.22.1: ",
                     "time budget exceeded: more than 0.5 s of wall time (raise --timeout)")


@pytest.mark.parametrize("timeout", ["inf", "1e12"])
def test_a_timeout_longer_than_an_alarm_holds_runs_as_without_one(capsys, timeout):
    """`sim run adleak-count --timeout inf` (or 1e12) said `workload adleak-count raised
    OverflowError: timestamp out of range for platform time_t`: the budget's alarm cannot
    be set that far, and the error was blamed on the workload (review, session 58). A
    budget no run reaches sets no alarm; the run gives the rows it gives without one."""
    args = ["run", "adleak-count", "--set", "iterations=100", "--format", "csv"]
    code, plain, lines = run_cli(args, capsys)
    assert code == 0, lines
    code, out, lines = run_cli(args + ["--timeout", timeout], capsys)
    assert code == 0, lines
    assert out == plain and "heap_bytes_delta" in out


def test_a_budget_writes_nothing_beside_a_device_or_fifo_out(tmp_path, capsys):
    """`sim run ... --out /dev/null` stopped by a budget wrote `/dev/null.partial` (as
    root: a new file in /dev; review, session 58): a device or FIFO as --out is written in
    place, and asks for nothing beside it. The error line is the budget's alone."""
    path = tmp_path / "over.py"
    path.write_text(SAMPLED_THEN_OVER)
    fifo = tmp_path / "rows.fifo"
    os.mkfifo(fifo)
    code, _, lines = run_cli(["run", str(path), "--max-ops", "2000", "--out", str(fifo)],
                             capsys)
    assert_one_error(code, lines, "budget")
    assert "partial" not in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["over.py", "rows.fifo"]


def test_the_thread_alarm_raises_once_as_the_signal_alarm_does(monkeypatch):
    """A second error sent after the first landed could land in the first's handler in
    :meth:`Simulation.run` and leave the run as a bare ``_TimeUp``: the timer raises once
    (as the SIGALRM alarm does), and a run whose workload swallowed it is stopped by the
    next budget check, the run marked over time."""
    import threading
    import types

    from sim.engine import simulation

    sent = []
    three = threading.Event()

    def record(thread_id, exc_class):
        sent.append(exc_class)
        if len(sent) >= 3:
            three.set()

    monkeypatch.setattr(simulation, "_raise_in", record)
    sim = types.SimpleNamespace(_over_time=False)
    budget = types.SimpleNamespace(sim=sim, RETRY_S=0.001, may_raise=lambda frame: True)
    alarm = simulation._ThreadAlarm(budget, 0.0)
    three.wait(0.2)          # the old timer sent again every RETRY_S: three in 2 ms
    alarm.stop()
    assert sent[0] is simulation._TimeUp and sim._over_time
    assert sent[1:] == [None]     # stop() takes back one not yet raised, and no other


def test_a_memory_budget_seen_at_a_yield_names_the_workload_line(tmp_path, capsys):
    """`sim run --max-nodes` stopped a workload at its `yield` (the budget is checked
    between two steps of the program, and every 4,096 registrations inside them) with
    no line of the workload in its error, where an op budget seen inside a step named
    one (session 59's list): the error now names the line the program yielded at."""
    path = tmp_path / "hold.py"
    path.write_text(HOLDS_200_NODES)
    code, _, lines = run_cli(["run", str(path), "--max-nodes", "50"], capsys)
    yield_line = HOLDS_200_NODES.splitlines().index("        yield sim.tick()") + 1
    assert_one_error(code, lines, f"{path}:{yield_line}: memory budget exceeded: more than "
                                  f"50 live simulated nodes held individually")


def test_ctrl_c_while_run_runs_its_policies_on_two_jobs(tmp_path):
    """`sim run -p all -j 2` runs its policies on worker processes: Ctrl-C stops them
    and writes nothing, as it does to a run in one process."""
    out = tmp_path / "rows.csv"
    proc = start(["run", "adleak-rss", "-p", "all", "-j", "2", "--out", str(out)],
                 "import sim.engine.runner\nsim.engine.runner.run_cell = ready_then_wait\n",
                 tmp_path / "ready", tmp_path)
    assert_interrupted(*interrupt(proc))
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))
    assert not (tmp_path / "rows.csv.partial").exists()
