"""``sim calibrate``: fit a few profile parameters to measured points by least squares.

Only the parameters named with ``--fit`` move; everything else stays as the
base profile has it. Residuals are relative errors (absolute, in the metric's
slack, for points measured as zero). The Jacobian is taken by finite
differences over full simulations of the cells the fitted points need, and the
step solves a bounded linear least-squares problem (parameters stay >= 0);
the time and additive memory parameters enter the model linearly, so one or two
Gauss-Newton steps converge. A parameter that no fitted point depends on is
refused.

A parameter the fitted points hardly depend on (5 % more moves none of them by
:data:`~sim.analysis.fit.MIN_EFFECT` or more) and that already agree with its value is
refused too: any value would do, so the fit would only move it on noise. When the first
step would gain less than :data:`~sim.analysis.fit.MIN_GAIN` in rms relative error, the
values stay as they are. A ``[layout]`` parameter (derived from burn's struct layouts) is
never fitted.

The fit itself (residuals, Gauss-Newton steps) is :mod:`sim.analysis.fit`'s; this
command selects the points, runs the cells, prints and writes the profile.

The new profile is the base file with the fitted values substituted in place
(comments kept, each fitted parameter's source label made ``[fitted]``), a header
naming the new profile, its base and the measured files as given, and a
``[calibration]`` table listing the fitted parameters and the fitted points. A
staged calibration (not ``fresh``) keeps the base's record, except the base's
fitted points this fit moves without fitting them: those are dropped from
``points`` (they are predicted from now on) and named in a warning.
"""

from __future__ import annotations

import math
import os
import re
import sys
import textwrap
import tomllib
from pathlib import Path

from ..analysis.compare import cells_for, join, point_id, quick_params
from ..analysis.fit import gauss_newton, residuals
from ..analysis.data import atomic_write, check_output_file, output_target, probe_csv_rows
from ..errors import UserError
from ..engine.profile import Profile, load_profile, validate
from ..platform.rss import ALLOCATOR_CLASSES
from .profile_text import KEY, quoted, table_span
from .progress import Progress
from ..engine.runner import run_cell
from ..engine.workers import local_pool

__all__ = ["calibrate", "calibrate_tlb", "calibrate_parts", "calibrate_trim", "select_points", "run_cells", "check_out",
           "measured_policy"]

#: a base profile's fitted point whose prediction moves by more than this (relative) is
#: no longer at the value it was fitted to
MOVED = 1e-4

#: the source labels of the profiles' comments (models/*.toml): what a value rests on
LABEL = re.compile(r"\[(guess|source|derived|fitted|layout|measured|n/a)\]")

#: the first line of a header ``sim calibrate`` wrote (replaced when calibrated again)
HEADER = re.compile(r"^# Profile .+?: written by `sim calibrate`")


def run_cells(cells, profile, jobs=1, quick=None):
    """Predicted rows of every ``(workload, variant, policy)`` cell (sorted, deterministic).
    ``quick``: workload name -> the parameters its cells run with (the ``QUICK`` loop
    counts of measured rows from ``sim measure --quick``, :func:`sim.analysis.compare.quick_params`)."""
    quick = quick or {}
    if jobs <= 1 or len(cells) <= 1:
        rows = []
        for workload, variant, policy in cells:
            rows.extend(run_cell(workload, variant, policy, profile, quick.get(workload),
                                 observables=False))
        return rows
    with local_pool(jobs) as pool:      # workers leave Ctrl-C to this process
        futures = [pool.submit(_run_one, w, v, p, profile.path, profile.data, quick.get(w))
                   for w, v, p in cells]
        rows = []
        for future in futures:
            rows.extend(future.result())
    return rows


def _run_one(workload, variant, policy, path, data, sets=None):
    profile = Profile(Path(path).stem, path, data)
    return run_cell(workload, variant, policy, profile, sets, observables=False)


def select_points(measured, selectors):
    """Measured rows whose point id (``experiment/variant/phase/x/metric``, see
    :func:`sim.analysis.compare.point_id`; a variant may hold ``/`` itself) matches any selector:
    the same fields, ``*`` standing for any text (``/`` included). A selector that
    matches no measured point is an error naming it, the form and a measured point
    like it."""
    if not selectors:
        return list(measured)
    ids = [point_id(m) for m in measured]
    chosen = set()
    for selector in selectors:
        pattern = re.compile("^" + re.escape(selector).replace(r"\*", ".*") + "$")
        hits = {i for i, pid in enumerate(ids) if pattern.match(pid)}
        if not hits:
            raise UserError(_no_match(selector, ids))
        chosen |= hits
    return [m for i, m in enumerate(measured) if i in chosen]


def measured_policy(measured, policy=None) -> str:
    """The policy whose predictions the ``measured`` rows are fitted to: ``policy`` if given,
    else the one their ``burn_version`` tag names (``0.22.1+NAME``: burn with
    ``NAME``'s patch, ``sim measure --patch NAME``), else ``burn-0.22.1``. Rows of
    different patches, or a ``policy`` other than their patch's, are an error."""
    tags = {str(m.get("burn_version", "")).partition("+")[2] for m in measured}
    if len(tags) > 1:
        shown = ", ".join(sorted(t or "(unpatched)" for t in tags))
        raise UserError(f"the measured rows are of different builds of burn ({shown}): "
                        f"calibrate on one patch's measurements at a time")
    tag = tags.pop() if tags else ""
    if policy is None:
        return tag or "burn-0.22.1"
    if tag and policy != tag:
        raise UserError(f"--policy {policy}: the measured rows are of burn with the {tag} "
                        f"patch (burn_version 0.22.1+{tag}); fit them to -p {tag}")
    return policy


def _no_match(selector, ids) -> str:
    """The error line of a ``--points`` selector that matches no measured point."""
    fields = selector.split("/")
    form = ("a selector is experiment/variant/phase/x/metric, 5 fields separated by '/' "
            "(phase often empty), * for any text")
    like = _nearest(fields, ids)
    example = f"; e.g. {like}" if like else ""
    if len(fields) < 5 and "*" not in selector:
        return f"--points {selector}: {len(fields)} field(s) given: {form}{example}"
    return f"--points {selector}: no measured point matches ({form}{example})"


def _nearest(fields, ids):
    """The measured point id sharing most of the selector's literal ``fields`` (the first
    of equals, so the answer is deterministic), or None when there are no points."""
    given = {f for f in fields if f and "*" not in f}
    best, score = None, -1
    for pid in ids:
        parts = pid.split("/")
        s = (parts[0] == fields[0]) * 10 + len(given & set(parts))
        if s > score:
            best, score = pid, s
    return best


def _with(profile, values):
    data = _deepcopy(profile.data)
    for name, value in values.items():
        section, key = name.rsplit(".", 1)
        table = data
        for part in section.split("."):
            table = table[part]
        table[key] = int(round(value)) if isinstance(table[key], int) else float(value)
    return Profile(profile.name, profile.path, data)


def _deepcopy(data):
    if isinstance(data, dict):
        return {k: _deepcopy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deepcopy(v) for v in data]
    return data


def _with_sets(quick, cells, sets) -> dict:
    """``quick`` (workload name -> the parameters its cells run with) with ``sets`` (key ->
    value, as ``sim run --set``) added for every workload of ``cells`` that has the key;
    a key no such workload has is an error naming the keys they have."""
    if not sets:
        return quick
    from ..engine.workloads import load_workload
    workloads = {name: load_workload(name) for name in sorted({c[0] for c in cells})}
    for key in sets:
        if not any(key in w.params for w in workloads.values()):
            known = sorted({k for w in workloads.values() for k in w.params})
            raise UserError(f"--set {key}: no simulated workload has this parameter "
                            f"(they have: {', '.join(known)})")
    out = {name: dict(values) for name, values in quick.items()}
    for name, w in workloads.items():
        for key, value in sets.items():
            if key in w.params:
                out.setdefault(name, {})[key] = value
    return out


def calibrate(measured, base, params, points=(), out=None, jobs=1, echo=print, fresh=False,
              max_iterations=8, progress=False, force=False, sources=None, warn=None,
              sets=None, policy=None, against=None, additive=()):
    """Fit ``params`` of profile ``base`` to the selected ``measured`` points.

    ``progress``: show a bar on stderr over each iteration's simulations of the fitted
    cells (one per parameter for the Jacobian, then the step and its line search).

    At most ``max_iterations`` Gauss-Newton steps; stopping at that limit while the fit
    still improves is reported (rerun with more, or from the written profile).

    The written profile's ``[calibration]`` table lists what was fitted, on which points:
    this call's, plus the base profile's (a calibration in stages), unless ``fresh``. A
    base point this fit moves (its prediction changes by more than :data:`MOVED`) without
    fitting it is dropped from the record and named in a warning (``warn``, one line;
    default: stderr).

    ``out``: where to write the new profile; checked before anything is simulated
    (:func:`check_out`: an existing file other than the base is refused unless ``force``).
    ``sources``: the measured files as the command was given them, named in the written
    header (default: the files the rows were read from). Without ``out`` nothing is
    written, and the last line says so.

    ``sets``: workload parameters (key -> value, ``sim run --set``) the fitted cells run
    with during the fit where their workload has the key, e.g. ``{"steps": "500"}``: a
    p10-ema cell whose fitted points are at steps <= 500 runs 500 steps instead of 2,000
    in each of the fit's simulations (a run's rows up to a step do not depend on its
    length; a fitted point past it has no prediction, an error). The table of every point
    and the check of the base's fitted points run the cells as measured, once before and
    once after.

    ``policy``: the policy whose predictions the measured rows are fitted to (default:
    :func:`measured_policy`, the patch their ``burn_version`` names, else burn-0.22.1):
    a parameter only a fix charges (``time.drop_release_node_ns``) is fitted on that
    fix's patched burn. Such a point is recorded as ``POLICY:point``; the base's recorded
    points are checked under their own policy.

    ``additive``: parameters moved additively, bounded at zero
    (:func:`sim.analysis.fit.gauss_newton`).

    ``against``: measured rows of unpatched burn from the same probes (the fix's
    reference). Each fitted point then fits what the patch adds: its measured value less
    unpatched burn's at the same point, plus burn-0.22.1's prediction there (a cost the
    model charges elsewhere on unpatched burn, e.g. a tensor handle's own drop, is not
    fitted into the fix's parameter). The fitted parameters must leave burn-0.22.1's
    predictions of those points as they are (a parameter only the fix charges).

    Returns ``(new profile, table of every point before/after)``.
    """
    profile = load_profile(base) if not isinstance(base, Profile) else base
    base_text = _base_text(profile)
    _check_params(profile, params, base_text)
    if out is not None:
        check_out(out, profile.path, force)
    policy = measured_policy(measured, policy)
    fit_rows = select_points(measured, points)
    fit_cells = cells_for(fit_rows, policy)
    # rows of `sim measure --quick` run with the probes' quick loop counts, as in compare
    quick = quick_params(measured)
    if not fit_cells:
        raise UserError("no fitted point belongs to a known workload")
    fit_quick = _with_sets(quick, fit_cells, sets)
    if against is not None:
        fit_rows = _added_by_patch(fit_rows, against, profile, current_values=params,
                                   jobs=jobs, quick=fit_quick)
        echo(f"fitting what the {policy} patch adds over unpatched burn at "
             f"{len(fit_rows)} point(s) (its value less unpatched burn's, plus "
             f"burn-0.22.1's prediction)")
    x0 = {name: float(profile.get(name)) for name in params}
    echo(f"fitting {len(params)} parameter(s) on {len(fit_rows)} point(s) "
         f"({len(fit_cells)} simulated cells)")

    bar = None

    def evaluate(values, label="step"):
        if bar is not None and bar.done == bar.total:
            bar.total += 1          # the line search, or a parameter probed again
        r = residuals(fit_rows, run_cells(fit_cells, _with(profile, values), jobs, fit_quick),
                      policy)
        if bar is not None:
            bar.advance(label)
        return r

    def say(text):
        nonlocal bar
        if bar is not None:     # end the bar's line before the iteration's report
            bar.close()
            bar = None
        echo(text)

    def on_iteration(iteration):
        nonlocal bar
        if progress:
            if bar is not None:
                bar.close()
            bar = Progress(len(params) + 1, unit=f"simulations (iteration {iteration + 1})")

    if progress:
        bar = Progress(1, unit="simulations of the fitted cells (initial point)")
    r0 = evaluate(x0, "initial point")
    integer = {name for name in params if isinstance(profile.get(name), int)}
    try:
        current, _ = gauss_newton(x0, evaluate, r0, integer, max_iterations, say, on_iteration,
                                  additive)
    finally:
        if bar is not None:
            bar.close()

    new_profile = _with(profile, current)
    previous = {} if fresh else profile.data.get("calibration", {})
    fit_ids = [policy_point(policy, point_id(m)) for m in fit_rows]
    earlier = [p for p in previous.get("points", []) if p not in set(fit_ids)]
    cells = cells_for(measured, policy)
    predicted_before = run_cells(cells, profile, jobs, quick)
    predicted_after = run_cells(cells, new_profile, jobs, quick)
    before_earlier, after_earlier, earlier_quick = _base_point_rows(
        earlier, predicted_before, profile, new_profile, jobs, previous.get("quick_points"),
        quick)
    # the base's points' own runs last: they hold only the points the fit's run does not
    # check (another cell, an x it does not reach, or a run of the other length)
    dropped = _moved(earlier, predicted_before + before_earlier,
                     predicted_after + after_earlier)
    fit_quick_ids = {fid for fid in fit_ids if point_workload(_split_point(fid)[1]) in quick}
    new_profile.data["calibration"] = _record(previous, params, fit_ids,
                                              {pid for pid, _, _ in dropped},
                                              fit_quick_ids | earlier_quick)
    fitted_ids = [pid for pol, pid in map(_split_point, new_profile.data["calibration"]["points"])
                  if pol == policy]
    before = join(measured, predicted_before, fitted_ids, policy)
    after = join(measured, predicted_after, fitted_ids, policy)
    echo("")
    wide = max(len("parameter"), *map(len, params))
    echo(f"{'parameter':<{wide}} {'before':>14} {'after':>14}")
    for name in params:
        echo(f"{name:<{wide}} {x0[name]:>14.6g} {current[name]:>14.6g}")
    echo("")
    for line in _point_table(before, after):
        echo(line)
    if dropped:
        (warn or _stderr)(_dropped_warning(profile.name, dropped))
    if out is None:
        echo("\nnot written (no --out): give --out FILE.toml to save the calibrated profile")
        return new_profile, after
    header = _provenance(Path(out).stem, _base_label(base, profile), _sources(sources, measured),
                         params, len(fit_ids), sets)
    write_profile(profile.path, new_profile, current, out, header=header,
                  dropped=[pid for pid, _, _ in dropped], base_text=base_text)
    echo(f"\nwrote {out}")
    return new_profile, after


#: where ``sim calibrate --tlb`` writes each value of the probe's: (section, key, field)
TLB_KEYS = (("process", "dtlb_entries", "entries"), ("process", "dtlb_ways", "ways"),
            ("time", "sweep_tlb_read_ns", "ns"), ("time", "sweep_tlb_miss_reads", "reads"),
            ("time", "sweep_tlb_miss_reach", "reach"), ("time", "sweep_tlb_miss", "miss"),
            ("time", "sweep_tlb_order_reads", "order_reads"),
            ("time", "sweep_tlb_order_reach", "order_reach"),
            ("time", "sweep_tlb_order_miss", "order_miss"),
            ("time", "sweep_tlb_order_spacing", "order_spacing"))


def calibrate_tlb(base, tlb_dir, out=None, force=False, echo=print):
    """Write the data TLB's ``[process] dtlb_entries``/``dtlb_ways`` and ``[time]
    sweep_tlb_read_ns`` from the sweep-scan probe's ``tlb`` output in ``tlb_dir``
    (:func:`sim.analysis.tlb.read_tlb_dir`: cpuid's entries and ways, the median cost of a
    read whose page misses; no fit, no simulation) and the TLB's miss curves ``[time]
    sweep_tlb_miss_reads``, ``sweep_tlb_miss_reach``, ``sweep_tlb_miss`` from its ``tlbr``
    rows in ``tlb_dir/tlbr/`` (:func:`sim.analysis.tlb.read_tlbr_dir`; empty, the miss
    fraction then from the TLB's size and ways, where there are none) and its miss curves in
    the orphan sweep's own order and key spacing ``[time] sweep_tlb_order_*`` from its
    ``order`` rows in ``tlb_dir/order/`` (:func:`sim.analysis.tlb.read_order_dir`; empty,
    the sweep then reads the random-order curves, where there are none; keys the base
    profile lacks are added after ``sweep_tlb_miss``) into profile
    ``base``, each value with a comment naming the files and the host they were measured
    on. The rest of the profile,
    its header and its ``[calibration]`` record stay as they are. Returns the values."""
    from ..analysis.tlb import MIN_FILL, read_order_dir, read_tlb_dir, read_tlbr_dir

    profile, base_text = _measured_base(base, out, force)
    tlb = read_tlb_dir(tlb_dir)
    values = {"entries": tlb["entries"], "ways": tlb["ways"], "ns": round(tlb["ns"], 3)}
    where = [f"# {_relative(tlb['stderr'])},", f"# {_relative(tlb['csv'])}"]
    curves = read_tlbr_dir(Path(tlb_dir) / "tlbr", values["entries"], values["ns"])
    values.update(curves or {"reads": [], "reach": [], "miss": []})
    curve_note = ([
        "# The data TLB's miss curves (sim.platform.l2_cache.TlbMissCurve): the reads per page",
        "# of each curve, the pages read over the TLB's entries (key pages and their keys'",
        "# 32-B table slots) and the fraction of reads that miss, (spread4k - lines4k) /",
        "# sweep_tlb_read_ns, [measured] by `sweep-scan tlbr R FILL P,...` on " + tlb["host"] + ":",
        "# keys R to a page read in one random order every pass, the mean over the runs of",
        f"# pages filling at least {MIN_FILL:g} of their span (no fit); written by `sim calibrate",
        "# --tlb` from"] + [f"# {_relative(f)}" for f in curves["files"]] if curves else [
        "# The data TLB's miss curves (sim.platform.l2_cache.TlbMissCurve): none measured (no",
        f"# tlbr/ rows in {_relative(Path(tlb_dir))}): the miss fraction from the TLB's size and",
        "# ways; written by `sim calibrate --tlb`"])
    order = read_order_dir(Path(tlb_dir) / "order", values["entries"], values["ns"])
    values.update({"order_" + k: v for k, v in
                   (order or {"reads": [], "reach": [], "miss": [], "spacing": []}).items()
                   if k != "files"})
    order_note = ([
        "# The data TLB's miss curves in the orphan sweep's own order and key spacing (they",
        "# replace the curves above where measured): one per place of the live key in the hash",
        "# order, at the reads per page, pages read over the TLB's entries (the keys' and the",
        "# nodes table's share) where the sweep's model reads its curve for that pass",
        "# (sim.platform.l2_cache.sweep_tlb_point), and the fraction of reads that miss,",
        "# (order4k - orderln) / sweep_tlb_read_ns, [measured] by `sweep-scan order LAYOUT FRACS",
        "# P,...` on " + tlb["host"] + ": an EMA chain's keys at the simulated arena's",
        "# addresses, read in hash order up to the live key once per locator entry (no fit);",
        "# written by `sim calibrate --tlb` from"] + [f"# {_relative(f)}" for f in order["files"]]
        if order else [
        "# The data TLB's miss curves in the orphan sweep's own order: none measured (no order/",
        f"# rows in {_relative(Path(tlb_dir))}): the sweep reads the random-order curves above;",
        "# written by `sim calibrate --tlb`"])
    if order and order["spacing"]:
        order_note += [
            "# sweep_tlb_order_spacing: the key layout each curve was measured on, B of heap per",
            "# key (its rows' longest chain: pages x 4096 / keys; the order/ rows read " +
            f"{len(set(order['spacing']))}",
            "# layouts): a graph reads the curves of the layouts around its own key spacing,",
            "# linearly between them (sim.platform.l2_cache.TlbLayoutCurves)"]
    notes = {
        "order_reads": order_note,
        "entries": [
            "# Entries and ways of the core's L2 data TLB for 4-KiB pages (the orphan sweep's",
            "# TLB model, sim/platform/timing.py: a sweep read whose page the TLB does not hold",
            "# costs time.sweep_tlb_read_ns more), [measured] by `sweep-scan tlb`",
            "# (experiments/probes/cache-bw: cpuid 0x80000006, AMD's associativity code",
            f"# read as sim.analysis.tlb.AMD_WAYS) on {tlb['host']}; written by",
            "# `sim calibrate --tlb` from"] + where,
        "ns": [
            "# ns more per node read by the sweep whose page misses the data TLB (a page walk),",
            "# [measured] by `sweep-scan tlb` on " + tlb["host"] + ": maybe_useful's loop over",
            "# n keys one per 4-KiB page (pages4k) less the same lines packed 64 to a page",
            f"# (lines4k), median over the {tlb['sizes']} sizes at 2x to 32x the TLB's entries",
            "# (no fit); written by `sim calibrate --tlb` from"] + where,
        "reads": curve_note,
    }
    lines = base_text.rstrip("\n").split("\n")
    _add_missing(lines, "time", "sweep_tlb_miss",
                 [key for section, key, _ in TLB_KEYS if key.startswith("sweep_tlb_order")])
    _set_keys(lines, TLB_KEYS, values, notes, keep_shared=False)
    return _write_measured(profile, lines, TLB_KEYS, values, tlb["host"], out, echo)


def _add_missing(lines, section, after, keys) -> None:
    """Add the ``keys`` that table ``[section]`` of a profile's ``lines`` lacks (optional keys,
    :data:`sim.engine.profile.OPTIONAL_EMPTY`), empty, one run under one comment line, after
    the line of key ``after`` (:func:`_set_keys` writes their comment)."""
    missing = [key for key in keys if _find_key(lines, section, key) is None]
    i = _find_key(lines, section, after)
    if missing and i is None:
        raise UserError(f"cannot find {section}.{after} in the base profile text")
    if missing:
        lines[i + 1:i + 1] = ["#"] + [f"{key} = []" for key in missing]


def _measured_base(base, out, force):
    """The profile ``base`` (a name, path or :class:`Profile`) that a measured value is
    written into, and its file's text; ``out`` checked first."""
    profile = load_profile(base) if not isinstance(base, Profile) else base
    base_text = _base_text(profile)
    if not base_text:
        raise UserError(f"--profile {base}: cannot read its file")
    if out is not None:
        check_out(out, profile.path, force)
    return profile, base_text


def _set_keys(lines, keys, values, notes, keep_shared) -> None:
    """Set each ``(section, key, field)`` of ``keys`` to ``values[field]`` in a profile's
    ``lines``, its comment block replaced by ``notes[field]`` where there is one (and, with
    ``keep_shared``, where the block is not shared with other keys)."""
    for section, key, field in keys:
        i = _find_key(lines, section, key)
        if i is None:
            raise UserError(f"cannot find {section}.{key} in the base profile text")
        start, stop, shared = _comment_block(lines, i)
        lines[i] = f"{key} = {_toml_value(values[field])}"
        if field in notes and not (keep_shared and shared):
            lines[start:stop] = notes[field]


def _write_measured(profile, lines, keys, values, host, out, echo):
    """Validate the profile ``lines`` make, show each of ``keys``' old and new value and the
    host they were measured on, and write the profile to ``out`` (nothing written without
    it). Returns ``values``."""
    text = "\n".join(lines) + "\n"
    validate(tomllib.loads(text), out or profile.path)
    for section, key, field in keys:
        echo(f"{section}.{key:<22} {_shown_value(profile, f'{section}.{key}')} -> "
             f"{values[field]}")
    echo(f"host: {host}")
    if out is None:
        echo("\nnot written (no --out): give --out FILE.toml to save the profile")
        return values
    atomic_write(out, text)
    echo(f"\nwrote {out}")
    return values


#: where ``sim calibrate --process-parts`` writes each value of the probe's: (section, key,
#: field of :func:`sim.analysis.parts.read_parts`)
PARTS_KEYS = (("process", "baseline_rss_bytes", "start_bytes"),
              ("code", "gemv_bytes", "gemv_bytes"))


def calibrate_parts(base, parts_path, out=None, force=False, echo=print):
    """Write ``[process] baseline_rss_bytes`` (the processes' mean RSS before any burn code)
    and ``[code] gemv_bytes`` (the mean text their first single-row forward faults in)
    from the train-validate probe's ``PROBE_PARTS`` rows in ``parts_path``
    (:func:`sim.analysis.parts.read_parts`; no fit, no simulation) into profile ``base``,
    each value with a comment naming the file and the host, and, where the profile has a
    ``[host]`` table, its source in ``[host.sources]``. The rest of the profile, its header
    and its ``[calibration]`` record stay as they are. Returns the values."""
    from ..analysis.parts import GEMV, START, read_parts

    profile, base_text = _measured_base(base, out, force)
    parts = read_parts(parts_path)
    where = _relative(parts["file"])
    host = parts["host"] or "the host the file was measured on"
    starts, gemvs = parts["starts"], parts["gemvs"]
    notes = {
        "start_bytes": (
            f"B, [measured] RSS of a probe process before any burn code runs (/proc/self/statm "
            f"at the train-validate probe's PROBE_PARTS '{START}' part: the binary's and the "
            f"libraries' pages the loader and Rust's runtime made resident), the mean of "
            f"{len(starts)} processes ({min(starts):,.0f}-{max(starts):,.0f} KiB) on {host}; "
            f"no fit, written by `sim calibrate --process-parts` from {where}"),
        "gemv_bytes": (
            f"gemm's matrix-vector kernels, run besides its dispatch by a matmul whose gemm "
            f"has one row or column (a single-row forward; sim.burn.backend.gemm_is_gemv). "
            f"B, [measured] the binary's resident text the train-validate probe's first "
            f"generation sample adds right after step 1 ('{GEMV[1]}' less '{GEMV[0]}', "
            f"/proc/self/smaps), the mean of {len(gemvs)} processes "
            f"({min(gemvs):,.0f}-{max(gemvs):,.0f} KiB) on {host}; no fit, written by "
            f"`sim calibrate --process-parts` from {where}"),
    }
    notes = {field: textwrap.wrap(text, 90, initial_indent="# ", subsequent_indent="# ",
                                  break_on_hyphens=False)
             for field, text in notes.items()}
    lines = base_text.rstrip("\n").split("\n")
    _set_keys(lines, PARTS_KEYS, parts, notes, keep_shared=True)
    if "host" in profile.data:
        set_host_sources(lines, {
            "process.baseline_rss_bytes": [
                "measured", f"the train-validate probe's PROBE_PARTS '{START}' RSS, mean of "
                            f"{len(starts)} processes, {where}"],
            "code.gemv_bytes": [
                "measured", f"the train-validate probe's PROBE_PARTS text '{GEMV[1]}' less "
                            f"'{GEMV[0]}', mean of {len(gemvs)} processes, {where}"]})
    return _write_measured(profile, lines, PARTS_KEYS, parts, host, out, echo)


#: where ``sim calibrate --heap-refault`` writes each value of the probe's: (section, key,
#: field of :func:`read_heap_refault`)
TRIM_KEYS = (("time", "trim_cycle_ns", "cycle_ns"), ("time", "trim_page_ns", "page_ns"))
#: the rows of mechanism-cost's ``heap-refault`` variant the trim's cost is read from
TRIM_ROW = ("mechanism-cost", "heap-refault", "brk-per-trim", "pages", "ns_per_op")
#: the columns a ``brk-per-trim`` row is read from (a bad one's error names them)
TRIM_COLUMNS = "experiment,variant,phase,x,x_unit,metric,value"
#: the most pages a ``brk-per-trim`` row may give back (4 TiB of 4-KiB pages); with at least
#: one page this bounds the least-squares sums (no overflow, no spread that rounds to 0)
MAX_TRIM_PAGES = 1e9
#: the file of a directory that names the host its CSVs were measured on
HOST_FILE = "host.txt"


def read_heap_refault(path) -> dict:
    """The trim's cost from mechanism-cost ``heap-refault``'s ``brk-per-trim`` rows (ns per
    malloc-and-free cycle a trimmed top costs beyond a kept one's, at x pages given back) in
    ``path``, a CSV or a directory of them: the least-squares line through every row,
    ``cycle_ns`` fixed + ``page_ns`` per page. Also ``points`` ((pages, ns) read),
    ``files``, and ``host`` (a directory's ``host.txt``, or ""). At least two page counts
    are needed; a bad or missing value is one error naming the file."""
    path = Path(path)
    files = sorted(path.glob("*.csv")) if path.is_dir() else [path]
    if not files:
        raise UserError(f"--heap-refault {path}: no CSV file there")

    def read(row):
        if (row.get("experiment"), row.get("variant"), row.get("phase"),
                row.get("x_unit"), row.get("metric")) != TRIM_ROW:
            return None
        return float(row["x"]), float(row["value"])

    points = []
    for file in files:
        for line, row, point in probe_csv_rows(file, TRIM_COLUMNS, read,
                                               name=f"--heap-refault {file}"):
            if point is None:
                continue
            pages, ns = point
            if not (1 <= pages <= MAX_TRIM_PAGES and 0 <= ns < 1e9):
                raise UserError(f"--heap-refault {file}:{line}: pages must be between 1 and "
                                f"{MAX_TRIM_PAGES:g} and ns between 0 and 1e9, got {row['x']} "
                                f"and {row['value']}")
            points.append(point)
    if len({p for p, _ in points}) < 2:
        raise UserError(f"--heap-refault {path}: needs mechanism-cost heap-refault "
                        f"brk-per-trim rows at two page counts at least (`burn-probes "
                        f"mechanism-cost --variant heap-refault`), found {len(points)} row(s)")
    n = len(points)
    mx = sum(p for p, _ in points) / n
    my = sum(v for _, v in points) / n
    slope = (sum((p - mx) * (v - my) for p, v in points)
             / sum((p - mx) ** 2 for p, _ in points))
    slope = max(slope, 0.0)
    fixed = max(my - slope * mx, 0.0)
    host = ""
    if path.is_dir() and (path / HOST_FILE).is_file():
        host = (path / HOST_FILE).read_text(encoding="utf-8", errors="replace").strip()
    return {"cycle_ns": round(fixed, 1), "page_ns": round(slope, 2), "points": points,
            "files": files, "host": host}


def calibrate_trim(base, path, out=None, force=False, echo=print):
    """Write ``[time] trim_cycle_ns`` and ``trim_page_ns`` (what a trim of the glibc arena's
    top costs: the break cut back and grown again, two ``brk`` calls, and per page given
    back) from mechanism-cost ``heap-refault``'s ``brk-per-trim`` rows in ``path``
    (:func:`read_heap_refault`; no fit, no simulation) into profile ``base``, with a
    comment naming the files and the host and, where the profile has a ``[host]`` table,
    their source in ``[host.sources]``. Returns the values."""
    profile, base_text = _measured_base(base, out, force)
    allocator = profile.process.allocator
    if not ALLOCATOR_CLASSES[allocator].get("arena"):
        raise UserError(f"--heap-refault: profile {profile.name}'s allocator is "
                        f"{allocator!r}, which has no glibc arena: nothing trims there, so "
                        f"trim costs would never be charged (give a profile whose [process] "
                        f"allocator is 'glibc-arena', e.g. amd-epyc-zen4 or linux-x86_64)")
    trim = read_heap_refault(path)
    host = trim["host"] or "the host the files were measured on"
    files = trim["files"]
    where = (f"{_relative(files[0].parent)}/ ({', '.join(f.name for f in files)})"
             if len({f.parent for f in files}) == 1 else ", ".join(map(_relative, files)))
    pages = sorted({p for p, _ in trim["points"]})
    by_pages = ", ".join(
        f"{p:g} pages {min(v for q, v in trim['points'] if q == p):,.0f}-"
        f"{max(v for q, v in trim['points'] if q == p):,.0f} ns" for p in pages)
    text = {
        "cycle_ns": (
            f"ns per trim of the glibc arena's top (ptmalloc's systrim; sim.platform.ptmalloc), "
            f"charged where the arena trims: the brk that cuts the break back and the brk that "
            f"grows it again when the top is next carved (in a loop each trim is followed by "
            f"one growth). [measured] by mechanism-cost heap-refault's brk-per-trim rows (a "
            f"block at the heap's top written and freed, trim threshold 0 against a twin that "
            f"keeps its pages: the malloc and free beyond the twin's, its page faults apart; "
            f"{by_pages}), the least-squares line's fixed part; trim_page_ns: ns per page "
            f"a trim gives back to the kernel (unmapped), [measured], the line's slope; on "
            f"{host}, no fit, written by `sim calibrate --heap-refault` from {where}"),
    }
    notes = {field: textwrap.wrap(t, 90, initial_indent="# ", subsequent_indent="# ",
                                  break_on_hyphens=False) for field, t in text.items()}
    lines = base_text.rstrip("\n").split("\n")
    _set_keys(lines, TRIM_KEYS, trim, notes, keep_shared=False)
    if "host" in profile.data:
        set_host_sources(lines, {
            f"time.{key}": ["measured", f"mechanism-cost heap-refault brk-per-trim, "
                            f"{len(trim['points'])} rows at "
                            f"{', '.join(f'{p:g}' for p in pages)} pages, a line's "
                            f"{'fixed part' if 'cycle' in key else 'slope'}, {where}"]
            for _, key, _ in TRIM_KEYS})
    return _write_measured(profile, lines, TRIM_KEYS, trim, host, out, echo)


#: the comment under a ``[host.sources]`` header a command other than ``sim host-profile``
#: makes (``sim host-profile`` heads the table it writes whole with its own)
HOST_SOURCES_NOTE = ("# where a value a command measured on this host came from (measured,",
                     "# no fit; `sim host-profile` lists every value it wrote here)")

def set_host_sources(lines, sources, note=HOST_SOURCES_NOTE, replace=False) -> None:
    """Write ``sources`` (parameter -> ``[kind, detail...]``) into the ``[host.sources]``
    table of a profile's ``lines``, in place: each entry replaces the table's line for its
    parameter or is added at the table's end. ``replace``: the table holds ``sources``
    alone (its old entries and comment go). Where there is no table, one is made after
    ``[host]``, headed by ``note`` (comment lines). The one writer of the table: ``sim
    calibrate --process-parts`` and ``--heap-refault`` set their two values each in it,
    ``sim host-profile`` writes it whole."""
    span = table_span(lines, "host.sources")
    if span is not None and replace:
        start = span[0]
        while start > 0 and not lines[start - 1].strip():
            start -= 1                  # the blank lines before it go with it
        del lines[start:span[1]]
        span = None
    rendered = {quoted(name): f"{quoted(name)} = [" + ", ".join(quoted(v) for v in value)
                + "]" for name, value in sources.items()}
    if span is not None:
        start, stop = span
        for i in range(start + 1, stop):
            key = lines[i].split("=", 1)[0].strip()
            if key in rendered:
                lines[i] = rendered.pop(key)
        lines[stop:stop] = list(rendered.values())
        return
    host = table_span(lines, "host")
    if host is None:
        raise UserError("the profile has no [host] table")
    lines[host[1]:host[1]] = ["", "[host.sources]", *note, *rendered.values()]


def _shown_value(profile, name) -> str:
    try:
        return str(profile.get(name))
    except KeyError:
        return "(none)"


def _record(previous, params, fit_ids, dropped, quick_ids=()) -> dict:
    """The new ``[calibration]`` record: the ``previous`` one (the base's; empty when
    fresh) with this call's ``params`` and points ``fit_ids`` added, less the ``dropped``
    base points (moved by this fit without being among its points).

    ``quick_points``: the points of ``points`` in ``quick_ids``, those fitted on a probe's
    ``--quick`` run (the workload's ``QUICK`` parameters): the run the check of a later
    calibration runs them with (:func:`_earlier_predictions`). Kept where every point's
    run is known: a fresh record, or a ``previous`` one that keeps it (a record written
    before it cannot tell which run its points were fitted on, nor can its successors).

    ``fitted_on`` maps each parameter to the points of the call that last fitted it (all
    of that call's points: its parameters are fitted jointly); a refitted parameter's
    entry is replaced. A base point that only refitted parameters were fitted on, and
    that this call does not fit on, leaves ``points`` too, when every parameter the base
    lists has an entry (a base written before ``fitted_on`` cannot tell; its moved points
    leave through ``dropped``)."""
    fitted = list(dict.fromkeys(list(previous.get("fitted", [])) + list(params)))
    fitted_on = {name: list(ids) for name, ids in previous.get("fitted_on", {}).items()}
    old = set()
    if all(name in fitted_on for name in previous.get("fitted", [])):
        still = {p for name, ids in fitted_on.items() if name not in params for p in ids}
        old = {p for name in params for p in fitted_on.get(name, []) if p not in still}
    for name in params:
        fitted_on[name] = list(fit_ids)
    kept = [p for p in previous.get("points", []) if p not in dropped and p not in old]
    points = list(dict.fromkeys(kept + list(fit_ids)))
    record = {"fitted": fitted, "points": points}
    if "quick_points" in previous or not previous.get("points"):
        quick_ids = set(quick_ids)
        record["quick_points"] = [p for p in points if p in quick_ids]
    record["fitted_on"] = {name: fitted_on[name] for name in fitted if name in fitted_on}
    return record


def _stderr(text) -> None:
    """Print a warning line on stderr."""
    print(text, file=sys.stderr)


# -- checks made before anything is simulated ----------------------------------------------

def _base_text(profile) -> str:
    """The text of ``profile``'s file (its comments document each parameter's source), or
    ``""`` for a profile with no readable file."""
    try:
        return Path(profile.path).read_text(encoding="utf-8")
    except OSError:
        return ""


def _check_params(profile, params, base_text) -> None:
    """One error line for a ``--fit`` parameter that cannot be fitted: none given, not a
    profile parameter, not a number, or a ``[layout]`` one (the ``[layout]`` table, or a
    parameter its comment labels ``[layout]`` alone: a struct size derived from burn's
    source, never fitted)."""
    if not params:
        raise UserError("nothing to fit: give at least one --fit PARAM")
    known = set(profile.parameters())
    lines = base_text.split("\n")
    for name in params:
        if name not in known:
            raise UserError(f"--fit {name}: not a profile parameter (see models/*.toml; "
                            f"e.g. time.scan_node_ns)")
        if isinstance(profile.get(name), (str, list)):
            raise UserError(f"--fit {name}: not a numeric parameter")
        section, key = name.rsplit(".", 1)
        i = _find_key(lines, section, key)
        labels = _labels(lines, i) if i is not None else set()
        if section == "layout" or labels == {"layout"}:
            raise UserError(f"--fit {name}: a [layout] parameter, derived from burn's struct "
                            f"layouts, is not fitted (correct it in the profile by hand if "
                            f"the layout differs)")


def check_out(out, base_path, force=False) -> None:
    """Refuse, before any simulation, an ``out`` the calibrated profile should not or
    cannot be written to: an existing file that is not the base profile itself (``base_path``)
    unless ``force``; one :func:`sim.analysis.data.check_output_file` refuses (a directory, a
    directory that takes no new file, ...)."""
    target, in_place = output_target(out)
    if not in_place and target.is_file() and not force and not _same_file(target, base_path):
        raise UserError(f"--out {out}: the file exists and is not the base profile "
                        f"({_relative(base_path)}): give --force to overwrite it")
    check_output_file(out)


def _relative(path) -> str:
    """``path`` relative to the working directory where that is shorter (for messages)."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return relative if len(relative) < len(str(path)) else str(path)


def _same_file(a, b) -> bool:
    """Whether paths ``a`` and ``b`` name the same existing file."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


# -- the base's fitted points this fit moves --------------------------------------------

def _added_by_patch(fit_rows, against, profile, current_values, jobs, quick) -> list:
    """``fit_rows`` (a patch's) with each value replaced by the patch's measured value less
    the unpatched one (``against``, the same point) plus burn-0.22.1's prediction there;
    an error where unpatched burn has no such point or its prediction depends on the
    fitted parameters (``current_values``: their names)."""
    unpatched = {point_id(m): m for m in against}
    cells = cells_for(fit_rows)
    base = _by_point(run_cells(cells, profile, jobs, quick))
    bumped = _with(profile, {name: float(profile.get(name)) * 1.05 + 1.0
                             for name in current_values})
    moved = _by_point(run_cells(cells, bumped, jobs, quick))
    out = []
    for m in fit_rows:
        pid = point_id(m)
        ref, pred = unpatched.get(pid), base.get(pid)
        if ref is None:
            raise UserError(f"--against: unpatched burn has no measured point {pid}")
        if pred is None:
            raise UserError(f"--against: burn-0.22.1 predicts no {pid}")
        if float(moved[pid]["value"]) != float(pred["value"]):
            raise UserError(f"--against: {', '.join(current_values)} move(s) burn-0.22.1's "
                            f"prediction of {pid}: fit it on unpatched burn instead")
        row = dict(m)
        row["value"] = float(m["value"]) - float(ref["value"]) + float(pred["value"])
        out.append(row)
    return out


def policy_point(policy, pid) -> str:
    """A fitted point's id in a profile's ``[calibration]`` record: ``pid``, or
    ``POLICY:pid`` for a point of burn with a fix's patch (the same probe's point on
    unpatched burn is another point)."""
    return pid if policy == "burn-0.22.1" else f"{policy}:{pid}"


def _split_point(point) -> tuple:
    """``(policy, point id)`` of a recorded point (:func:`policy_point`; a variant may hold
    ``::`` itself, a policy name no ``/``)."""
    head, sep, rest = point.partition(":")
    return (head, rest) if sep and "/" not in head else ("burn-0.22.1", point)


def _earlier_cells(points) -> list:
    """The cells that predict the base's recorded ``points``, each under its policy."""
    by_policy = {}
    for point in points:
        policy, pid = _split_point(point)
        by_policy.setdefault(policy, []).append(pid)
    return [c for policy, ids in by_policy.items() for c in cells_for(_rows_of(ids), policy)]


def _base_point_rows(points, predicted, before, after, jobs, quick_points=None,
                     quick=None) -> tuple:
    """Predicted rows, under the profiles ``before`` and ``after`` the fit, of the base's
    recorded ``points`` that this fit's ``predicted`` rows (run with ``quick``: workload
    name -> its quick parameters) do not check: those of other cells, those of its own
    cells at an x its run does not reach (a point of a full run where this fit's rows are
    quick, or the reverse), and, where the base records ``quick_points``, those its run
    has at the other length; run as :func:`_earlier_predictions` chooses; else a point
    would be predicted by neither profile and go unchecked. Returns ``(rows before, rows
    after, the points checked on a quick run)``: this fit's run's for the points it
    checks."""
    quick = quick or {}
    indexes = {}
    missing, on_quick = [], set()
    for point in points:
        policy, pid = _split_point(point)
        if policy not in indexes:
            indexes[policy] = _by_point(predicted, policy)
        ours = point_workload(pid) in quick
        if pid not in indexes[policy] or (quick_points is not None
                                          and (point in quick_points) != ours):
            missing.append(point)
        elif ours:
            on_quick.add(point)
    if not missing:
        return [], [], on_quick
    rows_before, rows_after, checked = _earlier_predictions(
        missing, sorted(set(_earlier_cells(missing))), before, after, jobs, quick_points)
    return rows_before, rows_after, on_quick | checked


def point_workload(pid):
    """The workload of a point id ``pid`` (its experiment's), or None."""
    cells = cells_for(_rows_of([pid]))
    return cells[0][0] if cells else None


def _earlier_predictions(points, cells, before, after, jobs, quick_points=None) -> tuple:
    """Predicted rows of the base's recorded ``points`` that no measured row of this fit
    predicts (their ``cells``), under the profiles ``before`` and ``after`` the fit, and
    the points checked on a quick run.

    Each point is checked on the run it was fitted on: with its workload's ``QUICK``
    parameters (the probes' quick mode) where the base's record lists it in
    ``quick_points``, else with the workload's defaults. A base written before the record
    kept ``quick_points`` (``None``) cannot tell: a workload's cells then run quick where
    that run predicts every recorded point of them, else with the defaults, which assumes
    a quick run's rows equal a full run's where both have them: true for a point only a
    quick run reaches (adleak-rss's text points at 0 and 10 thousand iterations), not for
    every workload (backward-cost's quick chain of 200 gives ms per step 0.3-4 % off the
    full chain's of 2,000 at the same round, linux-x86_64; docs/calibrate.md)."""
    from ..engine.workloads import load_workload
    by_workload = {}
    for point in points:
        for cell in _earlier_cells([point]):
            if cell in cells:
                by_workload.setdefault(cell[0], (set(), []))
                by_workload[cell[0]][0].add(cell)
                by_workload[cell[0]][1].append(point)
    rows_before, rows_after, checked = [], [], set()
    for name, (group, group_points) in sorted(by_workload.items()):
        group = sorted(group)
        loop_counts = load_workload(name).quick
        quick = {name: dict(loop_counts)} if loop_counts else {}
        if quick_points is not None:
            on_quick = [p for p in group_points if quick and p in quick_points]
            runs = [({}, [p for p in group_points if p not in on_quick], None),
                    (quick, on_quick, None)]
        else:
            rows = run_cells(group, before, jobs, quick) if quick else None
            if rows is None or any(
                    _split_point(p)[1] not in _by_point(rows, _split_point(p)[0])
                    for p in group_points):
                quick, rows = {}, run_cells(group, before, jobs)
            runs = [(quick, group_points, rows)]
        for run_quick, run_points, rows in runs:
            if not run_points:
                continue
            if rows is None:
                rows = run_cells(group, before, jobs, run_quick)
            ids = {_split_point(p)[1] for p in run_points}
            rows_before += [r for r in rows if point_id(r) in ids]
            rows_after += [r for r in run_cells(group, after, jobs, run_quick)
                           if point_id(r) in ids]
            if run_quick:
                checked.update(run_points)
    return rows_before, rows_after, checked


def _rows_of(ids) -> list:
    """Stand-in rows (experiment and variant) of point ids, for :func:`cells_for`."""
    rows = []
    for pid in ids:
        parts = pid.split("/")
        if len(parts) >= 5:
            rows.append({"experiment": parts[0], "variant": "/".join(parts[1:-3])})
    return rows


def _by_point(predicted, policy="burn-0.22.1") -> dict:
    """point id -> predicted row, of the rows :func:`sim.analysis.compare.join` compares with."""
    return {point_id(r): r for r in predicted if r.get("policy", policy) in (policy, "pytorch")}


def _moved(ids, before, after) -> list:
    """``(id, before row, after row)`` of each point id in ``ids`` whose prediction
    differs between the predicted rows ``before`` and ``after`` by more than
    :data:`MOVED` (relative), or is predicted in one of them only (a row is None)."""
    out = []
    indexes = {}
    for point in ids:
        policy, pid = _split_point(point)
        if policy not in indexes:
            indexes[policy] = (_by_point(before, policy), _by_point(after, policy))
        x, y = (index.get(pid) for index in indexes[policy])
        if x is None and y is None:
            continue
        if x is None or y is None:
            out.append((point, x, y))
            continue
        old, new = float(x["value"]), float(y["value"])
        if abs(new - old) > MOVED * max(abs(old), 1e-12):
            out.append((point, x, y))
    return out


def _dropped_warning(base_name, dropped) -> str:
    """The warning line naming the base's fitted points this fit moved without fitting
    them, each with its prediction before and after."""
    def shown(row):
        if row is None:
            return "no prediction"
        unit = row.get("unit", "")
        return f"{float(row['value']):.6g}" + (f" {unit}" if unit else "")
    items = ", ".join(f"{pid} {shown(x)} -> {shown(y)}" for pid, x, y in dropped)
    return (f"sim: warning: {len(dropped)} point(s) the base profile {base_name} was fitted "
            f"on move with this fit but are not among its points, so the new record no longer "
            f"lists them as fitted (they are predicted now; add them with --measured/--points "
            f"to fit them too): {items}")


# -- the table of points ------------------------------------------------------------------

def _point_table(before, after) -> list:
    """Lines of the before/after table of every measured point, fitted first; a value
    that is not a number says why (``panic at step 3``, ``no panic``, ``no prediction``)."""
    rows = [("point", "measured", "before", "after", "error", "status")]
    for b, a in sorted(zip(before, after), key=lambda t: (t[1]["status"] != "fitted",
                                                          t[1]["point"])):
        err = a["rel_error"]
        if math.isfinite(err):
            error = f"{err * 100:.2f}%"
        else:
            error = "inf" if math.isfinite(a["predicted"]) else "-"
        status = a["status"]
        if not a["ok"] and status != "unpredicted":
            status += "  OUT OF TOLERANCE"
        rows.append((a["point"], _shown(a, "measured"), _shown(b, "predicted"),
                     _shown(a, "predicted"), error, status))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    widths[1:4] = [max(w, 11) for w in widths[1:4]]
    widths[4] = max(widths[4], 8)
    gap = "  " if any(not _is_number(c) for r in rows[1:] for c in r[1:4]) else " "
    return [f"{r[0]:<{widths[0]}} " + gap.join(f"{c:>{w}}" for c, w in zip(r[1:5], widths[1:5]))
            + f"  {r[5]}" for r in rows]


def _is_number(text) -> bool:
    """Whether a table cell is a number (not a phrase like ``no prediction``)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _shown(entry, key) -> str:
    """Text of ``entry[key]`` (``measured`` or ``predicted``) in the point table: a
    number, or for a panic point where the panic happens, or ``no prediction``."""
    value = entry[key]
    if entry["metric"] == "panic":
        if key == "measured" or math.isfinite(value):
            return " ".join(filter(None, ["panic at", entry["x_unit"], _number(entry["x"])]))
        found = re.match(r"predicted (panic at .+?): ", entry.get("note", "") + ": ")
        return found.group(1) if found else "no panic"
    if math.isfinite(value):
        return f"{value:.6g}"
    return "no prediction"


def _number(x) -> str:
    """``x`` as a point id writes it (an integer without ``.0``)."""
    return str(int(x)) if float(x).is_integer() else f"{float(x):g}"


# -- the written profile ------------------------------------------------------------------

def _base_label(base, profile) -> str:
    """The base profile as the command named it: a name with its file under models/, or
    the path as given."""
    if isinstance(base, Profile):
        return _relative(profile.path)
    text = str(base)
    if Path(text).suffix == ".toml" or Path(text).exists():
        return text
    return f"{text} (models/{text}.toml)"


def _sources(sources, measured) -> list:
    """The measured files as given (``sources``), else those the rows were read from."""
    if sources:
        return [str(s) for s in sources]
    return list(dict.fromkeys(str(m["_file"]) for m in measured if "_file" in m)) or ["(rows)"]


def _provenance(name, base_label, sources, params, n_points, sets=None) -> list:
    """The header lines of a written profile: its name, its base, what this call fitted
    and on which measured files (as given; no date, so the same inputs write the same
    bytes). Continuation lines start with ``#   `` (:func:`_with_header` finds them)."""
    text = (f"# Profile {name}: written by `sim calibrate` from base profile {base_label}, "
            f"fitting {', '.join(params)} on {n_points} point(s) of the measured file(s) "
            f"{', '.join(sources)} (paths as given to the command)"
            + (f", the fitted cells run with {', '.join(f'{k}={v}' for k, v in sets.items())}"
               if sets else "")
            + f". The [calibration] table at "
            f"the end lists every parameter fitted and every point fitted on.")
    return header_lines(text)


def header_lines(text) -> list:
    """A profile's header comment ``text`` wrapped at 90 columns, continuation lines
    starting with ``#   `` (:func:`_with_header` finds them)."""
    return textwrap.wrap(text, 90, subsequent_indent="#   ", break_long_words=False,
                         break_on_hyphens=False)


def _with_header(lines, header) -> list:
    """``lines`` of the base profile under ``header``: a header an earlier ``sim
    calibrate`` wrote is replaced (:data:`HEADER` and its ``#   `` continuation lines), and
    the base's own first line ``# Profile NAME: ...`` becomes ``# Base profile NAME: ...``."""
    if lines and HEADER.match(lines[0]):
        end = 1
        while end < len(lines) and lines[end].startswith("#   "):
            end += 1
        lines = lines[end:]
    if lines and lines[0].startswith("# Profile "):
        lines = ["# Base profile " + lines[0][len("# Profile "):]] + lines[1:]
    return list(header) + lines


def write_profile(base_path, new_profile, values, out, header=(), dropped=(),
                  base_text=None) -> None:
    """The base file with ``values`` substituted in place, each documented as
    ``[fitted]`` (:func:`_mark_fitted`), ``header`` on top (:func:`_with_header`) and a
    fresh ``[calibration]`` table (``dropped``: the base's points no longer fitted, listed
    in a comment). Validated, then written atomically."""
    text = base_text if base_text else Path(base_path).read_text(encoding="utf-8")
    text = re.split(r"\n\[calibration\]\n", text)[0].rstrip("\n") + "\n"
    lines = text.split("\n")
    for name in values:
        section, key = name.rsplit(".", 1)
        i = _find_key(lines, section, key)
        if i is None:
            raise UserError(f"cannot find {section}.{key} in the base profile text")
        _substitute(lines, i, key, new_profile.get(name))
        _mark_fitted(lines, i)
    if header:
        lines = _with_header(lines, header)
    cal = new_profile.data["calibration"]
    table = ["", "[calibration]",
             "# written by `sim calibrate`: the parameters fitted and the measured points used"]
    if dropped:
        table.append("# no longer fitted (moved by the last fit without being among its "
                     "points; predicted now):")
        table += [f"#   {p}" for p in dropped]
    table += ["fitted = [" + ", ".join(f'"{p}"' for p in cal["fitted"]) + "]", "points = ["]
    table += [f'  "{p}",' for p in cal["points"]]
    table += ["]"]
    if "quick_points" in cal:
        table += ["# the points fitted on (or, of an earlier record, checked on) a probe's "
                  "--quick run: a later calibration checks them on one", "quick_points = ["]
        table += [f'  "{p}",' for p in cal["quick_points"]] + ["]"]
    table += [""]
    if cal.get("fitted_on"):
        table += ["[calibration.fitted_on]",
                  "# each parameter: the points of the `sim calibrate` call that last fitted it"]
        for name, ids in cal["fitted_on"].items():
            table += [f'"{name}" = ['] + [f'  "{p}",' for p in ids] + ["]"]
        table += [""]
    text = "\n".join(lines) + "\n".join(table)
    data = tomllib.loads(text)
    validate(data, out)
    atomic_write(out, text)


def _find_key(lines, section, key):
    """Index of the line ``key = ...`` of table ``[section]``, or None."""
    current = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]") and not stripped.startswith("[["):
            current = stripped[1:-1].strip()
            continue
        found = KEY.match(line)
        if current == section and found and found.group(1) == key:
            return i
    return None


def _substitute(lines, i, key, value) -> None:
    """Line ``i`` (``key = ...``) with ``value``; its comment after the value, if any, kept."""
    _, _, comment = lines[i].partition("#")
    lines[i] = f"{key} = {_toml_number(value)}" + (f"  #{comment}" if comment else "")


def _comment_block(lines, i):
    """``(start, stop, shared)``: ``lines[start:stop]`` are the comment lines documenting
    the key on line ``i`` (those directly above the run of adjacent key lines that holds
    it), ``shared`` whether other keys of that run share them."""
    top = i
    while top > 0 and KEY.match(lines[top - 1]):
        top -= 1
    bottom = i + 1
    while bottom < len(lines) and KEY.match(lines[bottom]):
        bottom += 1
    start = top
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return start, top, bottom - top > 1


def _labels(lines, i) -> set:
    """The source labels (:data:`LABEL`) documenting the key on line ``i``: those of its
    own comment after the value, else those of its comment block."""
    own = LABEL.findall(lines[i].partition("#")[2])
    if own:
        return set(own)
    start, stop, _ = _comment_block(lines, i)
    return set(LABEL.findall("\n".join(lines[start:stop])))


def _mark_fitted(lines, i) -> None:
    """Document the key on line ``i`` as ``[fitted]``: the labels of its own comment, or
    of a comment block only it has, become ``[fitted]``; a key that shares its block with
    others (or has no label) gets ``# [fitted]`` after its value instead."""
    head, hash_, own = lines[i].partition("#")
    if LABEL.search(own):
        lines[i] = head + hash_ + LABEL.sub("[fitted]", own)
        return
    start, stop, shared = _comment_block(lines, i)
    labels = set(LABEL.findall("\n".join(lines[start:stop])))
    if labels and not shared:
        lines[start:stop] = [LABEL.sub("[fitted]", line) for line in lines[start:stop]]
    elif labels != {"fitted"}:
        lines[i] = (lines[i] + " [fitted]") if own.strip() else (head.rstrip() + "  # [fitted]")


def _toml_value(value):
    """``value`` (a number, or a list of numbers or of such lists) as TOML."""
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return _toml_number(value)


def _toml_number(value):
    if isinstance(value, int):
        return str(value)
    text = f"{value:.6g}"
    if "e" not in text and "." not in text:
        text += ".0"
    return text
