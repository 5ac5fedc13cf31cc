"""``sim calibrate``: fit a few profile parameters to measured points by least squares.

Only the parameters named with ``--fit`` move; everything else stays as the
base profile has it. Residuals are relative errors (absolute, in the metric's
slack, for points measured as zero). The Jacobian is taken by finite
differences over full simulations of the cells the fitted points need, and the
step solves a bounded linear least-squares problem (parameters stay >= 0);
the time and additive memory parameters enter the model linearly, so one or two
Gauss-Newton steps converge. A parameter that no fitted point depends on is
refused.

The new profile is the base file with the fitted values substituted in place
(comments kept) and a ``[calibration]`` table listing the fitted parameters,
the fitted points and the measured files.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
from scipy.optimize import lsq_linear

from .compare import SLACK, cells_for, join, point_id
from .data import atomic_write
from .errors import UserError
from .profile import Profile, load_profile, validate

__all__ = ["calibrate", "select_points", "run_cells"]


def run_cells(cells, profile, jobs=1):
    """Predicted rows of every ``(workload, variant, policy)`` cell (sorted, deterministic)."""
    from .runner import run_cell
    if jobs <= 1 or len(cells) <= 1:
        rows = []
        for workload, variant, policy in cells:
            rows.extend(run_cell(workload, variant, policy, profile, observables=False))
        return rows
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_run_one, w, v, p, profile.path, profile.data)
                   for w, v, p in cells]
        rows = []
        for future in futures:
            rows.extend(future.result())
    return rows


def _run_one(workload, variant, policy, path, data):
    from .runner import run_cell
    profile = Profile(Path(path).stem, path, data)
    return run_cell(workload, variant, policy, profile, observables=False)


def select_points(measured, selectors):
    """Measured rows whose point id matches any selector (``*`` wildcards, ``/`` separated)."""
    if not selectors:
        return list(measured)
    patterns = [re.compile("^" + re.escape(s).replace(r"\*", ".*") + "$") for s in selectors]
    chosen = [m for m in measured if any(p.match(point_id(m)) for p in patterns)]
    if not chosen:
        raise UserError(f"--points {' '.join(selectors)}: no measured point matches")
    return chosen


def _scale(m):
    value = abs(float(m["value"]))
    return value if value > 0 else max(SLACK.get(m["metric"], 1.0), 1e-9)


def _residuals(fit_rows, predicted):
    joined = join(fit_rows, predicted)
    r = []
    for m, e in zip(fit_rows, joined):
        if math.isnan(e["predicted"]):
            raise UserError(f"no prediction for fitted point {point_id(m)}")
        r.append((e["predicted"] - e["measured"]) / _scale(m))
    return np.array(r)


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


def _coordinate_steps(current, r0, jac, logs, params, evaluate):
    """One Gauss-Newton step per parameter alone (in turn, from the point the previous
    accepted ones reached; halved once if it does not help): ``(values, residuals)``,
    or ``(current, None)`` when no single parameter improves the fit."""
    best, best_r = dict(current), r0
    improved = False
    for i, name in enumerate(params):
        column = jac[:, i]
        norm = float(column @ column)
        if norm <= 0:
            continue
        d = -float(column @ best_r) / norm
        if logs[i]:
            d = float(np.clip(d, -np.log(10), np.log(10)))
        for _ in range(2):
            trial = dict(best)
            trial[name] = best[name] * float(np.exp(d)) if logs[i] else max(best[name] + d, 0.0)
            r1 = evaluate(trial)
            if np.sqrt(np.mean(r1 ** 2)) < np.sqrt(np.mean(best_r ** 2)):
                best, best_r, improved = trial, r1, True
                break
            d /= 2
    return (best, best_r) if improved else (current, None)


def calibrate(measured, base, params, points=(), out=None, jobs=1, echo=print, fresh=False,
              max_iterations=8, progress=False):
    """Fit ``params`` of profile ``base`` to the selected ``measured`` points.

    ``progress``: show a bar on stderr over each iteration's simulations of the fitted
    cells (one per parameter for the Jacobian, then the step and its line search).

    At most ``max_iterations`` Gauss-Newton steps; stopping at that limit while the fit
    still improves is reported (rerun with more, or from the written profile).

    The written profile's ``[calibration]`` table lists what was fitted, on which points:
    this call's, plus the base profile's (a calibration in stages), unless ``fresh``.

    Returns ``(new profile, table of every point before/after)``.
    """
    profile = load_profile(base) if not isinstance(base, Profile) else base
    known = set(profile.parameters())
    for name in params:
        if name not in known:
            raise UserError(f"--fit {name}: not a profile parameter (see models/*.toml; "
                            f"e.g. time.scan_node_ns)")
        if isinstance(profile.get(name), (str, list)):
            raise UserError(f"--fit {name}: not a numeric parameter")
    if not params:
        raise UserError("nothing to fit: give at least one --fit PARAM")
    fit_rows = select_points(measured, points)
    fit_cells = cells_for(fit_rows)
    if not fit_cells:
        raise UserError("no fitted point belongs to a known workload")
    x0 = {name: float(profile.get(name)) for name in params}
    echo(f"fitting {len(params)} parameter(s) on {len(fit_rows)} point(s) "
         f"({len(fit_cells)} simulated cells)")

    current = dict(x0)
    bar = None

    def evaluate(values, label="step"):
        if bar is not None and bar.done == bar.total:
            bar.total += 1          # the line search, or a parameter probed again
        residuals = _residuals(fit_rows, run_cells(fit_cells, _with(profile, values), jobs))
        if bar is not None:
            bar.advance(label)
        return residuals

    def say(text):
        nonlocal bar
        if bar is not None:     # end the bar's line before the iteration's report
            bar.close()
            bar = None
        echo(text)

    if progress:
        from .progress import Progress
        bar = Progress(1, unit="simulations of the fitted cells (initial point)")
    r0 = evaluate(current, "initial point")
    try:
        for iteration in range(max_iterations):
            if progress:
                if bar is not None:
                    bar.close()
                bar = Progress(len(params) + 1, unit=f"simulations (iteration {iteration + 1})")
            # Gauss-Newton with a finite-difference Jacobian; positive parameters move
            # multiplicatively (rates enter as 1/x), the step is halved until it helps
            columns, logs = [], []
            for name in params:
                value = current[name]
                log_space = value > 0
                if log_space:
                    trial_value = value * 1.05
                    if isinstance(profile.get(name), int):
                        trial_value = max(round(trial_value), value + 1)
                    step = np.log(trial_value / value)
                else:
                    step = max(abs(x0[name]) * 0.05, 1.0)
                    trial_value = value + step
                trial = dict(current)
                trial[name] = trial_value
                column = (evaluate(trial, f"d/d {name}") - r0) / step
                if log_space and not np.any(np.abs(column) > 1e-12):
                    # a parameter fitted to (nearly) zero has no multiplicative handle left:
                    # probe it additively, and move it additively (bounded at zero)
                    log_space = False
                    step = max(abs(x0[name]) * 0.05, 1.0)
                    trial[name] = value + step
                    column = (evaluate(trial, f"d/d {name}") - r0) / step
                if iteration == 0 and not np.any(np.abs(column) > 1e-12):
                    raise UserError(f"--fit {name}: no fitted point depends on it "
                                    f"(choose points it affects with --points)")
                columns.append(column)
                logs.append(log_space)
            jac = np.column_stack(columns)
            lower = np.array([-np.inf if lg else -current[n] for n, lg in zip(params, logs)])
            delta = lsq_linear(jac, -r0, bounds=(lower, np.inf)).x
            # trust region: a positive parameter moves at most x10 or /10 per iteration
            delta = np.where(logs, np.clip(delta, -np.log(10), np.log(10)), delta)
            rms0 = float(np.sqrt(np.mean(r0 ** 2)))
            for _ in range(6):
                trial = {n: (current[n] * float(np.exp(d)) if lg else current[n] + float(d))
                         for n, d, lg in zip(params, delta, logs)}
                r1 = evaluate(trial)
                if np.sqrt(np.mean(r1 ** 2)) < rms0:
                    break
                delta = delta / 2
            else:
                # the joint step fails (noisy or strongly nonlinear points): move the
                # parameters one at a time, each by its own Gauss-Newton step, keeping a move
                # only if it improves the fit (a parameter whose points are independent of the
                # rest, e.g. a baseline, is not held back by the others)
                trial, r1 = _coordinate_steps(current, r0, jac, logs, params, evaluate)
                if r1 is None:
                    say(f"  iteration {iteration + 1}: no step improves the fit; stopping")
                    break
                say(f"  iteration {iteration + 1}: the joint step does not improve the fit; "
                    f"moved parameters one at a time")
            moved = max(abs(trial[n] - current[n]) / max(abs(current[n]), 1e-9) for n in params)
            current, r0 = trial, r1
            say(f"  iteration {iteration + 1}: rms relative error {rms0:.4f}"
                f" -> {np.sqrt(np.mean(r0 ** 2)):.4f}")
            if moved < 1e-3 or rms0 - np.sqrt(np.mean(r0 ** 2)) < 1e-4:
                break
        else:   # no break: the limit came first
            say(f"  stopped at --max-iterations {max_iterations} while the fit still improved: "
                f"rerun with a higher limit, or from the written profile")
    finally:
        if bar is not None:
            bar.close()

    # a profile calibrated in stages keeps what earlier stages fitted
    previous = {} if fresh else profile.data.get("calibration", {})
    fitted_ids = list(dict.fromkeys(list(previous.get("points", []))
                                    + [point_id(m) for m in fit_rows]))
    new_profile = _with(profile, current)
    new_profile.data["calibration"] = {
        "fitted": list(dict.fromkeys(list(previous.get("fitted", [])) + list(params))),
        "points": fitted_ids,
    }
    all_cells = cells_for(measured)
    before = join(measured, run_cells(all_cells, profile, jobs), fitted_ids)
    after = join(measured, run_cells(all_cells, new_profile, jobs), fitted_ids)
    echo("")
    wide = max(len("parameter"), *map(len, params))
    echo(f"{'parameter':<{wide}} {'before':>14} {'after':>14}")
    for name in params:
        echo(f"{name:<{wide}} {x0[name]:>14.6g} {current[name]:>14.6g}")
    echo("")
    wide = max([len("point")] + [len(a["point"]) for a in after])   # names whole
    echo(f"{'point':<{wide}} {'measured':>11} {'before':>11} {'after':>11} {'error':>8}  status")
    for b, a in sorted(zip(before, after), key=lambda t: (t[1]["status"] != "fitted",
                                                          t[1]["point"])):
        err = a["rel_error"]
        echo(f"{a['point']:<{wide}} {a['measured']:>11.6g} {b['predicted']:>11.6g} "
             f"{a['predicted']:>11.6g} {err * 100 if math.isfinite(err) else float('nan'):>7.2f}%"
             f"  {a['status']}{'' if a['ok'] else '  OUT OF TOLERANCE'}")
    if out is not None:
        write_profile(profile.path, new_profile, current, out)
        echo(f"\nwrote {out}")
    return new_profile, after


def write_profile(base_path, new_profile, values, out) -> None:
    """The base file with ``values`` substituted in place and a fresh ``[calibration]`` table."""
    text = Path(base_path).read_text(encoding="utf-8")
    text = re.split(r"\n\[calibration\]\n", text)[0].rstrip("\n") + "\n"
    for name, value in values.items():
        section, key = name.rsplit(".", 1)
        text = _substitute(text, section, key, new_profile.get(name))
    cal = new_profile.data["calibration"]
    lines = ["", "[calibration]",
             "# written by `sim calibrate`: the parameters fitted and the measured points used",
             "fitted = [" + ", ".join(f'"{p}"' for p in cal["fitted"]) + "]",
             "points = ["]
    lines += [f'  "{p}",' for p in cal["points"]]
    lines += ["]", ""]
    text += "\n".join(lines)
    import tomllib
    data = tomllib.loads(text)
    validate(data, out)
    atomic_write(out, text)


def _substitute(text, section, key, value):
    lines = text.split("\n")
    current = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current = stripped[1:-1].strip()
            continue
        if current == section and re.match(rf"^{re.escape(key)}\s*=", stripped):
            lines[i] = f"{key} = {_toml_number(value)}"
            return "\n".join(lines)
    raise UserError(f"cannot find {section}.{key} in the base profile text")


def _toml_number(value):
    if isinstance(value, int):
        return str(value)
    text = f"{value:.6g}"
    if "e" not in text and "." not in text:
        text += ".0"
    return text
