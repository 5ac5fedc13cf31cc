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
``may_compact``           (simulator only) exact mode may keep dead
                          single-node graphs as run records
========================  ====================================================

Each policy lives in its own module and overrides only its seam(s).
"""

from __future__ import annotations

from ..errors import UserError
from .base import Policy
from .burn_0_20_pre1 import Burn020Pre1
from .skip_untracked import SkipUntracked
from .drop_release import DropRelease
from .detach_constant import DetachConstant
from .dedup_sweep import DedupSweep
from .periodic_sweep import PeriodicSweep
from .pytorch import PyTorch

__all__ = ["Policy", "POLICIES", "get_policy", "policy_names"]

POLICIES = {cls.name: cls for cls in (
    Policy, Burn020Pre1, SkipUntracked, DropRelease, DetachConstant, DedupSweep,
    PeriodicSweep, PyTorch,
)}


def policy_names():
    return list(POLICIES)


def get_policy(name):
    """The policy class called ``name``."""
    try:
        return POLICIES[name]
    except KeyError:
        raise UserError(f"unknown policy '{name}' (valid: {', '.join(POLICIES)})") from None
