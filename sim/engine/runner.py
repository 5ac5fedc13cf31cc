"""Run one cell: a workload variant under a policy with a profile, to rows of the schema."""

from __future__ import annotations

import traceback
from pathlib import Path

from .simulation import Limits, Simulation
from ..errors import LimitExceeded, UserError
from ..policies import policy_sources
from .profile import load_profile
from ..userfile import exception_frames, message_text, raised_text
from .workloads import load_workload

__all__ = ["run_cell"]


def run_cell(workload, variant, policy="burn-0.22.1", profile="m2max-macos", sets=None,
             limits=None, observables=True, fast_forward=True, keep=None, heartbeat=None,
             policy_reads=None):
    """Simulate ``workload``'s ``variant``; returns the rows (dicts), ``policy``/``profile`` added.

    ``workload`` and ``profile`` may be names or loaded objects; ``sets`` maps
    parameter names to values (strings are converted to the parameter's type);
    ``keep``: a list that receives the :class:`~sim.engine.simulation.Simulation` (its counters,
    for ``sim bench``); ``heartbeat``: called with it as the run goes
    (:class:`sim.commands.progress.Heartbeat`); ``policy_reads``: a set that receives the names of
    the policy's attributes the run read (:mod:`sim.policies.trace`).
    """
    if isinstance(workload, str):
        workload = load_workload(workload)
    if isinstance(profile, str):
        profile = load_profile(profile)
    params = workload.resolve(variant, sets)
    sim = Simulation(profile, policy=policy, experiment=workload.name, variant=variant,
                     limits=limits or Limits(), fast_forward=fast_forward,
                     policy_reads=policy_reads)
    if not observables:
        sim.observables = lambda: {}
    if keep is not None:
        keep.append(sim)
    sim.heartbeat = heartbeat
    try:
        rows = sim.run(lambda s, **p: _program(workload, s, variant, p), params)
    except UserError as exc:
        # the simulator refused what the workload (or policy) asked (a device it does not
        # have, shapes that do not match): the line that asked, where the message lacks it
        where = _where(exc, workload, sim.policy)
        if where is not None and not str(exc).startswith(where[0].rsplit(":", 1)[0]):
            exc = _same_kind(exc, f"{where[0]}: {exc}")
        if isinstance(exc, LimitExceeded):
            # a budget ends a run that was right so far: the rows it sampled go with the
            # error, for the caller to keep
            exc.rows = _labelled(list(sim.rows), sim, profile)
        raise exc from None
    except Exception as exc:  # an error in the workload's (or policy's) code: its file and line
        raise UserError(_describe(exc, workload, sim.policy)) from None
    workload.check_x_units(rows)
    return _labelled(rows, sim, profile)


def _labelled(rows, sim, profile) -> list:
    """``rows`` with the run's policy and profile names added."""
    for row in rows:
        row["policy"] = sim.policy_class.name     # the label: not a read of the run's
        row["profile"] = profile.name
    return rows


def _same_kind(exc, message):
    """``exc``'s class with ``message`` (a budget's error stays a ``LimitExceeded``)."""
    try:
        return type(exc)(message)
    except Exception:   # a subclass that takes other arguments
        return UserError(message)


def _program(workload, sim, variant, params):
    """The generator ``workload.run(sim, variant, **params)`` returns: the program the
    simulation runs; anything else is one error line naming the workload's file."""
    import inspect
    program = workload.run(sim, variant, **params)
    if not inspect.isgenerator(program):
        raise UserError(f"{workload.path}: run() must be a generator (it returned "
                        f"{type(program).__name__}): yield sim.sample(...) or sim.tick() "
                        f"where the program would print or sync")
    return program


def _where(exc, workload, policy):
    """``(PATH:LINE, what)`` of the innermost frame of ``exc``'s traceback in a policy
    file loaded with ``--policy FILE.py`` (``what``: ``policy NAME``) or in the workload's
    file (``workload NAME``); None if it passes through neither."""
    sources = policy_sources(policy.name)
    for frame in reversed(exception_frames(exc)):
        if frame.filename in sources:
            return f"{frame.filename}:{frame.lineno}", f"policy {policy.name}"
        if frame.filename == str(workload.path):
            return f"{workload.path}:{frame.lineno}", f"workload {workload.name}"
    return None


#: the simulator's own sources: an exception whose innermost frame is in them is named there too
_SIM_DIR = Path(__file__).resolve().parents[1]


def _inside_simulator(exc) -> str:
    """`` (inside the simulator, sim/PATH:LINE)`` where ``exc``'s innermost frame is in the
    simulator's own code (a bug to report, or an argument of a kind the simulator does not
    check), else nothing."""
    while exc.__cause__ is not None:      # SimPy re-raises a process's exception as a copy
        exc = exc.__cause__
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    path = Path(frames[-1].filename).resolve()
    if not path.is_relative_to(_SIM_DIR):
        return ""
    return f" (inside the simulator, sim/{path.relative_to(_SIM_DIR)}:{frames[-1].lineno})"


def _describe(exc, workload, policy) -> str:
    """One line naming the user's file and line where ``exc`` was raised: the innermost
    frame in a policy file loaded with ``--policy FILE.py``, else in the workload's file;
    where the innermost frame of all is in the simulator's own code, that too."""
    raised = raised_text(exc) + message_text(exc) + _inside_simulator(exc)
    where = _where(exc, workload, policy)
    if where is None:
        return f"{workload.path}: workload {workload.name} {raised}"
    return f"{where[0]}: {where[1]} {raised}"
