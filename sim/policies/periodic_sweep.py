"""``periodic-sweep``: run the orphan sweep every N registrations, backward or not."""

from __future__ import annotations

from .base import Policy

__all__ = ["PeriodicSweep"]

#: registrations between sweeps
SWEEP_EVERY = 65536


class PeriodicSweep(Policy):
    name = "periodic-sweep"
    changes = (f"GraphMutexClient::register counts registrations and calls "
               f"cleanup_orphaned_entries every {SWEEP_EVERY} of them, in addition to after "
               f"each backward.")
    expected = ("Bounds untracked records in loops that never call backward (inference, "
                "validation) at the price of a periodic O(entries) sweep; does not help a "
                "reachable chain (EMA).")

    def __init__(self, sim):
        super().__init__(sim)
        self.count = 0

    def ff_horizon(self, effect) -> float:
        if not effect.registered:
            return float("inf")
        return max(0, (SWEEP_EVERY - 1 - self.count) // effect.registered)

    def ff_apply(self, effect, count, run) -> None:
        super().ff_apply(effect, count, run)
        # every registration counts, those of loops that leave nothing behind too
        self.count += effect.registered * count

    def on_register(self, client, rc, step) -> None:
        super().on_register(client, rc, step)
        self.count += 1
        if self.count >= SWEEP_EVERY:
            self.count = 0
            self.cleanup_orphaned_entries(client)
