"""``pytorch``: PyTorch autograd's reference semantics, for the PyTorch rows of the seeds."""

from __future__ import annotations

from .aten import AtenTiming
from ..burn.optim import torch_adam
from .drop_release import DropRelease, ReleaseOnDropClient, ReleaseOnDropMemory
from .detach_constant import DetachConstant

__all__ = ["PyTorch"]


class PyTorch(DropRelease):
    name = "pytorch"
    changes = ("Not a patch of burn: PyTorch's model. An op records a node only if an input "
               "requires grad (no untracked records); a graph is owned by its outputs and "
               "freed by reference counting when they drop; detach() gives a constant; "
               "backward frees what it consumed; there is no global locator and no sweep. "
               "Time is charged as the ATen ops eager PyTorch runs for each call (forward, "
               "autograd backward, torch.optim SGD and Adam; sim/policies/aten.py) at the profile's "
               "[pytorch] rates.")
    expected = "Flat ms/step for EMA detach and target (the p10-ema-pytorch rows)."
    semantic_change = True
    # Python frees a temporary when the expression that made it is done, not inside the op
    moves_operands = False
    framework = "pytorch"
    reference = "reference (PyTorch)"
    #: the profile parameter of the RSS-only drift per backward: a fitted constant, which
    #: the report names as such (not a growth the mechanism produces)
    fitted_drift = "pytorch.rss_growth_per_step_bytes"
    # the release without the burn patch's children tables, and autograd's: a node freed
    # however it goes (consumed by a backward too) frees the parents it leaves unneeded
    GraphMutexClient = ReleaseOnDropClient
    GraphMemoryManagement = ReleaseOnDropMemory

    def __init__(self, sim):
        super().__init__(sim)
        # PyTorch's costs replace burn's: ATen ops, autograd nodes, Python calls
        sim.timing = AtenTiming(sim, sim.profile.time, sim.profile.pytorch,
                                AtenTiming.caches(sim.profile.process))

    def detach(self, tensor):
        """``Tensor.detach``: an alias that does not require grad (one view call)."""
        self.sim.timing.python_view()
        return DetachConstant.detach(self, tensor)

    def on_register(self, client, rc, step) -> None:
        super().on_register(client, rc, step)
        self.sim.timing.annotate(step)

    def in_place(self, kind) -> bool:
        """Eager PyTorch allocates every op's output (only ``_``-suffixed ops write in place)."""
        return False

    def sgd_update(self, backend, inner, grad, shape):
        """``torch.optim.SGD`` on CPU: ``param.add_(grad, alpha=-lr)`` (single-tensor loop),
        in place in the parameter's storage."""
        return inner.prim

    def adam_update(self, adam, tensor, grad, state, lr):
        """``torch.optim.Adam`` on CPU (:func:`sim.burn.optim.torch_adam`): moments and
        parameter updated in place, two temporaries per step."""
        return torch_adam(adam, tensor, grad, state, lr)

    def register_untracked(self, client, rc, step, device) -> None:
        """requires_grad=False everywhere: no grad_fn, nothing recorded."""

    def after_backward(self, client) -> None:
        """No sweep: nothing outlives its owners (drops during the backward are applied now).

        PyTorch's CPU allocator drifts upward by a small amount per training step
        (``pytorch.rss_growth_per_step_bytes``, fitted on the PyTorch rows).
        """
        self.sim.timing.end_backward()
        client.release_deferred()
        self.sim.rss_extra_bytes += self.sim.profile.pytorch["rss_growth_per_step_bytes"]

    def first_backward(self) -> None:
        """PyTorch's one-time costs at the first step (runtime and allocator warm-up)."""
        sim = self.sim
        sim.charge(sim.profile.pytorch["first_step_ns"])
        sim.rss_extra_bytes += sim.profile.pytorch["baseline_delta_bytes"]

    def rates(self, sim, backend):
        return sim.profile.pytorch
