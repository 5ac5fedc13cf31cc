"""burn-optim 0.22.1's SGD and Adam as they touch the autodiff bookkeeping (ops.md section 3).

``GradientsParams.from_grads`` removes each parameter's gradient from the
backward's Gradients. ``Sgd.step`` updates each parameter on the inner backend
(``grad * lr`` and a subtraction: plain ops, no autodiff step) and puts the
result back with ``from_inner`` + ``require_grad``: a new node id and a RootStep
in a brand-new graph, per parameter per step.

``Adam`` (``AdamConfig::new().init()``: beta 0.9 / 0.999, epsilon 1e-5, no
amsgrad, no weight decay) runs ``adam.rs``'s ``AdaptiveMomentum::transform`` op by
op on the inner backend (:func:`burn_adam`), so each op is costed and placed (in
place or a new buffer) as any other Flex op, and its two moment tensors per
parameter stay alive in the optimizer between steps. Nothing about Adam is
calibrated. Under the ``pytorch`` policy the update is ``torch.optim.Adam``'s
(:func:`torch_adam`).
"""

from __future__ import annotations

import math

from .costs.tables import RawTable, TableLayout
from .tensor import Tensor, drop

__all__ = ["GradientsParams", "ModuleOptimizer", "Sgd", "Adam", "OPTIMIZERS", "burn_adam", "torch_adam"]


class GradientsParams:
    """Parameter id -> gradient (a plain tensor)."""

    def __init__(self, grads):
        self.grads = grads

    @classmethod
    def from_grads(cls, grads, module) -> "GradientsParams":
        """burn-optim's converter visits every parameter with ``param.val()`` (which
        initialises a lazy parameter, gradient or not) and removes its gradient."""
        found = {}
        for param in module.params():
            handle = param.val()
            if handle.is_require_grad():
                grad = grads.remove(handle)
                if grad is not None:
                    found[param.param_id] = grad
            drop(handle)
        return cls(found)


class ModuleOptimizer:
    """burn-optim's ``ModuleOptimizer``: the loop every optimizer shares, and its host
    bookkeeping. A subclass is the ``Optimizer`` (``_update``: one parameter's step).

    ``step`` visits the parameters that have a gradient, as ``map_float`` does: the
    parameter's tensor goes to the inner backend (the autodiff handle dropped first),
    ``_update`` computes the new tensor there, then ``ParameterContext::restore``
    (``from_inner`` + ``require_grad``: a new node and RootStep) and
    ``Param::from_mapped_value`` put it back.

    ``param_context`` is a hashbrown map ``ParamId -> OptimizationContext``
    (``optimizer_context_slot_bytes`` per slot; removed and re-inserted per parameter
    and step, so it grows to the parameter count and stays). Each update joins the
    parameter's module path into a new ``String`` (its length in bytes; the old one is
    freed) and replaces the state's ``Arc`` block (``state_key``: the layout key of
    its size). Their order per parameter follows ``map_float``: the path first, then
    the old context's path dropped, then the state.
    """

    #: layout key of the size of this optimizer's state Arc block
    state_key = "sgd_state_bytes"

    def __init__(self, sim=None):
        """``SgdConfig::new().init()`` (and Adam's): the optimizer's own blocks (its group
        ``Vec`` and ``Arc``) are allocated now on ``sim``'s heap, or at the first step
        where no simulation is given."""
        self._context = {}      # param_id -> (path bytes, state bytes)
        self._table = None
        self._heap = None
        self._blocks = ()
        if sim is not None:
            self._own_blocks(sim)

    def _own_blocks(self, sim) -> None:
        layout = sim.layout
        self._heap = sim.heap
        self._blocks = tuple(b for b in (layout.optimizer_groups_bytes,
                                         layout.optimizer_arc_bytes) if b)
        for nbytes in self._blocks:
            self._heap.alloc(nbytes)

    def __del__(self):
        """Dropped: the group's ``Arc`` and ``Vec`` (its first field), then
        ``param_context``: each context's path ``String`` and state ``Arc``, the table."""
        heap = self._heap
        for nbytes in reversed(self._blocks):
            heap.free(nbytes)
        self._blocks = ()
        for path, state in self._context.values():
            if path:
                heap.free(path)
            if state:
                heap.free(state)
        self._context = {}
        if self._table is not None:
            self._table.drop()
            self._table = None

    def step(self, lr, module, grads: GradientsParams):
        """Update ``module``'s parameters; returns the module (as burn's ``step``)."""
        params = [p for p in module.params() if p.param_id in grads.grads]
        if not params:
            return module
        sim = params[0].tensor.device.sim
        if self._heap is None:
            self._own_blocks(sim)
        sim.timing.optimizer_step(len(params))
        sim.touched.touch_code("optimizer")   # burn-optim's step: text on first use
        for param in params:
            device = param.tensor.device
            grad = grads.grads.get(param.param_id)
            inner = param.tensor.without_autodiff()
            param.tensor = None
            updated = self._update(sim, param, inner, grad, lr)
            del inner, grad
            self._record(sim, param)
            param.replace(Tensor.from_inner(updated, device).require_grad())
            del updated
        return module

    def _update(self, sim, param, tensor, grad, lr) -> Tensor:
        """One parameter's new value (a plain tensor), from ``tensor`` and ``grad``."""
        raise NotImplementedError

    def _record(self, sim, param) -> None:
        layout, heap = sim.layout, sim.heap
        if self._table is None:
            self._table = RawTable(TableLayout(layout.optimizer_context_slot_bytes, 8,
                                               layout.group_width), heap)
        old = self._context.pop(param.param_id, None)
        path = len(param.path.encode())
        if path:
            heap.alloc(path)                    # self.path.join(".")
        if old is not None:
            if old[0]:
                heap.free(old[0])
            if old[1]:
                heap.free(old[1])               # Arc::try_unwrap of the old DynState
        state = getattr(layout, self.state_key)
        if state:
            heap.alloc(state)                   # DynState::create of the new state
        self._context[param.param_id] = (path, state)
        self._table.fit(len(self._context))


class Sgd(ModuleOptimizer):
    """SGD without momentum or weight decay: the policy seam ``sgd_update``."""

    def _update(self, sim, param, tensor, grad, lr) -> Tensor:
        backend = tensor.device.backend
        sim.timing.optimizer_update(math.prod(param.shape), backend)
        buf = sim.policy.sgd_update(backend, tensor, grad, param.shape)
        return Tensor(tensor.device, param.shape, buf)


class Adam(ModuleOptimizer):
    """Adam with burn's default config; ``states`` holds each parameter's moments.

    The update itself is the policy seam ``adam_update``: burn's :func:`burn_adam`,
    or under the ``pytorch`` policy :func:`torch_adam` (``torch.optim.Adam``).
    """

    beta_1, beta_2, epsilon = 0.9, 0.999, 1e-5
    state_key = "adam_state_bytes"

    def __init__(self, sim=None):
        super().__init__(sim)
        #: param_id -> [time, moment_1, moment_2] (plain tensors on the inner device)
        self.states = {}

    def _update(self, sim, param, tensor, grad, lr) -> Tensor:
        state = self.states.pop(param.param_id, None)
        updated, self.states[param.param_id] = sim.policy.adam_update(
            self, tensor, grad, state, lr)
        return updated


def burn_adam(adam, tensor, grad, state, lr):
    """burn-optim ``adam.rs`` for one parameter: ``(updated tensor, new state)``.

    ``AdaptiveMomentum::transform`` op by op on the inner device ("in place" where
    burn-flex reuses a uniquely owned operand, so the clones decide what allocates):

    * first step: ``m1 = grad.clone() * (1 - b1)`` (a new buffer: the clone shares
      grad's), ``m2 = grad.square() * (1 - b2)`` (``square`` is ``mul(x, x)``: a new
      buffer; grad is consumed);
    * later steps: ``m1 = m1 * b1 + grad.clone() * (1 - b1)`` and
      ``m2 = m2 * b2 + grad.square() * (1 - b2)`` (the moments in place);
    * ``update = (m1.clone() * c) / (m2.clone().sqrt() + eps')`` (two new buffers,
      the division in place), ``delta = update * lr``, ``tensor - delta`` (in place).
    """
    b1, b2 = adam.beta_1, adam.beta_2
    # every tensor is moved where the Rust code moves it (Tensor.move): each op drops its
    # operands' parts where burn does
    if state is None:
        time = 1
        m1 = grad.clone().move().mul_scalar(1.0 - b1)
        m2 = grad.move().square()
        m2 = m2.move().mul_scalar(1.0 - b2)
    else:
        time, m1, m2 = state
        time += 1
        m1 = m1.move().mul_scalar(b1)
        m1 = m1.move().add(grad.clone().move().mul_scalar(1.0 - b1).move())
        m2 = m2.move().mul_scalar(b2)
        square = grad.move().square()
        m2 = m2.move().add(square.move().mul_scalar(1.0 - b2).move())
        del square
    del grad
    correction = math.sqrt(1.0 - b2 ** time)
    factor = correction / (1.0 - b1 ** time)
    update = m1.clone().move().mul_scalar(factor).move().div(
        m2.clone().move().sqrt().move().add_scalar(adam.epsilon * correction).move())
    updated = tensor.move() - update.move().mul_scalar(lr).move()
    return updated, [time, m1, m2]


def torch_adam(adam, tensor, grad, state, lr):
    """``torch.optim.Adam`` (defaults, CPU: ``_single_tensor_adam``) for one parameter.

    The first step creates ``exp_avg`` and ``exp_avg_sq`` with ``zeros_like``; every
    step updates them in place (``lerp_``, ``mul_`` + ``addcmul_``), allocates
    ``exp_avg_sq.sqrt()`` and its quotient by the bias correction (the first freed
    once the second exists), adds epsilon in place and writes the parameter with
    ``addcdiv_``. The ATen ops are charged by :meth:`AtenTiming.adam_update`.
    """
    device, shape = tensor.device, tensor.shape
    backend = device.backend
    first = state is None
    if first:
        state = [0, Tensor(device, shape, backend.alloc(shape)),
                 Tensor(device, shape, backend.alloc(shape))]
    state[0] += 1
    device.sim.timing.adam_update(math.prod(shape), first)
    root = Tensor(device, shape, backend.alloc(shape))        # exp_avg_sq.sqrt()
    denom = Tensor(device, shape, backend.alloc(shape))       # ... / bias_correction2_sqrt
    drop(root)
    drop(denom)                                               # after param.addcdiv_
    drop(grad)
    return tensor.clone(), state


#: name -> optimizer class (what ``--set optimizer=NAME`` picks in the workloads)
OPTIMIZERS = {"sgd": Sgd, "adam": Adam}
