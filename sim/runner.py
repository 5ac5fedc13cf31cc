"""Run one cell: a workload variant under a policy with a profile, to rows of the schema."""

from __future__ import annotations

import traceback

from .engine import Limits, Simulation
from .errors import UserError
from .profile import load_profile
from .workloads import load_workload

__all__ = ["run_cell"]


def run_cell(workload, variant, policy="burn-0.22.1", profile="m2max-macos", sets=None,
             limits=None, observables=True, fast_forward=True):
    """Simulate ``workload``'s ``variant``; returns the rows (dicts), ``policy``/``profile`` added.

    ``workload`` and ``profile`` may be names or loaded objects; ``sets`` maps
    parameter names to values (strings are converted to the parameter's type).
    """
    if isinstance(workload, str):
        workload = load_workload(workload)
    if isinstance(profile, str):
        profile = load_profile(profile)
    params = workload.resolve(variant, sets)
    sim = Simulation(profile, policy=policy, experiment=workload.name, variant=variant,
                     limits=limits or Limits(), fast_forward=fast_forward)
    if not observables:
        sim.observables = lambda: {}
    try:
        rows = sim.run(lambda s, **p: workload.run(s, variant, **p), params)
    except UserError:
        raise
    except Exception as exc:  # an error in the workload's own code: name its file and line
        raise UserError(_describe(exc, workload)) from None
    for row in rows:
        row["policy"] = policy
        row["profile"] = profile.name
    return rows


def _describe(exc, workload) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    for frame in reversed(frames):
        if frame.filename == str(workload.path):
            where = f":{frame.lineno}"
            break
    text = str(exc).splitlines()[0] if str(exc) else ""
    return (f"{workload.path}{where}: workload {workload.name} raised "
            f"{type(exc).__name__}{': ' + text if text else ''}")
