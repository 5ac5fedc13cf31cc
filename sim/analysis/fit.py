"""The fit of ``sim calibrate``: residuals of fitted points, and bounded Gauss-Newton steps
over a finite-difference Jacobian.

The command (:mod:`sim.commands.calibrate`) reads the measured points, runs the cells,
prints and writes the profile; this module is the maths between: :func:`residuals` of a
prediction against the fitted points, :func:`gauss_newton` to move the parameters, given
a function that simulates a set of values and returns its residuals.

Residuals are relative errors (absolute, in the metric's slack, for points measured as
zero). Positive parameters move multiplicatively (rates enter the model as ``1/x``), a
parameter at zero additively, bounded at zero; each iteration solves a bounded linear
least-squares problem (:func:`scipy.optimize.lsq_linear`), halves the step until it
helps, and falls back to moving one parameter at a time (:func:`coordinate_steps`).

Examples
--------
A model ``y = a * x`` fitted to points at ``a = 3`` (from ``a = 1``):

>>> import numpy as np
>>> xs = np.array([1.0, 2.0, 4.0])
>>> values, r = gauss_newton({"a": 1.0}, lambda v, label="": (v["a"] * xs - 3 * xs) / (3 * xs),
...                          say=lambda text: None)
>>> round(values["a"], 3), float(np.max(np.abs(r))) < 1e-4
(3.0, True)
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import lsq_linear

from ..errors import UserError
from .compare import SLACK, join, point_id

__all__ = ["MIN_EFFECT", "MIN_GAIN", "residuals", "gauss_newton", "coordinate_steps",
           "check_dependence"]

#: the smallest change of a fitted point's relative error the +5 % probe of a parameter
#: must cause (somewhere) for the parameter to be fitted: 0.005 %, a parameter that would
#: have to move 10x to change a point by 0.01 % (the rms resolution the fit reports)
MIN_EFFECT = 5e-5

#: the least gain in rms relative error the first step must bring for the values to
#: move at all (the resolution the fit reports at; it stops below it too)
MIN_GAIN = 1e-4


def _scale(m):
    value = abs(float(m["value"]))
    return value if value > 0 else max(SLACK.get(m["metric"], 1.0), 1e-9)


def residuals(fit_rows, predicted, policy="burn-0.22.1"):
    """The residual of each fitted point (``fit_rows``, measured rows) against the
    ``predicted`` rows of ``policy``: (predicted - measured) / measured, or over the
    metric's slack for a point measured as zero. A point with no prediction is a
    :class:`~sim.errors.UserError`."""
    joined = join(fit_rows, predicted, policy=policy)
    r = []
    for m, e in zip(fit_rows, joined):
        if math.isnan(e["predicted"]):
            raise UserError(f"no prediction for fitted point {point_id(m)}")
        r.append((e["predicted"] - e["measured"]) / _scale(m))
    return np.array(r)


def _rms(r) -> float:
    return float(np.sqrt(np.mean(r ** 2)))


def coordinate_steps(current, r0, jac, logs, params, evaluate):
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
            if _rms(r1) < _rms(best_r):
                best, best_r, improved = trial, r1, True
                break
            d /= 2
    return (best, best_r) if improved else (current, None)


def check_dependence(name, value, column, r0, relative) -> None:
    """Refuse ``--fit name`` when no fitted point depends on it (``column``: d residual /
    d parameter, all zero), or, for a parameter moved in log space (``relative``), when
    the points hardly depend on it at ``value`` (5 % more changes no point's relative
    error by :data:`MIN_EFFECT` or more) and already agree with it (moving it alone could
    explain less than :data:`MIN_GAIN` of any point's residual ``r0``, to first order):
    any value would fit them about as well, so the fit would only move it on noise. (A
    weak parameter far from what its points need, e.g. a warm-up of 1 us where they ask
    for 1 ms, is fitted: the residual it explains is large.)"""
    if not np.any(np.abs(column) > 1e-12):
        raise UserError(f"--fit {name}: no fitted point depends on it "
                        f"(choose points it affects with --points)")
    effect = float(np.max(np.abs(column))) * float(np.log(1.05))
    explained = float(np.max(np.abs(column * (column @ r0) / (column @ column))))
    if relative and effect < MIN_EFFECT and explained < MIN_GAIN:
        raise UserError(f"--fit {name}: the fitted points hardly depend on it (5 % more than "
                        f"{value:g} moves them by {effect * 100:.4f} % at most, less than "
                        f"{MIN_EFFECT * 100:g} %) and already agree with it (moving it would gain "
                        f"{explained * 100:.4f} % of error at most): nothing to fit; "
                        f"choose points it affects with --points")


def _jacobian(current, x0, r0, evaluate, integer, first, additive=()):
    """The finite-difference Jacobian at ``current``: ``(columns, logs)``, each parameter
    probed 5 % up in log space (+1 at least for an integer one), or additively from zero
    (or where the multiplicative probe moves nothing, or for the names in ``additive``:
    a cost the points are linear in, moved additively and bounded at zero)."""
    columns, logs = [], []
    for name, value in current.items():
        log_space = value > 0 and name not in additive
        if log_space:
            trial_value = value * 1.05
            if name in integer:
                trial_value = max(round(trial_value), value + 1)
            step = np.log(trial_value / value)
        else:
            step = max(abs(value) * 0.05, abs(x0[name]) * 0.05, 1.0)
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
        if first:
            check_dependence(name, value, column, r0, log_space)
        columns.append(column)
        logs.append(log_space)
    return np.column_stack(columns), logs


def gauss_newton(x0, evaluate, r0=None, integer=(), max_iterations=8, say=print,
                 on_iteration=None, additive=()):
    """Fit the parameters ``x0`` (name -> start value): ``(values, residuals)``.

    ``evaluate(values, label)`` returns the residuals at ``values`` (``label`` says what
    the simulation is for: ``"d/d NAME"``, ``"step"``); ``r0``: its residuals at ``x0``
    (evaluated here if None); ``integer``: names of the parameters that take whole values;
    ``say(text)``: one line per iteration (and why it stopped); ``on_iteration(i)``:
    called before iteration ``i`` (from 0) simulates anything. At most ``max_iterations``
    steps; stopping at that limit while the fit still improves is said. ``additive``:
    names moved additively (bounded at zero) instead of in log space: costs the points are
    linear in, whose least-squares values one step reaches (in log space a cost the
    points want near zero creeps there by at most 10x an iteration).
    """
    params = list(x0)
    current = dict(x0)
    if r0 is None:
        r0 = evaluate(current, "initial point")
    for iteration in range(max_iterations):
        if on_iteration is not None:
            on_iteration(iteration)
        jac, logs = _jacobian(current, x0, r0, evaluate, set(integer), iteration == 0,
                              set(additive))
        lower = np.array([-np.inf if lg else -current[n] for n, lg in zip(params, logs)])
        delta = lsq_linear(jac, -r0, bounds=(lower, np.inf)).x
        # trust region: a positive parameter moves at most x10 or /10 per iteration
        delta = np.where(logs, np.clip(delta, -np.log(10), np.log(10)), delta)
        rms0 = _rms(r0)
        for _ in range(6):
            trial = {n: (current[n] * float(np.exp(d)) if lg else current[n] + float(d))
                     for n, d, lg in zip(params, delta, logs)}
            r1 = evaluate(trial, "step")
            if _rms(r1) < rms0:
                break
            delta = delta / 2
        else:
            # the joint step fails (noisy or strongly nonlinear points): move the
            # parameters one at a time, each by its own Gauss-Newton step, keeping a move
            # only if it improves the fit (a parameter whose points are independent of the
            # rest, e.g. a baseline, is not held back by the others)
            trial, r1 = coordinate_steps(current, r0, jac, logs, params,
                                         lambda values: evaluate(values, "step"))
            if r1 is None:
                say(f"  iteration {iteration + 1}: no step improves the fit; stopping")
                break
            say(f"  iteration {iteration + 1}: the joint step does not improve the fit; "
                f"moved parameters one at a time")
        if iteration == 0 and rms0 - _rms(r1) < MIN_GAIN:
            say(f"  iteration 1: rms relative error {rms0:.4f} -> {_rms(r1):.4f}, a gain "
                f"under {MIN_GAIN:g}: the values are kept (the fitted points do not ask for "
                f"another)")
            break
        moved = max(abs(trial[n] - current[n]) / max(abs(current[n]), 1e-9) for n in params)
        current, r0 = trial, r1
        say(f"  iteration {iteration + 1}: rms relative error {rms0:.4f} -> {_rms(r0):.4f}")
        if moved < 1e-3 or rms0 - _rms(r0) < MIN_GAIN:
            break
    else:   # no break: the limit came first
        say(f"  stopped at --max-iterations {max_iterations} while the fit still improved: "
            f"rerun with a higher limit, or from the written profile")
    return current, r0
