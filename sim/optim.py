"""burn-optim 0.22.1's SGD as it touches the autodiff bookkeeping (ops.md section 3).

``GradientsParams.from_grads`` removes each parameter's gradient from the
backward's Gradients. ``Sgd.step`` updates each parameter on the inner backend
(``grad * lr`` and a subtraction: plain ops, no autodiff step) and puts the
result back with ``from_inner`` + ``require_grad``: a new node id and a RootStep
in a brand-new graph, per parameter per step.
"""

from __future__ import annotations

import math

from .tensor import Tensor

__all__ = ["GradientsParams", "Sgd"]


class GradientsParams:
    """Parameter id -> gradient (a plain tensor)."""

    def __init__(self, grads):
        self.grads = grads

    @classmethod
    def from_grads(cls, grads, module) -> "GradientsParams":
        found = {}
        for param in module.params():
            if param.tensor is None or not param.tensor.is_require_grad():
                continue
            grad = grads.remove(param.tensor)
            if grad is not None:
                found[param.param_id] = grad
        return cls(found)


class Sgd:
    """SGD without momentum or weight decay."""

    def step(self, lr, module, grads: GradientsParams):
        """Update ``module``'s parameters in place; returns the module (as burn's ``step``)."""
        params = [p for p in module.params() if p.param_id in grads.grads]
        if params:
            sim = params[0].tensor.device.sim
            sim.timing.optimizer_step(len(params))
            sim.touched.touch_code("optimizer")   # burn-optim's step: text on first use
        for param in module.params():
            grad = grads.grads.get(param.param_id)
            if grad is None:
                continue
            device = param.tensor.device
            backend = device.backend
            inner = param.tensor.without_autodiff()
            param.tensor = None
            n = math.prod(param.shape)
            device.sim.timing.optimizer_update(n, backend)
            buf = device.sim.policy.sgd_update(backend, inner, grad, param.shape)
            del grad
            updated = Tensor(inner.device, param.shape, buf)
            del inner, buf
            param.tensor = Tensor.from_inner(updated, device).require_grad()
        return module
