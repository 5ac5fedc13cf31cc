"""burn-optim 0.22.1's SGD and Adam as they touch the autodiff bookkeeping (ops.md section 3).

``GradientsParams.from_grads`` removes each parameter's gradient from the
backward's Gradients. ``Sgd.step`` updates each parameter on the inner backend
(``grad * lr`` and a subtraction: plain ops, no autodiff step) and puts the
result back with ``from_inner`` + ``require_grad``: a new node id and a RootStep
in a brand-new graph, per parameter per step.

``Adam`` (``AdamConfig::new().init()``: beta 0.9 / 0.999, epsilon 1e-5, no
amsgrad, no weight decay) runs ``adam.rs``'s ``AdaptiveMomentum::transform`` op by
op on the inner backend, so each op is costed and placed (in place or a new
buffer) as any other Flex op, and its two moment tensors per parameter stay
alive in the optimizer between steps. Nothing about Adam is calibrated.
"""

from __future__ import annotations

import math

from .errors import UserError
from .tensor import Tensor, drop

__all__ = ["GradientsParams", "Sgd", "Adam", "OPTIMIZERS"]


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


class Adam:
    """Adam with burn's default config; ``states`` holds each parameter's moments.

    Per parameter and step, as ``adam.rs`` writes it (f32 elementwise ops on the
    inner device; "in place" where burn-flex reuses a uniquely owned operand):

    * first step: ``m1 = grad.clone() * (1 - b1)`` (a new buffer: the clone shares
      grad's), ``m2 = grad.square() * (1 - b2)`` (``square`` is ``mul(x, x)``: a new
      buffer; grad is consumed);
    * later steps: ``m1 = m1 * b1 + grad.clone() * (1 - b1)`` and
      ``m2 = m2 * b2 + grad.square() * (1 - b2)`` (the moments in place);
    * ``update = (m1.clone() * c) / (m2.clone().sqrt() + eps')`` (two new buffers,
      the division in place), ``delta = update * lr``, ``param - delta`` (in place).
    """

    beta_1, beta_2, epsilon = 0.9, 0.999, 1e-5

    def __init__(self):
        #: param_id -> [time, moment_1, moment_2] (plain tensors on the inner device)
        self.states = {}

    def step(self, lr, module, grads: GradientsParams):
        """Update ``module``'s parameters in place; returns the module (as burn's ``step``)."""
        params = [p for p in module.params() if p.param_id in grads.grads]
        if not params:
            return module
        sim = params[0].tensor.device.sim
        if sim.policy_name == "pytorch":
            raise UserError("Adam is modelled for burn's optimizer only, not under the "
                            "pytorch policy (torch.optim.Adam runs other ops)")
        sim.timing.optimizer_step(len(params))
        sim.touched.touch_code("optimizer")
        b1, b2 = self.beta_1, self.beta_2
        for param in params:
            device = param.tensor.device
            grad = grads.grads.pop(param.param_id)   # GradientsParams::remove: moved out
            inner = param.tensor.without_autodiff()
            param.tensor = None
            state = self.states.pop(param.param_id, None)
            if state is None:
                time = 1
                m1 = grad.clone().mul_scalar(1.0 - b1)
                m2 = grad.square()
                drop(grad)
                m2 = m2.mul_scalar(1.0 - b2)
            else:
                time, m1, m2 = state
                time += 1
                m1 = m1.mul_scalar(b1)
                m1 = m1.add(grad.clone().mul_scalar(1.0 - b1))
                m2 = m2.mul_scalar(b2)
                square = grad.square()
                drop(grad)
                m2 = m2.add(square.mul_scalar(1.0 - b2))
                del square
            correction = math.sqrt(1.0 - b2 ** time)
            factor = correction / (1.0 - b1 ** time)
            update = m1.clone().mul_scalar(factor).div(
                m2.clone().sqrt().add_scalar(self.epsilon * correction))
            self.states[param.param_id] = [time, m1, m2]
            updated = inner - update.mul_scalar(lr)
            del inner, update
            param.tensor = Tensor.from_inner(updated, device).require_grad()
            del updated
        return module


#: name -> optimizer class (what ``--set optimizer=NAME`` picks in the workloads)
OPTIMIZERS = {"sgd": Sgd, "adam": Adam}
