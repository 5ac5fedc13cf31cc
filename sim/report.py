"""The report a person reads first: report.md and report.html from the same blocks.

Sections: what was run; accuracy (points within tolerance per experiment and
kind, then every point out of tolerance or unpredicted, then every point; a
panic predicted at another step is a miss, out of tolerance); the figures,
their legend once; per run (per phase of a phased run), which policies remove
the memory growth, the time growth and the panic that burn 0.22.1 shows, by
the verdicts of :mod:`sim.growth` that the summary figure uses too, then the
rows where RSS and the live heap disagree and the runs without a row; what
each policy changes.

:func:`render` takes the run description (run.json), the error rows
(errors.csv), the growth of every run (:mod:`sim.growth`) and the figure file
names, and returns ``(markdown, html)``.
"""

from __future__ import annotations

import html
import math

from .compare import TOLERANCE
from .growth import run_label, singular_unit

__all__ = ["render"]

REFERENCE = "burn-0.22.1"


def render(info, errors, growth, figures, summary):
    """``(markdown text, html text)`` of the report."""
    from .results import workload_table
    workload_of = workload_table(info)
    blocks = []
    blocks += _what_was_run(info)
    blocks += _accuracy(errors, _panics(growth), workload_of)
    blocks += _figures(figures, summary, errors, workload_of)
    blocks += _removal(growth)
    blocks += _policies(sorted({g.policy for g in growth} | {e["policy"] for e in errors}),
                        info.get("policy_files", {}))
    title = info.get("title", "autodiff-sim report")
    return _markdown(title, blocks), _html(title, blocks)


# -- sections ---------------------------------------------------------------------------------

def _shown(path) -> str:
    """A measured file as the report shows it: relative to the working directory if inside it."""
    from pathlib import Path
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return Path(path).name


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
    from .units import METRICS
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
                            "table \"Which policies remove the growth\" (its rules are stated "
                            "there)."))
        blocks.append(("img", summary, "policy x workload summary"))
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
        blocks.append(("img", path, f"{name}: predicted vs measured"))
    return blocks


def _removal(growth):
    """Per run (per phase of a phased run): the growth the reference shows and the
    policies under which it is gone, by the verdicts of :mod:`sim.growth`."""
    from .growth import MEMORY_RULE, TIME_RULE
    blocks = [("h2", "Which policies remove the growth")]
    cells = {g.run + (g.policy,): g for g in growth}
    runs = list(dict.fromkeys(g.run for g in growth))
    policies = list(dict.fromkeys(g.policy for g in growth))
    if REFERENCE not in policies:
        blocks.append(("p", f"`{REFERENCE}` was not run: nothing to compare with."))
        return blocks
    blocks.append(("p", f"Per run (a run whose loop is sampled in phases: per phase), the "
                        f"growth `{REFERENCE}` shows, and the policies under which it is gone. "
                        f"The rules, which the summary figure uses too: {MEMORY_RULE}; a run "
                        f"sampled only once, after its loop, by its `*_delta` memory metric "
                        f"from the loop's start (growth over the loop); {TIME_RULE}; panic: "
                        f"none. *judged by*: the memory metric of the row; memory growth is "
                        f"per loop unit (*unit*), over the late half of the run."))
    headers = ["run", "unit", "judged by", f"{REFERENCE}: memory growth", "removed by",
               f"{REFERENCE}: time first -> last", "removed by", "panic", "removed by"]
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
        others = [cells[run + (p,)] for p in policies if p != REFERENCE and run + (p,) in cells]
        rows.append([label, ref.unit, ref.memory_metric or "—"] + _memory_cells(ref, others)
                    + _time_cells(ref, others) + _panic_cells(ref, others))
    blocks.append(("table", headers, rows))
    disagree = _heap_rss_disagreements(growth)
    if disagree:
        blocks.append(("p", "Where RSS and the live heap disagree (rows judged by RSS; the "
                            "live heap by the same rule). RSS flat with a rising live heap: "
                            "memory freed between samples and reused (a sawtooth the samples "
                            "alias), bounded. RSS rising with a flat live heap: memory the "
                            "model keeps outside the live heap (allocator pages; the `pytorch` "
                            "policy's per-backward allocator drift, the profile's "
                            "`pytorch.rss_growth_per_step_bytes`, is in RSS only)."))
        blocks.append(("list", disagree))
    if skipped:
        blocks.append(("p", "Runs without a row (no loop to grow along, or no reference):"))
        blocks.append(("list", skipped))
    return blocks


def _memory_cells(ref, others) -> list:
    """``[reference's memory growth, policies that remove it]``."""
    if ref.memory_grows is None:
        return [f"— ({ref.note})" if ref.note else "—", ""]
    if not ref.memory_grows:
        return ["flat", ""]
    return [_bytes(ref.memory_bytes), _names([g for g in others if g.memory_grows is False])]


def _time_cells(ref, others) -> list:
    if ref.time_grows:
        return [f"{_ms(ref.ms_first)} -> {_ms(ref.ms_last)}",
                _names([g for g in others if g.time_grows is False])]
    return ["flat" if ref.time_grows is False else "—", ""]


def _panic_cells(ref, others) -> list:
    if ref.panic_x is None:
        return ["none", ""]
    return [f"at {singular_unit(ref.x_unit)} {ref.panic_x:g}",
            _names([g for g in others if g.panic_x is None])]


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


def _names(growths):
    return ", ".join(f"`{g.policy}`" for g in growths) or "**none**"


def _bytes(n):
    from .plot import _bytes_text
    return _bytes_text(n)


def _ms(ms):
    from .plot import _ms_text
    return _ms_text(ms)


def _policies(names, files):
    """The policies of the run; ``files``: run.json's ``policy_files`` (policies from files)."""
    from .policies import POLICIES, policy_rank
    blocks = [("h2", "Policies")]
    items = []
    for name in sorted(names, key=policy_rank):
        cls = POLICIES.get(name)
        if cls is not None:
            text = dict(changes=cls.changes, expected=cls.expected,
                        semantic_change=cls.semantic_change, where="")
        elif name in files:
            text = dict(files[name], where=f" (from `{files[name]['file']}`)")
        else:
            items.append(f"`{name}`: not in this checkout's policy registry.")
            continue
        flag = " *(intended semantic change)*" if text["semantic_change"] else ""
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
    """Escape, then the two inline marks the blocks use: `code` and **bold** / *italic*."""
    import re
    text = html.escape(str(text))
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)
    return re.sub(r"\*([^*]+)\*", r"<i>\1</i>", text)


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
