"""sim fixes' figure per fix: a panel per run where the fix matters, from errors.csv rows."""

from sim.commands.fixes import fix_figures


def _row(experiment, variant, x, metric, measured, predicted, unit="B", phase=""):
    return {"experiment": experiment, "variant": variant, "phase": phase, "x": x,
            "x_unit": "k_iterations", "metric": metric, "unit": unit,
            "measured": measured, "predicted": predicted, "source": "adleak-rss.csv"}


def _errors(slope_measured, slope_predicted):
    rows = [_row("adleak-rss", "flex.autodiff", x, "rss_bytes", 4e6 + slope_measured * x,
                 4e6 + slope_predicted * x) for x in (0, 10, 20, 30)]
    rows += [_row("p10-ema", "detach", x, "ms_per_step", 2.0, 2.1, unit="ms")
             for x in (1, 50, 100)]
    rows.append(_row("p10-ema", "target", 3, "panic", 1, 1, unit="event"))
    rows.append(_row("p10-ema", "target", 1, "rss_bytes", 9e6, 9.1e6))
    return rows


def test_fix_figures_writes_a_png_per_fix_with_a_panel_per_measured_run(tmp_path):
    from matplotlib.figure import Figure

    from sim.output import figures

    drawn = fix_figures({"burn-0.22.1": _errors(1e6, 1e6), "skip-untracked": _errors(0, 0)},
                        tmp_path / "fixes")
    assert list(drawn) == ["skip-untracked"]          # the reference gets none of its own
    path = drawn["skip-untracked"]
    assert path == tmp_path / "fixes" / "skip-untracked.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list((tmp_path / "fixes").glob(".*part"))
    # the panels: only the runs of FIGURE_RUNS that the fake table measured
    fig = figures.draw("fix", "skip-untracked",
                       [("adleak-rss", "flex.autodiff", "", "rss_bytes"),
                        ("p10-ema", "detach", "", "ms_per_step"),
                        ("p10-ema", "target", "", "rss_bytes")],
                       _errors(0, 0), _errors(1e6, 1e6))
    assert isinstance(fig, Figure)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["adleak-rss / flex.autodiff\nrss_bytes",
                                                "p10-ema / detach\nms_per_step",
                                                "p10-ema / target\nrss_bytes"]
    assert [ax.get_ylabel() for ax in shown] == ["MiB", "ms", "MiB"]
    assert shown[0].get_xlabel() == "k iterations"
    # adleak: the reference's measured points and predicted line, then the fix's
    lines = shown[0].get_lines()
    assert len(lines) == 4
    assert list(lines[0].get_ydata()) == [(4e6 + 1e6 * x) / 2 ** 20 for x in (0, 10, 20, 30)]
    assert list(lines[2].get_ydata()) == [4e6 / 2 ** 20] * 4
