"""Measured against predicted: which cells to simulate for a measured set, and the errors.

A measured row names an experiment and variant; :func:`cells_for` maps it to
the workload that predicts it (a workload lists the experiment names it
predicts in ``MEASURED``) and the policy (``*-pytorch`` experiments are the
``pytorch`` policy's). :func:`join` pairs each measured point with its
prediction and grades it:

* memory figures within 5 % (or within a small absolute slack for values near
  zero: 2 KiB of heap, 0.05 MiB / MB), block counts exactly;
* times within 15 %;
* events exactly (the panic at the same step).

A measured point the simulator cannot predict is returned with status
``unpredicted`` (listed, not dropped).

A point measured by a probe (its row names one) also says how it was graded
(:data:`GRADING_COLUMNS`): ``mechanism``, what the model names as setting its RSS
(``text``: the binary's text pages are over half of what the program added; ``top
trims``: glibc trimmed the heap's top since the previous sample; empty: neither), and
``graded_against``, ``range`` (the measured run-to-run range, widened by the tolerance)
or ``point``. ``sim fixes`` groups its RSS points by them.
"""

from __future__ import annotations

import math
import re

from .data import DIFFERENCE, key_of, DataError, TRACE_FILES, measured_quick
from ..units import BYTES_PER, METRICS, bytes_to
from ..engine.workloads import builtin_names, load_workload

__all__ = ["cells_for", "quick_params", "join", "point_id", "TOLERANCE", "known_checker", "summarize", "difference_scales",
           "check_x_units", "measured_files", "within_range", "GRADING_COLUMNS", "TEXT",
           "TOP_TRIMS"]

TOLERANCE = {"memory": 0.05, "time": 0.15, "event": 0.0, "state": 0.0}
SLACK = {"heap_bytes_delta": 2048, "host_heap_delta": 2.0, "gpu_in_use": 0.05, "rss": 0.05,
         "rss_delta": 0.05, "heap_blocks_delta": 0, "rss_growth_per_step": 0.05,
         # probe metrics (issue 6): the same slack in their units
         "rss_bytes": 50_000, "text_rss_delta": 64.0, "heap_growth_per_step": 8.0, "kept_bytes": 0}


#: metrics graded exactly: block counts, and the GPU pool's bytes (cubecl's bookkeeping
#: is integer arithmetic on sizes the model knows; a miss is a mechanism, not noise)
EXACT = {"heap_blocks_delta", "gpu_in_use_bytes", "gpu_reserved_bytes", "gpu_padding_bytes",
         "gpu_outdated_reserved_bytes", "gpu_other_reserved_bytes"}


#: the columns an error row of a point measured by a probe adds (see the module docstring)
GRADING_COLUMNS = ("mechanism", "graded_against")
#: ``mechanism`` of an RSS row the binary's text pages dominate in the model
TEXT = "text"
#: ``mechanism`` of an RSS row whose sample follows a trim of the heap's top in the model
TOP_TRIMS = "top trims"

#: the CSVs ``sim sweep`` and ``sim compare`` write into their ``--out`` directory
RESULT_FILES = ("predicted.csv", "errors.csv")


def point_id(row) -> str:
    """``experiment/variant/phase/x/metric``: how profiles name calibration points."""
    x = row["x"]
    x = int(x) if float(x).is_integer() else x
    return f"{row['experiment']}/{row['variant']}/{row.get('phase', '') or ''}/{x}/{row['metric']}"


def _experiments(workloads=()):
    """experiment name -> the workload predicting it: the built-ins, then ``workloads``
    (loaded :class:`~sim.engine.workloads.Workload` objects, e.g. a user's files named on the
    command line; they take precedence for the experiments they declare)."""
    table = {}
    for name in builtin_names():
        w = load_workload(name)
        for experiment in w.measured:
            table[experiment] = w
    for w in workloads:
        for experiment in w.measured:
            table[experiment] = w
    return table


def measured_files(paths) -> list:
    """The measured CSV files ``paths`` name: a file as given, a directory (``sim measure
    --out DIR``) as its ``*.csv`` files in name order. The raw allocation traces ``sim
    measure`` writes next to its CSVs (:data:`sim.analysis.data.TRACE_FILES`, not measured points)
    are left out, also when named one by one (``--measured DIR/*.csv``); so are, in a
    directory, the CSVs a sweep or comparison writes (:data:`RESULT_FILES`: a comparison
    written into its measurements' directory must not read its own output next time)."""
    from pathlib import Path
    traces = set(TRACE_FILES.values())
    out = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            found = [p for p in sorted(path.glob("*.csv"))
                     if p.name not in traces and p.name not in RESULT_FILES and p.is_file()]
            if not found:
                raise DataError(f"{path}: is a directory with no measured CSV files (*.csv)")
            out.extend(found)
        elif path.name not in traces:
            out.append(path)
    if not out and paths:
        raise DataError(f"{', '.join(map(str, paths))}: only allocation traces of "
                        f"`sim measure`, no measured CSV files")
    return list(dict.fromkeys(out))


def known_checker(workloads=()):
    """``known(experiment, variant, phase, x_unit)`` for :func:`sim.analysis.data.read_measured`:
    the experiments (and variants) of the built-in workloads and of ``workloads`` (loaded
    workloads), and the ``x_unit`` each samples in where it declares it (``X_UNITS``;
    elsewhere :func:`check_x_units` checks it against the rows of the run)."""
    table = _experiments(workloads)

    def known(experiment, variant, phase="", x_unit=None):
        w = table.get(experiment)
        if w is None:
            return (f"unknown experiment '{experiment}' "
                    f"(known: {', '.join(sorted(table))})")
        if variant not in w.variants:
            return (f"unknown variant '{variant}' of {experiment} "
                    f"(known: {', '.join(w.variants)})")
        declared = w.x_unit(experiment, phase)
        if x_unit is not None and declared is not None and x_unit != declared:
            return _wrong_x_unit(x_unit, experiment, variant, phase, [declared])
        return None
    return known


def _wrong_x_unit(x_unit, experiment, variant, phase, expected) -> str:
    """What is wrong with a measured row sampled in ``x_unit`` where its workload samples
    in one of ``expected``."""
    where = f" phase {phase}" if phase else ""
    return (f"x_unit '{x_unit}' is wrong for {experiment} {variant}{where} "
            f"(expected {', '.join(sorted(expected))})")


def quick_params(measured_rows, workloads=()) -> dict:
    """Workload name -> the parameters to simulate its measured rows with where they come
    from a probe's ``--quick`` run (:func:`sim.analysis.data.measured_quick`): the workload's
    ``QUICK`` (the probe's cut loop counts). A workload whose rows mix quick and full runs
    is an error (one run per workload is compared: its points would meet the other run's
    x); one without ``QUICK`` is left out (its rows stay unpredicted where x differs)."""
    table = _experiments(workloads)
    seen = {}
    for row in measured_rows:
        w = table.get(row["experiment"])
        if w is not None:
            seen.setdefault(w.name, (w, set()))[1].add(measured_quick(row))
    out = {}
    for name, (w, modes) in seen.items():
        if True not in modes:
            continue
        if False in modes:
            raise DataError(f"the measured rows of {name} mix `sim measure --quick` runs "
                            f"and full ones: compare them apart")
        if w.quick:
            out[name] = dict(w.quick)
    return out


def cells_for(measured_rows, policy="burn-0.22.1", workloads=()):
    """Sorted ``(workload name, variant, policy)`` cells that predict the measured rows
    (by the built-in workloads and ``workloads``, as :func:`known_checker`)."""
    table = _experiments(workloads)
    cells = set()
    for row in measured_rows:
        w = table.get(row["experiment"])
        if w is None or row["variant"] not in w.variants:
            continue
        cell_policy = "pytorch" if row["experiment"].endswith("-pytorch") else policy
        cells.add((w.name, row["variant"], cell_policy))
    return sorted(cells)


def join(measured_rows, predicted_rows, fitted_points=(), policy="burn-0.22.1"):
    """Each measured point with its prediction, errors, tolerance and status."""
    fitted = set(fitted_points)
    index = {}
    for row in predicted_rows:
        if row.get("policy", policy) not in (policy, "pytorch"):
            continue
        index[key_of(row)] = row
    check_x_units(measured_rows, predicted_rows)
    series_x = {}
    for row in index.values():
        series_x.setdefault(_series(row), set()).add(float(row["x"]))
    twins = difference_scales(measured_rows)
    out = []
    for m in measured_rows:
        metric = METRICS.get(m["metric"])
        kind = metric.kind if metric else "memory"
        p = index.get(key_of(m))
        pid = point_id(m)
        entry = {
            "experiment": m["experiment"], "variant": m["variant"], "phase": m.get("phase", ""),
            "x": m["x"], "x_unit": m.get("x_unit", ""), "metric": m["metric"],
            "unit": m["unit"], "measured": float(m["value"]), "kind": kind,
            "status": "fitted" if pid in fitted else "predicted", "point": pid,
        }
        if p is None:
            if m["metric"] == "panic":
                entry.update(predicted=float("nan"), abs_error=float("nan"),
                             rel_error=float("nan"), ok=False,
                             note=_panic_note(m, predicted_rows))
            else:
                entry.update(predicted=float("nan"), abs_error=float("nan"),
                             rel_error=float("nan"), ok=False, status="unpredicted",
                             note=_unpredicted_note(m, series_x))
            out.append(entry)
            continue
        pv = float(p["value"])
        mv = entry["measured"]
        abs_err = pv - mv
        rel = abs(abs_err) / abs(mv) if mv else (0.0 if pv == mv else math.inf)
        tol = TOLERANCE[kind]
        slack = SLACK.get(m["metric"], 0)
        twin = twins.get(id(m))
        if twin is not None and min(pv, mv) <= 0:
            # a mechanism's cost against its twin where one side finds none (a fix removed
            # it: the difference is the twins' noise, or what the twin alone does): graded
            # as the twins are, within the tolerance of the smaller one
            slack = max(slack, tol * twin)
        ok = rel <= tol + 1e-12 or abs(abs_err) <= slack
        if m["metric"] in EXACT:
            ok = pv == mv
        entry.update(predicted=pv, abs_error=abs_err, rel_error=rel, ok=ok, note="")
        if m.get("probe"):
            entry.update(mechanism="", graded_against="point")
        share = p.get("text_share", 0.0)
        if share > TEXT_DOMINATED and m.get("probe"):
            _text_dominated(entry, m, share, tol, slack)
        elif p.get("top_trims") and m.get("probe"):
            _top_trimmed(entry, m, p["top_trims"], tol, slack,
                         untrimmed_level(m, p.get("untrimmed_bytes", 0)))
        out.append(entry)
    return out


def difference_scales(measured_rows) -> dict:
    """``id(row)`` -> the smaller of its two twins' values, in its unit, for each measured
    time at a phase ``A-minus-B`` (:func:`sim.analysis.data.is_difference`) whose rows at
    phases ``A`` and ``B`` (same experiment, variant and x) are measured too. A twin in ms
    per x (mechanism-cost's ``backward_ms`` of N nodes) counts per op in ns, as the
    difference does (``(dead - live) * 1e6 / N``)."""
    by_phase = {}
    for row in measured_rows:
        by_phase[(row["experiment"], row["variant"], row.get("phase", "") or "",
                  float(row["x"]))] = row
    out = {}
    for row in measured_rows:
        found = DIFFERENCE.match(row.get("phase", "") or "")
        if not found or METRICS.get(row["metric"]) is None:
            continue
        values = []
        for phase in found.groups():
            twin = by_phase.get((row["experiment"], row["variant"], phase, float(row["x"])))
            if twin is None:
                break
            value = abs(float(twin["value"]))
            if twin["unit"] == "ms" and row["unit"] == "ns":
                value *= 1e6 / float(row["x"])
            elif twin["unit"] != row["unit"]:
                break
            values.append(value)
        else:
            out[id(row)] = min(values)
    return out


#: the share of the binary's resident text in what a program added to its RSS (the model's,
#: :meth:`sim.engine.simulation.Simulation.text_share`) above which an RSS row is text-dominated
TEXT_DOMINATED = 0.5

_RUNS = re.compile(r"mean of (\d+) fresh runs \(([^)]*)\)")


def run_range(note):
    """``(low, high, runs)`` of a measured row whose note says ``mean of N fresh runs (v1,
    v2, ... unit)`` (:func:`sim.commands.measure.merge_repeats`), else None.

    >>> run_range("x; mean of 3 fresh runs (4.1, 3.9, 4.6 MB)")
    (3.9, 4.6, 3)
    """
    found = _RUNS.search(note or "")
    if not found:
        return None
    try:
        values = [float(v.split()[0]) for v in found.group(2).split(",") if v.strip()]
    except (ValueError, IndexError):
        return None
    return (min(values), max(values), int(found.group(1))) if values else None


def _text_dominated(entry, m, share, tol, slack) -> None:
    """An RSS row whose prediction the binary's text pages dominate (their residency varies
    with the run and the binary's layout): graded against the measured run-to-run range
    (widened by the tolerance) where the measured row has one, its range in the note;
    with one run, the note says its spread is unmeasured."""
    entry["mechanism"] = TEXT
    _graded_by_range(entry, m, tol, slack,
                     f"text pages are {share:.0%} of the program's RSS in the model")


def untrimmed_level(m, nbytes) -> float:
    """The predicted row's other level in measured row ``m``'s unit: ``nbytes``
    (:meth:`sim.engine.simulation.Simulation.untrimmed_bytes`, the pages the arena's latest
    trim gave back) where the metric is an RSS level in bytes (rss_bytes, rss_delta, rss);
    0 for a rate (rss_growth_per_step: its two ends each may sit at either level)."""
    unit = m.get("unit", "")
    if not nbytes or m["metric"] == "rss_growth_per_step" or unit not in BYTES_PER:
        return 0.0
    return bytes_to(nbytes, unit)


def _top_trimmed(entry, m, trims, tol, slack, untrimmed=0.0) -> None:
    """An RSS row whose prediction the glibc arena's trims of its top placed (it trimmed
    since the previous sample: :meth:`sim.engine.simulation.Simulation.top_trims`): which
    level a run is at turns on its hash order, so the row is graded against the measured
    run-to-run range (widened by the tolerance) where the measured row has one. The
    model predicts the two levels of a level metric (``untrimmed``: how far above its
    point a run whose latest trim did not happen sits, :func:`untrimmed_level`): then the
    predicted band must meet the widened range."""
    entry["mechanism"] = TOP_TRIMS
    why = f"the heap's top was trimmed {trims} times since the previous sample in the model"
    if untrimmed > 0:
        why += f" (untrimmed level {entry['predicted'] + untrimmed:g})"
    _graded_by_range(entry, m, tol, slack, why, untrimmed)


def _graded_by_range(entry, m, tol, slack, why, above=0.0) -> None:
    """Grade ``entry`` against the measured row's run-to-run range (widened by the
    tolerance) where ``m`` has one; ``why`` opens the note. With one run the row keeps its
    point grade and the note says its spread is unmeasured. ``above`` > 0: the prediction
    is the band from the point to ``above`` over it, which must meet the widened range."""
    spread = run_range(m.get("note", ""))
    if spread is None:
        entry["note"] = f"{why}; one run: its run-to-run spread is unmeasured"
        return
    low, high, runs = spread
    entry["range"] = (low, high)
    entry["graded_against"] = "range"
    predicted = entry["predicted"]
    if above > 0:
        entry["band"] = (predicted, predicted + above)
    entry["ok"] = (within_range(predicted, low, high, tol, slack)
                   or (above > 0 and bands_meet(predicted, predicted + above, low, high, tol,
                                                slack)))
    entry["note"] = f"{why}: graded against the run-to-run range {low:g}..{high:g} ({runs} runs)"


def within_range(predicted, low, high, tol, slack) -> bool:
    """Whether ``predicted`` lies in the measured range ``low .. high`` widened by the
    tolerance ``tol`` (relative) and ``slack`` (absolute) at each end."""
    return (low - tol * abs(low) - slack - 1e-12 <= predicted
            <= high + tol * abs(high) + slack + 1e-12)


def bands_meet(p_low, p_high, low, high, tol, slack) -> bool:
    """Whether the predicted band ``p_low .. p_high`` meets the measured range ``low ..
    high`` widened by ``tol`` (relative) and ``slack`` (absolute) at each end."""
    return (p_low <= high + tol * abs(high) + slack + 1e-12
            and p_high >= low - tol * abs(low) - slack - 1e-12)


def check_x_units(measured_rows, predicted_rows) -> None:
    """A measured row whose ``x_unit`` is not the one the workload samples that
    experiment, variant and phase in is an error naming its file and line (its ``x``
    would be matched against another scale); rows nothing predicts are not checked."""
    units = {}
    for row in predicted_rows:
        key = (row["experiment"], row["variant"], row.get("phase", "") or "")
        units.setdefault(key, set()).add(row.get("x_unit", ""))
    for m in measured_rows:
        key = (m["experiment"], m["variant"], m.get("phase", "") or "")
        expected = units.get(key)
        if expected and m.get("x_unit", "") not in expected:
            where = f"{m['_file']}:{m['_line']}" if "_file" in m else "measured row"
            raise DataError(f"{where}: {_wrong_x_unit(m.get('x_unit', ''), *key, expected)}")


def _series(row) -> tuple:
    """``(experiment, variant, phase, metric)``: the predicted series a row belongs to."""
    return (row["experiment"], row["variant"], row.get("phase", "") or "", row["metric"])


def _unpredicted_note(m, series_x) -> str:
    """Why measured row ``m`` has no prediction: the x values its series was predicted at
    (other loop counts than the measured run's: ``--set`` them), or that nothing predicts
    that metric of that variant and phase."""
    xs = sorted(series_x.get(_series(m), ()))
    if not xs:
        return "no prediction at this point: the simulator records no such series"
    shown = ", ".join(f"{x:g}" for x in xs[:6]) + (", ..." if len(xs) > 6 else "")
    return (f"no prediction at this point: predicted at {m.get('x_unit', 'x')} {shown} "
            f"(a run with other loop counts? --set them)")


def _panic_note(m, predicted_rows):
    for row in predicted_rows:
        if (row["experiment"] == m["experiment"] and row["variant"] == m["variant"]
                and row["metric"] == "panic"):
            return f"predicted panic at {row['x_unit']} {row['x']:g}: {row.get('note', '')}"
    return "no panic predicted"


def summarize(joined):
    """Counts of points within tolerance, by status."""
    out = {}
    for e in joined:
        s = out.setdefault(e["status"], [0, 0])
        s[1] += 1
        s[0] += bool(e["ok"])
    return out
