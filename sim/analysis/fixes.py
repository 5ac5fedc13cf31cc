"""Fixes measured on patched burn, graded: the growth of each run measured with a fix (the
report's confirmed verdicts) and the points within tolerance of its predictions (``sim
fixes``, :mod:`sim.commands.fixes`).

``experiments/measured/<platform>/patched/NAME/`` holds what ``sim measure --patch NAME``
measured on burn-autodiff 0.22.1 with ``experiments/patches/NAME.patch`` applied.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from .data import DataError, read_measured
from .growth import growth_of_runs
from ..paths import EXPERIMENTS
from ..units import METRICS

__all__ = ["PATCHED_MEASURED", "VERDICT_FILES", "TIME_BAR", "measured_growth", "grade",
           "within_time_bar", "own_misses", "largest_misses"]

PATCHED_MEASURED = EXPERIMENTS / "measured" / "linux-x86_64" / "patched"

#: the measured files whose runs the report's growth verdicts are checked on
VERDICT_FILES = ("adleak-rss.csv", "pit-infer.csv", "p10-ema.csv", "train-validate.csv")


def measured_growth(root=PATCHED_MEASURED) -> dict:
    """``fix -> {(experiment, variant, phase): Growth}`` of the committed measurements of
    patched burn (:data:`VERDICT_FILES` of each ``NAME/`` directory; ``burn-0.22.1/``: the
    unpatched reference measured the same way), each judged by
    :func:`sim.analysis.growth.growth_of_runs`, the rule of the predicted verdicts. Empty where
    nothing was measured."""
    root = Path(root)
    found = {}
    for fix_dir in sorted(d for d in root.iterdir() if d.is_dir()) if root.is_dir() else ():
        rows = []
        for name in VERDICT_FILES:
            try:
                file_rows = read_measured(fix_dir / name)
            except DataError:
                continue          # not measured under this fix
            rows += [dict(r, policy=fix_dir.name) for r in file_rows]
        growths = growth_of_runs(rows, lambda row: row["experiment"])
        found[fix_dir.name] = {g.run[:3]: g for g in growths if g.has_figures}
    return found


#: issue 38's bar for a time (ms per step): a prediction within 25 % of the measurement,
#: where ``sim compare`` grades times at 15 % (:data:`sim.analysis.compare.TOLERANCE`)
TIME_BAR = 0.25


def within_time_bar(e) -> bool:
    """Whether a graded time point is within :data:`TIME_BAR`: within ``sim compare``'s
    tolerance, or its relative error at most 25 %."""
    if e["ok"]:
        return True
    try:
        return float(e["rel_error"]) <= TIME_BAR + 1e-12
    except (TypeError, ValueError):
        return False


def grade(errors) -> dict:
    """Points and points within tolerance: in all, by experiment and by metric; and the
    time points within :data:`TIME_BAR` (``time_bar``: ``[within, points]``)."""
    total = [0, 0]
    by_exp = defaultdict(lambda: [0, 0])
    by_metric = defaultdict(lambda: [0, 0])
    by_kind = {"memory": [0, 0], "time": [0, 0], "event": [0, 0], "state": [0, 0]}
    time_bar = [0, 0]
    for e in errors:
        if e["status"] == "unpredicted":
            continue
        metric = METRICS.get(e["metric"])
        kind = by_kind.setdefault(metric.kind if metric else "other", [0, 0])
        for counter in (total, by_exp[e["experiment"]], by_metric[e["metric"]], kind):
            counter[0] += bool(e["ok"])
            counter[1] += 1
        if metric is not None and metric.kind == "time":
            time_bar[0] += within_time_bar(e)
            time_bar[1] += 1
    return {"total": total, "experiments": dict(by_exp), "metrics": dict(by_metric),
            "kinds": by_kind, "time_bar": time_bar,
            "unpredicted": sum(e["status"] == "unpredicted" for e in errors)}


def _point(e):
    return (e["experiment"], e["variant"], e["phase"], e["x"], e["metric"])


def own_misses(errors, reference) -> list:
    """The fix's misses at points where the unpatched run of the same day is within
    tolerance of burn-0.22.1's prediction: what the machine and the load do not explain."""
    ok_there = {_point(e) for e in reference if e["ok"]}
    return [e for e in largest_misses(errors) if _point(e) in ok_there]


def largest_misses(errors):
    """The points outside tolerance, the largest relative error first."""
    bad = [e for e in errors if not e["ok"] and e["status"] != "unpredicted"]

    def size(e):
        rel = e.get("rel_error")
        return rel if isinstance(rel, float) and rel == rel else float("inf")
    return sorted(bad, key=size, reverse=True)
