"""Figures: predicted curves against measured points, and a policy x workload summary.

:func:`workload_figure` draws one workload: a panel per (variant, metric) with
one curve per policy (colour, the same in every figure) and the measured points
on top as large black-edged markers, never joined by lines, so a measurement
and its prediction are told apart at a glance. Curves that coincide are drawn
as nested stripes (the first policy widest) so none hides another. Under each
panel with measurements, a residual strip shows the signed relative error of
the prediction in % with the tolerance band shaded; a panel without any says
"no measurements" instead, and the title mentions measured markers only when
the figure has some. Byte metrics are drawn in the binary (or, for metrics
recorded in KB/MB, decimal) unit their magnitude calls for, without an offset
or a scientific multiplier. Axes switch to log scale where the values span
decades (labelled at 1, 2 and 5 of a decade when a single power of ten falls
in range); a panel whose points are phases of one loop (``after-loop``,
``after-unrelated-backward``) uses the phases as categories, and phases that
are series of their own (a train loop's reports, then the generation's; thread-0,
thread-1) are each drawn over their own x ticks (in numeric order) with their name
under them, wrapped or shrunk to the width of those ticks. A measured point with no
prediction is a grey bar across its residual strip, never a mark that reads as an
error value. Every marker kind a figure draws is in its legend. Panics are dashed
vertical lines (predicted) and an ``X`` (measured). The title is wrapped to the
figure's width, and the legend takes as many columns as fit it.

:func:`summary_figure` draws two heat maps, runs (workload / variant) by
policy: memory growth (with the height a fix's bounded memory plateaus at);
time per loop unit at the end of the run against burn-0.22.1's on the same
run, with panics (see :mod:`sim.analysis.growth`). Cells are coloured by classes, and
each heat map's legend lists exactly the classes its cells use.

Figures are :class:`matplotlib.figure.Figure` objects (no pyplot state); the
caller saves them.
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Annotation
from matplotlib.textpath import TextToPath
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, ScalarFormatter
from matplotlib.transforms import blended_transform_factory

from ..analysis.compare import TOLERANCE
from ..analysis.growth import GROWS_BYTES, LEVEL_RATIOS, memory_level, ratio_text, verdict
from ..analysis.growth import phase_ranks as _phase_order
from ..policies import POLICIES, policy_label, policy_rank, reference_label
from ..units import BYTES_PER, METRICS, OBSERVABLES

__all__ = ["workload_figure", "summary_figure", "fix_figure", "policy_color", "policy_colors", "interval_rates",
           "use_policy_colors", "OBSERVABLES"]


_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#17becf", "#bcbd22", "#7f7f7f"]
_PARAM_MARKERS = ["o", "^", "s", "v"]
#: marker size (points) of a curve's samples: a dot when one parameter point is drawn,
#: a shape a reader can tell apart when the markers name grid points
_SAMPLE_MS, _GRID_MS = 3.5, 6.5

#: metrics that are a running mean from a base x (the seed's ``rss_growth_per_step``:
#: (RSS now - RSS after step 1) / (steps - 1)) -> that base. Such a mean keeps falling
#: after a warm-up while the memory still rises, so its panels also draw the growth per
#: loop unit over each interval between samples (:func:`interval_rates`), dotted.
RUNNING_MEANS = {"rss_growth_per_step": 1.0}
_MEASURED_MARKERS = ["o", "s", "D", "^", "v", "P"]
#: residual strips are clipped to +-this many percent
_RESIDUAL_CAP = 100.0
#: the mark of a measured point with no prediction in a residual strip: a grey bar across
#: the whole strip (no error value), its width in points
_UNPREDICTED = {"color": "0.55", "alpha": 0.5, "lw": 3.0}
#: font size (points) of the figure title, and the height of one of its lines (inches)
_TITLE_SIZE, _TITLE_LINE = 11, 0.19
#: font size (points) of a phase's name under its ticks, and the smallest it is shrunk to
_PHASE_SIZE, _PHASE_MIN_SIZE = 7.5, 5.5


#: more colours for policies outside the registry (a user's files); the ones a built-in
#: uses are left out of :func:`_other_palette`
_MORE_COLORS = ["#393b79", "#e7ba52", "#637939", "#7b4173", "#9c9ede", "#00676b"]

#: colours of this run's policies outside the registry (:func:`use_policy_colors`)
_OTHER_COLORS = {}


_BAND = re.compile(r"run-to-run range ([-+0-9.eE]+)\.\.([-+0-9.eE]+)")


def measured_band(entry):
    """``(low, high)`` of a measured point graded against its run-to-run range
    (:func:`sim.analysis.compare.join`: its ``range``, or read back from its note), else None."""
    if entry.get("range"):
        return entry["range"]
    found = _BAND.search(entry.get("note") or "")
    return (float(found.group(1)), float(found.group(2))) if found else None


def _other_palette() -> list:
    """Colours no built-in policy uses, for the policies outside the registry."""
    builtin = {_PALETTE[i % len(_PALETTE)] for i in range(len(POLICIES))}
    # grey is left out: the legends draw what is not a policy (grid points, the
    # measured curve) in greys
    return [c for c in dict.fromkeys(_PALETTE + _MORE_COLORS)
            if c not in builtin and c != "#7f7f7f"]


def policy_colors(names) -> dict:
    """Colours of the policies ``names`` that are not built-ins (a user's files, or names
    read back from results): none a built-in uses, distinct from each other while the
    palette lasts, given in name order (the same names get the same colours)."""
    palette = _other_palette()
    others = sorted({n for n in names if n not in POLICIES})
    return {name: palette[i % len(palette)] for i, name in enumerate(others)}


def use_policy_colors(colors) -> None:
    """Draw the policies outside the registry in ``colors`` (:func:`policy_colors` of all
    the policies of a run, so that every figure of it agrees)."""
    _OTHER_COLORS.clear()
    _OTHER_COLORS.update(colors or {})


def policy_color(policy: str) -> str:
    """The colour of ``policy`` in every figure: a built-in's by registry order; any other
    policy's as :func:`use_policy_colors` set it, else one no built-in uses chosen by a
    (stable) hash of its name."""
    import zlib
    names = list(POLICIES)
    if policy in names:
        return _PALETTE[names.index(policy) % len(_PALETTE)]
    if policy in _OTHER_COLORS:
        return _OTHER_COLORS[policy]
    palette = _other_palette()
    return palette[zlib.crc32(policy.encode()) % len(palette)]


# -- one workload ------------------------------------------------------------------------------

def workload_figure(name, description, predicted, errors, profile=""):
    """The figure of one workload.

    Parameters
    ----------
    name, description : str
    predicted : list of dict
        The workload's predicted rows (numeric ``x`` and ``value``), any policies.
    errors : list of dict
        The workload's rows of errors.csv (measured points and their errors).
    profile : str
        Shown in the title.
    """
    own = _workload_rows(predicted)
    panels = _panels(own, errors)
    policies = _shown_order({r["policy"] for r in predicted})
    params = list(dict.fromkeys(r.get("params", "") for r in predicted))
    sources = list(dict.fromkeys((e["source"], e["experiment"]) for e in errors))
    per_variant = max((len(ms) for _, ms in panels), default=1)
    slots = [(v, m) for v, ms in panels for m in ms]
    if per_variant == 1:   # one metric per variant: wrap the variants into rows of three
        ncols = max(1, min(3, len(slots)))
        positions = [(i // ncols, i % ncols) for i in range(len(slots))]
    else:                  # a row per variant, a column per metric, at most three: a
        # variant with more metrics takes as many rows as that needs (four: 2 x 2), so
        # that the figure, shown at a page's width, keeps its fonts legible
        rows_each = math.ceil(per_variant / _MOST_COLUMNS)
        ncols = math.ceil(per_variant / rows_each)
        positions = [(r * rows_each + c // ncols, c % ncols)
                     for r, (_, ms) in enumerate(panels) for c in range(len(ms))]
    nrows = max(1, max((r for r, _ in positions), default=0) + 1)

    drawn = _drawn_errors(slots, errors)
    handles = _legend_handles(predicted, drawn, policies, params, sources, errors)
    categorical = any(r.get("phase", "") for r in predicted + errors)
    # without residual strips, the "no measurements" notes need room of their own
    note = 0.0 if errors else 0.2
    slot = (max(4.3, 8.0 / ncols), 3.1)
    space = (0.85, (1.45 if categorical else 0.95) + note)
    width = _grid_width(ncols, slot[0], space[0], (0.75, 0.25))
    # the title wrapped to the figure's width; each line beyond two moves the legend and
    # the panels down by a line
    heading = _figure_heading(name, bool(drawn), description, profile, width)
    extra = (heading.count("\n") - 1) * _TITLE_LINE
    legend_cols = _legend_columns([h.get_label() for h in handles],
                                  min(len(handles), max(2, ncols * 2)), width)
    legend_rows = math.ceil(len(handles) / legend_cols)
    fig, grid = _figure_grid(nrows, ncols, slot=slot, space=space,
                             margins=(0.75, 0.25, 0.75 + extra + 0.24 * legend_rows,
                                      (0.95 if categorical else 0.5) + note))
    striped = False
    for (variant, metric), (r, c) in zip(slots, positions):
        if errors:   # a residual strip under each panel that has measurements
            sub = grid[r, c].subgridspec(2, 1, height_ratios=[3, 1], hspace=0.06)
            ax = fig.add_subplot(sub[0])
            if any(e["variant"] == variant and e["metric"] == metric for e in errors):
                res = fig.add_subplot(sub[1], sharex=ax)
            else:   # (an empty strip would cost as much to draw as a panel)
                res = None
        else:
            ax, res = fig.add_subplot(grid[r, c]), None
        striped |= _draw_panel(ax, res, variant, metric, own, errors, policies, params,
                               sources)
    if not striped:      # no two policies' curves coincide: the stripes' entry explains nothing
        handles = [h for h in handles if h.get_label() != _STRIPED]
    height = fig.get_figheight()
    fig.suptitle(heading, fontsize=_TITLE_SIZE, y=1 - 0.08 / height, va="top")
    fig.legend(handles=handles, loc="upper center",
               bbox_to_anchor=(0.5, 1 - (0.55 + extra) / height),
               ncols=legend_cols, fontsize=_LEGEND_SIZE, frameon=False,
               handlelength=_LEGEND_HANDLE)
    return fig


def _figure_heading(name, measured, description, profile, width) -> str:
    """The figure's title text: :func:`_figure_title`, then the workload's
    ``description`` and ``[profile ...]``, each wrapped at spaces to lines that fit a
    figure ``width`` inches wide (less a margin) in the title's font: at least two
    lines, more when a line is too long (the profile tag is never split)."""
    fits = width - 2 * _TEXT_MARGIN
    subtitle = re.findall(r"\s*\S+", description)
    if profile:
        subtitle.append(f"   [profile {profile}]")
    lines = _wrap_pieces(re.findall(r"\s*\S+", _figure_title(name, measured)), fits,
                         _TITLE_SIZE)
    return "\n".join(lines + (_wrap_pieces(subtitle, fits, _TITLE_SIZE) or [""]))


#: most columns of panels a workload figure has (wider, it is shrunk to a page's width and
#: its fonts with it)
_MOST_COLUMNS = 3

#: font size (points) and handle length (font sizes) of a workload figure's legend
_LEGEND_SIZE, _LEGEND_HANDLE = 8, 2.5
#: what a text keeps clear of the edge it must fit in, inches
_TEXT_MARGIN = 0.1


def _legend_columns(labels, most, width) -> int:
    """The number of columns, at most ``most``, of the widest legend of ``labels`` (in
    order, filled column by column as matplotlib fills them) that fits a figure
    ``width`` inches wide; 1 when none does."""
    em = _LEGEND_SIZE / 72   # inches
    for ncols in range(max(1, most), 1, -1):
        columns = [c for c in np.array_split(np.arange(len(labels)), ncols) if len(c)]
        # handle, the gap after it and the widest label of each column; the spacing
        # between columns (2 em) and the border pad (0.4 em a side)
        needed = sum((_LEGEND_HANDLE + 0.8) * em +
                     max(_text_width(labels[i], _LEGEND_SIZE) for i in column)
                     for column in columns) + (len(columns) - 1) * 2 * em + 0.8 * em
        if needed <= width - 2 * _TEXT_MARGIN:
            return ncols
    return 1


_TEXT_TO_PATH = TextToPath()


@functools.lru_cache(maxsize=4096)
def _line_width(line, fontsize) -> float:
    """Width in inches of one ``line`` of text in the default font at ``fontsize``
    points (as drawn, within a percent or so; no renderer needed). Cached: shaping
    costs some 30 µs a character."""
    prop = FontProperties(size=fontsize)
    return _TEXT_TO_PATH.get_text_width_height_descent(line, prop, ismath=False)[0] / 72


def _text_width(text, fontsize) -> float:
    """Width in inches of the widest line of ``text`` (:func:`_line_width`)."""
    return max(_line_width(line, fontsize) for line in text.split("\n"))


def _wrap_pieces(pieces, width, fontsize) -> list:
    """Lines of the ``pieces`` of a text (each with the separator before it: " word",
    "after-"), as many on a line as fit ``width`` inches at ``fontsize`` points, a
    line's first piece without its separator. A line's width is the sum of its pieces'
    (each measured once; kerning across a seam is a fraction of a point, which the
    callers' margins cover). A piece wider than ``width`` alone has a line of its own
    (the caller shrinks the font when that matters)."""
    lines, used = [], 0.0
    for piece in pieces:
        wide = _line_width(piece, fontsize)
        if lines and used + wide <= width:
            lines[-1] += piece
            used += wide
        else:
            lines.append(piece.lstrip())
            used = _line_width(lines[-1], fontsize)
    return lines


def _figure_title(name, measured: bool) -> str:
    """The first title line: what the lines are, and the measured markers only when the
    figure draws some (``measured``)."""
    title = f"{name}: predicted (lines, a colour per policy)"
    if measured:
        return f"{title} vs measured (black-edged markers)"
    return f"{title}; no measurements"


def _drawn_errors(slots, errors) -> list:
    """The rows of ``errors`` the figure draws: measured points of its panels
    ``slots`` ``[(variant, metric), ...]``, and measured panics of their variants."""
    panels = set(slots)
    variants = {v for v, _ in slots}
    return [e for e in errors if (e["variant"], e["metric"]) in panels
            or (e["metric"] == "panic" and e["variant"] in variants)]


#: the legend entry of coinciding policies' striped lines (left out where none coincide)
_STRIPED = "coinciding policies: striped"


def _legend_handles(predicted, drawn, policies, params, sources, errors) -> list:
    """Legend entries for every kind of line and marker the figure draws: a line per
    policy, a marker per grid point (``params``, when more than one), a marker per
    measured source, the coinciding-curve stripes, panics, and the kinds of marks in
    the residual strips (``drawn``: the measured rows drawn, :func:`_drawn_errors`)."""
    handles = [Line2D([], [], color=policy_color(p), lw=3, label=policy_label(p))
               for p in policies]
    if len(params) > 1:
        handles += [Line2D([], [], color="0.3", lw=1, marker=_PARAM_MARKERS[i % 4],
                           ms=_GRID_MS, label=p or "defaults") for i, p in enumerate(params)]
    for i, (source, experiment) in enumerate(sources):
        handles.append(Line2D([], [], ls="", marker=_MEASURED_MARKERS[i % 6], ms=9,
                              mfc=_measured_face(experiment, errors), mec="black", mew=1.6,
                              label=f"measured {experiment} ({source})"))
    handles.append(Line2D([], [], color="0.5", lw=2.2, ls=(0, (5, 5)),
                          label=_STRIPED))
    if any(r["metric"] == "panic" for r in predicted):
        handles.append(Line2D([], [], color="0.3", lw=1.4, ls=(0, (2, 2)),
                              label="predicted panic"))
    means = sorted({r["metric"] for r in predicted} & set(RUNNING_MEANS))
    if means:
        handles.append(Line2D([], [], color="0.3", lw=1.6, ls=":",
                              label=f"dotted: {', '.join(means)} over each interval "
                                    f"(the line: its mean since step "
                                    f"{RUNNING_MEANS[means[0]]:g})"))
    if any(e["metric"] == "panic" for e in drawn):
        handles.append(Line2D([], [], ls="", marker="X", ms=10, color="black",
                              label="measured panic"))
    return handles + _residual_handles([e for e in drawn if e["metric"] != "panic"])


def _residual_handles(points) -> list:
    """Legend entries of the residual strips' marks that ``points`` (measured points
    drawn with a strip) produce: within tolerance (filled), outside it (hollow, red
    edge), and measured where nothing was predicted (a grey bar across the strip: no
    error value, :func:`_draw_residuals`)."""
    missing = [e for e in points if math.isnan(e["predicted"])]
    predicted = [e for e in points if not math.isnan(e["predicted"])]
    handles = []
    if any(e["ok"] for e in predicted):
        handles.append(Line2D([], [], ls="", marker="o", ms=6, mfc="0.45", mec="0.45",
                              mew=1.5, label="error %: within tolerance (green band)"))
    if any(not e["ok"] for e in predicted):
        handles.append(Line2D([], [], ls="", marker="o", ms=6, mfc="white", mec="#d62728",
                              mew=1.5, label="error %: outside tolerance"))
    if missing:
        handles.append(Line2D([], [], ls="", marker="|", ms=11,
                              mew=_UNPREDICTED["lw"], color=_UNPREDICTED["color"],
                              alpha=_UNPREDICTED["alpha"],
                              label="measured, not predicted there: no error % (grey bar)"))
    return handles


def _note_no_measurements(ax, anchor):
    """Write "no measurements" under ``ax``, just below ``anchor`` (the lowest text under
    the axes: its x label, or a phase name), where a residual strip would be. The note
    is the figure's (the panel's own texts are its labels)."""
    # x: the panel's centre; y: the anchor's bottom, known once the axes are drawn (the
    # figure draws its own artists after its axes)
    ax.figure.add_artist(Annotation(
        "no measurements", xy=(0.5, 0), xycoords=(ax.transAxes, anchor), xytext=(0, -6),
        textcoords="offset points", ha="center", va="top", fontsize=7, color="0.5",
        annotation_clip=False))


def _figure_grid(nrows, ncols, slot, space, margins):
    """A figure sized in inches around an ``nrows`` x ``ncols`` grid of slots.

    ``slot``: (width, height) of one slot; ``space``: (horizontal, vertical) gap
    between slots; ``margins``: (left, right, top, bottom). Fixed margins instead
    of a layout engine: the layout pass costs more than drawing the figure.
    """
    (w, h), (ws, hs), (left, right, top, bottom) = slot, space, margins
    width = _grid_width(ncols, w, ws, (left, right))
    height = top + nrows * h + (nrows - 1) * hs + bottom
    fig = Figure(figsize=(width, height))
    grid = fig.add_gridspec(nrows, ncols, left=left / width, right=1 - right / width,
                            top=1 - top / height, bottom=bottom / height,
                            wspace=ws / w, hspace=hs / h)
    return fig, grid


def _grid_width(ncols, slot_width, gap, margins) -> float:
    """Width in inches of a figure with ``ncols`` slots ``slot_width`` inches wide,
    ``gap`` inches apart, within (left, right) ``margins`` (inches)."""
    left, right = margins
    return left + ncols * slot_width + (ncols - 1) * gap + right


def _stripe(i, k, dash=5.0):
    """Dash pattern of member ``i`` of ``k`` coinciding lines: together, a striped line."""
    if k == 1:
        return "-"
    period = k * dash
    return ((k - i) * dash % period, (dash, period - dash))


def _measured_face(experiment, errors):
    """Measured markers are filled with the colour of the policy they are compared with."""
    for e in errors:
        if e["experiment"] == experiment:
            return policy_color(e["policy"])
    return "white"


#: predicted metrics drawn beside a measured one (the seed printed the pool's bytes in use;
#: the reserved bytes the pool model predicts go next to them)
COMPANIONS = {"gpu_in_use": ("gpu_reserved",)}


def _workload_rows(predicted) -> list:
    """``predicted`` less the bookkeeping observables each ``sim.sample`` records after the
    workload's own metrics: the :data:`OBSERVABLES`, in their order, one after the other at
    one sample (same run, phase and x). A metric the workload records itself under an
    observable's name (``sim.sample(..., observables=False, heap_bytes=...)``) stays."""
    n, out, i = len(OBSERVABLES), [], 0
    while i < len(predicted):
        block = predicted[i:i + n]
        if predicted[i]["metric"] == OBSERVABLES[0] and _one_sample_set(block):
            i += n
            continue
        out.append(predicted[i])
        i += 1
    return out


def _one_sample_set(block) -> bool:
    """Whether ``block`` is one sample's :data:`OBSERVABLES` (:func:`_workload_rows`)."""
    def key(r):
        return tuple(r.get(k, "") for k in ("experiment", "variant", "phase", "x", "x_unit",
                                            "policy", "profile", "params"))
    return (tuple(r["metric"] for r in block) == OBSERVABLES
            and len({key(r) for r in block}) == 1)


def _panels(predicted, errors):
    """``[(variant, [metric, ...]), ...]``: the panels, a row of metrics per variant.

    ``predicted``: the workload's own rows (:func:`_workload_rows`). When the workload has
    measurements, the metrics measured on any of its variants (so a variant whose
    measurement is withheld still shows its prediction) and their :data:`COMPANIONS`;
    otherwise every metric the workload records itself. The bookkeeping observables
    and events are never panels (predicted.csv has them); a metric the workload records
    under an observable's name itself (``observables=False``) is.
    """
    own = {r["metric"] for r in predicted}

    def drawable(metric):
        return (metric not in OBSERVABLES or metric in own) and _kind(metric) != "event"

    measured = {e["metric"] for e in errors if drawable(e["metric"])}
    measured |= {c for m in measured for c in COMPANIONS.get(m, ())}
    metrics = {}
    for row in errors + predicted:
        metric = row["metric"]
        if drawable(metric) and (not measured or metric in measured):
            names = metrics.setdefault(row["variant"], [])
            if metric not in names:
                names.append(metric)
    variants = list(dict.fromkeys(r["variant"] for r in predicted + errors))
    return [(v, metrics[v]) for v in variants if v in metrics]


def _kind(metric):
    m = METRICS.get(metric)
    return m.kind if m else "memory"


def _unit(metric, rows):
    m = METRICS.get(metric)
    if m:
        return m.unit
    return next((r["unit"] for r in rows if r["metric"] == metric), "")


def _draw_panel(ax, res, variant, metric, predicted, errors, policies, params, sources) -> bool:
    """One panel: ``variant``'s ``metric`` predicted per policy and parameter point, the
    measured points on top, panics, and the residual strip ``res`` (None: no strip).
    Returns whether it drew a striped line (coinciding curves or panics)."""
    rows = [r for r in predicted if r["variant"] == variant and r["metric"] == metric]
    points = [e for e in errors if e["variant"] == variant and e["metric"] == metric]
    panics = [r for r in predicted if r["variant"] == variant and r["metric"] == "panic"]
    measured_panics = [e for e in errors if e["variant"] == variant and e["metric"] == "panic"]
    categorical = any(r.get("phase", "") for r in rows + points)
    positions = _categories(rows + points) if categorical else None
    # phases that are series of their own (each at several x: a train loop's reports and
    # the generation's, or a chain's forward and backward per round) get a line each;
    # phases at one x (the steps of one sequence) are joined in the order they happened
    series = categorical and _phase_series(rows + points)

    def xpos(row):
        return positions[(row["x"], row.get("phase", ""))] if categorical else row["x"]

    unit = _unit(metric, rows + points)
    scale, shown_unit = _display_unit(unit, [r["value"] for r in rows] +
                                      [e["measured"] for e in points])
    values = [r["value"] * scale for r in rows] + [e["measured"] * scale for e in points]
    to_screen = _scale_y(ax, values)
    if unit in BYTES_PER:
        _plain_ticks(ax.yaxis)
    # curves: one per (policy, parameter point); curves no reader could tell apart (within
    # a pixel or so) share one striped line
    groups = []
    for p_index, params_text in enumerate(params):
        for policy in policies:
            mine = [r for r in rows
                    if r["policy"] == policy and r.get("params", "") == params_text]
            for phase in (dict.fromkeys(r.get("phase", "") for r in mine) if series else [None]):
                pts = sorted((xpos(r), r["value"] * scale) for r in mine
                             if phase is None or r.get("phase", "") == phase)
                if not pts:
                    continue
                for group in groups:
                    if group[0] == p_index and _coincide(group[1], pts, to_screen):
                        group[2].append(policy)
                        break
                else:
                    groups.append((p_index, pts, [policy]))
    sample_ms = _GRID_MS if len(params) > 1 else _SAMPLE_MS
    if metric in RUNNING_MEANS and not categorical:
        # rates under 0.2 % of the panel's largest mean are the rounding of the means
        # (6 decimals) times the steps behind them: drawn as 0
        floor = 2e-3 * max((abs(v) for v in values), default=0)
        for _, pts, members in groups:
            rates = [(x, r if abs(r) >= floor else 0.0)
                     for x, r in interval_rates(pts, RUNNING_MEANS[metric])]
            if rates:
                xs, ys = zip(*rates)
                ax.plot(xs, ys, color=policy_color(members[0]), lw=1.6, ls=":", zorder=1.8)
                values += list(ys)
        to_screen = _scale_y(ax, values)
    for p_index, pts, members in groups:
        xs, ys = zip(*pts)
        for i, policy in enumerate(members):
            ax.plot(xs, ys, color=policy_color(policy), lw=2.2, ls=_stripe(i, len(members)),
                    zorder=2)
        ax.plot(xs, ys, ls="", marker=_PARAM_MARKERS[p_index % 4], ms=sample_ms,
                color=policy_color(members[0]), mec="white", mew=0.6 if len(params) > 1 else 0,
                zorder=2.5)
    # measured points on top, once each (errors.csv has a row per policy compared with)
    # (one line of markers per source and colour: a Line2D per point costs more to draw)
    drawn, marks = set(), {}
    for e in points:
        key = (e["source"], e["experiment"], e.get("phase", ""), e["x"])
        if key in drawn:
            continue
        drawn.add(key)
        index = sources.index((e["source"], e["experiment"]))
        marks.setdefault((index, policy_color(e["policy"])), []).append(
            (xpos(e), e["measured"] * scale))
        band = measured_band(e)
        if band is not None:
            # a row graded against its run-to-run range (text pages dominate it): the range
            ax.vlines(xpos(e), band[0] * scale, band[1] * scale, color=policy_color(e["policy"]),
                      lw=7, alpha=0.35, zorder=9)
    for (index, color), xy in marks.items():
        xs, ys = zip(*xy)
        ax.plot(xs, ys, ls="", marker=_MEASURED_MARKERS[index % 6], ms=9, mfc=color,
                mec="black", mew=1.6, zorder=10)
    # panics
    top = blended_transform_factory(ax.transData, ax.transAxes)
    at = {}
    for r in panics:
        at.setdefault(r["x"], []).append(r["policy"])
    for x, members in ([] if categorical else at.items()):
        for i, policy in enumerate(members):
            ax.axvline(x, color=policy_color(policy), lw=1.4, ls=_stripe(i, len(members), 3),
                       zorder=1)
    for e in measured_panics:
        if not categorical:
            ax.plot([e["x"]], [0.93], transform=top, ls="", marker="X", ms=10, color="black",
                    zorder=11, clip_on=False)
    bottom = ax if res is None else res
    x_unit = next((r["x_unit"] for r in rows + points if r.get("x_unit")), "")
    if categorical:
        anchor = _label_phases(ax, bottom, rows + points, positions, series, x_unit)
    else:
        xs = [r["x"] for r in rows] + [e["x"] for e in points]
        if xs and min(xs) > 0 and max(xs) / min(xs) >= 100:
            ax.set_xscale("log")
            ax.minorticks_off()
            _label_log_axis(ax.xaxis, min(xs), max(xs))
        bottom.set_xlabel(x_unit, fontsize=8)
        anchor = bottom.xaxis.label
    # at most ~6 ticks on a linear axis (a tick is a dozen artists to draw)
    if not categorical and ax.get_xscale() == "linear":
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
    if ax.get_yscale() == "linear":
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5))
    ax.tick_params(labelbottom=res is None, labelsize=8)
    # a fixed title position: placing it automatically costs a layout pass per panel
    mean = (f"\nline: mean since {x_unit[:-1] if x_unit.endswith('s') else x_unit} "
            f"{RUNNING_MEANS[metric]:g}; dotted: over each interval"
            if metric in RUNNING_MEANS and not categorical else "")
    ax.set_title(f"{variant}: {metric} ({shown_unit}){mean}", fontsize=9, y=1.0, pad=4)
    ax.grid(True, alpha=0.3)
    if res is not None:
        _draw_residuals(res, points, xpos, sources)
    elif not points:
        _note_no_measurements(ax, anchor)
    return (any(len(members) > 1 for _, _, members in groups)
            or any(len(members) > 1 for members in ([] if categorical else at.values())))


def interval_rates(points, base):
    """The growth per x unit over each interval between samples of a running mean from
    ``base`` (``points``: ``[(x, mean of the growth per x unit from base to x), ...]``,
    sorted): at each sample after the first, (total at x - total at the previous x) /
    (x - previous x), where total = mean * (x - base); the first sample's mean is its
    interval's rate.

    >>> [(x, round(r, 3)) for x, r in interval_rates([(50, 20.0), (100, 12.0), (2000, 3.0)], 1)]
    [(50, 20.0), (100, 4.16), (2000, 2.531)]
    """
    out, last = [], None
    for x, mean in points:
        total = mean * (x - base)
        if last is None:
            out.append((x, mean))
        elif x > last[0]:
            out.append((x, (total - last[1]) / (x - last[0])))
        last = (x, total)
    return out


def _label_phases(ax, bottom, rows, positions, series, x_unit):
    """Label the x axis of a panel whose points are phases (``positions``:
    :func:`_categories`) on ``bottom`` (the panel, or its residual strip); returns the
    lowest text under it (where a note can go).

    Series of their own (:func:`_phase_series`) get their x values as ticks and each
    phase's name, with its x unit, once under its own ticks, within their width (each
    category is an equal cell of the axis: wrapped, then shrunk, :func:`_fit_label`);
    phases at one x (the steps of one sequence) are the ticks themselves, with that x in
    the axis label."""
    labels = sorted(positions, key=positions.get)
    bottom.set_xticks(range(len(labels)))
    if not series:
        bottom.set_xticklabels([_category_label(x, phase, labels) for x, phase in labels],
                               fontsize=7, rotation=12, ha="right")
        xs = sorted({x for x, _ in labels})
        if len(xs) == 1:
            bottom.set_xlabel(f"phase, at {x_unit} = {xs[0]:g}", fontsize=8)
        return bottom.xaxis.label
    bottom.set_xticklabels([f"{x:g}" for x, _ in labels], fontsize=7)
    bottom.set_xlim(-0.5, len(labels) - 0.5)   # a cell per category (shared with ax)
    cell = bottom.get_position().width * bottom.figure.get_figwidth() / len(labels)
    units = {}
    for r in rows:
        units.setdefault(r.get("phase", ""), r.get("x_unit", ""))
    anchor = bottom.xaxis.label
    for phase in dict.fromkeys(p for _, p in labels):
        at = [positions[k] for k in labels if k[1] == phase]
        unit = units.get(phase, "")
        text, size = _fit_label(f"{phase} ({unit})" if unit else phase,
                                (max(at) - min(at) + 1) * cell - _TEXT_MARGIN)
        anchor = bottom.annotate(text, xy=((min(at) + max(at)) / 2, 0),
                                 xycoords=("data", "axes fraction"), xytext=(0, -17),
                                 textcoords="offset points", ha="center", va="top",
                                 fontsize=size, color="0.25", annotation_clip=False)
        if min(at) > 0:
            bottom.axvline(min(at) - 0.5, color="0.6", lw=0.8, ls=":", zorder=0.5)
            if bottom is not ax:
                ax.axvline(min(at) - 0.5, color="0.6", lw=0.8, ls=":", zorder=0.5)
    return anchor


def _fit_label(text, width):
    """``(text, font size)``: a phase's name ``text`` fitted to ``width`` inches: on one
    line at :data:`_PHASE_SIZE` points where it fits, else wrapped at spaces and after
    hyphens onto two lines, shrinking the font (by half points, down to
    :data:`_PHASE_MIN_SIZE`) until they fit; at the smallest size, as many lines as
    it takes."""
    pieces = re.findall(r"\s*[^\s-]*-|\s*[^\s-]+", text)
    size = _PHASE_SIZE
    while size > _PHASE_MIN_SIZE:
        lines = _wrap_pieces(pieces, width, size)
        if len(lines) <= 2 and all(_text_width(line, size) <= width for line in lines):
            return "\n".join(lines), size
        size -= 0.5
    return "\n".join(_wrap_pieces(pieces, width, _PHASE_MIN_SIZE)), _PHASE_MIN_SIZE


def _categories(rows):
    """``(x, phase) -> position``: in the order the rows come, which is the order a run
    recorded them (a train loop's reports, then the generation's; the phases of one
    loop at one x as they happened), not sorted by x: phases with x axes of their own
    (steps, then samples) would interleave. Phases that are series of their own
    (:func:`_phase_series`) are kept together, in :func:`sim.analysis.growth.phase_ranks`, and within a
    phase ordered by x (numerically: a grid's runs come in the order asked for,
    ``--set iterations=10000,1000``)."""
    order = {}
    for r in rows:
        order.setdefault((r["x"], r.get("phase", "")), len(order))
    if not _phase_series(rows):
        return order
    rank = _phase_order(phase for _, phase in order)
    keys = sorted(order, key=lambda k: (rank[k[1]], k[0]))
    return {k: i for i, k in enumerate(keys)}


def _phase_series(rows) -> bool:
    """Whether every phase of ``rows`` has points at more than one x (a single such
    phase included: it is labelled as series are, its name once under its x ticks)."""
    xs = {}
    for r in rows:
        xs.setdefault(r.get("phase", ""), set()).add(r["x"])
    return bool(xs) and all(len(v) > 1 for v in xs.values())


def _category_label(x, phase, labels):
    one_x = len({lx for lx, _ in labels}) == 1
    x_text = f"{x:g}"
    if not phase:
        return x_text
    return phase if one_x else f"{phase}\n@{x_text}"


#: the narrowest y window of a linear panel, as a fraction of its largest value
FLAT_WINDOW = 0.1


def _y_scale(values) -> str:
    """The y scale of a panel's ``values``: ``"log"`` where positive values span 30x or
    more, ``"symlog"`` where values reaching zero or below have nonzero magnitudes
    spanning 1000x or more, else ``"linear"``. (Unchanged by a unit: ratios decide.)"""
    values = [v for v in values if math.isfinite(v)]
    nonzero = [abs(v) for v in values if v != 0]
    if values and min(values) > 0 and max(values) / min(values) >= 30:
        return "log"
    if nonzero and min(values) <= 0 and max(nonzero) / min(nonzero) >= 1000:
        return "symlog"
    return "linear"


def _scale_y(ax, values):
    """Log (or symmetric log) y where the values span decades (:func:`_y_scale`); returns
    value -> axis fraction."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return lambda v: v
    nonzero = [abs(v) for v in values if v != 0]
    scale = _y_scale(values)
    if scale == "log":
        ax.set_yscale("log")
        ax.minorticks_off()
        _label_log_axis(ax.yaxis, min(values), max(values))
        low, high = math.log10(min(values)), math.log10(max(values))
        return lambda v: (math.log10(v) - low) / (high - low) if v > 0 else -1.0
    if scale == "symlog":
        # linear within the smallest nonzero value's decade: its ticks do not collide
        linthresh = 10 ** math.floor(math.log10(min(nonzero)))
        ax.set_yscale("symlog", linthresh=linthresh)
        ax.minorticks_off()

        def symlog(v):
            return math.copysign(math.log10(1 + abs(v) / linthresh), v)
        low, high = symlog(min(values)), symlog(max(values))
        return lambda v: (symlog(v) - low) / (high - low)
    low, high = min(values), max(values)
    if low > 0 and high - low < FLAT_WINDOW * high:
        # a nearly flat positive series (a time per op, a steady step): at least a 10 %
        # window around it, so that a percent of run-to-run noise does not fill the panel
        centre, half = (low + high) / 2, FLAT_WINDOW * high / 2
        low, high = centre - half, centre + half
        ax.set_ylim(low - 0.05 * (high - low), high + 0.05 * (high - low))
    span = (high - low) or abs(high) or 1.0
    return lambda v: (v - low) / span


def _label_log_axis(axis, low, high):
    """Ticks of a log ``axis`` over data ``low``..``high`` (both > 0): at 1, 2 and 5 of
    each decade, labelled as plain numbers, when fewer than two powers of ten fall in the
    range (a single label, "10^1", gives nothing to read a value against); else the
    powers of ten alone."""
    powers = math.floor(math.log10(high)) - math.ceil(math.log10(low)) + 1
    if powers < 2:
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda value, _: _number_text(value)))


def _plain_ticks(axis):
    """Tick labels of a linear ``axis`` as the numbers themselves: no offset ("+1e7") and
    no scientific multiplier ("1e7") above the axis. (Log axes label their own decades.)"""
    if axis.get_scale() == "linear":
        formatter = ScalarFormatter(useOffset=False)
        formatter.set_scientific(False)
        axis.set_major_formatter(formatter)


#: byte units an axis or a cell is shown in, largest first, with their sizes in bytes:
#: binary, or decimal for metrics recorded in decimal units (the seed programs print MB,
#: so their numbers stay the ones a reader compares with)
_BINARY_UNITS = (("GiB", 1024 ** 3), ("MiB", BYTES_PER["MiB"]), ("KiB", BYTES_PER["KiB"]),
                 ("B", BYTES_PER["B"]))
_DECIMAL_UNITS = (("GB", 1e9), ("MB", BYTES_PER["MB"]), ("KB", BYTES_PER["KB"]),
                  ("B", BYTES_PER["B"]))


def _byte_unit(nbytes, decimal=False):
    """``(unit, bytes per unit)``: the largest unit ``|nbytes|`` is at least one of (B
    below a KiB), binary or (``decimal``) decimal."""
    units = _DECIMAL_UNITS if decimal else _BINARY_UNITS
    return next((u for u in units if abs(nbytes) >= u[1]), units[-1])


def _display_unit(unit, values):
    """``(factor, unit shown)`` of a panel whose ``values`` are in ``unit``: a byte unit
    (:data:`sim.units.BYTES_PER`) is replaced by the one (:func:`_byte_unit`; decimal
    stays decimal) the values' magnitude calls for, ``value * factor`` being in it: on
    a linear axis the largest ``|value|``'s, on a log axis (:func:`_y_scale`) the
    geometric middle of the nonzero magnitudes' (the axis' middle decade). Any other
    unit, or values all zero, are shown as they are (factor 1).

    >>> _display_unit("B", [4.0e6, 9.9e6])
    (9.5367431640625e-07, 'MiB')
    >>> _display_unit("KB", [0.0001, 1000.0])
    (1000.0, 'B')
    >>> _display_unit("ms", [1e7])
    (1.0, 'ms')
    """
    finite = [abs(v) for v in values if math.isfinite(v) and v != 0]
    if unit not in BYTES_PER or not finite:
        return 1.0, unit
    magnitude = max(finite)
    if _y_scale(values) != "linear":
        magnitude = math.sqrt(min(finite) * magnitude)
    name, size = _byte_unit(magnitude * BYTES_PER[unit], decimal=unit in ("KB", "MB"))
    return BYTES_PER[unit] / size, name


def _number_text(value, digits=3) -> str:
    """``value`` to ``digits`` significant digits, positional (never "1.1e+04"), without
    trailing zeros: 0.000123, 2.03, 15.1, 1020."""
    return np.format_float_positional(value, precision=digits, unique=True,
                                      fractional=False, trim="-")


#: curves closer than this fraction of the axis height everywhere are drawn as one
_COINCIDE = 0.006


def _coincide(a, b, to_screen) -> bool:
    """Whether two curves ``[(x, value), ...]`` would look the same on the axis."""
    if len(a) != len(b):
        return False
    return all(xa == xb and abs(to_screen(va) - to_screen(vb)) <= _COINCIDE
               for (xa, va), (xb, vb) in zip(a, b))


def _draw_residuals(res, points, xpos, sources):
    """Signed relative error of each prediction, in %, with the tolerance band
    (``points``: the panel's measured points, at least one: a panel without any has no
    strip, :func:`workload_figure`). A measured point with no prediction has no error:
    it is a grey bar across the whole strip at its x, which no reader takes for a value
    (a mark on the 0 % line would read as a perfect prediction)."""
    res.tick_params(labelsize=7)
    res.grid(True, alpha=0.3)
    tol = max(TOLERANCE.get(_kind(e["metric"]), 0.0) for e in points) * 100
    ys, missing, marks = [], [], {}
    for e in points:
        index = sources.index((e["source"], e["experiment"]))
        marker = _MEASURED_MARKERS[index % 6]
        if math.isnan(e["predicted"]):
            missing.append(xpos(e))
            continue
        if e["measured"] != 0 and math.isfinite(e["rel_error"]):
            y = math.copysign(e["rel_error"] * 100, e["abs_error"])
        else:
            y = 0.0 if e["ok"] else math.copysign(_RESIDUAL_CAP, e["abs_error"])
        clipped = max(-_RESIDUAL_CAP, min(_RESIDUAL_CAP, y))
        ys.append(clipped)
        style = (marker, policy_color(e["policy"]) if e["ok"] else "white",
                 policy_color(e["policy"]) if e["ok"] else "#d62728")
        marks.setdefault(style, []).append((xpos(e), clipped))
    if missing:   # one collection, bottom to top of the strip (axes fraction)
        res.vlines(missing, 0, 1, transform=res.get_xaxis_transform(), zorder=2.5,
                   colors=_UNPREDICTED["color"], alpha=_UNPREDICTED["alpha"],
                   lw=_UNPREDICTED["lw"])
    for (marker, face, edge), xy in marks.items():
        xs, errs = zip(*xy)
        res.plot(xs, errs, ls="", marker=marker, ms=6, mfc=face, mec=edge, mew=1.5, zorder=3)
    limit = max([tol * 2, 1.0] + [abs(y) * 1.25 for y in ys])
    limit = min(limit, _RESIDUAL_CAP * 1.1)
    res.axhspan(-tol, tol, color="#2ca02c", alpha=0.15, lw=0)
    res.axhline(0, color="0.4", lw=0.8)
    res.set_ylim(-limit, limit)
    res.yaxis.set_major_locator(MaxNLocator(nbins=3, symmetric=True))
    res.set_ylabel("error %", fontsize=7)


# -- summary --------------------------------------------------------------------------------------

#: colours of the memory heat map's cells by class (:func:`sim.analysis.growth.memory_level`, 0: none
#: to 4: worst; 5: a reference framework's RSS drift that is a fitted constant; 6: a higher
#: plateau)
_LEVEL_COLORS = ("#c7e9c0", "#fff7bc", "#fdae6b", "#fc9272", "#de2d26", "#c6dbef", "#bcbddc")
#: colours of the time heat map's cells by class (:func:`_time_level`)
_TIME_COLORS = ("#c7e9c0", "#74c476", "#fdae6b", "#fc9272", "#de2d26")
#: colour of a cell without a figure (no loop to grow along, or the run is missing)
_NO_FIGURE = "#e0e0e0"
#: memory class of a reference framework's fitted RSS drift
_DRIFT = 5
#: memory class of a flat memory beside a flat reference that plateaus higher than it
#: (the report's verdict ``higher``, :func:`sim.analysis.growth.higher_plateau`): a price
#: of the fix, drawn as one, as growth is
_HIGHER = 6


def _memory_levels(reference) -> dict:
    """Class -> legend text of the memory cells (:func:`sim.analysis.growth.memory_level`)."""
    half, most, same = (round(r * 100) for r in LEVEL_RATIOS)
    return {0: "none / flat",
            _HIGHER: f"flat, plateau above {reference}'s (a price)",
            1: f"grows, under {half} % of {reference}'s",
            2: f"grows, {half}-{most} % of {reference}'s",
            3: f"as {reference} (within {same - 100} %)",
            4: f"more than {reference}, or grows where it does not",
            _DRIFT: "reference framework: RSS drift = a fitted constant, heap flat"}


def _time_levels(reference="burn-0.22.1") -> dict:
    """Class -> legend text of the time cells (:func:`_time_level`)."""
    tol = f"{TOLERANCE['time']:.0%}"
    return {0: f"flat, and within {tol} of {reference}",
            1: f"faster than {reference} by more than {tol}",
            2: f"{reference} slows down along the run, and as slow as it",
            3: f"slower than {reference} by more than {tol}",
            4: "panic"}


def _time_level(g, ref):
    """Class of run ``g``'s simulated time per loop unit at the end, keys of
    :func:`_time_levels`, judged against ``ref`` (the reference's series of the same run,
    :func:`sim.analysis.growth.verdict`); the reference's own cell by its slowdown along the run.
    A panic is the worst; None: no figure."""
    if g is None:
        return None
    if g.panic_x is not None:
        return 4
    if g.ms_last is None:
        return None
    if ref is None or g is ref:
        return 2 if g.time_grows else 0
    v = verdict(g, ref)
    if v.time is None:
        return 2 if g.time_grows else 0
    return {"removed": 1, "reduced": 1, "faster": 1, "kept": 2, "same": 0,
            "slower": 3}[v.time]


def _is_drift(g) -> bool:
    """Whether ``g`` grows only by a reference framework's fitted RSS drift (its live heap
    flat): the ``pytorch`` policy's ``pytorch.rss_growth_per_step_bytes``."""
    return bool(g is not None and g.memory_grows and g.heap_grows is False
                and getattr(POLICIES.get(g.policy), "fitted_drift", ""))


def _level_color(level, colors=_LEVEL_COLORS) -> str:
    """The colour of a cell of class ``level`` in ``colors`` (None: no figure)."""
    return _NO_FIGURE if level is None else colors[level]


def _level_legend(levels, texts, colors=_LEVEL_COLORS) -> list:
    """Legend patches for exactly the colours cells of classes ``levels`` (a table of
    them, None: no figure) are drawn in, in class order; ``texts``: class -> text."""
    used = {level for row in levels for level in row}
    handles = [Patch(color=_level_color(k, colors), label=text) for k, text in texts.items()
               if k in used]
    if None in used:
        handles.append(Patch(color=_NO_FIGURE, label="no figure (no loop, or not run)"))
    return handles


def summary_figure(growth):
    """Runs x policies: memory growth; time per loop unit at the end, and panics.

    Memory cells are coloured by the class of their growth against ``burn-0.22.1``'s
    on the same run (:func:`sim.analysis.growth.memory_level`; a reference framework's fitted RSS
    drift in a colour of its own), and where ``burn-0.22.1``'s memory grows and a
    policy's does not, the cell names the height it plateaus at; where neither grows and
    the policy plateaus higher (the report's price *higher plateau*), the cell has a
    colour of its own and names both peaks. Time cells are
    coloured against ``burn-0.22.1`` on the same run, and say how much faster or slower
    (``burn-0.22.1``'s own cell: by its slowdown along the run), or a panic
    (:func:`_time_level`); under each heat map a legend explains the colours its cells
    use. Cell texts are humanly sized: "2.03 KiB", "15.1 ms", "3.06 h". Column labels
    are never clipped: the right margin leaves room for the last one.
    """
    policies = _shown_order({g.policy for g in growth})
    # a row per series (workload, variant, phase, params); series with no loop to grow
    # along (one sample, e.g. size_of tables) have none
    runs = list(dict.fromkeys(g.run for g in growth if g.has_figures))
    cell = {g.run + (g.policy,): g for g in growth}
    reference = "burn-0.22.1" if "burn-0.22.1" in policies else policies[0]
    ref_of = {run: cell.get(run + (reference,)) for run in runs}
    frameworks = {p for p in policies if reference_label(p)}
    mem_l = [[_memory_class(cell.get(run + (p,)), ref_of[run]) for p in policies]
             for run in runs]
    time_l = [[_time_level(cell.get(run + (p,)), ref_of[run]) for p in policies]
              for run in runs]
    mem_t = [[_memory_cell_text(cell.get(run + (p,)), ref_of[run]) for p in policies]
             for run in runs]
    time_t = [[_time_cell_text(cell.get(run + (p,)), ref_of[run]) for p in policies]
              for run in runs]
    units = [next((cell[run + (p,)].unit for p in policies
                   if run + (p,) in cell and cell[run + (p,)].unit), "") for run in runs]
    points_of = {}
    for w, _, _, p in runs:
        points_of.setdefault(w, set()).add(p)
    labels = [f"{w} / {v}" + (f" ({phase})" if phase else "") +
              (f" [{p}]" if len(points_of[w]) > 1 else "") + (f"  ({u})" if u else "")
              for (w, v, phase, p), u in zip(runs, units)]
    left = 0.3 + 0.062 * max(map(len, labels), default=10)
    column = max(0.95 * len(policies), 7.5) / max(len(policies), 1)
    # column labels are rotated 25 degrees from the middle of their column: the last one
    # runs past the right edge by its length's horizontal extent less half a column
    names = [policy_label(p) for p in policies]
    right = max(0.2, _text_width(names[-1], 8.5) * math.cos(math.radians(25))
                - column / 2 + 0.15)
    # the titles sit above the labels: the top margin grows with the longest one's height
    rise = max(_text_width(n, 8.5) for n in names) * math.sin(math.radians(25))
    fig, grid = _figure_grid(2, 1, slot=(max(0.95 * len(policies), 7.5), 0.27 * len(runs)),
                             space=(0, 2.15 + max(0, rise - 0.8)),
                             margins=(left, right, 1.75 + max(0, rise - 0.8), 0.95))
    height = fig.get_figheight()
    panels = ((f"Memory growth per loop unit (RSS where recorded, else live heap; plus GPU "
               f"in use)\ncolour: against {reference} on the same run\n'peak': the height "
               f"a bounded memory plateaus at ('peak A > B': more than "
               f"{TOLERANCE['memory']:.0%} and {GROWS_BYTES // 1024} KiB above {reference}'s B)",
               mem_l, mem_t,
               _memory_levels(reference), _LEVEL_COLORS),
              (f"Simulated time per loop unit at the end of the run\ncolour and 'x faster' "
               f"/ 'x slower': against {reference} on the same run\n({reference}'s own "
               f"cells: its last interval against its first, {TOLERANCE['time']:.0%} "
               f"tolerance), or a panic", time_l, time_t,
               _time_levels(reference), _TIME_COLORS))
    for k, (title, levels, texts, legend, colors) in enumerate(panels):
        ax = fig.add_subplot(grid[k, 0])
        _heat_map(ax, levels, texts, policies, labels, colors, frameworks)
        ax.set_title(title, fontsize=10, loc="left", y=1.0,
                     pad=58 + 72 * max(0, rise - 0.8))
        box = grid[k, 0].get_position(fig)
        handles = _level_legend(levels, legend, colors)
        # two columns where the longest text fits half the heat map's width (+ left margin)
        longest = max((_text_width(h.get_label(), 8.5) for h in handles), default=0)
        ncols = 2 if 2 * (longest + 0.5) < box.width * fig.get_figwidth() + left else 1
        fig.legend(handles=handles, loc="upper left",
                   bbox_to_anchor=(box.x0, box.y0 - 0.08 / height), ncols=ncols,
                   fontsize=8.5, frameon=False)
    fig.suptitle(f"Policies x runs: growth over the loop (flat: the late half peaks under "
                 f"{GROWS_BYTES // 1024} KiB above the early half)", fontsize=11,
                 y=1 - 0.08 / height, va="top")
    return fig


def _shown_order(policies) -> list:
    """``policies`` in the order figures show them: burn's, its history and the fixes in
    registry order, then the reference frameworks (``pytorch``), apart."""
    return sorted(policies, key=lambda p: (reference_label(p) is not None, policy_rank(p)))


def _heat_map(ax, levels, texts, policies, labels, colors=_LEVEL_COLORS, frameworks=()):
    """Draw a table of cells on ``ax``: rows ``labels``, columns ``policies`` (those in
    ``frameworks``, the last columns, labelled as a reference right of a rule), each cell in the colour of its class
    (``levels``, :func:`_level_color`) with its text."""
    ax.imshow([[to_rgba(_level_color(level, colors)) for level in row] for row in levels],
              aspect="auto")
    ax.xaxis.tick_top()
    ax.set_xticks(range(len(policies)))
    ax.set_xticklabels([policy_label(p) for p in policies], rotation=25, ha="left",
                       fontsize=8.5)
    if frameworks:
        # the reference frameworks stand apart, right of a rule: not fix candidates
        ax.axvline(len(policies) - len(frameworks) - 0.5, color="black", lw=2.5, zorder=3)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=8)
    for i, row in enumerate(texts):
        for j, text in enumerate(row):
            ax.text(j, i, text, ha="center", va="center",
                    fontsize=6.5 if "\n" in text else 7.5, linespacing=1.0)
    ax.set_xticks(np.arange(-0.5, len(policies)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(labels)), minor=True)
    ax.grid(which="minor", color="white", lw=1.5)
    ax.tick_params(which="minor", length=0)


def _memory_class(g, ref):
    """Class of run ``g``'s memory cell, keys of :func:`_memory_levels`: a reference
    framework's fitted drift; a higher plateau where the report's verdict is ``higher``;
    else its growth against ``ref``'s (:func:`sim.analysis.growth.memory_level`)."""
    if _is_drift(g):
        return _DRIFT
    level = memory_level(g, ref)
    if level == 0 and _higher(g, ref):
        return _HIGHER
    return level


def _higher(g, ref) -> bool:
    return g is not ref and ref is not None and verdict(g, ref).memory == "higher"


def _memory_cell_text(g, ref=None) -> str:
    """A memory cell's text: growth per loop unit ("·": the run is missing); where the
    reference's memory grows and ``g``'s does not, the height it plateaus at; where
    neither grows and ``g`` plateaus higher, its peak against the reference's; a fitted
    drift says so."""
    if g is None:
        return "·"
    if g.memory_bytes is None:
        return ""
    text = _bytes_text(g.memory_bytes)
    if _is_drift(g):
        return f"{text}\nfitted drift"
    if g is not ref and ref is not None and ref.memory_grows and g.memory_grows is False \
            and g.memory_peak_bytes is not None:
        return f"{text}\npeak {_bytes_text(g.memory_peak_bytes)}"
    if _higher(g, ref):
        return (f"{text}\npeak {_bytes_text(g.memory_peak_bytes)}\n"
                f"> {_bytes_text(ref.memory_peak_bytes)}")
    return text


def _time_cell_text(g, ref=None) -> str:
    """A time cell's text: time per loop unit at the end, how much faster or slower than
    the reference's (where by more than the time tolerance), and where the run panicked."""
    if g is None:
        return "·"
    lines = [] if g.ms_last is None else [_ms_text(g.ms_last)]
    if g.ms_last is not None and ref is not None and g is not ref:
        v = verdict(g, ref)
        if v.time in ("removed", "reduced", "faster", "slower"):
            lines.append(ratio_text(v.ratio))
    if g.panic_x is not None:
        lines.append(f"panic at {g.panic_x:g}")
    return "\n".join(lines)


def _bytes_text(nbytes) -> str:
    """A byte count humanly: "472 B", "2.03 KiB", "55.3 MiB", "1.2 GiB" (binary units,
    3 significant digits, whole bytes below a KiB)."""
    sign = "-" if nbytes < 0 else ""
    unit, size = _byte_unit(nbytes)
    if unit == "B":
        return f"{sign}{abs(nbytes):.0f} B"
    return f"{sign}{_number_text(abs(nbytes) / size)} {unit}"


#: duration units, largest first: (name, ms per unit, shortest duration shown in it, ms)
_DURATION_UNITS = (("h", 3_600_000.0, 3_600_000.0), ("min", 60_000.0, 60_000.0),
                   ("s", 1000.0, 1000.0), ("ms", 1.0, 0.1), ("µs", 1e-3, 0.0))


def _ms_text(ms) -> str:
    """A duration given in ms, humanly: "3.06 h", "12 min", "45 s", "120 ms", "0.122 ms",
    "70 µs" (3 significant digits, never an exponent; ms from 0.1 ms)."""
    sign = "-" if ms < 0 else ""
    name, size, _ = next((u for u in _DURATION_UNITS if abs(ms) >= u[2]), _DURATION_UNITS[-1])
    return f"{sign}{_number_text(abs(ms) / size)} {name}"


# -- a fix's figure (sim fixes) ----------------------------------------------------------------

#: the reference drawn beside each fix (unpatched burn, its own prediction)
_REFERENCE_GREY = "#8c8c8c"


def _fix_points(errors, run, metric):
    """``(xs, measured, predicted)`` of ``errors``' rows of ``run`` (experiment, variant,
    phase) and ``metric``, sorted by x; predicted None where nothing was predicted."""
    points = []
    for e in errors:
        if (e["experiment"], e["variant"], e.get("phase") or "") != run or e["metric"] != metric:
            continue
        try:
            x, m = float(e["x"]), float(e["measured"])
        except (TypeError, ValueError):
            continue
        try:
            p = float(e["predicted"])
        except (TypeError, ValueError):
            p = None
        points.append((x, m, p if p == p else None))
    points.sort()
    return points


def _fix_panel(ax, run, metric, sides):
    """One panel of :func:`fix_figure`: per side (label, errors, colour, reference?) the
    measured points and the predicted line of ``metric`` against the loop count, and
    where a side panics, its measured and predicted panic steps."""
    unit = ""
    x_unit = ""
    scale, shown_unit = 1.0, ""
    for _, errors, _, _ in sides:
        for e in errors:
            if (e["experiment"], e["variant"], e.get("phase") or "") == run \
                    and e["metric"] == metric:
                unit, x_unit = e["unit"], e["x_unit"]
                break
        if unit:
            break
    if unit == "B":
        scale, shown_unit = BYTES_PER["MiB"], "MiB"
    else:
        shown_unit = unit
    xs_all = []
    for label, errors, color, reference in sides:
        pts = _fix_points(errors, run, metric)
        xs_all += [x for x, _, _ in pts]
        style = dict(color=color, zorder=2 if reference else 3)
        if pts:
            ax.plot([x for x, _, _ in pts], [m / scale for _, m, _ in pts],
                    linestyle="none", marker="o", markersize=6 if reference else 5,
                    markerfacecolor="none" if reference else color,
                    markeredgecolor=color, **style)
            pred = [(x, p / scale) for x, _, p in pts if p is not None]
            if pred:
                ax.plot(*zip(*pred), linestyle="--" if reference else "-",
                        linewidth=1.2 if reference else 1.8, marker="_", markersize=14,
                        **style)
        for x, m, p in _fix_points(errors, run, "panic"):
            xs_all.append(x)
            if m:
                ax.axvline(x, color=color, linestyle=":", linewidth=1.4, zorder=1)
                ax.plot([x], [1.0], marker="X", markersize=9, color=color, clip_on=False,
                        transform=blended_transform_factory(ax.transData, ax.transAxes))
            if p:
                ax.plot([x], [0.0], marker="^", markersize=8, color=color, clip_on=False,
                        markerfacecolor="none",
                        transform=blended_transform_factory(ax.transData, ax.transAxes))
    experiment, variant, phase = run
    ax.set_title(f"{experiment} / {variant}{f' ({phase})' if phase else ''}\n{metric}",
                 fontsize=9)
    ax.set_xlabel(x_unit.replace("_", " ") or "x", fontsize=8)
    ax.set_ylabel(shown_unit or metric, fontsize=8)
    positive = [x for x in xs_all if x > 0]
    if positive and max(positive) / min(positive) >= 20:
        ax.set_xscale("log")
    ax.tick_params(labelsize=7)
    ax.grid(True, color="#e6e6e6", linewidth=0.6)
    if not xs_all:
        _note_no_measurements(ax, (0.5, 0.5))


def fix_figure(fix, panels, errors, reference_errors, reference="burn-0.22.1"):
    """A fix measured on patched burn against its prediction (``sim fixes``): a panel per
    ``(experiment, variant, phase, metric)`` of ``panels``, the metric against the loop
    count, the fix's measured points (filled) and predicted line (solid) in its colour and
    unpatched ``reference``'s (hollow, dashed) in grey, from the two comparisons' errors.csv
    rows (``errors``, ``reference_errors``). A run that panics: a dotted line and a cross at
    the measured panic step, a hollow triangle at the predicted one."""
    n = max(1, len(panels))
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(4.2 * ncols, 3.1 * nrows + 1.0))
    color = policy_color(fix)
    sides = [(reference, reference_errors or [], _REFERENCE_GREY, True),
             (fix, errors, color, False)]
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, (experiment, variant, phase, metric) in zip(axes.flat, panels):
        _fix_panel(ax, (experiment, variant, phase), metric, sides)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles = [Line2D([], [], color=color, marker="o", linestyle="none",
                      label=f"{fix}: measured on patched burn"),
               Line2D([], [], color=color, linewidth=1.8, label=f"{fix}: predicted"),
               Line2D([], [], color=_REFERENCE_GREY, marker="o", markerfacecolor="none",
                      linestyle="none", label=f"{reference} (unpatched): measured"),
               Line2D([], [], color=_REFERENCE_GREY, linestyle="--",
                      label=f"{reference}: predicted"),
               Line2D([], [], color="#444444", marker="X", linestyle="none",
                      label="panic, measured (dotted line)"),
               Line2D([], [], color="#444444", marker="^", markerfacecolor="none",
                      linestyle="none", label="panic, predicted")]
    fig.suptitle(f"{fix}: predicted against measured, where the fix matters", fontsize=11)
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.55 / (3.1 * nrows + 1.0), 1, 0.97))
    return fig
