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

import json
from collections import defaultdict
from pathlib import Path

from .errors import UserError
from .paths import EXPERIMENTS, ROOT

__all__ = ["fixes_report", "measured_growth", "PATCHED_MEASURED"]

PATCHED_MEASURED = EXPERIMENTS / "measured" / "linux-x86_64" / "patched"

PATCHES = EXPERIMENTS / "patches"

#: the directory of unpatched burn measured the same way, graded against burn-0.22.1
REFERENCE = "burn-0.22.1"

#: misses listed per fix
WORST = 12


def _fix_dirs(root):
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"--measured {root}: no such directory")
    found = sorted(d for d in root.iterdir() if d.is_dir() and any(d.glob("*.csv")))
    if not found:
        raise UserError(f"--measured {root}: no NAME/ directory with measured CSVs "
                        f"(sim measure --patch NAME --out {root}/NAME)")
    return found


#: the measured files whose runs the report's growth verdicts are checked on
VERDICT_FILES = ("adleak-rss.csv", "pit-infer.csv", "p10-ema.csv", "train-validate.csv")


def measured_growth(root=PATCHED_MEASURED) -> dict:
    """``fix -> {(experiment, variant, phase): Growth}`` of the committed measurements of
    patched burn (:data:`VERDICT_FILES` of each ``NAME/`` directory; ``burn-0.22.1/``: the
    unpatched reference measured the same way), each judged by
    :func:`sim.growth.growth_of_runs`, the rule of the predicted verdicts. Empty where
    nothing was measured."""
    from .data import DataError, read_measured
    from .growth import growth_of_runs
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


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def grade(errors) -> dict:
    """Points and points within tolerance: in all, by experiment and by metric."""
    from .units import METRICS
    total = [0, 0]
    by_exp = defaultdict(lambda: [0, 0])
    by_metric = defaultdict(lambda: [0, 0])
    by_kind = {"memory": [0, 0], "time": [0, 0], "event": [0, 0], "state": [0, 0]}
    for e in errors:
        if e["status"] == "unpredicted":
            continue
        metric = METRICS.get(e["metric"])
        kind = by_kind.setdefault(metric.kind if metric else "other", [0, 0])
        for counter in (total, by_exp[e["experiment"]], by_metric[e["metric"]], kind):
            counter[0] += bool(e["ok"])
            counter[1] += 1
    return {"total": total, "experiments": dict(by_exp), "metrics": dict(by_metric),
            "kinds": by_kind,
            "unpredicted": sum(e["status"] == "unpredicted" for e in errors)}


def _point(e):
    return (e["experiment"], e["variant"], e["phase"], e["x"], e["metric"])


def own_misses(errors, reference) -> list:
    """The fix's misses at points where the unpatched run of the same day is within
    tolerance of burn-0.22.1's prediction: what the machine and the load do not explain."""
    ok_there = {_point(e) for e in reference if e["ok"]}
    return [e for e in _misses(errors) if _point(e) in ok_there]


def _misses(errors):
    bad = [e for e in errors if not e["ok"] and e["status"] != "unpredicted"]

    def size(e):
        rel = e.get("rel_error")
        return rel if isinstance(rel, float) and rel == rel else float("inf")
    return sorted(bad, key=size, reverse=True)


def fixes_report(measured=PATCHED_MEASURED, profile="linux-x86_64", results="results/fixes",
                 out="docs/fixes.md", jobs=1, echo=print, command="sim fixes",
                 figures=False) -> dict:
    """Compare every fix's measurements with its predictions; write the page ``out``.
    Returns ``{fix: grade}``."""
    from .data import atomic_write
    from .policies import get_policy
    from .results import load
    from .sweep import compare
    dirs = _fix_dirs(measured)
    for fix_dir in dirs:
        get_policy(fix_dir.name)    # a directory no policy is named after: an error up front
    grades = {}
    all_errors = {}
    for fix_dir in dirs:
        name = fix_dir.name
        res = Path(results) / name
        echo(f"fixes: {name}: sim compare --measured {fix_dir} -p {name} --profile {profile}")
        compare([str(fix_dir)], (), (name,), profile, str(res), jobs, progress=False,
                command=f"sim compare --measured {fix_dir} -p {name} --profile {profile} "
                        f"--out {res}", figures=figures)
        _, errors, _ = load(res)
        all_errors[name] = errors
    reference = all_errors.get(REFERENCE)
    sections = []
    for fix_dir in dirs:
        name = fix_dir.name
        errors = all_errors[name]
        g = grade(errors)
        if reference is not None and name != REFERENCE:
            g["own_misses"] = own_misses(errors, reference)
        grades[name] = g
        sections.append(_section(name, fix_dir, g, errors, profile))
    lines = ["# Fixes, predicted and measured on patched burn", "",
             f"Generated by `{command}` from the measurements in "
             f"`{_rel(measured)}/NAME/` (`sim measure --patch NAME --quick`): burn-autodiff "
             f"0.22.1 with `experiments/patches/NAME.patch`, graded against the `NAME` policy's "
             f"predictions (profile `{profile}`) with `sim compare`'s tolerances (memory 5 % "
             f"or a small absolute slack, block counts exact, times 15 %, panics at the same "
             f"step). Unpredicted points (no prediction at that x) are counted apart.", "",
             "The last column counts a fix's misses at points where the unpatched run of the "
             "same day (`burn-0.22.1`, no patch) is within tolerance of burn-0.22.1's "
             "prediction: the misses that the host and the load do not explain.", "",
             "| fix | points | within tolerance | share | memory | counts and state | time "
             "| events | unpredicted | misses where unpatched is within |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, g in grades.items():
        ok, n = g["total"]
        share = f"{100 * ok / n:.0f} %" if n else "-"
        kinds = " | ".join(f"{k[0]} of {k[1]}" for k in
                           (g["kinds"]["memory"], g["kinds"]["state"], g["kinds"]["time"],
                            g["kinds"]["event"]))
        own = len(g["own_misses"]) if "own_misses" in g else "-"
        lines.append(f"| {name} | {n} | {ok} | {share} | {kinds} | {g['unpredicted']} "
                     f"| {own} |")
    lines.append("")
    lines.extend(_semantics(Path(measured) / "semantics.json"))
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
              "sim measure --patch NAME --quick --out "
              f"{_rel(measured)}/NAME   # builds burn-autodiff 0.22.1 + the patch (minutes)",
              f"sim compare --measured {_rel(measured)}/NAME -p NAME --profile {profile}",
              f"{command}",
              "```", ""]
    atomic_write(out, "\n".join(lines))
    return grades


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


def _rel(path) -> str:
    path = Path(path).resolve()
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def _section(name, fix_dir, g, errors, profile):
    from .policies import get_policy
    cls = get_policy(name)
    ok, n = g["total"]
    patch = (f"Patch `experiments/patches/{name}.patch`" if (PATCHES / f"{name}.patch").is_file()
             else "No patch: the reference, burn-autodiff 0.22.1 as released, measured the "
                  "same way")
    lines = [f"## {name}", "",
             f"{patch}; policy: {cls.changes}", "",
             f"Measured on: {_host(fix_dir)}.", "",
             f"**{ok} of {n} points within tolerance**"
             + (f" ({g['unpredicted']} unpredicted)" if g["unpredicted"] else "") + ".", "",
             "| experiment | points | within tolerance |", "|---|---:|---:|"]
    for exp, (eok, en) in sorted(g["experiments"].items()):
        lines.append(f"| {exp} | {en} | {eok} |")
    lines.append("")
    if g.get("own_misses"):
        own = g["own_misses"]
        lines += [f"Misses where the unpatched run is within tolerance ({len(own)}; "
                  f"{min(WORST, len(own))} largest):", "",
                  "| experiment | variant | phase | x | metric | measured | predicted | error |",
                  "|---|---|---|---:|---|---:|---:|---:|"]
        lines += [_miss_row(e) for e in own[:WORST]]
        lines.append("")
    misses = _misses(errors)
    if misses:
        lines += [f"Largest misses ({min(WORST, len(misses))} of {len(misses)}):", "",
                  "| experiment | variant | phase | x | metric | measured | predicted | error |",
                  "|---|---|---|---:|---|---:|---:|---:|"]
        lines += [_miss_row(e) for e in misses[:WORST]]
        lines.append("")
    return lines


def _miss_row(e) -> str:
    rel = e.get("rel_error")
    err = f"{100 * rel:.0f} %" if isinstance(rel, float) and rel == rel else "-"
    return (f"| {e['experiment']} | {e['variant']} | {e['phase']} | {_fmt(e['x'])} "
            f"| {e['metric']} | {_fmt(e['measured'])} {e['unit']} "
            f"| {_fmt(e['predicted'])} | {err} |")
