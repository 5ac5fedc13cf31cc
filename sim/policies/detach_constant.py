"""``detach-constant``: ``detach`` of a leaf that requires grad yields a constant (PyTorch semantics)."""

from __future__ import annotations

from .base import Policy

__all__ = ["DetachConstant"]


class DetachConstant(Policy):
    name = "detach-constant"
    changes = ("ops/tensor.rs float_detach: return AutodiffTensor::new(primitive) without "
               "re-applying require_grad (no RootStep, no new graph).")
    expected = ("EMA/target-network snapshots stop growing a tracked chain: flat ms/step in "
                "p10-ema detach and no consumed-graph panic in target mode. Semantic change: "
                "a detached parameter no longer requires grad.")
    semantic_change = True

    def detach(self, tensor):
        return tensor.rewrap(tensor.device)
