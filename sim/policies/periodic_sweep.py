"""``periodic-sweep``: run the orphan sweep every N registrations, backward or not."""

from __future__ import annotations

from ..burn.runtime.graph import GraphMutexClient
from .base import Policy

__all__ = ["PeriodicSweep", "PeriodicSweepClient"]

#: registrations between sweeps (``SWEEP_EVERY`` of experiments/patches/periodic-sweep.patch)
SWEEP_EVERY = 65536


class PeriodicSweepClient(GraphMutexClient):
    """``GraphMutexClient`` of ``experiments/patches/periodic-sweep.patch``."""

    def __init__(self, sim):
        super().__init__(sim)
        #: registrations since the last sweep outside backward (``static REGISTERED``)
        self.registered_since_sweep = 0

    def register(self, rc, step) -> None:
        """Register as burn does; every ``SWEEP_EVERY`` registrations, the orphan sweep a
        backward runs (the policy's seam ``cleanup_orphaned_entries``)."""
        super().register(rc, step)
        self.registered_since_sweep += 1
        if self.registered_since_sweep >= SWEEP_EVERY:
            self.registered_since_sweep = 0
            self.sim.policy.cleanup_orphaned_entries(self)


class PeriodicSweep(Policy):
    name = "periodic-sweep"
    changes = (f"GraphMutexClient::register counts registrations and calls "
               f"cleanup_orphaned_entries every {SWEEP_EVERY} of them, in addition to after "
               f"each backward.")
    expected = ("Bounds untracked records in loops that never call backward (inference, "
                "validation) at the price of a periodic O(entries) sweep; does not help a "
                "reachable chain (EMA).")

    GraphMutexClient = PeriodicSweepClient

