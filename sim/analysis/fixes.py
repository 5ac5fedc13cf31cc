"""Fixes measured on patched burn, graded: the growth of each run measured with a fix (the
report's confirmed verdicts) and the points within tolerance of its predictions (``sim
fixes``, :mod:`sim.commands.fixes`).

``experiments/measured/<platform>/patched/NAME/`` holds what ``sim measure --patch NAME``
measured on burn-autodiff 0.22.1 with ``experiments/patches/NAME.patch`` applied.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from .compare import SLACK, TEXT, TOLERANCE, TOP_TRIMS, within_range
from .data import DataError, read_measured
from .growth import growth_of_runs
from ..paths import EXPERIMENTS
from ..units import METRICS

__all__ = ["PATCHED_MEASURED", "VERDICT_FILES", "TIME_BAR", "RSS_BAR", "RSS_METRICS",
           "measured_growth", "grade", "within_time_bar", "within_rss_bar", "rss_group",
           "BAND_BUILDS", "build_bands", "in_build_band", "rss_by_mechanism", "own_misses",
           "largest_misses"]

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
    return _within(e, TIME_BAR)


def _within(e, bar) -> bool:
    """Whether a graded point is within ``sim compare``'s grade, or its relative error is
    at most ``bar``."""
    if e["ok"]:
        return True
    try:
        return float(e["rel_error"]) <= bar + 1e-12
    except (TypeError, ValueError):
        return False


#: issue 38's bar for RSS: a prediction within 10 % of the measurement, where ``sim
#: compare`` grades memory at 5 %
RSS_BAR = 0.10

#: the metrics of the RSS bar: the process's resident set and the binary's resident text
RSS_METRICS = ("rss", "rss_bytes", "rss_delta", "rss_growth_per_step", "text_rss_delta")


def within_rss_bar(e) -> bool:
    """Whether a graded RSS point is within :data:`RSS_BAR`: within ``sim compare``'s
    grade (a point, or a measured run-to-run range), or its relative error at most 10 %."""
    return _within(e, RSS_BAR)


def rss_group(e) -> str:
    """The mechanism ``sim compare`` names for a graded RSS point (its ``mechanism``,
    :data:`sim.analysis.compare.GRADING_COLUMNS`): ``text`` (the binary's text pages are
    over half of what the program added to RSS in the model, or the row is the resident
    text itself, ``text_rss_delta``), ``top trims`` (glibc trimmed the heap's top since the
    previous sample in the model) or ``heap`` (neither: the heap's pages; also a point no
    probe measured, which has no ``mechanism``: only a probe's rows are graded by one)."""
    mechanism = e.get("mechanism", "")
    if e["metric"] == "text_rss_delta" or mechanism == TEXT:
        return "text"
    if mechanism == TOP_TRIMS:
        return "top trims"
    return "heap"


def _key(e):
    return (e["experiment"], e["variant"], e["phase"], float(e["x"]), e["metric"])


def build_bands(all_errors) -> dict:
    """``point -> [(predicted, measured, fix)]`` of every graded RSS point of every fix: the
    same row measured with each build of the probes."""
    out = defaultdict(list)
    for fix, errors in all_errors.items():
        for e in errors:
            if e["status"] != "unpredicted" and e["metric"] in RSS_METRICS:
                out[_key(e)].append((float(e["predicted"]), float(e["measured"]), fix))
    return out


#: builds of the probes that predict a row alike, at least, for their measured values to
#: make a band
BAND_BUILDS = 3


def in_build_band(e, bands):
    """For a text point measured once: ``(low, high, builds, inside)``, the range of the
    values measured at that point with every build whose prediction there is this one's
    (the same program in the model; the binaries differ by the patch, so by where the
    linker put each function, and the kernel's fault-around maps text in 64-KiB windows),
    and whether the prediction is inside it, widened by the tolerance as ``sim compare``
    widens a run-to-run range. None with fewer than :data:`BAND_BUILDS` such builds."""
    pv = float(e["predicted"])
    same = [m for p, m, _ in bands.get(_key(e), ()) if p == pv]
    if len(same) < BAND_BUILDS:
        return None
    low, high = min(same), max(same)
    metric = METRICS.get(e["metric"])
    tol = TOLERANCE[metric.kind if metric else "memory"]
    slack = SLACK.get(e["metric"], 0)
    return low, high, len(same), within_range(pv, low, high, tol, slack)


def rss_by_mechanism(errors, bands) -> dict:
    """The RSS points of one fix: ``points``, ``ok`` (``sim compare``'s grade), ``bar``
    (:func:`within_rss_bar`), ``groups`` (:func:`rss_group` -> ``[points, ok]``),
    ``band`` (the text points measured once with a build band: ``[inside, points]``),
    ``graded`` (``ok``, with each such text point graded by its band instead of as a
    point) and ``open`` (the misses left after that: entries, with ``band`` set on the
    text ones that have one)."""
    out = {"points": 0, "ok": 0, "bar": 0, "graded": 0, "band": [0, 0], "open": [],
           "groups": {g: [0, 0] for g in ("text", "top trims", "heap")}}
    for e in errors:
        if e["status"] == "unpredicted" or e["metric"] not in RSS_METRICS:
            continue
        group = rss_group(e)
        ok = bool(e["ok"])
        out["points"] += 1
        out["ok"] += ok
        out["bar"] += within_rss_bar(e)
        out["groups"][group][0] += 1
        out["groups"][group][1] += ok
        ranged = e.get("graded_against") == "range"
        band = in_build_band(e, bands) if group == "text" and not ranged else None
        if band is not None:
            out["band"][1] += 1
            out["band"][0] += band[3]
            ok = band[3]
        out["graded"] += ok
        if not ok:
            out["open"].append(dict(e, band=band, group=group))
    return out


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
