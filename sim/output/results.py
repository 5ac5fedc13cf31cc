"""A results directory: what ``sim sweep`` / ``sim compare`` write and ``sim plot`` reads.

Files in ``DIR``:

``predicted.csv``   every row every cell recorded: the measured schema plus
                    ``policy`` and ``profile`` (and ``params``, the overridden
                    workload parameters, when the run had a ``--set`` grid).
                    Byte-identical however the cells were run.
``errors.csv``      every measured point joined with its prediction
                    (:func:`join_errors`): measured, predicted, abs_error
                    (predicted - measured, in the metric's unit), rel_error
                    (|abs_error| / |measured|), tolerance, ok, status
                    (``fitted``: used to calibrate the profile; ``predicted``;
                    ``unpredicted``: the simulator has no value there), the
                    policy and profile predicting it, the measured file.
``run.json``        what was run and how (cells, cached, wall time, jobs): the
                    only file with machine-dependent content.
``<workload>.png``  one figure per workload, ``summary.png`` (the registry of figures,
                    :mod:`sim.output.figures`; drawn by :mod:`sim.output.plot`).
``report.md``, ``report.html``   the report (see :mod:`sim.output.report`).

Every file is written to a temporary name and renamed. A run's files are written
together into ``DIR/.staging`` first and renamed into ``DIR`` at the end
(:func:`publish`): an interrupted run leaves the files of the run before it as they
were.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
from pathlib import Path

from . import report
from ..analysis.compare import GRADING_COLUMNS, TOLERANCE, join
from ..analysis.data import (PREDICTED_COLUMNS, atomic_write, atomic_write_bytes, file_in_the_way,
                   format_value, rows_to_csv)
from ..errors import UserError
from ..analysis.growth import growth_of_runs
from ..engine.interrupts import held_interrupt
from ..engine.workers import local_pool

__all__ = ["ERROR_COLUMNS", "join_errors", "write_data", "write_info", "previous_figures",
           "load", "render", "publish", "prepare_out", "STAGING"]

ERROR_COLUMNS = ["experiment", "variant", "phase", "x", "x_unit", "metric", "unit", "measured",
                 "predicted", "abs_error", "rel_error", "tolerance", "ok", "status", "policy",
                 "profile", "source", "note"]


#: where :func:`publish` writes a run's files before it renames them into the directory
STAGING = ".staging"


def prepare_out(out) -> Path:
    """The output directory, created if missing; one error line if it cannot be."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory")
    above = file_in_the_way(path)
    if above is not None:
        raise UserError(f"--out {out}: {above} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create ({exc.strerror})") from None
    if not os.access(path, os.W_OK):
        raise UserError(f"--out {out}: directory is not writable")
    # temporary files of a run that was killed before it could rename them
    for stale in path.glob(".*.tmp"):
        stale.unlink(missing_ok=True)
    shutil.rmtree(path / STAGING, ignore_errors=True)
    return path


def join_errors(measured, runs, policies, profile, fitted=()) -> list:
    """Each measured point with each prediction of it.

    Parameters
    ----------
    measured : list of dict
        Rows from :func:`sim.analysis.data.read_measured` (``_file`` names the source).
    runs : list of (workload name, measured experiments, params text, policy, rows)
        The predictions, one entry per cell.
    policies : list of str
        Predictions to compare with: each policy's, and for ``*-pytorch``
        experiments the ``pytorch`` policy's.
    profile : str
        Name of the profile the predictions used.
    fitted : iterable of str
        Point ids (:func:`sim.analysis.compare.point_id`) used to calibrate the profile.

    Returns
    -------
    list of dict
        Rows of :data:`ERROR_COLUMNS` (plus ``params``), grouped by workload,
        parameter point and policy, measured points in file order within each.
    """
    out, seen = [], set()
    workloads = []
    for name, experiments, params, policy, rows in runs:
        if (name, experiments) not in workloads:
            workloads.append((name, experiments))
    for name, experiments in workloads:
        points = [m for m in measured if m["experiment"] in experiments]
        if not points:
            continue
        params_points = []
        for w, _, params, _, _ in runs:
            if w == name and params not in params_points:
                params_points.append(params)
        for params in params_points:
            for policy in policies:
                predicted = []
                for w, _, p, cell_policy, rows in runs:
                    if w != name or p != params:
                        continue
                    if cell_policy == policy:
                        predicted.extend(rows)
                    elif cell_policy == "pytorch":
                        predicted.extend(r for r in rows if r["experiment"].endswith("-pytorch"))
                for m, e in zip(points, join(points, predicted, fitted, policy)):
                    used = "pytorch" if m["experiment"].endswith("-pytorch") else policy
                    identity = (params, used, m["_file"], m["_line"])
                    if identity in seen:
                        continue
                    seen.add(identity)
                    e.update(policy=used, profile=profile, params=params,
                             source=Path(m["_file"]).name,
                             tolerance=TOLERANCE[e["kind"]])
                    out.append(e)
    return out


# -- writing and reading -----------------------------------------------------------------------

def _csv_text(rows, columns) -> str:
    return rows_to_csv(rows, columns, _cell_text)


def _cell_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isnan(value):
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return format_value(value)


def write_data(out, predicted, errors, with_params=False) -> None:
    """Write predicted.csv and errors.csv into ``out``; errors.csv has the columns of how a
    probe's point was graded (:data:`sim.analysis.compare.GRADING_COLUMNS`) where a row
    has them."""
    extra = ["params"] if with_params else []
    grading = [c for c in GRADING_COLUMNS if any(c in e for e in errors)]
    atomic_write(Path(out) / "predicted.csv", _csv_text(predicted, PREDICTED_COLUMNS + extra))
    atomic_write(Path(out) / "errors.csv", _csv_text(errors, ERROR_COLUMNS + extra + grading))


def write_info(out, info) -> None:
    """Write run.json (what was run, how long it took, which figures) into ``out``."""
    atomic_write(Path(out) / "run.json", json.dumps(info, indent=1, sort_keys=True) + "\n")


def previous_figures(out) -> list:
    """Figures the last run into ``out`` wrote (from its run.json), to replace or remove."""
    try:
        return list(json.loads((Path(out) / "run.json").read_text(encoding="utf-8"))
                    .get("figures", []))
    except (OSError, ValueError, AttributeError):
        return []


def load(out):
    """``(predicted rows, error rows, run info)`` read back from a results directory."""
    out = Path(out)
    if not out.is_dir():
        raise UserError(f"{out}: no such results directory")
    predicted = _read_csv(out / "predicted.csv", ("x", "value"))
    errors = _read_csv(out / "errors.csv",
                       ("x", "measured", "predicted", "abs_error", "rel_error", "tolerance"))
    for e in errors:
        e["ok"] = e.get("ok") == "true"
    try:
        info = json.loads((out / "run.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        info = {}
    except (OSError, ValueError) as exc:
        raise UserError(f"{out / 'run.json'}: unreadable ({exc})") from None
    return predicted, errors, info


def _read_csv(path, numeric):
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: missing (not a results directory of `sim sweep`?)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: unreadable ({exc})") from None
    rows = []
    reader = csv.DictReader(io.StringIO(text))
    for lineno, row in enumerate(reader, start=2):
        if None in row or None in row.values():   # fields past the header's, or too few
            fields = len(row) - 1 + len(row[None]) if None in row else \
                sum(value is not None for value in row.values())
            raise UserError(f"{path}:{lineno}: {fields} fields, the header has "
                            f"{len(reader.fieldnames)}")
        for column in numeric:
            if column not in row or row[column] is None:
                raise UserError(f"{path}:{lineno}: missing column {column}")
            try:
                row[column] = float(row[column]) if row[column] != "" else math.nan
            except ValueError:
                raise UserError(f"{path}:{lineno}: {column} '{row[column]}' is not a number") \
                    from None
        row.setdefault("params", "")
        rows.append(row)
    return rows


# -- figures and report -----------------------------------------------------------------------------

def render(out, predicted, errors, info, stale=(), jobs=1) -> list:
    """Draw every figure and write the report; returns the figures' file names.

    ``stale``: figures of an earlier run into ``out``; those not drawn again are
    removed. ``jobs`` > 1 draws the figures in that many processes.
    """
    from . import figures, plot  # noqa: F401  (matplotlib: imported once here, before any fork)
    out = Path(out)
    workload_of = report.workload_table(info)
    names = [w["name"] for w in info.get("workloads", [])]
    for row in predicted + errors:
        name = workload_of(row)
        if name not in names:
            names.append(name)
    descriptions = {w["name"]: w.get("description", "") for w in info.get("workloads", [])}
    growth = growth_of_runs(predicted, workload_of)
    # one colour per policy in every figure, also for the ones outside the registry
    colors = plot.policy_colors({r["policy"] for r in predicted + errors if r.get("policy")})
    plot.use_policy_colors(colors)
    tasks = []
    for name in names:
        rows = [r for r in predicted if workload_of(r) == name]
        points = [e for e in errors if workload_of(e) == name]
        if rows or points:
            tasks.append((f"{_safe(name)}.png", "workload",
                          (name, descriptions.get(name, ""), rows, points,
                           info.get("profile", "")), colors))
    summary = "summary.png" if any(g.has_figures for g in growth) else None
    if summary:
        tasks.append((summary, "summary", (growth,), colors))
    if jobs > 1 and len(tasks) > 1:
        # the biggest figures first (drawing time grows with the rows plotted), so that no
        # process is left drawing a big one alone at the end
        weight = [len(t[2][2]) if t[1] == "workload" else len(predicted) / len(tasks)
                  for t in tasks]
        order = sorted(range(len(tasks)), key=lambda i: -weight[i])
        with local_pool(min(jobs, len(tasks))) as pool:
            drawn = dict(zip(order, pool.map(_draw, [tasks[i] for i in order])))
        images = [drawn[i] for i in range(len(tasks))]
    else:
        images = [_draw(task) for task in tasks]
    for (file_name, *_), image in zip(tasks, images):
        atomic_write_bytes(out / file_name, image)
    written = [file_name for file_name, *_ in tasks]
    for name in stale:
        if name not in written and name.endswith(".png") and "/" not in name \
                and (out / name).is_file():
            (out / name).unlink()
    figures = [(task[2][0], task[0]) for task in tasks if task[1] == "workload"]
    md, html = report.render(info, errors, growth, figures, summary)
    atomic_write(out / "report.md", md)
    atomic_write(out / "report.html", html)
    return written


def publish(out, info, stale=(), jobs=1, data=None, finish=None, figures=True) -> None:
    """Replace the results in ``out`` with a run's, all at the end.

    ``data``: ``(predicted rows, error rows, with_params)`` for new predicted.csv and
    errors.csv (None: draw from the ones in ``out``, as ``sim plot`` does). The data,
    the figures and report drawn from them (:func:`render`) and run.json (``info``, its
    ``figures`` set here, none drawn without ``figures``; ``finish(info)`` is called just
    before it is written) go to
    ``out/.staging`` first, then are renamed into ``out`` with Ctrl-C held back
    (:func:`sim.engine.interrupts.held_interrupt`), run.json last, and the earlier run's figures
    (``stale``) that this run did not draw are removed. An interrupt or error before
    that leaves ``out`` as the earlier run left it (the sweep's cell cache aside).
    """
    out = Path(out)
    staging = out / STAGING
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        if data is not None:
            write_data(staging, *data)
            predicted, errors, _ = load(staging)   # drawn from the files, as `sim plot` does
        else:
            predicted, errors, _ = load(out)
        info["figures"] = render(staging, predicted, errors, info, (), jobs=jobs) \
            if figures else []
        if finish is not None:
            finish(info)
        write_info(staging, info)
        with held_interrupt():
            # every file the run wrote (data, figures, report, whatever render adds), run.json
            # last: it names the figures of a complete run
            names = sorted(p.name for p in staging.iterdir()
                           if p.is_file() and not p.name.startswith(".") and p.name != "run.json")
            names.append("run.json")
            for name in names:
                if (out / name).is_symlink():   # its target is written, the link stays
                    atomic_write_bytes(out / name, (staging / name).read_bytes())
                else:
                    os.replace(staging / name, out / name)
            if not figures:
                # no report drawn: an earlier run's no longer describes the data
                for name in ("report.md", "report.html"):
                    if (out / name).is_file():
                        (out / name).unlink()
            for name in stale:
                if name not in info["figures"] and name.endswith(".png") and "/" not in name \
                        and (out / name).is_file():
                    (out / name).unlink()
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _draw(task) -> bytes:
    """PNG bytes of one figure: ``(file name, the figure's name in the registry
    (:mod:`sim.output.figures`), arguments, colours of the policies outside the
    registry of policies)``."""
    from . import figures, plot
    _, name, args, colors = task
    plot.use_policy_colors(colors)   # a worker process draws with the run's colours
    buf = io.BytesIO()
    figures.draw(name, *args).savefig(buf, format="png", dpi=100,
                                      metadata={"Software": None})
    return buf.getvalue()


def _safe(name) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
