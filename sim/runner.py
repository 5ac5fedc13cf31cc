"""Run one cell: a workload variant under a policy with a profile, to rows of the schema."""

from __future__ import annotations

from .engine import Limits, Simulation
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
    rows = sim.run(lambda s, **p: workload.run(s, variant, **p), params)
    for row in rows:
        row["policy"] = policy
        row["profile"] = profile.name
    return rows
