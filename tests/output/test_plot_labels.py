"""What the figures say in words: titles, notes, units, tick labels, legends and cell texts
match what is drawn (nothing here is timed)."""

import math

from matplotlib.colors import to_hex
from matplotlib.text import Text

from sim.output import plot
from sim.analysis.growth import Growth
from sim.output.plot import summary_figure, workload_figure


def predicted_rows(metric="rss_bytes", unit="B", values=(4.0e6, 6.0e6, 9.9e6), phase="",
                   variant="v", params="", policy="burn-0.22.1", x_unit="step"):
    return [{"experiment": "w", "variant": variant, "phase": phase, "x": float(50 * (i + 1)),
             "x_unit": x_unit, "metric": metric, "value": float(v), "unit": unit, "note": "",
             "policy": policy, "profile": "p", "params": params}
            for i, v in enumerate(values)]


def error_row(x, measured, predicted, ok=True, metric="rss_bytes", unit="B", params=""):
    abs_error = predicted - measured
    return {"experiment": "w", "variant": "v", "phase": "", "x": float(x), "x_unit": "step",
            "metric": metric, "unit": unit, "measured": measured, "predicted": predicted,
            "abs_error": abs_error, "rel_error": abs(abs_error) / measured, "tolerance": 0.05,
            "ok": ok, "status": "predicted", "policy": "burn-0.22.1", "profile": "p",
            "source": "seeds.csv", "note": "", "params": params}


def texts(fig):
    """Every text the figure draws (its own, its panels', its legends')."""
    return [t.get_text() for t in fig.findobj(Text)]


def legend_labels(fig):
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


# -- 1. measured markers are named only where there are some ---------------------------------

def test_a_figure_without_measurements_says_so_in_its_title_and_under_each_panel():
    predicted = predicted_rows() + predicted_rows(metric="ms_per_step", unit="ms",
                                                  values=(1.0, 1.1, 1.2))
    fig = workload_figure("w", "a workload", predicted, [])
    title = fig._suptitle.get_text()
    assert "measured" not in title.split("\n")[0].replace("no measurements", "")
    assert "black-edged" not in title
    assert "no measurements" in title
    assert texts(fig).count("no measurements") == 2   # one note per panel


def test_a_figure_with_measurements_names_their_markers_and_notes_only_bare_panels():
    predicted = predicted_rows() + predicted_rows(metric="ms_per_step", unit="ms",
                                                  values=(1.0, 1.1, 1.2))
    errors = [error_row(50, 4.1e6, 4.0e6)]
    fig = workload_figure("w", "a workload", predicted, errors)
    assert "vs measured (black-edged markers)" in fig._suptitle.get_text()
    # the rss_bytes panel has its residual strip; the ms_per_step panel is measured on
    # no variant, so it is not drawn: no note
    assert texts(fig).count("no measurements") == 0
    errors.append(error_row(50, 1.0, 1.0, metric="ms_per_step", unit="ms"))
    predicted += predicted_rows(variant="u")      # a variant measured on nothing
    fig = workload_figure("w", "a workload", predicted, errors)
    assert texts(fig).count("no measurements") == 1   # u's rss_bytes panel


# -- 2. the panels of one figure label and order phases alike ---------------------------------

def test_numbered_series_are_ordered_by_number_and_labelled_alike_in_every_panel():
    two = (predicted_rows(metric="ms_per_step", unit="ms", phase="thread-1",
                          variant="two", x_unit="forwards") +
           predicted_rows(metric="ms_per_step", unit="ms", phase="thread-0",
                          variant="two", x_unit="forwards"))
    one = predicted_rows(metric="ms_per_step", unit="ms", phase="thread-0", variant="one",
                         x_unit="forwards")
    fig = workload_figure("w", "a workload", two + one, [])
    left, right = fig.axes[:2]
    assert [t.get_text() for t in left.texts] == ["thread-0 (forwards)", "thread-1 (forwards)"]
    assert [t.get_text() for t in right.texts] == ["thread-0 (forwards)"]
    assert [t.get_text() for t in right.get_xticklabels()] == ["50", "100", "150"]
    assert not any("@" in t.get_text() for ax in (left, right) for t in ax.get_xticklabels())


def test_phase_order_keeps_stages_in_run_order_and_numbers_in_numeric_order():
    assert list(plot._phase_order(["train", "generate"])) == ["train", "generate"]
    assert list(plot._phase_order(["forward", "backward"])) == ["forward", "backward"]
    ranks = plot._phase_order(["thread-10", "thread-2", "setup", "thread-1"])
    assert sorted(ranks, key=ranks.get) == ["thread-1", "thread-2", "thread-10", "setup"]


# -- 3. byte axes in readable units, without offset or multiplier -----------------------------

def test_byte_axes_are_shown_in_the_unit_their_magnitude_calls_for():
    assert plot._display_unit("B", [4.0e6, 9.9e6]) == (1 / 1024 ** 2, "MiB")
    assert plot._display_unit("KiB", [4200.0, 7200.0]) == (1 / 1024, "MiB")
    assert plot._display_unit("MiB", [3.0, 19.0]) == (1.0, "MiB")
    assert plot._display_unit("B", [12.0, 800.0]) == (1.0, "B")
    assert plot._display_unit("KB", [2.0, 60.0]) == (1.0, "KB")        # decimal stays decimal
    assert plot._display_unit("B", [0.0, 0.0]) == (1.0, "B")
    assert plot._display_unit("ms", [1e7]) == (1.0, "ms")             # not a byte unit
    # a log axis: the unit of its middle decade, not of its top
    assert plot._display_unit("MiB", [3.6, 2048.0])[1] == "MiB"


def test_a_byte_axis_has_plain_tick_labels_and_no_offset():
    fig = workload_figure("w", "a workload", predicted_rows(values=(4.0e6, 6.0e6, 9.9e6)), [])
    fig.draw_without_rendering()
    ax = fig.axes[0]
    assert ax.get_title() == "v: rss_bytes (MiB)"
    assert ax.yaxis.get_offset_text().get_text() == ""
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and all("e" not in text and float(text.replace("−", "-")) < 12
                          for text in labels)
    # the curve is drawn in MiB
    assert max(ax.lines[0].get_ydata()) == 9.9e6 / 1024 ** 2


# -- 4. summary legend, durations and sizes ----------------------------------------------------

def growth(variant, policy, memory=None, total=None, first=None, last=None, panic=None):
    return Growth("w", variant, policy, "", unit="per step", memory_bytes=memory,
                  memory_total_bytes=total, ms_first=first, ms_last=last, panic_x=panic,
                  x_unit="step")


def summary_growths():
    rows = []
    for variant, burn, other in (("a", 2000.0, 2000.0), ("b", 2000.0, 3500.0),
                                 ("c", 2000.0, 500.0), ("d", 2000.0, 1500.0),
                                 ("e", 0.0, 0.0)):
        for policy, per_step in (("burn-0.22.1", burn), ("pytorch", other)):
            rows.append(growth(variant, policy, per_step, per_step * 1000, 1.0, 1.0))
    rows += [growth("f", "burn-0.22.1", first=1.0, last=1.5),
             growth("f", "pytorch", first=1.0, last=3.0),
             growth("g", "burn-0.22.1", first=1.0, last=11000 * 1000.0),
             growth("g", "pytorch", first=1.0, last=1.0, panic=3.0)]
    return rows


def used_colors(ax):
    """The colours of a heat map's cells."""
    rgba = ax.images[0].get_array()
    return {to_hex(tuple(cell)) for row in rgba for cell in row}


def test_the_summary_legends_explain_exactly_the_colours_their_cells_use():
    fig = summary_figure(summary_growths())
    assert len(fig.legends) == 2
    for ax, legend in zip(fig.axes, fig.legends):
        explained = {to_hex(patch.get_facecolor()) for patch in legend.get_patches()}
        assert used_colors(ax) == explained
    memory, time = fig.axes
    # five memory classes and no-figure cells (f, g have no memory figure)
    assert len(used_colors(memory)) == 6
    labels = legend_labels(fig)
    assert "panic" in labels and "none / flat" in labels
    assert any("more than burn-0.22.1" in label for label in labels)


def test_every_class_has_its_own_colour_and_a_legend_text():
    for texts_of, colors in ((plot._memory_levels("burn-0.22.1"), plot._LEVEL_COLORS),
                             (plot._time_levels(), plot._TIME_COLORS)):
        assert set(texts_of) == set(range(len(colors)))
        assert len(set(colors) | {plot._NO_FIGURE}) == len(colors) + 1


def test_summary_cells_show_durations_humanly():
    fig = summary_figure(summary_growths())
    cells = texts(fig)
    assert "3.06 h" in cells
    assert not any("e+" in text for text in cells)


def test_durations_read_as_a_person_writes_them():
    assert plot._ms_text(11000 * 1000.0) == "3.06 h"
    assert plot._ms_text(12 * 60_000.0) == "12 min"
    assert plot._ms_text(45_000.0) == "45 s"
    assert plot._ms_text(120.0) == "120 ms"
    assert plot._ms_text(0.122) == "0.122 ms"
    assert plot._ms_text(0.07) == "70 µs"
    for ms in (1e-4, 0.5, 999.0, 59_999.0, 3.6e6 - 1, 1e9, 1e12):
        assert "e" not in plot._ms_text(ms).split()[0]


def test_sizes_read_as_a_person_writes_them():
    assert plot._bytes_text(472) == "472 B"
    assert plot._bytes_text(2080) == "2.03 KiB"
    assert plot._bytes_text(-3 * 1024 ** 2) == "-3 MiB"
    assert plot._bytes_text(1000 * 1024) == "1000 KiB"    # not "1e+03 KiB"
    assert plot._bytes_text(5000 * 1024 ** 3) == "5000 GiB"


# -- 5. grid figures: visible markers, every marker kind in the legend ------------------------

def test_grid_points_have_visible_markers_and_every_marker_kind_has_a_legend_entry():
    predicted = predicted_rows(params="steps=500") + predicted_rows(
        params="steps=2000", values=(5.0e6, 7.0e6, 9.0e6))
    missing = error_row(100, 6.5e6, math.nan, ok=False, params="steps=500")
    missing.update(abs_error=math.nan, rel_error=math.nan, status="unpredicted")
    errors = [error_row(50, 4.0e6, 4.0e6, params="steps=500"),
              error_row(150, 8.0e6, 9.9e6, ok=False, params="steps=500"), missing]
    fig = workload_figure("w", "a workload", predicted, errors)
    ax = fig.axes[0]
    grid_markers = [line for line in ax.lines if line.get_linestyle() == "None"
                    and line.get_marker() in plot._PARAM_MARKERS and line.get_markersize() < 9]
    assert grid_markers and all(line.get_markersize() >= 6 for line in grid_markers)
    labels = legend_labels(fig)
    assert {"steps=500", "steps=2000"} <= set(labels)
    assert "error %: within tolerance (green band)" in labels
    assert "error %: outside tolerance" in labels
    assert "measured, not predicted there: no error % (grey bar)" in labels


def test_marks_a_figure_does_not_draw_are_not_in_its_legend():
    fig = workload_figure("w", "a workload", predicted_rows(), [error_row(50, 4.0e6, 4.0e6)])
    labels = legend_labels(fig)
    assert "error %: within tolerance (green band)" in labels
    assert not any("outside" in label or "not predicted" in label for label in labels)
    assert "measured panic" not in labels


# -- 6. a log axis over a single power of ten is labelled within the decade -------------------

def test_a_log_axis_with_one_power_of_ten_gets_labels_within_the_decade():
    fig = workload_figure("w", "a workload", predicted_rows(
        metric="ms_per_step", unit="ms", values=(2.1, 8.0, 65.0)), [])
    fig.draw_without_rendering()
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    low, high = ax.get_ylim()
    labels = [t.get_text() for t in ax.get_yticklabels()
              if t.get_text() and low <= t.get_position()[1] <= high]
    assert {"5", "10", "20", "50"} <= set(labels)


def test_a_log_axis_over_decades_keeps_its_powers_of_ten():
    fig = workload_figure("w", "a workload", predicted_rows(
        metric="ms_per_step", unit="ms", values=(0.5, 8.0, 600.0)), [])
    fig.draw_without_rendering()
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    ticks = [v for v in ax.get_yticks() if low <= v <= high]
    assert ticks == [1.0, 10.0, 100.0]


# -- 7. titles fit the figure; unpredicted points read as no error; phases readable ----------

LONG = ("RSS of `c = a.clone() + b.clone(); drop(c)` on 16-element tensors, every 100k "
        "iterations, on a machine with a rather long description of itself")


def inside(fig, artist):
    """Whether ``artist``'s drawn extent lies within the figure (a drawn figure)."""
    box, frame = artist.get_window_extent(), fig.bbox
    return (box.x0 >= frame.x0 - 0.5 and box.x1 <= frame.x1 + 0.5
            and box.y0 >= frame.y0 - 0.5 and box.y1 <= frame.y1 + 0.5)


def test_a_single_panel_figure_wraps_a_long_title_to_fit_its_width():
    errors = [error_row(50, 4.1e6, 4.0e6)]
    fig = workload_figure("adleak-rss-with-a-long-name", LONG, predicted_rows(), errors,
                          profile="m2max-macos")
    fig.draw_without_rendering()
    title = fig._suptitle
    assert inside(fig, title)
    lines = title.get_text().split("\n")
    assert len(lines) > 2                                   # wrapped, not clipped
    assert "[profile m2max-macos]" in lines[-1]             # the tag is never split
    assert " ".join(line.strip() for line in lines[1:]).replace("   [", " [") == \
        f"{LONG} [profile m2max-macos]"
    # the legend fits too, and sits below the title, above the panels
    legend = fig.legends[0]
    assert inside(fig, legend)
    assert legend.get_window_extent().y1 <= title.get_window_extent().y0 + 1
    assert legend.get_window_extent().y0 >= fig.axes[0].get_window_extent().y1


def test_a_short_title_keeps_its_two_lines():
    fig = workload_figure("w", "a workload", predicted_rows(), [], profile="p")
    assert fig._suptitle.get_text().count("\n") == 1
    fig.draw_without_rendering()
    assert inside(fig, fig._suptitle)


def test_a_legend_with_long_labels_takes_fewer_columns_to_fit():
    errors = [error_row(50, 4.1e6, 4.0e6)]
    for e in errors:
        e["source"] = "measurements-from-the-lab-machine-under-the-desk-" * 2 + ".csv"
    fig = workload_figure("w", "a workload", predicted_rows(), errors)
    fig.draw_without_rendering()
    assert inside(fig, fig.legends[0])


def unpredicted_row(x, measured):
    row = error_row(x, measured, math.nan, ok=False)
    row.update(abs_error=math.nan, rel_error=math.nan, status="unpredicted")
    return row


def test_a_measured_point_without_prediction_is_not_drawn_as_an_error_value():
    errors = [error_row(50, 4.0e6, 4.0e6), unpredicted_row(75, 5.0e6),
              error_row(150, 8.0e6, 9.9e6, ok=False)]
    fig = workload_figure("w", "a workload", predicted_rows(), errors)
    fig.draw_without_rendering()
    panel, strip = fig.axes[:2]
    # no marker of the strip is at x = 75 (least of all on its 0 % line)
    for line in strip.lines:
        xs = list(line.get_xdata())
        assert 75 not in xs or line.get_marker() in (None, "None", "")
    # the mark there is a bar across the whole strip height, in axes fractions
    bars = [c for c in strip.collections if len(c.get_segments())]
    segments = [s for c in bars for s in c.get_segments()]
    assert [[tuple(p) for p in s] for s in segments] == [[(75.0, 0.0), (75.0, 1.0)]]
    frame = strip.get_window_extent()
    (_, low), (_, high) = bars[0].get_transform().transform(segments[0])
    assert abs(low - frame.y0) < 1 and abs(high - frame.y1) < 1
    # the legend says what the bar is, with a mark of the same colour
    legend = fig.legends[0]
    entry = next(h for h, t in zip(legend.legend_handles, legend.get_texts())
                 if "not predicted" in t.get_text())
    assert "no error" in entry.get_label() and entry.get_marker() == "|"
    assert to_hex(entry.get_color()) == to_hex(bars[0].get_color()[0])
    # the measured marker is still drawn on the panel
    assert any(75 in list(line.get_xdata()) for line in panel.lines)


def grid_rows(phase, xs, policy="burn-0.22.1"):
    return [{"experiment": "w", "variant": "v", "phase": phase, "x": float(x),
             "x_unit": "iterations", "metric": "heap_bytes_delta", "value": float(x),
             "unit": "B", "note": "", "policy": policy, "profile": "p",
             "params": f"iterations={x}"} for x in xs]


def test_ticks_within_a_phase_run_in_numeric_order_whatever_the_run_order():
    # a grid asked for as iterations=10000,1000: the runs come 10000 first
    predicted = []
    for x in (10000, 1000):
        predicted += grid_rows("after-loop", [x]) + grid_rows("after-unrelated-backward", [x])
    fig = workload_figure("w", "a workload", predicted, [])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1000", "10000"] * 2
    assert [t.get_text().replace("\n", " ") for t in ax.texts] == [
        "after-loop (iterations)", "after-unrelated-backward (iterations)"]


def test_phase_names_under_narrow_series_fit_their_ticks_and_do_not_overlap():
    phases = ("after-loop", "after-unrelated-backward", "after-backward-through-a")
    predicted = []
    for x in (10000, 1000):
        for phase in phases:
            predicted += grid_rows(phase, [x])
    # two variants side by side: the right panel's last name must stay in the figure
    predicted += [dict(r, variant="u") for r in predicted]
    fig = workload_figure("w", "a workload", predicted, [])
    fig.draw_without_rendering()
    for ax in fig.axes:
        names = list(ax.texts)
        assert len(names) == 3
        boxes = [t.get_window_extent() for t in names]
        frame = ax.get_window_extent()
        for left, right in zip(boxes, boxes[1:]):
            assert left.x1 <= right.x0                       # no overlap
        for text, box in zip(names, boxes):
            assert inside(fig, text)
            assert frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1   # under its panel
            assert text.get_fontsize() >= plot._PHASE_MIN_SIZE
            assert text.get_text().count("\n") <= 1
        # each name stays under its own ticks: centred between its first and last
        ticks = ax.get_xticks()
        for i, box in enumerate(boxes):
            x0, x1 = (ax.transData.transform((tick, 0))[0] for tick in ticks[2 * i: 2 * i + 2])
            assert abs((box.x0 + box.x1) / 2 - (x0 + x1) / 2) < 1


def test_fit_label_keeps_a_name_that_fits_and_wraps_one_that_does_not():
    assert plot._fit_label("train (step)", 2.0) == ("train (step)", plot._PHASE_SIZE)
    text, size = plot._fit_label("after-backward-through-a (iterations)", 1.2)
    assert (text, size) == ("after-backward-\nthrough-a (iterations)", plot._PHASE_SIZE)
    assert all(plot._text_width(line, size) <= 1.2 for line in text.split("\n"))
    # too narrow for two lines even at the smallest size: as many lines as it takes
    text, size = plot._fit_label("after-backward-through-a (iterations)", 0.5)
    assert size == plot._PHASE_MIN_SIZE and text.count("\n") >= 2


# -- a metric the workload records under an observable's name is drawn -------------------------

OWN_HEAP = """\
def run(sim, variant):
    for step in (1, 2, 3):
        yield sim.sample(step, "step", observables=False, heap_bytes=1000.0 * step,
                         rss=2.0 * step)
        yield sim.sample(step, "step", phase="with-observables", rss=3.0 * step)
"""


def test_a_metric_recorded_under_an_observables_name_is_drawn_and_the_observables_are_not(
        tmp_path):
    """`sim.sample(..., observables=False, heap_bytes=...)` wrote the workload's own
    heap_bytes to predicted.csv but no figure drew it: the figure hid every metric named
    like a bookkeeping observable (session 57's list). Only the observables each sample
    records after the workload's metrics are left out now."""
    from sim.engine.runner import run_cell
    path = tmp_path / "own.py"
    path.write_text(OWN_HEAP)
    rows = run_cell(str(path), "default")
    assert sum(r["metric"] == "heap_bytes" for r in rows) == 3 + 3   # own, observable
    own = plot._workload_rows(rows)
    assert [r["value"] for r in own if r["metric"] == "heap_bytes"] == [1000.0, 2000.0, 3000.0]
    assert not any(r["metric"] in plot.OBSERVABLES and r["metric"] != "heap_bytes"
                   for r in own)
    fig = workload_figure("own", "", rows, [])
    titles = [ax.get_title() for ax in fig.axes]
    assert any(t.startswith("default: heap_bytes") for t in titles), titles
    assert not any("live_nodes" in t or "sim_time_ms" in t for t in titles), titles
