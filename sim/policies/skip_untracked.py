"""``skip-untracked``: an op with no tracked input registers nothing when checkpointing is disabled."""

from __future__ import annotations

from ..burn.checkpoint import DISABLED
from .base import Policy

__all__ = ["SkipUntracked"]


class SkipUntracked(Policy):
    name = "skip-untracked"
    changes = ("ops/base.rs UnTracked finish: when the device's checkpoint strategy is "
               "NoCheckpointing, skip register_step (no UntrackedOpsStep, no graph, no locator "
               "entry); under BalancedCheckpointing register as today, since a memory-bound "
               "child's retro-forward may need the untracked parent.")
    expected = ("Flat memory for inference on an autodiff device (adleak flex.autodiff, "
                "pit-infer B) with no semantic change: untracked steps are never reached by a "
                "backward.")

    def register_untracked(self, client, rc, step, device) -> None:
        if device.checkpointing != DISABLED:
            client.register(rc, step)
