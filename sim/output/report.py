"""The report a person reads first: report.md and report.html from the same blocks.

Sections: first the answer, "which fix, and at what price": per run where burn
0.22.1 grows, slows down or panics, the fixes that remove all of it, part of it
or none, each with its price against burn 0.22.1 on the same run (the height
its memory plateaus at, its time as x faster / x slower), by
:func:`sim.analysis.growth.verdict`; what the fixes cost on the runs burn handles;
another framework (``pytorch``) beside them as a reference, its fitted RSS drift
named as such. Then what was run; accuracy (points within tolerance per
experiment and kind, then every point out of tolerance or unpredicted, then
every point; a panic predicted at another step is a miss, out of tolerance);
the figures, their legend once; every run's growth under burn 0.22.1 and every
policy's verdict, with the rules, the rows where RSS and the live heap disagree
and the runs without a row; what each policy changes.

:func:`render` takes the run description (run.json), the error rows
(errors.csv), the growth of every run (:mod:`sim.analysis.growth`) and the figure file
names, and returns ``(markdown, html)``.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from ..analysis.compare import TOLERANCE
from ..analysis.fixes import PATCHED_MEASURED, measured_growth
from ..analysis.growth import (run_label, singular_unit, x_words, ratio_text, verdict, MEMORY_RULE, TIME_RULE,
                     VERDICT_RULE, GROWS_BYTES)
from ..policies import (POLICIES, is_fix, known_policy, policy_label, policy_rank,
                        reference_label)
from ..platform.host import how_to_profile
from ..units import METRICS
from ..engine.workloads import builtin_names, load_workload

__all__ = ["render", "smallest_combination", "workload_table"]

REFERENCE = "burn-0.22.1"


def workload_table(info):
    """``row -> workload name``: by the (experiment, variant) pairs each workload of the
    run produced, else by the experiments the workloads measure, else the experiment."""
    by_experiment, by_pair = {}, {}
    for name in builtin_names():
        for experiment in load_workload(name).measured:
            by_experiment[experiment] = name
    for w in info.get("workloads", []):
        for experiment in w.get("experiments", []):
            by_experiment[experiment] = w["name"]
        for experiment, variant in w.get("produces", []):
            by_pair[experiment, variant] = w["name"]

    def workload_of(row):
        experiment = row["experiment"]
        return by_pair.get((experiment, row["variant"]),
                           by_experiment.get(experiment, experiment))
    return workload_of


def render(info, errors, growth, figures, summary):
    """``(markdown text, html text)`` of the report."""
    workload_of = workload_table(info)
    blocks = []
    blocks += _answer(growth)
    blocks += _what_was_run(info)
    blocks += _accuracy(errors, _panics(growth), workload_of)
    blocks += _figures(figures, summary, errors, workload_of)
    blocks += _verdicts(growth)
    blocks += _policies(sorted({g.policy for g in growth} | {e["policy"] for e in errors}),
                        info.get("policy_files", {}))
    title = info.get("title", "autodiff-sim report")
    return _markdown(title, blocks), _html(title, blocks)


# -- sections ---------------------------------------------------------------------------------

def _shown(path) -> str:
    """A measured file as the report shows it: relative to the working directory if inside
    it, else to the checkout if inside it (the seeds: ``experiments/measured/...`` from any
    directory), else the whole path (a bare name, ``measured/``, named no place)."""
    from pathlib import Path
    from ..paths import ROOT
    resolved = Path(path).resolve()
    for base in (Path.cwd(), ROOT):
        try:
            return str(resolved.relative_to(base.resolve()))
        except ValueError:
            continue
    return str(resolved)


def _hosts_line(hosts):
    """The hosts of the profile and of the measurements (``info["hosts"]``: the machine the
    profile describes, ``sim measure``'s measure-info.json where recorded) and, where the
    sweep ran on another kind of machine than the profile's, that its predictions are the
    profile's machine's and how to make one of this host's; None without ``hosts``."""
    if not hosts:
        return None
    profile = hosts.get("profile") or "not recorded (no [host] table)"
    by_host = {}
    for path, host in hosts.get("measured", {}).items():
        where = by_host.setdefault(host or "not recorded", [])
        folder = f"`{_shown(str(Path(path).parent))}/`"     # a run's CSVs share a folder
        if folder not in where:
            where.append(folder)
    measured = "; ".join(f"{host} ({', '.join(paths)})" for host, paths in by_host.items())
    line = f"Host of the profile: {profile}. Host of the measurements: {measured or 'none'}."
    if "not recorded" in by_host:
        line += (" (A measurement's host is recorded in a `measure-info.json` beside its CSV, "
                 "as `sim measure` writes it: `{\"machine\": {\"host\": {\"cpu_model\": "
                 "...}}}`.)")
    running, kind = hosts.get("running"), hosts.get("kind")
    if running and kind and running != kind:
        line += (f" Run on a {running} host, another kind than the profile's: every time "
                 f"and memory figure here is the profile's machine's; "
                 f"{how_to_profile(running)}.")
    return line


def _what_was_run(info):
    blocks = [("h2", "What was run")]
    workloads = info.get("workloads", [])
    cells = info.get("cells", 0)
    how = (f"on the dask scheduler {info['scheduler']}" if info.get("scheduler")
           else f"with {info.get('jobs', 1)} local process(es)")
    items = [
        f"Command: `{info['command']}`" if info.get("command") else None,
        f"Profile: `{info.get('profile', '?')}`; code version `{info.get('code_version', '?')}`.",
        f"Policies: {', '.join(f'`{p}`' for p in info.get('policies', []))}" +
        (f" (plus `{REFERENCE}` / `pytorch` cells the measured points need)"
         if info.get("reference_cells") else "") + ".",
        "Workloads: " + "; ".join(
            f"`{w['name']}` ({', '.join(w.get('variants', []))})" for w in workloads) + ".",
        ("Parameter grid (`--set`): " + "; ".join(f"`{k}` = {', '.join(map(str, v))}"
                                                  for k, v in info["grid"].items()) + ".")
        if info.get("grid") else "Workload parameters: defaults.",
        f"Measured: {', '.join(f'`{_shown(m)}`' for m in info.get('measured', [])) or 'none'}.",
        _hosts_line(info.get("hosts")),
        f"The orphan sweep's data TLB misses: {info['tlb']}." if info.get("tlb") else None,
        ("Rows of `sim measure --quick` (loop counts cut ~10x), simulated with the probes' "
         "quick parameters: " + "; ".join(f"`{name}` {params}" for name, params
                                          in info["quick"].items()) + ".")
        if info.get("quick") else None,
        # how long it took and what came from the cache are in run.json: the report of the
        # same command is the same file every time
        f"{cells} cells, {how}." if cells else None,
        "Exact mode (`--exact`): every loop iteration simulated, no fast-forward."
        if info.get("exact") else None,
        "Data: `predicted.csv` (every predicted row, incl. the bookkeeping observables "
        "live_graphs, live_nodes, locator_entries, registered_steps, heap_bytes, heap_blocks, "
        "sim_time_ms, cleanup_ms), `errors.csv` (every measured point and its error), "
        "`run.json`.",
    ]
    blocks.append(("list", [i for i in items if i]))
    return blocks


def _accuracy(errors, panics, workload_of):
    """The accuracy section. ``panics``: :func:`_panics`; ``workload_of``: error row ->
    workload name (to find the panic the simulator predicted for a measured one)."""
    blocks = [("h2", "Accuracy against the measurements")]
    if not errors:
        blocks.append(("p", "No measured points for the workloads run."))
        return blocks
    tolerances = ", ".join(f"{kind} {TOLERANCE[kind] * 100:g} %" for kind in
                           ("memory", "time")) + ", events and block counts exact"
    blocks.append(("p", f"Tolerances: {tolerances} (memory figures near zero: a small "
                        f"absolute slack). Every point is one of: *fitted* (used to calibrate "
                        f"the profile), *predicted* (not used), *unpredicted* (the simulator "
                        f"has no value of that metric at that point); the counts below add up "
                        f"to *points*. An event (a panic) is within tolerance only at the "
                        f"measured step: a panic predicted at another step, or none predicted, "
                        f"is a *miss*, a predicted (or fitted) point out of tolerance, not an "
                        f"unpredicted one."))
    groups = {}
    for e in errors:
        key = (e["experiment"], _kind(e), e.get("params", ""), e["policy"])
        groups.setdefault(key, []).append(e)
    with_params = any(e.get("params") for e in errors)
    headers = ["experiment", "kind", "policy"] + (["params"] if with_params else []) + \
        ["points", "within tolerance", "fitted ok", "predicted ok", "unpredicted",
         "largest error"]
    rows = []
    for (experiment, kind, params, policy), items in groups.items():
        fitted = [e for e in items if e["status"] == "fitted"]
        predicted = [e for e in items if e["status"] == "predicted"]
        errs = [e["rel_error"] for e in items
                if isinstance(e["rel_error"], float) and math.isfinite(e["rel_error"])]
        missed = sum(_missed_event(e) for e in items)
        largest = f"{max(errs) * 100:.1f} %" if errs else "—"
        if missed:
            largest = f"{missed} missed event(s)" if not errs else f"{largest}; {missed} missed"
        rows.append([experiment, kind, policy] + ([params] if with_params else []) + [
            str(len(items)), str(sum(e["ok"] for e in items)),
            f"{sum(e['ok'] for e in fitted)}/{len(fitted)}",
            f"{sum(e['ok'] for e in predicted)}/{len(predicted)}",
            str(sum(e["status"] == "unpredicted" for e in items)), largest])
    bad = [e for e in errors if not e["ok"] and e["status"] != "unpredicted"]
    unpredicted = [e for e in errors if e["status"] == "unpredicted"]
    missed = [e for e in bad if _missed_event(e)]
    total_ok = sum(e["ok"] for e in errors)
    blocks.append(("p", f"**{total_ok} of {len(errors)} points within tolerance**; "
                        f"{len(bad)} out of tolerance"
                        + (f" (including {len(missed)} missed event(s))" if missed else "")
                        + f", {len(unpredicted)} unpredicted."))
    blocks.append(("table", headers, rows))

    def row(e):
        return _point_row(e, with_params, _predicted_text(e, panics, workload_of))
    point_headers = ["experiment", "variant", "phase", "x", "metric", "measured",
                     "predicted", "error", "ok", "status", "policy"] + \
        (["params"] if with_params else []) + ["source", "note"]
    if bad:
        blocks.append(("h3", f"Out of tolerance ({len(bad)})"))
        blocks.append(("table", point_headers, [row(e) for e in bad]))
    if unpredicted:
        blocks.append(("h3", f"Not predicted ({len(unpredicted)})"))
        blocks.append(("p", "Measured points the simulator has no value for (listed, not "
                            "dropped): a metric, phase or x the workload does not record. "
                            "A missed event is not here: it is out of tolerance."))
        blocks.append(("table", point_headers, [row(e) for e in unpredicted]))
    blocks.append(("details", f"Every point ({len(errors)})",
                   [("table", point_headers, [row(e) for e in errors])]))
    return blocks


def _missed_event(e) -> bool:
    """A measured event (panic) the simulator did not predict at its step."""
    return _kind(e) == "event" and e["status"] != "unpredicted" and not e["ok"]


def _panics(growth) -> dict:
    """``(workload, variant, policy, params)`` -> ``(x, x unit)`` of the run's first
    predicted panic, or ``None`` where the run has none."""
    out = {}
    for g in growth:
        key = (g.workload, g.variant, g.policy, g.params)
        if g.panic_x is not None:
            out[key] = (g.panic_x, g.x_unit)
        else:
            out.setdefault(key, None)
    return out


def _predicted_text(e, panics, workload_of):
    """The predicted cell of a point: the value, or for a missed event what the run
    predicted instead (a panic at another x, or none)."""
    if not _missed_event(e) or (isinstance(e["predicted"], (int, float))
                                and math.isfinite(e["predicted"])):
        return _num(e["predicted"])
    key = (workload_of(e), e["variant"], e["policy"], e.get("params", ""))
    if key not in panics:
        return _num(e["predicted"])
    if panics[key] is None:
        return "no panic"
    x, unit = panics[key]
    return f"panic at {singular_unit(unit)} {x:g}"


def _kind(e):
    m = METRICS.get(e["metric"])
    return m.kind if m else "memory"


def _num(v):
    if not isinstance(v, (int, float)) or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if float(v).is_integer() and abs(v) < 1e12:
        return str(int(v))
    return f"{v:.4g}"


def _point_row(e, with_params, predicted):
    rel = e["rel_error"]
    err = f"{math.copysign(rel * 100, e['abs_error']):+.1f} %" \
        if isinstance(rel, float) and math.isfinite(rel) and math.isfinite(e["abs_error"]) \
        else ("missed" if _missed_event(e) else "—")
    return [e["experiment"], e["variant"], e.get("phase", ""), _num(e["x"]),
            f"{e['metric']} ({e['unit']})", _num(e["measured"]), predicted, err,
            "yes" if e["ok"] else "**no**", e["status"], e["policy"]] + \
        ([e.get("params", "")] if with_params else []) + [e.get("source", ""),
                                                           e.get("note", "")]


def _figures(figures, summary, errors, workload_of):
    """The figures, with their legend once; each workload figure says how many measured
    points it draws (``errors``: the measured points; ``workload_of``: row -> workload)."""
    blocks = [("h2", "Figures")]
    if summary:
        blocks.append(("p", "Summary: for every run (workload / variant; a phased run per "
                            "phase) and policy, the memory growth per loop unit, the time per "
                            "loop unit at the end and the panics, by the same verdicts as the "
                            "tables \"Which fix, and at what price\" and \"Every run: growth "
                            "and verdicts\" (its rules are stated there)."))
        blocks.append(("img", summary, "policy x workload summary"))
    elif figures:
        blocks.append(("p", "No summary figure: no run has a loop to grow along (more than "
                            "one sample, or one sample of a `*_delta` memory metric) nor a "
                            "panic, so there is no growth or time per loop unit to set the "
                            "policies against; each run is listed under \"Every run: growth "
                            "and verdicts\", and its values are in the workload figures."))
    if figures:
        blocks.append(("p", "Workload figures: lines are predictions, one colour per policy "
                            "(coinciding curves nest, the first policy widest); black-edged "
                            "markers are measured points, where the workload has any; the "
                            "strip below a panel with measured points is the error of the "
                            "prediction in % (green band: tolerance; hollow red: out of "
                            "tolerance)."))
    measured = {}
    for e in errors:
        name = workload_of(e)
        measured[name] = measured.get(name, 0) + 1
    for name, path in figures:
        blocks.append(("h3", name))
        n = measured.get(name, 0)
        blocks.append(("p", f"{n} measured point(s) drawn against the predictions." if n
                       else "No measured points: predictions only."))
        blocks.append(("img", path, f"{name}: predicted vs measured" if n
                       else f"{name}: predicted, no measurements"))
    return blocks


def _reference_frameworks(policies) -> set:
    """The policies that model another framework (``framework`` other than burn, e.g.
    ``pytorch``): shown as a reference beside the fixes, not as a fix."""
    return {p for p in policies if reference_label(p)}


def _fitted_drift(policy) -> str:
    """The profile parameter of a policy's RSS-only drift that is a fitted constant, or ""."""
    return getattr(POLICIES.get(policy), "fitted_drift", "") or ""


def _problems(ref) -> list:
    """What the reference shows on its run: ``memory``, ``time``, ``panic``."""
    return [name for name, shown in (("memory", ref.memory_grows),
                                     ("time", ref.time_grows),
                                     ("panic", ref.panic_x is not None)) if shown]


def _reference_text(ref) -> str:
    """The reference's growth on a run, as the answer table states it."""
    parts = []
    if ref.memory_grows:
        # its highest sample too: what a fix's plateau (its price, "peak ...") is set against
        peak = ("" if ref.memory_peak_bytes is None
                else f" (to {_bytes(ref.memory_peak_bytes)})")
        parts.append(f"memory +{_bytes(ref.memory_bytes)} {ref.unit}{peak}")
    if ref.time_grows:
        parts.append(f"time {_ms(ref.ms_first)} -> {_ms(ref.ms_last)} {ref.unit}")
    elif ref.ms_last is not None:
        parts.append(f"time {_ms(ref.ms_last)} {ref.unit}")
    if ref.panic_x is not None:
        parts.append(f"panic at {singular_unit(ref.x_unit)} {ref.panic_x:g}")
    return "; ".join(parts)


def _price_text(g, v, problems) -> str:
    """What policy series ``g`` (verdict ``v`` against the reference) does about the
    reference's ``problems`` and at what price: its plateau (or one higher than the
    reference's), its time against the reference's, a panic or growth of its own."""
    parts = []
    if v.memory in ("removed", "flat") and ("memory" in problems or v.memory == "removed"):
        if v.peak_bytes is not None:
            parts.append(f"peak {_bytes(v.peak_bytes)}")
        elif g.memory_total_bytes is not None:    # sampled once, after the loop
            parts.append(f"keeps {_bytes(g.memory_total_bytes)} over the loop")
    elif v.memory in ("reduced", "kept", "new", "grows"):
        parts.append(f"grows {_bytes(g.memory_bytes)} {g.unit}")
    elif v.memory == "higher":
        parts.append(_higher_text(v))
    if v.ratio is not None:
        text = ratio_text(v.ratio)
        if "time" in problems and v.time in ("removed", "reduced"):
            text += f", {_ms(g.ms_last)}"
        parts.append(text)
    if v.panic in ("kept", "new"):
        parts.append(f"panics at {singular_unit(g.x_unit)} {g.panic_x:g}")
    elif v.panic == "removed":
        parts.append("no panic")
    return "; ".join(parts)


def _higher_text(v) -> str:
    """A higher plateau as the tables state it: the policy's peak against the reference's."""
    return f"higher plateau, peak {_bytes(v.peak_bytes)} against {_bytes(v.ref_peak_bytes)}"


def _fixes(v, problems) -> str:
    """``"all"``, ``"some"`` or ``"none"``: how many of the reference's ``problems``
    verdict ``v`` removes (a reduced growth or slowdown counts towards *some*)."""
    status = {"memory": v.memory, "time": v.time, "panic": v.panic}
    removed = [p for p in problems if status[p] == "removed"]
    helped = [p for p in problems if status[p] in ("removed", "reduced")]
    return "all" if len(removed) == len(problems) else "some" if helped else "none"


def _against_reference(growth, title):
    """A section's heading, and the growth rows by (run..., policy), the runs and the
    policies in their order; the cells are None (and the section says so) where the
    reference policy was not run."""
    blocks = [("h2", title)]
    cells = {g.run + (g.policy,): g for g in growth}
    runs = list(dict.fromkeys(g.run for g in growth))
    policies = list(dict.fromkeys(g.policy for g in growth))
    if REFERENCE not in policies:
        blocks.append(("p", f"`{REFERENCE}` was not run: nothing to compare with."))
        return blocks, None, runs, policies
    return blocks, cells, runs, policies


def _answer(growth):
    """The first section: per run where the reference grows, slows down or panics, the
    fixes that remove it and what each costs (:func:`sim.analysis.growth.verdict`); then what the
    fixes cost on the runs the reference handles; reference frameworks beside the fixes."""
    blocks, cells, runs, policies = _against_reference(growth, "Which fix, and at what price")
    if cells is None:
        return blocks
    frameworks = _reference_frameworks(policies)
    fixes = [p for p in policies if is_fix(p, REFERENCE)]
    blocks.append(("p", f"Per run where `{REFERENCE}` grows, slows down or panics: the fixes "
                        f"that remove all of it, those that remove part of it, and the rest, "
                        f"each with its price, judged against `{REFERENCE}` on the same run: "
                        f"*peak* is the height a bounded memory plateaus at, against "
                        f"`{REFERENCE}`'s highest sample where it grows (*to ...*; *higher "
                        f"plateau*: more than {TOLERANCE['memory'] * 100:g} % and "
                        f"{GROWS_BYTES // 1024} KiB above `{REFERENCE}`'s where neither "
                        f"grows), *x faster* / "
                        f"*x slower* the time per loop unit over the last interval against "
                        f"`{REFERENCE}`'s. "
                        + ("; ".join(f"*{policy_label(p)}*: `{p}` models another "
                                     f"framework, shown apart as a reference, never as a fix"
                                     for p in sorted(frameworks)) + ". "
                           if frameworks else "")
                        + "Rules, figures and every verdict: further down."))
    headers = ["run", f"{REFERENCE}", "fixed by (price)", "partly (price)",
               "not fixed by (price)"] + [policy_label(p) for p in sorted(frameworks)]
    rows, prices = [], []
    for run in runs:
        ref = cells.get(run + (REFERENCE,))
        if ref is None or not ref.has_figures:
            continue
        problems = _problems(ref)
        judged = [(p, cells[run + (p,)]) for p in fixes if run + (p,) in cells]
        if not problems:
            costly = [f"`{p}` ({_price_text(g, v, problems)})" for p, g in judged
                      for v in [verdict(g, ref)]
                      if v.time == "slower" or v.memory in ("new", "higher")
                      or v.panic == "new"]
            if costly:
                prices.append(f"{run_label(run)}: " + "; ".join(costly) + ".")
            continue
        columns = {"all": {}, "some": {}, "none": {}}
        for p, g in judged:
            v = verdict(g, ref)
            columns[_fixes(v, problems)].setdefault(_price_text(g, v, problems), []).append(p)
        row = [run_label(run), _reference_text(ref)] + \
            [_grouped(columns[k]) or ("**none**" if k != "none" else "")
             for k in ("all", "some", "none")]
        for p in sorted(frameworks):
            g = cells.get(run + (p,))
            row.append(_framework_text(g, verdict(g, ref), problems) if g else "—")
        rows.append(row)
    if rows:
        blocks.append(("table", headers, rows))
    else:
        blocks.append(("p", f"`{REFERENCE}` neither grows, slows down nor panics on any run."))
    if prices:
        blocks.append(("p", f"Price on the runs `{REFERENCE}` handles (a fix slower than it "
                            f"by more than {TOLERANCE['time'] * 100:g} %, its memory plateauing "
                            f"higher, or growing or panicking where it does not):"))
        blocks.append(("list", prices))
    blocks += _combination(cells, runs, fixes)
    blocks += _confirmed(cells, runs, fixes)
    return blocks


def _removed(cells, runs, fix) -> set:
    """The ``(run, problem)`` pairs of the reference that ``fix`` removes."""
    from ..analysis.growth import verdict
    out = set()
    for run in runs:
        ref, g = cells.get(run + (REFERENCE,)), cells.get(run + (fix,))
        if ref is None or g is None or not ref.has_figures:
            continue
        v = verdict(g, ref)
        status = {"memory": v.memory, "time": v.time, "panic": v.panic}
        out.update((run, p) for p in _problems(ref) if status[p] == "removed")
    return out


def smallest_combination(removes, candidates) -> tuple:
    """``(fixes, covered)``: the fewest of ``candidates`` (names, in order) whose removals
    together (``removes``: name -> set of problems it removes) cover every problem any
    of them removes; the first such set in ``candidates``' order.

    >>> smallest_combination({"a": {1}, "b": {1, 2}, "c": {3}}, ["a", "b", "c"])
    (('b', 'c'), {1, 2, 3})
    """
    import itertools
    target = set().union(*(removes[f] for f in candidates)) if candidates else set()
    for size in range(1, len(candidates) + 1):
        for combo in itertools.combinations(candidates, size):
            if set().union(*(removes[f] for f in combo)) == target:
                return combo, target
    return (), target


def _combination(cells, runs, fixes):
    """The smallest combination of fixes that removes every growth, slowdown and panic
    that some fix removes, from the single fixes' verdicts; without a semantic change,
    then with one where that removes more; and, where the combination was swept as one
    policy (``-p a+b``), whether its own run removes them, at what price."""
    from ..analysis.growth import verdict
    from ..policies import known_policy
    problems = {(run, p) for run in runs
                for ref in [cells.get(run + (REFERENCE,))] if ref is not None and ref.has_figures
                for p in _problems(ref)}
    if not problems:
        return []
    singles = [f for f in fixes if "+" not in f and known_policy(f) is not None
               and not known_policy(f).history]
    removes = {f: _removed(cells, runs, f) for f in singles + [f for f in fixes if "+" in f]}
    lines = []
    plain = [f for f in singles if not known_policy(f).semantic_change]
    best, covered = smallest_combination(removes, plain)
    choices = [("without a semantic change", best, covered)]
    wider, more = smallest_combination(removes, singles)
    if more > covered:
        choices.append(("allowing a semantic change", wider, more))
    for what, combo, got in choices:
        if not combo:
            continue
        name = "+".join(combo)
        lines.append(f"{what}: `{name}` removes {len(got)} of the {len(problems)} problems "
                     f"(growth, slowdown, panic) `{REFERENCE}` shows, judged by each fix's "
                     f"own runs" + (f"; none removes {_problem_list(problems - got)}"
                                    if problems - got else "") + ".")
        swept = next((f for f in fixes if "+" in f and set(f.split("+")) == set(combo)), None)
        if len(combo) == 1:
            continue
        if swept is None:
            lines.append(f"`{name}` was not swept as one policy: `sim sweep -p all -p {name}` "
                         f"predicts the composition itself.")
            continue
        lost = got - removes[swept]
        prices = []
        for run in runs:
            ref, g = cells.get(run + (REFERENCE,)), cells.get(run + (swept,))
            if ref is None or g is None or not ref.has_figures:
                continue
            v, shown = verdict(g, ref), _problems(ref)
            if shown or v.time == "slower" or "new" in (v.memory, v.panic) \
                    or v.memory == "higher":
                price = _price_text(g, v, shown)
                if price:
                    prices.append(f"{run_label(run)}: {price}")
        lines.append(f"swept as `{swept}`: " + (
            f"its own run removes all {len(got)}" if not lost else
            f"its own run does **not** remove {_problem_list(lost)} (the fixes interact)")
            + ("; its price against `" + REFERENCE + "` where that has a problem or the "
               "composition costs more: " + "; ".join(prices) if prices else "")
            + ".")
    if not lines:
        return []
    return [("p", "The smallest combination of fixes (`-p a+b` composes policies):"),
            ("list", lines)]


def _problem_list(pairs) -> str:
    """``(run, problem)`` pairs as "run (memory, time); run (panic)"."""
    by_run = {}
    for run, problem in sorted(pairs):
        by_run.setdefault(run, []).append(problem)
    return "; ".join(f"{run_label(run)} ({', '.join(ps)})" for run, ps in by_run.items())


def _confirmed(cells, runs, fixes):
    """Where real burn was measured with a fix (:func:`sim.analysis.fixes.measured_growth`): on each
    run where unpatched real burn and the prediction both grow or panic, whether the fix's
    measured run removes the growth or the panic as its predicted run does."""
    measured = measured_growth()
    reference = measured.get(REFERENCE, {})
    lines = []
    for run in runs:
        ref = cells.get(run + (REFERENCE,))
        real = reference.get(run[:3])
        if ref is None or real is None or run[3]:
            continue
        for what, shown in (("growth", lambda g: bool(g.memory_grows)),
                            ("panic", lambda g: g.panic_x is not None)):
            if not (shown(ref) and shown(real)):
                continue
            for fix in fixes:
                predicted, got = cells.get(run + (fix,)), measured.get(fix, {}).get(run[:3])
                if predicted is None or got is None:
                    continue
                said = "keeps" if shown(predicted) else "removes"
                seen = "keeps" if shown(got) else "removes"
                verdict = "confirmed" if said == seen else "**not confirmed**"
                if got.x_last is not None and got.x_last != predicted.x_last:
                    verdict += (f" (real burn ran to {x_words(got.x_last, got.x_unit)}, "
                                f"the prediction to "
                                f"{x_words(predicted.x_last, predicted.x_unit)})")
                lines.append(f"{run_label(run)}: `{fix}` {said} the {what} in the "
                             f"prediction; on patched real burn it {seen} it: {verdict}.")
    if not lines:
        return [("p", "No run of real burn with a fix applied has been measured where it "
                      "would confirm a verdict above: the fixes' verdicts are predictions.")]
    where = PATCHED_MEASURED.relative_to(PATCHED_MEASURED.parents[3])
    # the verdicts real burn contradicts first: they are what a reader deciding must see
    missed = [line for line in lines if "**not confirmed**" in line]
    tally = (f"{len(lines) - len(missed)} of {len(lines)} verdicts confirmed"
             + (f"; the {len(missed)} not confirmed first" if missed else ""))
    return [("p", f"Confirmed on real burn: burn-autodiff 0.22.1 patched with each fix "
                  f"(`sim measure --patch NAME`, quick loop counts, Linux; `{where}/`, "
                  f"docs/fixes.md), judged by the same rule as the predictions, on the runs "
                  f"where unpatched real burn shows the problem too ({tally}):"),
            ("list", missed + [line for line in lines if line not in missed])]


def _grouped(prices) -> str:
    """``{price text: [policy, ...]}`` as "`a`, `b` (price); `c` (price)"."""
    return "; ".join(", ".join(f"`{p}`" for p in names) + (f" ({price})" if price else "")
                     for price, names in prices.items())


def _framework_text(g, v, problems) -> str:
    """A reference framework's cell: its verdict, its RSS-only drift named as the
    fitted constant it is."""
    drift = _fitted_drift(g.policy)
    if drift and g.memory_grows and g.heap_grows is False:
        memory = (f"RSS drift {_bytes(g.memory_bytes)} {g.unit} (fitted constant "
                  f"`{drift}`), live heap flat")
        text = _price_text(g, _flat(v), problems)
        return memory + (f"; {text}" if text else "")
    return _price_text(g, v, problems)


def _flat(v):
    """``v`` without a memory verdict (its growth is a drift the model adds as a fitted
    constant, stated beside it)."""
    from dataclasses import replace
    return replace(v, memory=None, peak_bytes=None)


def _verdicts(growth):
    """Every run under the reference and every policy's verdict against it, with the
    rules: the detail behind the answer."""
    blocks, cells, runs, policies = _against_reference(growth, "Every run: growth and verdicts")
    if cells is None:
        return blocks
    blocks.append(("p", f"Per run (a run whose loop is sampled in phases: per phase), what "
                        f"`{REFERENCE}` shows, and every other policy's verdict against it. "
                        f"Growth, which the summary figure uses too: {MEMORY_RULE}; a run "
                        f"sampled only once, after its loop, by its `*_delta` memory metric "
                        f"from the loop's start (growth over the loop); {TIME_RULE} (for "
                        f"`{REFERENCE}`'s own slowdown); panic: none. {VERDICT_RULE}. "
                        f"*judged by*: the memory metric of the row; memory growth is per "
                        f"loop unit (*unit*), over the late half of the run."))
    frameworks = _reference_frameworks(policies)
    others = ([p for p in policies if p != REFERENCE and p not in frameworks]
              + sorted(frameworks))          # the fixes, then the reference frameworks apart
    headers = ["run", "unit", "judged by", f"{REFERENCE}: memory growth",
               f"{REFERENCE}: time first -> last", "panic"] + [
                   policy_label(p) if p in frameworks else f"`{p}`" for p in others]
    rows, skipped = [], []
    for run in runs:
        ref = cells.get(run + (REFERENCE,))
        label = run_label(run)
        if ref is None:
            skipped.append(f"{label}: not run under `{REFERENCE}`.")
            continue
        if not ref.has_figures:
            skipped.append(f"{label}: {ref.note or 'no figure'}.")
            continue
        row = [label, ref.unit, ref.memory_metric or "—", _memory_cell(ref),
               _time_cell(ref), _panic_cell(ref)]
        for p in others:
            g = cells.get(run + (p,))
            row.append(_verdict_cell(g, verdict(g, ref), ratio_text) if g else "—")
        rows.append(row)
    blocks.append(("table", headers, rows))
    disagree = _heap_rss_disagreements(growth)
    if disagree:
        blocks.append(("p", "Where RSS and the live heap disagree (rows judged by RSS; the "
                            "live heap by the same rule). RSS flat with a rising live heap: "
                            "memory freed between samples and reused (a sawtooth the samples "
                            "alias), bounded. RSS rising with a flat live heap: memory the "
                            "model keeps outside the live heap (allocator pages; the `pytorch` "
                            "policy's per-backward allocator drift, the fitted constant "
                            "`pytorch.rss_growth_per_step_bytes` of the profile, is in RSS "
                            "only)."))
        blocks.append(("list", disagree))
    if skipped:
        blocks.append(("p", "Runs without a row (no loop to grow along, or no reference):"))
        blocks.append(("list", skipped))
    return blocks


def _memory_cell(ref) -> str:
    if ref.memory_grows is None:
        return f"— ({ref.note})" if ref.note else "—"
    return _bytes(ref.memory_bytes) if ref.memory_grows else "flat"


def _time_cell(ref) -> str:
    if ref.time_grows:
        return f"{_ms(ref.ms_first)} -> {_ms(ref.ms_last)}"
    if ref.time_grows is False:
        return f"flat, {_ms(ref.ms_last)}"
    return "—"


def _panic_cell(ref) -> str:
    if ref.panic_x is None:
        return "none"
    return f"at {singular_unit(ref.x_unit)} {ref.panic_x:g}"


def _verdict_cell(g, v, ratio_text) -> str:
    """One policy's verdict on a run, briefly: memory, time against the reference, panic."""
    parts = []
    if v.memory is not None:
        memory = {"removed": "memory removed", "reduced": "memory reduced",
                  "kept": "memory grows", "new": "memory grows", "grows": "memory grows",
                  "flat": "flat", "higher": "flat"}[v.memory]
        if v.memory in ("reduced", "kept", "new", "grows"):
            memory += f" {_bytes(g.memory_bytes)}"
            if _fitted_drift(g.policy) and g.heap_grows is False:
                memory = (f"RSS drift {_bytes(g.memory_bytes)} (fitted constant "
                          f"`{_fitted_drift(g.policy)}`), live heap flat")
        if v.memory == "higher":
            memory += f" ({_higher_text(v)})"
        elif v.peak_bytes is not None:
            memory += f" (peak {_bytes(v.peak_bytes)})"
        parts.append(memory)
    if v.ratio is not None:
        parts.append(ratio_text(v.ratio) + (f" (slowdown {v.time})"
                                            if v.time in ("removed", "reduced") else ""))
    if v.panic == "removed":
        parts.append("no panic")
    elif v.panic in ("kept", "new"):
        parts.append(f"panic at {singular_unit(g.x_unit)} {g.panic_x:g}")
    return "; ".join(parts) or "—"


def _heap_rss_disagreements(growth) -> list:
    """Per policy, the rows judged by RSS whose live heap gets the other verdict."""
    by_policy = {}
    for g in growth:
        if g.heap_grows is None or g.heap_grows == g.memory_grows:
            continue
        if g.memory_grows:
            text = f"{g.label}: RSS {_bytes(g.memory_bytes)} {g.unit}, live heap flat"
        else:
            text = f"{g.label}: RSS flat, live heap {_bytes(g.heap_bytes)} {g.unit}"
        by_policy.setdefault(g.policy, []).append(text)
    return [f"`{p}`: " + "; ".join(texts) + "." for p, texts in by_policy.items()]


def _bytes(n):
    from .plot import _bytes_text
    return _bytes_text(n)


def _ms(ms):
    from .plot import _ms_text
    return _ms_text(ms)


def _policies(names, files):
    """The policies of the run; ``files``: run.json's ``policy_files`` (policies from files)."""
    blocks = [("h2", "Policies")]
    items = []
    for name in sorted(names, key=policy_rank):
        cls = known_policy(name)
        if cls is not None:
            text = dict(changes=cls.changes, expected=cls.expected,
                        semantic_change=cls.semantic_change, where="")
        elif name in files:
            text = dict(files[name], where=f" (from `{files[name]['file']}`)")
        else:
            items.append(f"`{name}`: not in this checkout's policy registry.")
            continue
        flag = " *(intended semantic change)*" if text["semantic_change"] else ""
        if reference_label(name):
            flag = f" *({reference_label(name)}: another framework, not a fix)*"
        items.append(f"`{name}`{text['where']}{flag}: {text['changes']} "
                     f"*Expected:* {text['expected']}")
    blocks.append(("list", items))
    return blocks


# -- rendering --------------------------------------------------------------------------------

def _md_cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _markdown(title, blocks) -> str:
    return "\n".join([f"# {title}", ""] + _md_blocks(blocks)).rstrip("\n") + "\n"


def _md_blocks(blocks) -> list:
    out = []
    for block in blocks:
        kind = block[0]
        if kind in ("h2", "h3"):
            out += [("## " if kind == "h2" else "### ") + block[1], ""]
        elif kind == "p":
            out += [block[1], ""]
        elif kind == "list":
            out += [f"- {item}" for item in block[1]] + [""]
        elif kind == "table":
            _, headers, rows = block
            out.append("| " + " | ".join(headers) + " |")
            out.append("|" + "---|" * len(headers))
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            out.append("")
        elif kind == "img":
            out += [f"![{block[2]}]({block[1]})", ""]
        elif kind == "details":
            out += [f"### {block[1]}", ""] + _md_blocks(block[2])
    return out


def _inline(text) -> str:
    """Escape, then the two inline marks the blocks use: `code` and **bold** / *italic*.

    Code spans are set aside first, so that a ``*`` inside one (`*_delta`) is not an
    emphasis mark and an emphasis around one nests it: ``<i>a <code>b</code></i>``.

    >>> _inline("by its `*_delta` metric; *judged by*: **x**")
    'by its <code>*_delta</code> metric; <i>judged by</i>: <b>x</b>'
    """
    import re
    spans = []

    def keep(match):
        spans.append(f"<code>{match.group(1)}</code>")
        return f"\x00{len(spans) - 1}\x00"
    text = re.sub(r"`([^`]+)`", keep, html.escape(str(text)))
    text = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)
    text = re.sub(r"\*([^*]+)\*", r"<i>\1</i>", text)
    return re.sub("\x00(\\d+)\x00", lambda m: spans[int(m.group(1))], text)


_CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;
color:#222;line-height:1.45}table{border-collapse:collapse;font-size:13px;margin:.5em 0 1em}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}img{max-width:100%;border:1px solid #ddd}code{background:#f5f5f5;
padding:0 2px}summary{cursor:pointer;font-weight:bold}"""


def _html_blocks(blocks) -> list:
    out = []
    for block in blocks:
        kind = block[0]
        if kind in ("h2", "h3"):
            out.append(f"<{kind}>{_inline(block[1])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{_inline(block[1])}</p>")
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in block[1]) + "</ul>")
        elif kind == "table":
            _, headers, rows = block
            head = "".join(f"<th>{_inline(h)}</th>" for h in headers)
            body = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>"
                           for row in rows)
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "img":
            src = html.escape(block[1], quote=True)
            out.append(f'<p><a href="{src}"><img src="{src}" alt="{html.escape(block[2])}">'
                       f"</a></p>")
        elif kind == "details":
            out.append(f"<details><summary>{_inline(block[1])}</summary>"
                       + "".join(_html_blocks(block[2])) + "</details>")
    return out


def _html(title, blocks) -> str:
    body = "\n".join(_html_blocks(blocks))
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
            f"<h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n")
