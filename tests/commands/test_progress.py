"""The sweep's live progress (issue 42, item 11): the bar names the running cells and
their loop position, is redrawn while they run, and gives no estimate of the time left."""

import io
import os

import pytest

import sim.commands.progress
import sim.commands.sweep
from sim.commands.progress import CellBeat, Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def frames(out):
    """The bar's successive states on a terminal (each drawn after ``\\r``)."""
    return [f.replace("\x1b[K", "").strip() for f in out.getvalue().split("\r") if f.strip()]


def test_the_bar_is_redrawn_while_a_cell_runs_and_names_its_position(monkeypatch):
    monkeypatch.setattr(sim.commands.progress.shutil, "get_terminal_size",
                        lambda *args: os.terminal_size((300, 24)))
    now = [0.0]
    out = Terminal()
    bar = Progress(3, stream=out, clock=lambda: now[0])     # every 1 s on a terminal
    bar.advance("a/x/burn-0.22.1")
    bar.running("b/x/burn-0.22.1", "starting")
    bar.running("c/x/pytorch", "step 10")
    drawn = len(frames(out))
    for second in range(1, 7):         # one long cell: six seconds, its position moving
        now[0] = second
        bar.running("b/x/burn-0.22.1", f"step {second * 100:,}")
    states = frames(out)[drawn:]
    assert len(states) == 6            # at least once every 2 s (here: every second)
    assert states[-1].endswith("running: b/x/burn-0.22.1 (step 600, 6 s), "
                               "c/x/pytorch (step 10, 6 s)")
    assert "6.0 s" in states[-1]
    bar.tick()                         # no time passed: not redrawn
    assert len(frames(out)) == drawn + 6
    now[0] = 7.5
    bar.tick()                         # no report, the time moves on
    assert "7.5 s" in frames(out)[-1]
    bar.advance("b/x/burn-0.22.1")
    assert frames(out)[-1].endswith("running: c/x/pytorch (step 10, 8 s)")
    assert not any("ETA" in state for state in frames(out))


def test_a_log_gets_a_line_every_2_s_while_cells_run():
    now = [0.0]
    out = io.StringIO()
    bar = Progress(100, stream=out, clock=lambda: now[0])
    bar.running("a", "step 1")
    now[0] = 1.9
    bar.running("a", "step 2")
    now[0] = 2.0
    bar.running("a", "step 3")
    assert out.getvalue().splitlines()[-1].endswith("running: a (step 3, 2 s)")
    assert len(out.getvalue().splitlines()) == 2


def test_a_cell_beat_reports_its_position_at_most_every_period(monkeypatch):
    reports = []
    clock = [100.0]
    monkeypatch.setattr(sim.commands.progress.time, "perf_counter", lambda: clock[0])
    beat = CellBeat("p10-ema/detach/burn-0.22.1", lambda *r: reports.append(r), every=1.0)

    class Sim:
        last_x, last_x_unit, ff_progress, registered = 1200, "step", (1024, 1192), 5000
    beat(Sim())
    clock[0] = 101.0
    beat(Sim())
    beat(Sim())
    assert reports == [("p10-ema/detach/burn-0.22.1",
                        "step 1,200, fast-forwarding 1,024 of 1,192 iterations")]


def test_a_cell_without_a_loop_position_shows_its_seconds_and_steps_not_starting(monkeypatch):
    """adleak-count-params' cells read their figures after the loop and set no position,
    and a long fast-forward calls no heartbeat: for minutes the bar said "(starting)". Now
    each running cell shows its seconds, counted by the bar, and the steps burn registered
    where its beat reports them."""
    reports = []
    clock = [100.0]
    monkeypatch.setattr(sim.commands.progress.time, "perf_counter", lambda: clock[0])
    beat = CellBeat("adleak-count-params/untracked/size=16/burn-0.22.1",
                    lambda *r: reports.append(r[1]), every=1.0)

    class Sim:
        last_x, last_x_unit, registered = None, "", 0
    for second, registered in ((1, 0), (150, 6_000_000)):
        clock[0] = 100.0 + second
        Sim.registered = registered
        beat(Sim())
    assert reports == ["", "6,000,000 steps registered"]
    now = [0.0]
    out = io.StringIO()
    bar = Progress(2, stream=out, clock=lambda: now[0])
    label = "adleak-count-params/untracked/size=16/burn-0.22.1"
    bar.running(label, "starting")
    now[0] = 1.0
    bar.running(label, reports[0])
    now[0] = 150.0
    bar.tick()                         # no report for minutes: its seconds still move
    assert out.getvalue().splitlines()[-1].endswith(f"running: {label} (150 s)")
    bar.running(label, reports[1])
    assert bar._line().endswith(f"({reports[1]}, 150 s)")


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_sweep_names_its_running_cells_and_their_position(tmp_path, capsys, monkeypatch,
                                                            jobs):
    """The cells' reports reach the bar from worker processes (jobs 2) and in-process."""
    from sim.engine.profile import load_profile
    from sim.commands.sweep import Cell, run_cells

    class Eager(Progress):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, every=0.0, **kwargs)

    class EagerBeat(CellBeat):
        def __init__(self, label, report, every=1.0):
            super().__init__(label, report, every=0.0)
    monkeypatch.setattr(sim.commands.sweep, "Progress", Eager)
    monkeypatch.setattr(sim.commands.sweep, "CellBeat", EagerBeat)   # workers fork with it
    cells = [Cell("p10-ema", "detach", "burn-0.22.1", (("steps", 60),)),
             Cell("p10-ema", "without", "burn-0.22.1", (("steps", 60),))]
    run_cells(cells, load_profile("m2max-macos"), tmp_path, jobs=jobs, reuse=False)
    err = capsys.readouterr().err
    for cell in cells:
        assert f"{cell.label} (starting, " in err
        assert f"{cell.label} (step " in err, err
    assert "ETA" not in err
