"""Bookkeeping policies: burn's behaviour, its history, and candidate fixes.

A policy is a small, named variation of the simulated bookkeeping. The mirror
of burn (``sim.autodiff``) calls the policy at the few seams where a fix would
change burn's code, and the default of each seam is burn 0.22.1's behaviour:

========================  ====================================================
seam                      where it is in burn 0.22.1
========================  ====================================================
``register_untracked``    ``ops/base.rs`` UnTracked ``finish``: register an
                          ``UntrackedOpsStep`` (``GraphMutexClient::register``)
``after_backward``        ``GraphMutexClient::backward``: then
                          ``GraphCleaner::cleanup_orphaned_entries``
``detach``                ``ops/tensor.rs`` ``float_detach``: a new leaf that
                          keeps ``require_grad``
``on_last_handle``        nothing (``AutodiffTensor`` has no ``Drop``)
``on_register``           nothing (no sweep outside backward)
``rates``                 the inner backend's compute rates
``in_place``              burn-flex ``binary_op_typed``/``scalar_op_typed``:
                          write into a uniquely owned operand
``sgd_update``            burn-optim ``sgd.rs``: ``tensor - grad * lr``
``adam_update``           burn-optim ``adam.rs``: moments, bias correction,
                          ``tensor - lr * m1 / (sqrt(m2) + eps)``
``may_compact``           (simulator only) exact mode may keep dead
                          single-node graphs as run records
========================  ====================================================

Each policy lives in its own module and overrides only its seam(s).

A user's fix is a policy too: a ``.py`` file defining one subclass of
:class:`Policy` with its own ``name`` (``--policy path/to/fix.py`` wherever a
policy is named; :func:`load_policy_file`). Its class is used as written, except
that fast-forward stays off for it unless the file defines ``ff_horizon``: the
simulator cannot see state a policy keeps for itself, so every loop iteration
is simulated. A policy that defines it and keeps counters updates them in
``ff_apply``, which fast-forward calls for every batch of iterations it applies; a loop
that grows a chain (:mod:`sim.chainrun`) is fast-forwarded under it only if it also
defines ``ff_chain`` (the members built and the node ids moved).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import UserError
from ..userfile import describe_raise, exec_user_file
from .base import Policy
from .burn_0_20_pre1 import Burn020Pre1
from .skip_untracked import SkipUntracked
from .drop_release import DropRelease
from .detach_constant import DetachConstant
from .dedup_sweep import DedupSweep
from .periodic_sweep import PeriodicSweep
from .pytorch import PyTorch

__all__ = ["Policy", "POLICIES", "SEAMS", "HOOKS", "get_policy", "policy_names",
           "load_policy_file", "policy_file", "policy_rank", "fast_forwards"]

#: the seams a policy overrides, each with where it is in burn 0.22.1 (the table above,
#: one line each; `sim policies` prints it)
SEAMS = {
    "register_untracked": "ops/base.rs UnTracked finish: register an UntrackedOpsStep "
                          "(GraphMutexClient::register)",
    "after_backward": "GraphMutexClient::backward: then GraphCleaner::cleanup_orphaned_entries",
    "detach": "ops/tensor.rs float_detach: a new leaf that keeps require_grad",
    "on_last_handle": "nothing (AutodiffTensor has no Drop)",
    "on_register": "nothing (no sweep outside backward)",
    "rates": "the inner backend's compute rates",
    "in_place": "burn-flex binary_op_typed/scalar_op_typed: write into a uniquely owned "
                "operand",
    "sgd_update": "burn-optim sgd.rs: tensor - grad * lr",
    "adam_update": "burn-optim adam.rs: moments, bias correction, "
                   "tensor - lr * m1 / (sqrt(m2) + eps)",
    "may_compact": "(simulator only) exact mode may keep dead single-node graphs as run "
                   "records",
}

#: further methods a policy may override: its own bookkeeping and fast-forward
HOOKS = {
    "on_node_removed": "a node left a graph's nodes map (a policy's own index of nodes)",
    "first_backward": "the process's first backward: lazy global state, one-time warm-up",
    "ff_horizon": "fast-forward: iterations that may be applied before the policy acts "
                  "differently",
    "ff_apply": "fast-forward applied a batch of iterations: update the policy's counters",
    "ff_chain": "fast-forward built a growing chain's members in closed form and moved node "
                "ids: update a policy's own index of nodes (a file policy without it runs "
                "chain loops exactly)",
}

POLICIES = {cls.name: cls for cls in (
    Policy, Burn020Pre1, SkipUntracked, DropRelease, DetachConstant, DedupSweep,
    PeriodicSweep, PyTorch,
)}


#: policies loaded from files in this process: name -> (class, resolved path)
_FILES = {}

#: what a policy name may contain (it names rows, cache entries and figure legends)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def policy_names():
    """The built-in policies' names, in the registry's order."""
    return list(POLICIES)


def get_policy(name):
    """The policy class called ``name``, or the one defined in the ``.py`` file ``name``."""
    text = str(name)
    cls = POLICIES.get(text)
    if cls is None and text in _FILES:
        cls = _FILES[text][0]
    if cls is None and text.endswith(".py"):
        cls = load_policy_file(text)
    if cls is None:
        raise UserError(f"unknown policy '{text}' (valid: {', '.join(POLICIES)}, "
                        f"or a path to a .py file defining one)")
    return cls


def policy_file(name):
    """The file a policy loaded from a file came from (a ``str``), or None for a built-in."""
    entry = _FILES.get(name)
    return entry[1] if entry else None


def policy_rank(name) -> tuple:
    """Sort key of a policy name: the built-ins in registry order, then file policies in
    the order they were loaded, then any other name (e.g. read back from old results)."""
    if name in POLICIES:
        return (list(POLICIES).index(name), "")
    if name in _FILES:
        return (len(POLICIES) + list(_FILES).index(name), "")
    return (len(POLICIES) + len(_FILES), name)


def load_policy_file(path):
    """Load the policy a user's file defines and register it under its ``name``.

    The file defines exactly one subclass of :class:`Policy` (or names the one to
    use as ``POLICY``) with a ``name`` of its own; ``changes`` and ``expected``
    describe it as the built-ins' do (the class docstring stands in for ``changes``).
    Loading the same file again returns the same class. Any problem is a
    :class:`~sim.errors.UserError` naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such policy file")
    path = path.resolve()
    for cls, where in _FILES.values():
        if where == str(path):
            return cls
    module = exec_user_file(path, "_sim_policy")
    module_name = module.__name__
    cls = getattr(module, "POLICY", None)
    if cls is None:
        found = [c for c in vars(module).values() if isinstance(c, type)
                 and issubclass(c, Policy) and c.__module__ == module_name]
        if len(found) != 1:
            what = ("no subclass of sim.policies.Policy" if not found else
                    f"{len(found)} policies ({', '.join(c.__name__ for c in found)}): "
                    f"set POLICY to the one to use")
            raise UserError(f"{path}: a policy file must define one subclass of "
                            f"sim.policies.Policy; it defines {what}")
        cls = found[0]
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise UserError(f"{path}: POLICY must be a subclass of sim.policies.Policy")
    own = [c for c in cls.__mro__ if c.__module__ == module_name]
    name = cls.name if any("name" in vars(c) for c in own) else None
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UserError(f"{path}: {cls.__name__} must set name = '...' (letters, digits, "
                        f"'.', '_', '+', '-'), a name of its own")
    if name in POLICIES:
        raise UserError(f"{path}: policy name '{name}' is a built-in policy's; "
                        f"give yours a name of its own")
    if name in _FILES:
        raise UserError(f"{path}: policy name '{name}' is already taken by {_FILES[name][1]}")
    extra = {"__module__": module_name}
    if not any("changes" in vars(c) for c in own):
        doc = (cls.__doc__ or "").strip().split("\n")[0]
        extra["changes"] = doc or f"(no description: {path.name} sets no changes text)"
    if not any("expected" in vars(c) for c in own):
        extra["expected"] = "(not stated)"
    if not any("ff_horizon" in vars(c) for c in own):
        extra["ff_horizon"] = _exact_only
    elif not any("ff_chain" in vars(c) for c in own):
        # a chain's closed form shifts node ids and builds registrations no seam saw: a
        # file policy that gives no ff_chain runs such loops exactly
        extra["ff_horizon"] = _no_chain(cls.ff_horizon)
    extra["__init__"] = _reporting_init(cls.__init__, str(path), name)
    extra["__doc__"] = cls.__doc__
    extra["__qualname__"] = cls.__qualname__
    cls = type(cls.__name__, (cls,), extra)
    _FILES[name] = (cls, str(path))
    return cls


def _reporting_init(init, path, name):
    """The constructor of a file policy: ``init`` (its class's own), with an exception it
    raises made one :class:`~sim.errors.UserError` line naming the file and line, as an
    exception raised in one of its seams is (:func:`sim.runner.run_cell`)."""
    def __init__(self, sim):
        try:
            init(self, sim)
        except UserError:
            raise
        except Exception as exc:  # the user's constructor (or a seam it calls) raised
            raise UserError(describe_raise(exc, path, f"policy {name}")) from None
    return __init__


def fast_forwards(cls) -> bool:
    """Whether loops under policy ``cls`` may be fast-forwarded (False for a file policy
    that gives no ``ff_horizon``)."""
    return cls.ff_horizon is not _exact_only


def _exact_only(self, effect) -> float:
    """Fast-forward horizon of a file policy that does not give its own: none."""
    return 0


def _no_chain(horizon):
    """``horizon`` (a file policy's ``ff_horizon``), but 0 for a growing chain or a leaked
    graph (their members are built in closed form: a policy's own index of node ids
    would need :meth:`~sim.policies.base.Policy.ff_chain`)."""
    def ff_horizon(self, effect):
        return 0 if effect.shape in ("chain", "leak") else horizon(self, effect)
    ff_horizon.__doc__ = horizon.__doc__
    return ff_horizon
