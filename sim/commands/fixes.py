"""``sim fixes``: every fix's measurements on patched burn graded against its predictions.

``experiments/measured/<platform>/patched/NAME/`` holds what ``sim measure --patch NAME``
measured on burn-autodiff 0.22.1 with ``experiments/patches/NAME.patch`` applied. For each
such directory this runs ``sim compare --measured DIR -p NAME`` (results in
``RESULTS/NAME``) and writes one markdown page: per fix, the points within tolerance by
experiment, the host the rows were measured on, and the worst misses, with the commands
that reproduce it. Every number on the page comes from the committed measurements and the
model's predictions.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from ..analysis.data import atomic_write
from ..errors import UserError
from ..analysis.fixes import (BAND_BUILDS, PATCHED_MEASURED, RSS_METRICS, VERDICT_FILES,
                              build_bands, grade, largest_misses, own_misses, rss_by_mechanism)
from ..analysis.growth import HEAP_WHERE_FLAT_RULE, growth_of_runs
from ..paths import EXPERIMENTS, ROOT
from ..policies import get_policy, policy_rank
from ..output.results import load
from .sweep import compare, compare_cells, run_cells

__all__ = ["fixes_report", "verdict_table"]

PATCHES = EXPERIMENTS / "patches"

#: the directory of unpatched burn measured the same way, graded against burn-0.22.1
REFERENCE = "burn-0.22.1"

#: misses listed per fix
WORST = 12

#: the runs issue 38 names where a fix matters, drawn in every fix's figure beside the
#: runs of the verdict table: (experiment, variant, phase, the metric drawn)
FIGURE_RUNS = (("adleak-rss", "flex.autodiff", "", "rss_bytes"),
               ("pit-infer-flex", "A-model-and-input-autodiff", "", "rss_bytes"),
               ("pit-infer-flex", "B-valid-model-input-autodiff", "", "rss_bytes"),
               ("p10-ema", "detach", "", "ms_per_step"),
               ("p10-ema", "target", "", "rss_bytes"),
               ("train-validate", "autodiff", "train", "host_heap_delta"),
               ("train-validate", "autodiff", "train", "ms_per_step"))

#: the metric drawn for a run of the verdict table that panics (the panic step is marked)
PANIC_PANEL_METRIC = "rss_bytes"


def _fix_dirs(root):
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"--measured {root}: no such directory")
    found = sorted(d for d in root.iterdir() if d.is_dir() and any(d.glob("*.csv")))
    if not found:
        raise UserError(f"--measured {root}: no NAME/ directory with measured CSVs "
                        f"(sim measure --patch NAME --out {root}/NAME)")
    return found


def _host(fix_dir) -> str:
    try:
        info = json.loads((fix_dir / "measure-info.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "host not recorded"
    machine = info.get("machine", {})
    bits = [machine.get("cpu", "?"), f"{machine.get('cpus', '?')} CPUs",
            machine.get("rustc", "")]
    quick = "quick loop counts" if info.get("quick") else "full loop counts"
    return (f"{', '.join(b for b in bits if b)}; {quick}; burn "
            f"{info.get('burn_version', '0.22.1')}")


def simulate_together(groups, profile, results, jobs=1, echo=print) -> None:
    """Simulate at once every cell that ``sim compare --measured DIR -p POLICY --profile
    profile`` needs for each ``(DIR, POLICY)`` of ``groups``, into the cell cache under
    ``results`` (``results/.cache``, which the comparisons then read with ``cache_dir``).

    The comparisons of the fixes plan the same workloads, variants and loop counts, each
    under its own policy: run one by one, every cell is simulated under every policy. Run
    together, the cells of a family (workload, variant, parameters) share one run where
    their policies would run it alike (:mod:`sim.policies.trace`, as ``sim sweep``'s cells
    do): a later policy's cell whose run reads nothing that policy changes takes the rows
    of the first, renamed. The rows are the ones each cell would give on its own; only
    fewer are simulated."""
    from ..engine.profile import load_profile
    plans = [compare_cells([str(d)], (), (policy,), profile)[0] for d, policy in groups]
    first = {}
    for cells in plans:
        for cell in cells:
            first.setdefault(("w", cell.workload), len(first))
            first.setdefault(("v", cell.workload, cell.variant), len(first))
            first.setdefault(("p", cell.workload, cell.params), len(first))
    union = sorted({cell for cells in plans for cell in cells},
                   key=lambda c: (first["w", c.workload], first["v", c.workload, c.variant],
                                  first["p", c.workload, c.params], policy_rank(c.policy)))
    run = run_cells(union, load_profile(profile), Path(results), jobs, progress=False,
                    reuse=True, cache_dir=Path(results))
    echo(f"fixes: {len(union)} cells of {len(groups)} comparisons with profile {profile}: "
         f"{run.computed} simulated, {len(run.reused)} from an equivalent policy's run, "
         f"{run.cached} cached ({run.wall_s:.1f} s)")


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def fixes_report(measured=PATCHED_MEASURED, profile="linux-x86_64", results="results/fixes",
                 out="docs/fixes.md", jobs=1, echo=print, command="sim fixes",
                 figures=False, also=(), from_results=False) -> dict:
    """Compare every fix's measurements with its predictions; write the page ``out`` and,
    in ``fixes/`` beside it, a figure per fix (:func:`fix_figures`).
    ``also``: more profiles to grade the same measurements with (their totals and
    verdicts in a section of their own). ``from_results``: simulate and compare nothing;
    read every comparison an earlier run left in ``results`` (``RESULTS/NAME/errors.csv``
    and the like; a missing one is an error). Returns ``{fix: grade}``."""
    dirs = _fix_dirs(measured)
    for fix_dir in dirs:
        get_policy(fix_dir.name)    # a directory no policy is named after: an error up front
    grades = {}
    if from_results:
        for res in ([Path(results) / d.name for d in dirs]
                    + [Path(results) / f"profile-{Path(a).stem}" / d.name for a in also
                       for d in dirs]
                    + [Path(results) / f"release-{d.name}" for d in _release_dirs(measured)]):
            if not (res / "errors.csv").is_file():
                raise UserError(f"--from-results: {res}/errors.csv missing (run sim fixes "
                                f"without --from-results first)")
    else:
        simulate_together([(d, d.name) for d in dirs]
                          + [(d, REFERENCE) for d in _release_dirs(measured)],
                          profile, results, jobs, echo)
    all_errors = _compare_each(dirs, profile, Path(results), results, jobs, echo,
                               figures=figures, from_results=from_results)
    drawn = fix_figures(all_errors, Path(out).parent / "fixes")
    reference = all_errors.get(REFERENCE)
    sections = []
    for fix_dir in dirs:
        name = fix_dir.name
        errors = all_errors[name]
        g = grade(errors)
        if reference is not None and name != REFERENCE:
            g["own_misses"] = own_misses(errors, reference)
        grades[name] = g
        figure = drawn.get(name)
        sections.append(_section(name, fix_dir, g, errors, profile,
                                 os.path.relpath(figure, Path(out).parent) if figure else None))
    lines = ["# Fixes, predicted and measured on patched burn", "",
             f"Generated by `{command}` from the measurements in "
             f"`{_rel(measured)}/NAME/` (`sim measure --patch NAME --quick --cpu-time`): burn-autodiff "
             f"0.22.1 with `experiments/patches/NAME.patch`, graded against the `NAME` policy's "
             f"predictions (profile `{profile}`) with `sim compare`'s tolerances (memory 5 % "
             f"or a small absolute slack, block counts exact, times 15 %, panics at the same "
             f"step). Unpredicted points (no prediction at that x) are counted apart.", "",
             "The last column counts a fix's misses at points where the unpatched run of the "
             "same day (`burn-0.22.1`, no patch) is within tolerance of burn-0.22.1's "
             "prediction: the misses that the host and the load do not explain.", "",
             "The column \"time within 25 %\" counts the time points within issue 38's bar for "
             "ms per step (a relative error of at most 25 %, or within `sim compare`'s "
             "tolerance); \"time\" counts them at `sim compare`'s 15 %.", "",
             "| fix | points | within tolerance | share | memory | counts and state | time "
             "| time within 25 % | events | unpredicted | misses where unpatched is within |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, g in grades.items():
        ok, n = g["total"]
        share = f"{100 * ok / n:.0f} %" if n else "-"
        own = len(g["own_misses"]) if "own_misses" in g else "-"
        lines.append(f"| {name} | {n} | {ok} | {share} | {_kinds(g)} | {g['unpredicted']} "
                     f"| {own} |")
    lines.append("")
    lines.extend(_hosts(dirs, profile, also))
    lines.extend(rss_section(all_errors, profile))
    lines.extend(verdict_table(all_errors))
    for other in also:
        lines.extend(_also_graded(dirs, other, results, jobs, echo, from_results))
    lines.extend(_semantics(Path(measured) / "semantics.json"))
    lines.extend(_burn_tests(Path(measured) / "burn-tests.json"))
    for release_dir in _release_dirs(measured):
        name = release_dir.name
        res = Path(results) / f"release-{name}"
        if not from_results:
            echo(f"fixes: {name}: sim compare --measured {release_dir} -p {REFERENCE} "
                 f"--profile {profile}")
            compare([str(release_dir)], (), (REFERENCE,), profile, str(res), jobs,
                    progress=False, figures=figures, cache_dir=results,
                    command=f"sim compare --measured {release_dir} -p {REFERENCE} "
                            f"--profile {profile} --out {res}")
        lines.extend(_release(release_dir, load(res)[1], reference, profile))
    notes = Path(measured).parent / "releases" / "README.md"
    if notes.is_file():
        text = notes.read_text(encoding="utf-8")
        at = text.find("## The misses")
        if at >= 0:
            lines += [text[at:].rstrip("\n") + f" (from `{_rel(notes)}`)", ""]
    notes = PATCHES / "README.md"
    if notes.is_file():
        text = notes.read_text(encoding="utf-8")
        at = text.find("## What writing the Rust showed")
        if at >= 0:
            lines += [text[at:].rstrip("\n") + f" (from `{_rel(notes)}`)", ""]
    for section in sections:
        lines.extend(section)
    lines += ["## Reproduce", "",
              "```",
              "sim measure --patch NAME --quick --cpu-time --out "
              f"{_rel(measured)}/NAME   # builds burn-autodiff 0.22.1 + the patch (minutes)",
              f"sim compare --measured {_rel(measured)}/NAME -p NAME --profile {profile}",
              f"{command}",
              "```", ""]
    atomic_write(out, "\n".join(lines))
    return grades


def rss_section(all_errors, profile, heading="##") -> list:
    """The RSS points of every fix by the mechanism ``sim compare`` names for them
    (:func:`sim.analysis.fixes.rss_by_mechanism`), and the misses left, by group."""
    bands = build_bands(all_errors)
    rss = {name: rss_by_mechanism(errors, bands) for name, errors in all_errors.items()}
    lines = [f"{heading} RSS by mechanism (profile `{Path(profile).stem}`)", "",
             f"The RSS points ({', '.join(f'`{m}`' for m in RSS_METRICS)}), graded by "
             f"`sim compare` (5 % or its slack; a row the model says is placed by glibc's "
             f"trims of the heap's top, or by the binary's text pages, against its measured "
             f"run-to-run range where the row is a mean of fresh runs), by the mechanism "
             f"the model names for them: **text** (the binary's text pages are over half of "
             f"what the program added to RSS, or the row is the resident text itself), "
             f"**top trims** (glibc trimmed the heap's top since the previous sample), "
             f"**heap** (neither). \"within 10 %\": issue 38's bar for RSS. The text pages a "
             f"code path makes resident depend on where the linker put its functions, which "
             f"every patch moves, and the kernel's fault-around maps text in 64-KiB windows: "
             f"a text row measured once is graded, in the last two columns, against the band "
             f"of the values measured at that point with every build whose prediction there "
             f"is the same (the same program in the model; at least {BAND_BUILDS} builds), "
             f"widened by the tolerance as a run-to-run range is; the \"within tolerance\" "
             f"columns grade it as a point.", "",
             "| fix | RSS points | within tolerance | within 10 % | text | text within "
             "| top trims | top trims within | heap | heap within | text once: inside the "
             "build band | within, text by its band |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in rss.items():
        g = r["groups"]
        lines.append(f"| {name} | {r['points']} | {r['ok']} | {r['bar']} | "
                     + " | ".join(f"{g[k][0]} | {g[k][1]}" for k in ("text", "top trims", "heap"))
                     + f" | {r['band'][0]} of {r['band'][1]} | {r['graded']} |")
    lines.append("")
    return lines + _open_rss(rss)


#: the mechanism suspected for each group of RSS misses left (group, experiment, variant,
#: metric, each of the last three ``*`` for any; the most specific row applies)
OPEN_MISSES = PATCHES / "open-misses.csv"


def load_open_misses(path=OPEN_MISSES) -> list:
    """The rows of ``path`` (:data:`OPEN_MISSES`) as dicts; none where it is missing. A row
    without its five columns is a :class:`UserError` naming the file and the line."""
    path = Path(path)
    if not path.is_file():
        return []
    need = ("group", "experiment", "variant", "metric", "mechanism")
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in need if c not in (reader.fieldnames or ())]
        if missing:
            raise UserError(f"{path}: missing column(s) {', '.join(missing)} (need "
                            f"{', '.join(need)})")
        rows = []
        for line, row in enumerate(reader, start=2):
            if any(not (row.get(c) or "").strip() for c in need):
                raise UserError(f"{path}:{line}: every row needs {', '.join(need)}")
            rows.append({c: row[c].strip() for c in need})
    return rows


def suspected_mechanism(entries, group, experiment, variant, metric) -> str:
    """The mechanism of the most specific entry of :func:`load_open_misses` that matches
    (``*`` matches anything; fewer ``*`` wins, the first of equals), or ``"none named"``.

    >>> rows = [{"group": "heap", "experiment": "*", "variant": "*", "metric": "*",
    ...          "mechanism": "any"},
    ...         {"group": "heap", "experiment": "p10-ema", "variant": "*", "metric": "*",
    ...          "mechanism": "start"}]
    >>> suspected_mechanism(rows, "heap", "p10-ema", "detach", "rss_bytes")
    'start'
    >>> suspected_mechanism(rows, "text", "p10-ema", "detach", "rss_bytes")
    'none named'
    """
    best, best_wild = None, None
    for row in entries:
        if row["group"] != group:
            continue
        keys = (row["experiment"], row["variant"], row["metric"])
        if any(k != "*" and k != v for k, v in zip(keys, (experiment, variant, metric))):
            continue
        wild = sum(k == "*" for k in keys)
        if best is None or wild < best_wild:
            best, best_wild = row["mechanism"], wild
    return best if best is not None else "none named"


def _open_rss(rss, open_misses=None) -> list:
    """The RSS misses left once text rows are graded by their build band, by group and
    run: how many points of how many fixes, the worst relative error, the band, and the
    mechanism suspected (:data:`OPEN_MISSES`)."""
    entries = load_open_misses() if open_misses is None else open_misses
    rows = {}
    for name, r in rss.items():
        for e in r["open"]:
            key = (e["group"], e["experiment"], e["variant"], e["phase"], e["metric"])
            entry = rows.setdefault(key, {"points": 0, "fixes": set(), "worst": 0.0,
                                          "bands": 0, "outside": []})
            entry["points"] += 1
            entry["fixes"].add(name)
            try:
                entry["worst"] = max(entry["worst"], float(e["rel_error"]))
            except (TypeError, ValueError):
                pass
            if e["band"] is not None:
                entry["bands"] += 1
                low, high = e["band"][:2]
                entry["outside"].append(f"{_fmt(float(e['predicted']))} against "
                                        f"{_fmt(low)}..{_fmt(high)}")
    if not rows:
        return []
    lines = ["RSS misses left (text rows measured once graded by their build band), by "
             "group: the points of all fixes, the fixes, the largest relative error; for text "
             "rows outside their band, a prediction against its band; the mechanism suspected "
             f"for them, none of which the model includes yet (`{_rel(OPEN_MISSES)}`, where "
             "the measurements behind each are named).", "",
             "| group | experiment / variant (phase) | metric | points | fixes | worst error "
             "| outside the band | suspected mechanism (open) |",
             "|---|---|---|---:|---:|---:|---|---|"]
    for key in sorted(rows, key=lambda k: (k[0], -rows[k]["points"], k[1:])):
        entry = rows[key]
        group, experiment, variant, phase, metric = key
        where = f"{experiment} / {variant}" + (f" ({phase})" if phase else "")
        shown = list(dict.fromkeys(entry["outside"]))
        outside = "; ".join(shown[:2]) + (" ..." if len(shown) > 2 else "")
        why = suspected_mechanism(entries, group, experiment, variant, metric)
        lines.append(f"| {group} | {where} | {metric} | {entry['points']} | "
                     f"{len(entry['fixes'])} | {100 * entry['worst']:.0f} % | {outside or '-'} "
                     f"| {why} |")
    return lines + [""]


def _kinds(g) -> str:
    """The table cells of a grade's kinds: memory, counts and state, time, time within the
    issue's 25 % bar, events."""
    return " | ".join(f"{k[0]} of {k[1]}" for k in
                      (g["kinds"]["memory"], g["kinds"]["state"], g["kinds"]["time"],
                       g["time_bar"], g["kinds"]["event"]))


def _hosts(dirs, profile, also=()) -> list:
    """Which host the measurements were made on, which host ``profile`` describes, and the
    profiles ``also`` graded with."""
    measured = _measured_hosts(dirs)
    shown = "; ".join(f"{cpu} (L2 {b // 1024} KiB)" for cpu, b in sorted(measured)) or "?"
    text = (f"**Graded by profile `{profile}`**, whose time parameters are fitted on "
            f"{_described(profile)}; the measurements were made on {shown} "
            f"(`measure-info.json` of each directory)"
            + (": the measured host's own profile." if _of_measured(profile, measured)
               else "."))
    for other in also:
        whose = ("the measured host's profile" if _of_measured(other, measured)
                 else f"fitted on {_described(other)}")
        text += (f" The same measurements graded with `{Path(other).stem}` ({whose}): the "
                 f"section \"Graded with profile `{Path(other).stem}`\" below.")
    return [text, ""]


def _measured_hosts(dirs) -> set:
    """``(cpu model, L2 bytes)`` of the hosts the directories ``dirs`` were measured on."""
    measured = set()
    for fix_dir in dirs:
        info = fix_dir / "measure-info.json"
        if info.is_file():
            host = json.loads(info.read_text(encoding="utf-8")).get("machine", {}).get("host", {})
            measured.add((host.get("cpu_model", "?"), host.get("l2_bytes", 0)))
    return measured


def _profile_host(profile) -> tuple:
    """``(cpu model, L2 bytes)`` of the host ``profile``'s parameters were fitted on."""
    from ..engine.profile import load_profile
    p = load_profile(profile)
    return p.data.get("host", {}).get("cpu_model", "an unnamed host"), p.process.l2_bytes


def _described(profile) -> str:
    cpu, l2 = _profile_host(profile)
    return f"{cpu} (L2 {l2 // 1024} KiB)"


def _of_measured(profile, measured) -> bool:
    """Whether ``profile`` describes the one host the measurements were made on."""
    return measured == {_profile_host(profile)}


def _compare_each(dirs, profile, out_root, results, jobs, echo, figures=False,
                  from_results=False) -> dict:
    """``sim compare`` of each fix directory against its own policy with ``profile``, into
    ``out_root/NAME`` (``from_results``: the comparisons an earlier run left there), and
    the errors.csv rows of each: fix name -> rows."""
    all_errors = {}
    for fix_dir in dirs:
        name = fix_dir.name
        res = out_root / name
        if not from_results:
            echo(f"fixes: {name}: sim compare --measured {fix_dir} -p {name} "
                 f"--profile {profile}")
            compare([str(fix_dir)], (), (name,), profile, str(res), jobs, progress=False,
                    command=f"sim compare --measured {fix_dir} -p {name} --profile "
                            f"{profile} --out {res}", figures=figures, cache_dir=results)
        errors = load(res)[1]
        if any(e["status"] != "unpredicted" for e in errors) and "mechanism" not in errors[0]:
            # patched burn's rows are all a probe's: their grading columns are in the file
            raise UserError(f"{res}/errors.csv has no mechanism column (written by an older "
                            f"sim compare): run sim fixes without --from-results")
        all_errors[name] = errors
    return all_errors


def _also_graded(dirs, profile, results, jobs, echo, from_results=False) -> list:
    """The same measurements graded with another ``profile``: totals and verdicts
    (``from_results``: the comparisons an earlier run left in ``results``)."""
    if not from_results:
        simulate_together([(d, d.name) for d in dirs], profile, results, jobs, echo)
    all_errors = _compare_each(dirs, profile, Path(results) / f"profile-{Path(profile).stem}",
                               results, jobs, echo, from_results=from_results)
    whose = ("`sim host-profile`'s profile of the measured host"
             if _of_measured(profile, _measured_hosts(dirs))
             else f"time parameters fitted on {_described(profile)}")
    lines = [f"## Graded with profile `{Path(profile).stem}`", "",
             f"The same measurements, graded against each policy's predictions with profile "
             f"`{profile}` ({whose}).", "",
             *_hosts(dirs, profile)[:1], "",
             "| fix | points | within tolerance | share | memory | counts and state | time "
             "| time within 25 % | events | unpredicted |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, errors in all_errors.items():
        g = grade(errors)
        ok, n = g["total"]
        share = f"{100 * ok / n:.0f} %" if n else "-"
        lines.append(f"| {name} | {n} | {ok} | {share} | {_kinds(g)} | {g['unpredicted']} |")
    lines.append("")
    lines.extend(rss_section(all_errors, profile, heading="###"))
    table = verdict_table(all_errors)
    if table:
        lines += [f"Growth verdicts with `{Path(profile).stem}`:", ""] + table[2:]
    return lines


def _semantics(path) -> list:
    """The semantic check's summary (``experiments/probes/semantics.py --out``), if run."""
    if not path.is_file():
        return []
    result = json.loads(path.read_text(encoding="utf-8"))
    lines = ["## Semantics", "",
             f"`experiments/probes/semantics.py --count {result['count']} --seed "
             f"{result['seed']} --length {result['length']}`: random tensor programs on "
             f"unpatched and patched burn, every value, gradient, require-grad flag and panic "
             f"compared bit for bit ({len(result.get('nondeterministic', []))} programs whose "
             f"two unpatched runs differ are left out). Host: {result['host'].get('cpu', '?')}.",
             "", "| fix | programs | identical | differ (first difference) |",
             "|---|---:|---:|---|"]
    for fix, r in result["fixes"].items():
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r["kinds"].items())) or "-"
        lines.append(f"| {fix} | {r['checked']} | {r['agree']} | {kinds} |")
    lines.append("")
    for fix, r in result["fixes"].items():
        for d in r["differences"][:3]:
            if d["kind"] == "panic":
                lines.append(f"- {fix}, program {d['program']}: the panic moved: unpatched at "
                             f"statement {d['unpatched']}, patched at {d['patched']} (None: "
                             f"no panic)")
                continue
            lines.append(f"- {fix}, program {d['program']}: {d['kind']} at statement "
                         f"{d.get('statement', '?')} (`{d.get('line', '?')}`): unpatched "
                         f"`{d.get('unpatched', d.get('only_in', ''))}`, patched "
                         f"`{d.get('patched', d.get('what', ''))}`")
    lines.append("")
    return lines


def _growths_of(errors, side, policy, heap_where_flat=True) -> dict:
    """``(experiment, variant, phase) -> Growth`` of one side (``measured`` or
    ``predicted``) of a comparison's points in :data:`VERDICT_FILES`: both sides judged at
    the same points (the measured run's loop counts) by the predictions' rule, with
    :data:`~sim.analysis.growth.HEAP_WHERE_FLAT_RULE` (``heap_where_flat``)."""
    rows = []
    for e in errors:
        if e.get("source") not in VERDICT_FILES:
            continue
        try:
            value = float(e[side])
        except (TypeError, ValueError):
            continue
        if value != value:
            continue
        rows.append({"experiment": e["experiment"], "variant": e["variant"],
                     "phase": e.get("phase") or "", "x": float(e["x"]),
                     "x_unit": e["x_unit"], "metric": e["metric"], "value": value,
                     "unit": e["unit"], "policy": policy, "params": ""})
    return {g.run[:3]: g for g in growth_of_runs(rows, lambda row: row["experiment"],
                                                 heap_where_flat=heap_where_flat)
            if g.has_figures}


#: what a run that shows each problem is said to do
PROBLEM_WORD = {"growth": "grows", "panic": "panics"}


def _shows(g, what) -> bool:
    """Whether the Growth ``g`` (None: no figures) shows ``what``: ``growth`` or ``panic``."""
    return g is not None and bool(g.memory_grows if what == "growth"
                                  else g.panic_x is not None)


def verdict_table(all_errors) -> list:
    """Per run where unpatched real burn grows or panics, each fix's verdict (removes /
    keeps) predicted and measured at the same points: the page's verdict table."""
    reference = all_errors.get(REFERENCE)
    if reference is None:
        return []
    real = _growths_of(reference, "measured", REFERENCE)
    model = _growths_of(reference, "predicted", REFERENCE)
    problems = [(key, what) for key, g in real.items() for what in ("growth", "panic")
                if _shows(g, what) and _shows(model.get(key), what)]
    fixes = [name for name in all_errors if name != REFERENCE]
    if not fixes:
        return []
    if not problems:
        return ["## Growth verdicts on real burn", "",
                "No run grows or panics both on unpatched real burn and in burn-0.22.1's "
                "prediction (" + HEAP_WHERE_FLAT_RULE + ").", "", *_set_aside(reference), ""]
    sides = {name: (_growths_of(all_errors[name], "predicted", name),
                    _growths_of(all_errors[name], "measured", name)) for name in fixes}
    agree = dict.fromkeys(fixes, 0)
    judged = dict.fromkeys(fixes, 0)
    rows = []
    for key, what in problems:
        cells = []
        for name in fixes:
            predicted, measured = (side.get(key) for side in sides[name])
            if predicted is None or measured is None:
                cells.append("-")
                continue
            p, m = ("keeps" if _shows(g, what) else "removes" for g in (predicted, measured))
            judged[name] += 1
            agree[name] += p == m
            cells.append(f"{p}" if p == m else f"**predicted {p}, measured {m}**")
        experiment, variant, phase = key
        by = real[key].memory_metric.split(" ")[0] if what == "growth" else "panic event"
        rows.append(f"| {experiment} / {variant}{f' ({phase})' if phase else ''} | {what} | "
                    f"{by} | " + " | ".join(cells) + " |")
    return ["## Growth verdicts on real burn", "",
            "Per run where unpatched real burn (`burn-0.22.1/`) and burn-0.22.1's prediction "
            "both grow or panic: what each fix does to it, predicted and measured at the same "
            "points (the measured run's "
            "loop counts, judged by the predictions' rule, `sim.analysis.growth`, with one "
            "addition: " + HEAP_WHERE_FLAT_RULE + "); one word where both sides agree. "
            "\"judged by\": the metric unpatched real burn's growth was judged by.", "",
            "| run | problem | judged by | " + " | ".join(f"`{n}`" for n in fixes) + " |",
            "|---|---|---|" + "---|" * len(fixes),
            *rows,
            "| **equal verdicts** | | | " + " | ".join(f"{agree[n]} of {judged[n]}"
                                                      for n in fixes) + " |", "",
            *_set_aside(reference), ""]


def _set_aside(reference) -> list:
    """The runs whose RSS grows on unpatched real burn or in its prediction with the live
    heap flat: growths the RSS rule alone would have put in the table."""
    lines = []
    for side, policy in (("measured", "real burn"), ("predicted", "the prediction")):
        rss = _growths_of(reference, side, REFERENCE, heap_where_flat=False)
        heap = _growths_of(reference, side, REFERENCE)
        for key, g in rss.items():
            h = heap.get(key)
            if g.memory_grows and h is not None and not h.memory_grows:
                experiment, variant, phase = key
                lines.append(f"- {experiment} / {variant}{f' ({phase})' if phase else ''}, "
                             f"{policy}: {h.memory_metric}")
    if not lines:
        return []
    return ["Not growths by this rule (burn-0.22.1, unpatched; RSS alone would count them):",
            "", *lines]


def _release_dirs(measured) -> list:
    """``releases/burn-VERSION/`` beside ``measured`` (``sim measure --burn VERSION``)."""
    root = Path(measured).parent / "releases"
    if not root.is_dir():
        return []
    return sorted(d for d in root.iterdir() if d.is_dir() and any(d.glob("*.csv")))


def _release(release_dir, errors, reference, profile) -> list:
    """Another release of burn measured by the probes, graded against burn-0.22.1's
    predictions: its points by experiment beside unpatched 0.22.1's of the same kind of run,
    and the growth verdicts of the runs where 0.22.1 grows or panics."""
    try:
        info = json.loads((release_dir / "measure-info.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = {}
    version = info.get("burn_version", release_dir.name.removeprefix("burn-"))
    equal = next((v for k, v in info.items() if k.startswith("runtime_equal_to_")), {})
    g = grade(errors)
    ok, n = g["total"]
    ref = grade(reference) if reference is not None else None
    lines = [f"## burn {version}, graded against burn-0.22.1's predictions", "",
             f"`sim measure --burn {version} --quick --out {_rel(release_dir)}`: the probes "
             f"built against burn {version} from crates.io (no patch), graded with "
             f"`sim compare --measured {_rel(release_dir)} -p {REFERENCE} --profile "
             f"{profile}`. Measured on: {_host(release_dir)}.", ""]
    if equal:
        same = [f"`{f.removeprefix('src/')}`" for f, e in equal.items() if e]
        differ = [f"`{f.removeprefix('src/')}`" for f, e in equal.items() if not e]
        lines += [f"burn-autodiff {version}'s " + ", ".join(same)
                  + (" are" if len(same) > 1 else " is")
                  + " byte for byte 0.22.1's (compared in cargo's registry when measured)"
                  + (f"; {', '.join(differ)} differ" if differ else "")
                  + ": burn-0.22.1's bookkeeping model applies unchanged.", ""]
    lines += [f"**{ok} of {n} points within tolerance**"
              + (f" ({g['unpredicted']} unpredicted)" if g["unpredicted"] else "")
              + (f"; unpatched 0.22.1 measured the same way: {ref['total'][0]} of "
                 f"{ref['total'][1]}" if ref else "") + ".", ""]
    if reference is not None:
        own = own_misses(errors, reference)
        lines += [f"Misses where unpatched 0.22.1 is within tolerance: {len(own)}.", ""]
    lines += ["| experiment | points | within tolerance | 0.22.1: within tolerance |",
              "|---|---:|---:|---:|"]
    for exp, (eok, en) in sorted(g["experiments"].items()):
        there = ref["experiments"].get(exp) if ref else None
        lines.append(f"| {exp} | {en} | {eok} | "
                     f"{f'{there[0]} of {there[1]}' if there else '-'} |")
    lines.append("")
    if reference is not None:
        real = _growths_of(reference, "measured", REFERENCE)
        expected = _growths_of(reference, "predicted", REFERENCE)
        model = _growths_of(errors, "predicted", REFERENCE)
        measured = _growths_of(errors, "measured", version)
        rows = []
        for key, g0 in sorted(real.items()):
            for what in ("growth", "panic"):
                def said(x):
                    if x is None:
                        return None
                    return PROBLEM_WORD[what] if _shows(x, what) else "flat"
                # the runs of the fixes' verdict table: real 0.22.1 and its prediction
                # both show the problem
                if said(g0) == "flat" or said(expected.get(key)) in (None, "flat"):
                    continue
                p, m = said(model.get(key)), said(measured.get(key))
                if p is None or m is None:
                    continue
                experiment, variant, phase = key
                cell = p if p == m else f"**predicted {p}, measured {m}**"
                rows.append(f"| {experiment} / {variant}{f' ({phase})' if phase else ''} "
                            f"| {what} | {cell} |")
        if rows:
            lines += [f"Runs where unpatched 0.22.1 grows or panics, on burn {version} "
                      f"(burn-0.22.1's prediction and the measurement, judged at the same "
                      f"points):", "", "| run | problem | verdict |", "|---|---|---|",
                      *rows, ""]
    misses = largest_misses(errors)
    if misses:
        lines += _miss_table(f"Largest misses ({min(WORST, len(misses))} of {len(misses)}):",
                             misses)
    return lines


def _burn_tests(path) -> list:
    """burn's own autodiff tests per patch (``experiments/probes/burn_tests.py --out``)."""
    if not path.is_file():
        return []
    result = json.loads(path.read_text(encoding="utf-8"))
    host = result.get("host", {})
    lines = ["## burn's autodiff tests", "",
             f"`experiments/probes/burn_tests.py`: burn's own tests, "
             f"{result['tests']}, taken from burn's repository at commit "
             f"`{result['tests_commit'][:10]}` (version {result.get('tests_version', '?')}), "
             f"built against {result['against']}. Host: {host.get('cpu', '?')}, "
             f"{host.get('rustc', '')}.", "",
             "| patch | built | passed | failed | ignored | failing tests |",
             "|---|---|---:|---:|---:|---|"]
    base = set(result["patches"].get("none", {}).get("failures", []))
    for patch, r in result["patches"].items():
        if not r.get("built"):
            first = (r.get("errors") or ["?"])[0]
            lines.append(f"| {patch} | no: {first} | - | - | - | - |")
            continue
        failing = r.get("failures", [])
        new = [f for f in failing if f not in base] if patch != "none" else failing
        shown = ", ".join(f"`{f}`" for f in new[:6]) + (f" and {len(new) - 6} more"
                                                       if len(new) > 6 else "")
        if patch != "none":
            shown = (f"as unpatched, plus {shown}" if new and base
                     else shown if new else "as unpatched" if failing else "-")
        lines.append(f"| {patch} | yes | {r['passed']} | {r['failed']} | {r['ignored']} | "
                     f"{shown or '-'} |")
    lines.append("")
    return lines


def _rel(path) -> str:
    path = Path(path).resolve()
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def figure_panels(all_errors) -> list:
    """The panels of every fix's figure: ``(experiment, variant, phase, metric)`` of each
    run of the verdict table (the metric its growth was judged by; a run that panics:
    :data:`PANIC_PANEL_METRIC`, the panic step marked), then :data:`FIGURE_RUNS`."""
    panels = []
    reference = all_errors.get(REFERENCE)
    if reference is not None:
        real = _growths_of(reference, "measured", REFERENCE)
        model = _growths_of(reference, "predicted", REFERENCE)
        for key, g in real.items():
            for what in ("growth", "panic"):
                if _shows(g, what) and _shows(model.get(key), what):
                    metric = (g.memory_metric.split(" ")[0] if what == "growth"
                              else PANIC_PANEL_METRIC)
                    panels.append((*key, metric))
    for run in FIGURE_RUNS:
        if run not in panels:
            panels.append(run)
    return panels


def fix_figures(all_errors, out_dir) -> dict:
    """Draw one PNG per fix of ``all_errors`` (``{fix: errors.csv rows}``, the reference
    left out) into ``out_dir/FIX.png`` with :func:`figure_panels`' panels, unpatched
    burn-0.22.1 in grey; a panel none of whose runs were measured is left out. Returns
    ``{fix: path}``."""
    from ..output import figures
    reference = all_errors.get(REFERENCE) or []
    measured = {(e["experiment"], e["variant"], e.get("phase") or "", e["metric"])
                for errors in all_errors.values() for e in errors}
    panels = [p for p in figure_panels(all_errors) if p in measured]
    drawn = {}
    if not panels:
        return drawn
    out_dir = Path(out_dir)
    for name, errors in all_errors.items():
        if name == REFERENCE:
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{name}.png"
        part = out_dir / f".{name}.png.part"
        figures.draw("fix", name, panels, errors, reference).savefig(
            part, format="png", dpi=100, metadata={"Software": None})
        os.replace(part, path)
        drawn[name] = path
    return drawn


def _section(name, fix_dir, g, errors, profile, figure=None):
    cls = get_policy(name)
    ok, n = g["total"]
    parts = name.split("+")
    if all((PATCHES / f"{part}.patch").is_file() for part in parts):
        patch = ("Patch" if len(parts) == 1 else "Patches") + " " + ", then ".join(
            f"`experiments/patches/{part}.patch`" for part in parts)
        if len(parts) > 1:
            patch += (f" (`--patch {name}`), graded against the composed policy `{name}` "
                      f"(`-p {name}`)")
    else:
        patch = ("No patch: the reference, burn-autodiff 0.22.1 as released, measured the "
                 "same way")
    lines = [f"## {name}", "",
             f"{patch}; policy: {cls.changes}", "",
             f"Measured on: {_host(fix_dir)}.", "",
             f"**{ok} of {n} points within tolerance**"
             + (f" ({g['unpredicted']} unpredicted)" if g["unpredicted"] else "") + ".", ""]
    if figure:
        lines += [f"![{name}: predicted against measured, beside unpatched burn-0.22.1]"
                  f"({figure})", ""]
    lines += ["| experiment | points | within tolerance |", "|---|---:|---:|"]
    for exp, (eok, en) in sorted(g["experiments"].items()):
        lines.append(f"| {exp} | {en} | {eok} |")
    lines.append("")
    if g.get("own_misses"):
        own = g["own_misses"]
        lines += _miss_table(f"Misses where the unpatched run is within tolerance ({len(own)}; "
                             f"{min(WORST, len(own))} largest):", own)
    misses = largest_misses(errors)
    if misses:
        lines += _miss_table(f"Largest misses ({min(WORST, len(misses))} of {len(misses)}):",
                             misses)
    return lines


def _miss_table(title, misses) -> list:
    """A titled table of the first ``WORST`` of ``misses`` (errors.csv rows)."""
    return [title, "",
            "| experiment | variant | phase | x | metric | measured | predicted | error |",
            "|---|---|---|---:|---|---:|---:|---:|",
            *(_miss_row(e) for e in misses[:WORST]), ""]


def _miss_row(e) -> str:
    rel = e.get("rel_error")
    err = f"{100 * rel:.0f} %" if isinstance(rel, float) and rel == rel else "-"
    return (f"| {e['experiment']} | {e['variant']} | {e['phase']} | {_fmt(e['x'])} "
            f"| {e['metric']} | {_fmt(e['measured'])} {e['unit']} "
            f"| {_fmt(e['predicted'])} | {err} |")
