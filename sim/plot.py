"""Figures: predicted curves against measured points, and a policy x workload summary.

:func:`workload_figure` draws one workload: a panel per (variant, metric) with
one curve per policy (colour, the same in every figure) and the measured points
on top as large black-edged markers, never joined by lines, so a measurement
and its prediction are told apart at a glance. Curves that coincide are drawn
as nested stripes (the first policy widest) so none hides another. Under each
panel with measurements, a residual strip shows the signed relative error of
the prediction in % with the tolerance band shaded. Axes switch to log scale
where the values span decades; a panel whose points are phases of one loop
(``after-loop``, ``after-unrelated-backward``) uses the phases as categories.
Panics are dashed vertical lines (predicted) and an ``X`` (measured).

:func:`summary_figure` draws two heat maps, runs (workload / variant) by
policy: memory growth; time per loop unit at the end of the run, with panics
(see :mod:`sim.growth`).

Figures are :class:`matplotlib.figure.Figure` objects (no pyplot state); the
caller saves them.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import blended_transform_factory

from .compare import TOLERANCE
from .policies import policy_rank
from .units import METRICS

__all__ = ["workload_figure", "summary_figure", "policy_color", "policy_colors",
           "use_policy_colors", "OBSERVABLES"]

#: bookkeeping observables every sample carries (``Simulation.observables``):
#: kept in predicted.csv, not drawn per workload
OBSERVABLES = {"live_graphs", "live_nodes", "locator_entries", "registered_steps",
               "heap_bytes", "heap_blocks", "sim_time_ms", "cleanup_ms"}

_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#17becf", "#bcbd22", "#7f7f7f"]
_PARAM_MARKERS = ["o", "^", "s", "v"]
_MEASURED_MARKERS = ["o", "s", "D", "^", "v", "P"]
#: residual strips are clipped to +-this many percent
_RESIDUAL_CAP = 100.0


#: more colours for policies outside the registry (a user's files); the ones a built-in
#: uses are left out of :func:`_other_palette`
_MORE_COLORS = ["#393b79", "#e7ba52", "#637939", "#7b4173", "#9c9ede", "#00676b"]

#: colours of this run's policies outside the registry (:func:`use_policy_colors`)
_OTHER_COLORS = {}


def _other_palette() -> list:
    """Colours no built-in policy uses, for the policies outside the registry."""
    from .policies import POLICIES
    builtin = {_PALETTE[i % len(_PALETTE)] for i in range(len(POLICIES))}
    # grey is left out: the legends draw what is not a policy (grid points, the
    # measured curve) in greys
    return [c for c in dict.fromkeys(_PALETTE + _MORE_COLORS)
            if c not in builtin and c != "#7f7f7f"]


def policy_colors(names) -> dict:
    """Colours of the policies ``names`` that are not built-ins (a user's files, or names
    read back from results): none a built-in uses, distinct from each other while the
    palette lasts, given in name order (the same names get the same colours)."""
    from .policies import POLICIES
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
    from .policies import POLICIES
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
    panels = _panels(predicted, errors)
    policies = sorted({r["policy"] for r in predicted}, key=policy_rank)
    params = list(dict.fromkeys(r.get("params", "") for r in predicted))
    sources = list(dict.fromkeys((e["source"], e["experiment"]) for e in errors))
    per_variant = max((len(ms) for _, ms in panels), default=1)
    slots = [(v, m) for v, ms in panels for m in ms]
    if per_variant == 1:   # one metric per variant: wrap the variants into rows of three
        ncols = max(1, min(3, len(slots)))
        positions = [(i // ncols, i % ncols) for i in range(len(slots))]
    else:                  # a row per variant, a column per metric
        ncols = per_variant
        positions = [(r, c) for r, (_, ms) in enumerate(panels) for c in range(len(ms))]
    nrows = max(1, max((r for r, _ in positions), default=0) + 1)

    handles = [Line2D([], [], color=policy_color(p), lw=3, label=p) for p in policies]
    if len(params) > 1:
        handles += [Line2D([], [], color="0.3", lw=1, marker=_PARAM_MARKERS[i % 4], ms=6,
                           label=p or "defaults") for i, p in enumerate(params)]
    for i, (source, experiment) in enumerate(sources):
        handles.append(Line2D([], [], ls="", marker=_MEASURED_MARKERS[i % 6], ms=9,
                              mfc=_measured_face(experiment, errors), mec="black", mew=1.6,
                              label=f"measured {experiment} ({source})"))
    handles.append(Line2D([], [], color="0.5", lw=2.2, ls=(0, (5, 5)),
                          label="coinciding policies: striped"))
    if any(r["metric"] == "panic" for r in predicted):
        handles.append(Line2D([], [], color="0.3", lw=1.4, ls=(0, (2, 2)),
                              label="predicted panic"))
    if any(e["metric"] == "panic" for e in errors):
        handles.append(Line2D([], [], ls="", marker="X", ms=10, color="black",
                              label="measured panic"))
    legend_cols = min(len(handles), max(2, ncols * 2))
    legend_rows = math.ceil(len(handles) / legend_cols)
    categorical = any(r.get("phase", "") for r in predicted + errors)
    fig, grid = _figure_grid(nrows, ncols, slot=(max(4.3, 8.0 / ncols), 3.1),
                             space=(0.85, 1.45 if categorical else 0.95),
                             margins=(0.75, 0.25, 0.75 + 0.24 * legend_rows,
                                      0.95 if categorical else 0.5))
    for (variant, metric), (r, c) in zip(slots, positions):
        if errors:   # a residual strip under each panel that has measurements
            sub = grid[r, c].subgridspec(2, 1, height_ratios=[3, 1], hspace=0.06)
            ax = fig.add_subplot(sub[0])
            if any(e["variant"] == variant and e["metric"] == metric for e in errors):
                res = fig.add_subplot(sub[1], sharex=ax)
            else:   # (an empty strip would cost as much to draw as a panel)
                res = None
                box = sub[1].get_position(fig)
                fig.text((box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2 - 0.15 * box.height,
                         "no measurements", ha="center", va="center", fontsize=7,
                         color="0.5")
        else:
            ax, res = fig.add_subplot(grid[r, c]), None
        _draw_panel(ax, res, variant, metric, predicted, errors, policies, params, sources)
    height = fig.get_figheight()
    title = f"{name}: predicted (lines, a colour per policy) vs measured (black-edged markers)"
    subtitle = description + (f"   [profile {profile}]" if profile else "")
    fig.suptitle(f"{title}\n{subtitle}", fontsize=11, y=1 - 0.08 / height, va="top")
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.55 / height),
               ncols=legend_cols, fontsize=8, frameon=False, handlelength=2.5)
    return fig


def _figure_grid(nrows, ncols, slot, space, margins):
    """A figure sized in inches around an ``nrows`` x ``ncols`` grid of slots.

    ``slot``: (width, height) of one slot; ``space``: (horizontal, vertical) gap
    between slots; ``margins``: (left, right, top, bottom). Fixed margins instead
    of a layout engine: the layout pass costs more than drawing the figure.
    """
    (w, h), (ws, hs), (left, right, top, bottom) = slot, space, margins
    width = left + ncols * w + (ncols - 1) * ws + right
    height = top + nrows * h + (nrows - 1) * hs + bottom
    fig = Figure(figsize=(width, height))
    grid = fig.add_gridspec(nrows, ncols, left=left / width, right=1 - right / width,
                            top=1 - top / height, bottom=bottom / height,
                            wspace=ws / w, hspace=hs / h)
    return fig, grid


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


def _panels(predicted, errors):
    """``[(variant, [metric, ...]), ...]``: the panels, a row of metrics per variant.

    When the workload has measurements, the metrics measured on any of its
    variants (so a variant whose measurement is withheld still shows its
    prediction); otherwise every metric the workload records itself.
    Observables and events are never panels (predicted.csv has them).
    """
    def drawable(metric):
        return metric not in OBSERVABLES and _kind(metric) != "event"

    measured = {e["metric"] for e in errors if drawable(e["metric"])}
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


def _draw_panel(ax, res, variant, metric, predicted, errors, policies, params, sources):
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

    values = [r["value"] for r in rows] + [e["measured"] for e in points]
    to_screen = _scale_y(ax, values)
    # curves: one per (policy, parameter point); curves no reader could tell apart (within
    # a pixel or so) share one striped line
    groups = []
    for p_index, params_text in enumerate(params):
        for policy in policies:
            mine = [r for r in rows
                    if r["policy"] == policy and r.get("params", "") == params_text]
            for phase in (dict.fromkeys(r.get("phase", "") for r in mine) if series else [None]):
                pts = sorted((xpos(r), r["value"]) for r in mine
                             if phase is None or r.get("phase", "") == phase)
                if not pts:
                    continue
                for group in groups:
                    if group[0] == p_index and _coincide(group[1], pts, to_screen):
                        group[2].append(policy)
                        break
                else:
                    groups.append((p_index, pts, [policy]))
    for p_index, pts, members in groups:
        xs, ys = zip(*pts)
        for i, policy in enumerate(members):
            ax.plot(xs, ys, color=policy_color(policy), lw=2.2, ls=_stripe(i, len(members)),
                    zorder=2)
        ax.plot(xs, ys, ls="", marker=_PARAM_MARKERS[p_index % 4], ms=3.5,
                color=policy_color(members[0]), zorder=2.5)
    # measured points on top, once each (errors.csv has a row per policy compared with)
    # (one line of markers per source and colour: a Line2D per point costs more to draw)
    drawn, marks = set(), {}
    for e in points:
        key = (e["source"], e["experiment"], e.get("phase", ""), e["x"])
        if key in drawn:
            continue
        drawn.add(key)
        index = sources.index((e["source"], e["experiment"]))
        marks.setdefault((index, policy_color(e["policy"])), []).append((xpos(e), e["measured"]))
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
    if categorical and series:
        # phases that are series of their own (a train loop's reports, then the
        # generation's): the x values as ticks, each phase named once under its own
        labels = sorted(positions, key=positions.get)
        bottom.set_xticks(range(len(labels)))
        bottom.set_xticklabels([f"{x:g}" for x, _ in labels], fontsize=7)
        units = {}
        for r in rows + points:
            units.setdefault(r.get("phase", ""), r.get("x_unit", ""))
        for phase in dict.fromkeys(p for _, p in labels):
            at = [positions[k] for k in labels if k[1] == phase]
            unit = units.get(phase, "")
            bottom.annotate(f"{phase} ({unit})" if unit else phase,
                            xy=((min(at) + max(at)) / 2, 0), xycoords=("data", "axes fraction"),
                            xytext=(0, -17), textcoords="offset points", ha="center",
                            va="top", fontsize=7.5, color="0.25", annotation_clip=False)
            if min(at) > 0:
                bottom.axvline(min(at) - 0.5, color="0.6", lw=0.8, ls=":", zorder=0.5)
                if bottom is not ax:
                    ax.axvline(min(at) - 0.5, color="0.6", lw=0.8, ls=":", zorder=0.5)
    elif categorical:
        labels = sorted(positions, key=positions.get)
        bottom.set_xticks(range(len(labels)))
        bottom.set_xticklabels([_category_label(x, phase, labels) for x, phase in labels],
                            fontsize=7, rotation=12, ha="right")
    else:
        xs = [r["x"] for r in rows] + [e["x"] for e in points]
        if xs and min(xs) > 0 and max(xs) / min(xs) >= 100:
            ax.set_xscale("log")
            ax.minorticks_off()
    # at most ~6 ticks on a linear axis (a tick is a dozen artists to draw)
    if not categorical and ax.get_xscale() == "linear":
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
    if ax.get_yscale() == "linear":
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5))
    ax.tick_params(labelbottom=res is None, labelsize=8)
    # a fixed title position: placing it automatically costs a layout pass per panel
    ax.set_title(f"{variant}: {metric} ({_unit(metric, rows + points)})", fontsize=9, y=1.0,
                 pad=4)
    ax.grid(True, alpha=0.3)
    x_unit = next((r["x_unit"] for r in rows + points if r.get("x_unit")), "")
    if res is not None:
        _draw_residuals(res, points, xpos, sources)
    xs = sorted({x for x, _ in positions}) if categorical else []
    if len(xs) == 1:
        bottom.set_xlabel(f"phase, at {x_unit} = {xs[0]:g}", fontsize=8)
    elif not categorical:
        bottom.set_xlabel(x_unit, fontsize=8)


def _categories(rows):
    """``(x, phase) -> position``: in the order the rows come, which is the order a run
    recorded them (a train loop's reports, then the generation's; the phases of one
    loop at one x as they happened), not sorted by x: phases with x axes of their own
    (steps, then samples) would interleave. Phases that are series of their own
    (:func:`_phase_series`) are kept together, in the order each first appears."""
    order = {}
    for r in rows:
        order.setdefault((r["x"], r.get("phase", "")), len(order))
    if not _phase_series(rows):
        return order
    first = {}
    for x, phase in order:
        first.setdefault(phase, len(first))
    keys = sorted(order, key=lambda k: (first[k[1]], order[k]))
    return {k: i for i, k in enumerate(keys)}


def _phase_series(rows) -> bool:
    """Whether every phase of ``rows`` has points at more than one x."""
    xs = {}
    for r in rows:
        xs.setdefault(r.get("phase", ""), set()).add(r["x"])
    return len(xs) > 1 and all(len(v) > 1 for v in xs.values())


def _category_label(x, phase, labels):
    one_x = len({lx for lx, _ in labels}) == 1
    x_text = f"{x:g}"
    if not phase:
        return x_text
    return phase if one_x else f"{phase}\n@{x_text}"


#: the narrowest y window of a linear panel, as a fraction of its largest value
FLAT_WINDOW = 0.1


def _scale_y(ax, values):
    """Log (or symmetric log) y where the values span decades; returns value -> axis fraction."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return lambda v: v
    nonzero = [abs(v) for v in values if v != 0]
    if min(values) > 0 and max(values) / min(values) >= 30:
        ax.set_yscale("log")
        ax.minorticks_off()
        low, high = math.log10(min(values)), math.log10(max(values))
        return lambda v: (math.log10(v) - low) / (high - low) if v > 0 else -1.0
    if nonzero and min(values) <= 0 and max(nonzero) / min(nonzero) >= 1000:
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
    strip, :func:`workload_figure`)."""
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
    if missing:
        res.plot(missing, [0] * len(missing), ls="", marker="x", color="0.4", ms=7, zorder=3)
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

_GROWTH_CMAP = LinearSegmentedColormap.from_list(
    "growth", ["#c7e9c0", "#fff7bc", "#fc9272", "#de2d26"]).with_extremes(bad="#e0e0e0")


def summary_figure(growth):
    """Runs x policies: memory growth; time per loop unit at the end, and panics.

    Memory cells are coloured by growth relative to ``burn-0.22.1`` on the same
    run (green: none left, red: as much or more); time cells by how much the last
    interval is slower than the first, red where the run panicked.
    """
    from .growth import GROWS_BYTES
    policies = sorted({g.policy for g in growth}, key=policy_rank)
    # runs with no loop to grow along (one sample, e.g. size_of tables) have no row
    runs = list(dict.fromkeys((g.workload, g.variant, g.params) for g in growth
                              if g.has_figures))
    cell = {(g.workload, g.variant, g.params, g.policy): g for g in growth}
    reference = "burn-0.22.1" if "burn-0.22.1" in policies else policies[0]
    shape = (len(runs), len(policies))
    mem_c, time_c = np.full(shape, np.nan), np.full(shape, np.nan)
    mem_t, time_t = ([[""] * shape[1] for _ in runs] for _ in range(2))
    units = []
    for i, run in enumerate(runs):
        ref = cell.get(run + (reference,))
        unit = next((cell[run + (p,)].unit for p in policies
                     if run + (p,) in cell and cell[run + (p,)].unit), "")
        units.append(unit)
        for j, policy in enumerate(policies):
            g = cell.get(run + (policy,))
            if g is None:
                mem_t[i][j] = time_t[i][j] = "·"
                continue
            if g.memory_bytes is not None:
                mem_t[i][j] = _bytes_text(g.memory_bytes)
                ref_grows = ref is not None and ref.memory_grows
                if ref_grows and ref.memory_bytes > 0:
                    mem_c[i, j] = min(max(g.memory_bytes / ref.memory_bytes, 0.0), 1.2)
                else:
                    mem_c[i, j] = 1.2 if g.memory_grows else 0.0
            if g.ms_last is not None:
                time_t[i][j] = _ms_text(g.ms_last)
                ratio = g.ms_last / g.ms_first if g.ms_first else 1.0
                time_c[i, j] = min(max(math.log(max(ratio, 1e-9), 4), 0.0), 1.2) \
                    if g.time_grows else 0.0
            if g.panic_x is not None:
                time_c[i, j] = 1.2
                panic = f"panic at {g.panic_x:g}"
                time_t[i][j] = f"{time_t[i][j]}\n{panic}" if time_t[i][j] else panic
    points_of = {}
    for w, _, p in runs:
        points_of.setdefault(w, set()).add(p)
    labels = [f"{w} / {v}" + (f" [{p}]" if len(points_of[w]) > 1 else "") +
              (f"  ({u})" if u else "") for (w, v, p), u in zip(runs, units)]
    left = 0.3 + 0.062 * max(map(len, labels), default=10)
    fig, grid = _figure_grid(2, 1, slot=(max(0.95 * len(policies), 7.5), 0.27 * len(runs)),
                             space=(0, 1.45), margins=(left, 0.2, 1.85, 0.45))
    axes = [fig.add_subplot(grid[k, 0]) for k in range(2)]
    panels = (("Memory growth per loop unit (live heap + GPU in use); colour: relative to "
               "burn-0.22.1 on the same run", mem_c, mem_t),
              ("Simulated time per loop unit at the end of the run; colour: last interval "
               "against the first; red: panic", time_c, time_t))
    for ax, (title, colours, texts) in zip(axes, panels):
        ax.imshow(np.ma.masked_invalid(colours), cmap=_GROWTH_CMAP, vmin=0, vmax=1.2,
                  aspect="auto")
        ax.xaxis.tick_top()
        ax.set_xticks(range(len(policies)))
        ax.set_xticklabels(policies, rotation=25, ha="left", fontsize=8.5)
        ax.set_yticks(range(len(runs)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_title(title, fontsize=10, loc="left", y=1.0, pad=58)
        for i in range(len(runs)):
            for j in range(len(policies)):
                ax.text(j, i, texts[i][j], ha="center", va="center", fontsize=7.5)
        ax.set_xticks(np.arange(-0.5, len(policies)), minor=True)
        ax.set_yticks(np.arange(-0.5, len(runs)), minor=True)
        ax.grid(which="minor", color="white", lw=1.5)
        ax.tick_params(which="minor", length=0)
    height = fig.get_figheight()
    fig.suptitle(f"Policies x runs: growth over the loop (flat: under {GROWS_BYTES // 1024} "
                 f"KiB over the run)", fontsize=11, y=1 - 0.08 / height, va="top")
    fig.legend(handles=[Patch(color="#c7e9c0", label="none / flat"),
                        Patch(color="#fff7bc", label="some"),
                        Patch(color="#de2d26", label="as burn-0.22.1 or worse; panic"),
                        Patch(color="#e0e0e0", label="no figure")],
               loc="upper center", bbox_to_anchor=(0.5, 1 - 0.4 / height), ncols=4,
               fontsize=8.5, frameon=False)
    return fig


def _bytes_text(nbytes):
    sign = "-" if nbytes < 0 else ""
    value = abs(nbytes)
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if value >= size:
            return f"{sign}{value / size:.3g} {unit}"
    return f"{sign}{value:.0f} B"


def _ms_text(ms):
    if ms >= 1000:
        return f"{ms / 1000:.3g} s"
    if ms >= 0.1:
        return f"{ms:.3g} ms"
    return f"{ms * 1000:.3g} µs"
