"""``sim run --out FILE`` picks the format from the file's suffix unless --format says."""

import json

import pytest

from clirun import run_cli


@pytest.mark.parametrize("name,fmt,first", [
    ("rows.csv", None, "experiment,variant,phase"),
    ("rows.json", None, "["),
    ("rows.txt", None, "experiment "),
    ("rows.csv", "table", "experiment "),
])
def test_out_suffix_picks_the_format(name, fmt, first, tmp_path, capsys):
    out = tmp_path / name
    args = ["run", "adleak-rss", "-v", "flex", "--set", "iterations=10", "--out", str(out)]
    if fmt:
        args += ["--format", fmt]
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    text = out.read_text()
    assert text.startswith(first)
    if name.endswith(".json") and not fmt:
        assert json.loads(text)[0]["experiment"] == "adleak-rss"


def test_phases_of_their_own_loops_are_plotted_in_run_order():
    # train-validate reports train@50..200, then generate@50..400: not interleaved by x
    from sim.output.plot import _categories
    rows = [{"x": x, "phase": "train"} for x in (50, 100)] + \
           [{"x": x, "phase": "generate"} for x in (50, 100, 150)]
    positions = _categories(rows)
    assert sorted(positions, key=positions.get) == [
        (50, "train"), (100, "train"), (50, "generate"), (100, "generate"), (150, "generate")]


def test_phases_recorded_in_turn_are_grouped_and_drawn_as_separate_lines():
    # backward-cost records forward@r, backward@r for r = 1, 2, 3: each phase is a series
    from sim.output.plot import _categories, _phase_series
    rows = [{"x": r, "phase": p} for r in (1, 2, 3) for p in ("forward", "backward")]
    assert _phase_series(rows)
    positions = _categories(rows)
    assert sorted(positions, key=positions.get) == [
        (1, "forward"), (2, "forward"), (3, "forward"),
        (1, "backward"), (2, "backward"), (3, "backward")]
    # the steps of one sequence at one x (adleak-count's phases) stay joined, in run order
    steps = [{"x": 10000, "phase": p} for p in ("after-loop", "after-unrelated-backward")]
    assert not _phase_series(steps)
    assert list(_categories(steps)) == [(10000, "after-loop"),
                                        (10000, "after-unrelated-backward")]


def test_a_nearly_flat_panel_shows_at_least_a_ten_percent_window():
    # op-cost's plain add: 0.563-0.571 us over four blocks (1.4 % apart) must not look like
    # a swing across the whole panel; a panel that really varies keeps its own range
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sim.output.plot import FLAT_WINDOW, _scale_y
    fig, (flat, varied) = plt.subplots(1, 2)
    try:
        _scale_y(flat, [0.000563, 0.000571, 0.000566])
        low, high = flat.get_ylim()
        assert high - low >= FLAT_WINDOW * 0.000571
        assert low < 0.000563 and high > 0.000571
        varied.plot([1, 2], [1.0, 2.0])
        _scale_y(varied, [1.0, 2.0])
        assert varied.get_ylim()[1] - varied.get_ylim()[0] < 1.5
    finally:
        plt.close(fig)


def test_the_heartbeat_says_how_far_a_long_fast_forward_batch_is():
    """A batch that fast-forward works through iteration by iteration (here replayed heap
    events) is shown as it goes, not as a run stuck at its last exact step."""
    import io

    from sim.commands.progress import Heartbeat
    from sim.engine.runner import run_cell
    out = io.StringIO()
    beat = Heartbeat("p10-ema/target", stream=out, after=0, every=0, log_every=0)
    run_cell("p10-ema", "target", policy="detach-constant",
             sets={"steps": "1200", "report_at": "1,1200"}, heartbeat=beat)
    lines = out.getvalue().splitlines()
    assert any("fast-forwarding 1,024 of 1,19" in line for line in lines), lines[-3:]
