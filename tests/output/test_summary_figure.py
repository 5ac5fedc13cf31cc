"""The summary figure and the workload figures as a reader sees them: time coloured
against burn-0.22.1 on the same run, a fix's plateau in its cell, pytorch's fitted drift
not red, column labels inside the figure with nine or more policies, at most three
columns of panels, running means drawn beside their interval rates."""

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.text import Text

from sim.output import plot
from sim.analysis.growth import Growth
from sim.output.plot import summary_figure, workload_figure

REF = "burn-0.22.1"


def cell_colors(ax):
    """``[[hex colour of each cell in a row], ...]`` of a heat map."""
    return [[to_hex(tuple(c)) for c in row] for row in ax.images[0].get_array()]


def cell_texts(ax):
    return {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text()
            for t in ax.texts}


def _g(policy, **kw):
    return Growth("w", "detach", policy, "", unit="per step", x_unit="steps", **kw)


def _ema_growths(extra=()):
    """The issue's loop: 81.6 ms/step under burn at the end, 2.49 under dedup-sweep."""
    return [_g(REF, memory_total_bytes=10**7, memory_bytes=3000, ms_first=0.95, ms_last=81.6),
            _g("dedup-sweep", memory_total_bytes=10**7, memory_bytes=3000, ms_first=0.95,
               ms_last=2.49),
            _g("periodic-sweep", memory_total_bytes=0, memory_bytes=0,
               memory_peak_bytes=80_330_752, ms_first=0.95, ms_last=200.0),
            _g("pytorch", memory_total_bytes=10**6, memory_bytes=2775, heap_total_bytes=0,
               heap_bytes=0, ms_first=0.28, ms_last=0.28)] + list(extra)


def test_time_cells_are_coloured_against_burn_on_the_same_run():
    fig = summary_figure(_ema_growths())
    memory, time = fig.axes
    colors = cell_colors(time)[0]      # burn, dedup-sweep, periodic-sweep, pytorch
    assert colors[0] == plot._TIME_COLORS[2]     # burn slows down along the run
    assert colors[1] == plot._TIME_COLORS[1]     # 32.8x faster than burn: not burn's colour
    assert colors[2] == plot._TIME_COLORS[3]     # slower than burn
    texts = cell_texts(time)
    assert texts[(0, 1)] == "2.49 ms\n32.8x faster" and texts[(0, 2)] == "200 ms\n2.45x slower"
    assert texts[(0, 0)] == "81.6 ms"


def test_memory_cells_show_a_fix_plateau_and_pytorch_drift_is_not_red():
    fig = summary_figure(_ema_growths())
    memory, _ = fig.axes
    colors = cell_colors(memory)[0]
    assert colors[3] == plot._LEVEL_COLORS[plot._DRIFT] != plot._LEVEL_COLORS[4]
    texts = cell_texts(memory)
    assert texts[(0, 2)] == "0 B\npeak 76.6 MiB"
    assert texts[(0, 3)] == "2.71 KiB\nfitted drift"
    labels = [t.get_text() for t in memory.get_xticklabels()]
    assert labels[-1] == "reference (PyTorch)"


def test_column_labels_stay_inside_the_figure_with_nine_policies():
    extra = [_g(f"sweep-every-{4096 * k}-registrations", memory_total_bytes=0,
                memory_bytes=0, ms_first=1.0, ms_last=1.0) for k in range(1, 7)]
    growths = _ema_growths(extra)
    assert len({g.policy for g in growths}) == 10
    fig = summary_figure(growths)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    width, height = fig.get_figwidth() * fig.dpi, fig.get_figheight() * fig.dpi
    for text in fig.findobj(Text):
        if not text.get_text() or not text.get_visible():
            continue
        box = text.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= width + 0.5, text.get_text()
        assert box.y0 >= 0 and box.y1 <= height + 0.5, text.get_text()


def _rows(metric, unit, values, variant="v", xs=(50, 100, 500, 1000, 2000)):
    return [{"experiment": "w", "variant": variant, "phase": "", "x": float(x),
             "x_unit": "step", "metric": metric, "value": float(v), "unit": unit, "note": "",
             "policy": REF, "profile": "p", "params": ""} for x, v in zip(xs, values)]


def test_four_metrics_per_variant_take_two_columns_not_four():
    rows = []
    for metric, unit in (("rss_bytes", "B"), ("heap_bytes_delta", "B"),
                         ("ms_per_step", "ms"), ("host_heap_delta", "MiB")):
        for variant in ("a", "b"):
            rows += _rows(metric, unit, [1, 2, 3, 4, 5], variant=variant)
    fig = workload_figure("w", "", rows, [])
    columns = {round(ax.get_position().x0, 3) for ax in fig.axes}
    rows_of = {round(ax.get_position().y0, 3) for ax in fig.axes}
    assert len(columns) == 2 and len(rows_of) == 4
    assert fig.get_figwidth() < 11


def test_a_running_mean_panel_draws_its_interval_rates():
    # a leak of 3 KB/step after a 1000-KB warm-up at step 1..50: the mean falls, the
    # interval rate does not
    xs = (50, 100, 500, 1000, 2000)
    totals = [1000 + 3 * (x - 50) for x in xs]
    means = [t / (x - 1) for t, x in zip(totals, xs)]
    fig = workload_figure("w", "", _rows("rss_growth_per_step", "KB", means, xs=xs), [])
    (ax,) = fig.axes
    dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert len(dotted) == 1
    rates = dotted[0].get_ydata()
    assert [round(r, 3) for r in rates[1:]] == [3.0, 3.0, 3.0, 3.0]
    assert means[-1] < means[1]           # what the mean alone would have suggested
    assert "line: mean since step 1; dotted: over each interval" in ax.get_title()


def test_a_higher_plateau_is_marked_as_the_report_prices_it():
    """Neither burn nor the fix grows, and the fix plateaus higher (sweep-every-4 on p10-ema
    `log`: peak 10 MiB against 7.03): the report's verdict `higher` is a cell of its own
    colour naming both peaks, with its legend; 7.2 MiB (within 5 %) stays flat."""
    def flat(policy, peak_mib):
        return Growth("p10-ema", "log", policy, "", unit="per step", x_unit="steps",
                      memory_total_bytes=0, memory_bytes=0, memory_peak_bytes=peak_mib * 2**20,
                      ms_first=1.15, ms_last=1.15)
    fig = summary_figure([flat(REF, 7.03), flat("sweep-every-4", 10), flat("dedup-sweep", 7.2)])
    memory, _ = fig.axes
    colors = cell_colors(memory)[0]      # burn, dedup-sweep, sweep-every-4
    assert colors[0] == colors[1] == plot._LEVEL_COLORS[0]
    assert colors[2] == plot._LEVEL_COLORS[plot._HIGHER] not in plot._LEVEL_COLORS[:plot._HIGHER]
    texts = cell_texts(memory)
    assert texts[(0, 2)] == "0 B\npeak 10 MiB\n> 7.03 MiB" and texts[(0, 1)] == "0 B"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "flat, plateau above burn-0.22.1's (a price)" in legend


def test_the_stripes_legend_entry_only_where_two_policies_coincide():
    """Every workload figure's legend said 'coinciding policies: striped', also where no
    two curves coincide and nothing is striped (new-user walkthrough, session 57)."""
    def two(fix_values):
        fix = [dict(r, policy="dedup-sweep") for r in _rows("rss", "MB", fix_values)]
        return _rows("rss", "MB", [1, 2, 3, 4, 5]) + fix

    def labels(fig):
        return [t.get_text() for t in fig.legends[0].get_texts()]

    assert "coinciding policies: striped" in labels(workload_figure("w", "", two([1, 2, 3, 4, 5]), []))
    assert "coinciding policies: striped" not in labels(
        workload_figure("w", "", two([1, 1, 1, 1, 1]), []))
