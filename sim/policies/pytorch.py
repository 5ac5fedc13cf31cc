"""``pytorch``: PyTorch autograd's reference semantics, for the PyTorch rows of the seeds."""

from __future__ import annotations

from .drop_release import DropRelease
from .detach_constant import DetachConstant

__all__ = ["PyTorch"]

_NO_LOCATOR = ("new_graph_ns", "merge_ns", "sweep_fixed_ns", "sweep_copy_entry_ns",
               "sweep_visit_ns", "scan_node_ns", "sweep_free_ns", "free_unavailable_node_ns",
               "pop_scan_group_ns")


class PyTorch(DropRelease):
    name = "pytorch"
    changes = ("Not a patch of burn: PyTorch's model. An op records a node only if an input "
               "requires grad (no untracked records); a graph is owned by its outputs and "
               "freed by reference counting when they drop; detach() gives a constant; "
               "backward frees what it consumed; there is no global locator and no sweep. "
               "Compute and runtime costs come from the profile's [pytorch] table.")
    expected = "Flat ms/step for EMA detach and target (the p10-ema-pytorch rows)."
    semantic_change = True

    detach = DetachConstant.detach

    def __init__(self, sim):
        super().__init__(sim)
        for key in _NO_LOCATOR:
            sim.timing.p[key] = 0.0

    def register_untracked(self, client, rc, step, device) -> None:
        """requires_grad=False everywhere: no grad_fn, nothing recorded."""

    def after_backward(self, client) -> None:
        """No sweep: nothing outlives its owners (drops during the backward are applied now).

        PyTorch's CPU allocator drifts upward by a small amount per training step
        (``pytorch.rss_growth_per_step_bytes``, fitted on the PyTorch rows).
        """
        self.release_deferred()
        self.sim.rss_extra_bytes += self.sim.profile.pytorch["rss_growth_per_step_bytes"]

    def first_backward(self) -> None:
        """PyTorch's one-time costs at the first step (runtime and allocator warm-up)."""
        sim = self.sim
        sim.charge(sim.profile.pytorch["first_step_ns"])
        sim.rss_extra_bytes += sim.profile.pytorch["baseline_delta_bytes"]

    def rates(self, sim, backend):
        return sim.profile.pytorch
