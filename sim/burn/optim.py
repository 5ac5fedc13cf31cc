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

from ..platform.hashbrown import RawTable, TableLayout
from ..platform.vec import RustVec
from .tensor import Tensor, _check_devices, drop

__all__ = ["GradientsParams", "ModuleOptimizer", "Sgd", "Adam", "OPTIMIZERS", "burn_adam", "torch_adam"]


#: bytes of a Rust ``String`` (pointer, capacity, length) and of a reference (64-bit)
STRING_BYTES, POINTER_BYTES = 24, 8
#: alignment of the blocks burn-optim boxes a 64-B-aligned value into: a gradient's boxed
#: ``Tensor`` in ``GradientsParams`` and the optimizer state's ``Arc`` (the malloc-log
#: traces: posix_memalign, align 64)
BOX_ALIGN = 64


class GradientsParams:
    """burn-optim's ``GradientsParams``: parameter id -> gradient (a plain tensor), in a
    ``TensorContainer``: a hashbrown map whose slot is the id and a ``Box<dyn Any>``
    (24 B), the box holding the gradient's ``Tensor`` (``grads_param_box_bytes``,
    align 64). ``register`` boxes (then inserts: the first insert allocates the table),
    ``remove`` unboxes; dropping the container drops what is left, then the table."""

    def __init__(self, grads=None, sim=None):
        self.grads = {}
        self._boxes = {}
        self._heap = None
        self._table = None
        self._box = 0
        if sim is not None:
            layout = sim.layout
            self._heap = sim.heap
            self._box = layout.grads_param_box_bytes
            # a slot: the ParamId (8 B) and the Box<dyn Any> (a fat pointer, 16 B)
            self._table = RawTable(TableLayout(8 + 16, 8, layout.group_width), sim.heap,
                                   named=True)
        for param_id, grad in (grads or {}).items():
            self.register(param_id, grad)

    @classmethod
    def from_grads(cls, grads, module) -> "GradientsParams":
        """burn-optim's converter visits every parameter with ``param.val()`` (which
        initialises a lazy parameter, gradient or not), removes its gradient from the
        backward's container, drops the handle, then registers the gradient."""
        params = list(module.params())
        found = cls(sim=params[0].device.sim if params else None)
        for param in params:
            handle = param.val()
            grad = grads.remove(handle) if handle.is_require_grad() else None
            drop(handle)
            if grad is not None:
                found.register(param.param_id, grad)
        return found

    def register(self, param_id, grad) -> None:
        """Box ``grad`` and insert it under ``param_id``."""
        if self._heap is not None and self._box:
            self._boxes[param_id] = self._heap.alloc(self._box, BOX_ALIGN)
        self.grads[param_id] = grad
        if self._table is not None:
            self._table.fit(len(self.grads))

    def remove(self, param_id):
        """The gradient of ``param_id`` taken out (its box freed), or None."""
        grad = self.grads.pop(param_id, None)
        block = self._boxes.pop(param_id, None)
        if grad is not None and self._heap is not None and self._box:
            self._heap.free(self._box, block)
        return grad

    def drop(self) -> None:
        """The container is dropped (``ModuleOptimizer::step`` consumes it): each entry's
        gradient and box, then the table."""
        for param_id in list(self.grads):
            grad = self.grads.pop(param_id)
            drop(grad)
            block = self._boxes.pop(param_id, None)
            if self._heap is not None and self._box:
                self._heap.free(self._box, block)
        if self._table is not None:
            self._table.drop()
            self._table = None

    def __del__(self):
        self.drop()


class ModuleOptimizer:
    """burn-optim's ``ModuleOptimizer``: the loop every optimizer shares, and its host
    bookkeeping. A subclass is the ``Optimizer`` (``_update``: one parameter's step).

    ``step`` maps every parameter as ``module.map`` with a ``ModuleOptimizerMapper``
    does (``module_optimizer.rs``), in its order: the mapper's ``Vec`` s (the learning
    rate's one group, ``lr_group_bytes``; the optimizer groups' references), then per
    parameter ``enter_module`` (the field's name into a new ``String``, pushed on the
    path ``Vec<String>``), ``map_float``, ``exit_module`` (the name freed); at the end the
    mapper's ``Vec`` s and the consumed ``GradientsParams``. ``map_float``:
    ``Param::consume`` (a clone of the handle; the old ``Param``'s handle and state
    dropped), the gradient removed; with a gradient, the device read, the path joined
    into a new ``String`` (the old context's freed), the handle moved to the inner
    backend, the old state's ``Arc`` unwrapped and re-wrapped around the device move
    (``to_device_dyn``) then unwrapped by ``step_dyn``, ``_update`` computing the new
    tensor there, the new state boxed (``state_key``: its size; align 64) and inserted
    into ``param_context`` (a hashbrown map, ``optimizer_context_slot_bytes`` per slot,
    removed and re-inserted per parameter and step), and ``ParameterContext::restore``
    (``from_inner``, which reads the device, and ``require_grad``: a new node and
    RootStep); then ``Param::from_mapped_value`` (a new state ``Arc``).
    """

    #: layout key of the size of this optimizer's state Arc block
    state_key = "sgd_state_bytes"

    def __init__(self, sim=None):
        """``SgdConfig::new().init()`` (and Adam's): the optimizer's own blocks (its group
        ``Vec`` and ``Arc``) are allocated now on ``sim``'s heap, or at the first step
        where no simulation is given."""
        self._context = {}      # param_id -> (path bytes, path block, state bytes, state block)
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
        for path, path_block, state_bytes, state in self._context.values():
            if path:
                heap.free(path, path_block)
            if state_bytes:
                heap.free(state_bytes, state)
        self._context = {}
        if self._table is not None:
            self._table.drop()
            self._table = None

    def step(self, lr, module, grads: GradientsParams):
        """Update ``module``'s parameters (``grads`` is consumed); returns the module (as
        burn's ``step``)."""
        params = list(module.params())
        if not params:
            grads.drop()
            return module
        sim = params[0].device.sim
        if self._heap is None:
            self._own_blocks(sim)
        layout = sim.layout
        heap = sim.heap
        with_grads = sum(1 for p in params if p.param_id in grads.grads)
        if with_grads:
            sim.timing.optimizer_step(with_grads)
            sim.touched.touch_code("optimizer")   # burn-optim's step: text on first use
        # ModuleOptimizerMapper::new: the learning rate's Vec<LrGroup> (moved in), the
        # optimizer groups' references collected
        lr_groups = heap.alloc(layout.lr_group_bytes) if layout.lr_group_bytes else None
        group_refs = heap.alloc(POINTER_BYTES)
        path = RustVec(heap, STRING_BYTES)
        entered = []
        blocks = []

        def enter(names) -> None:
            """exit_module down to the common prefix (each name freed), then enter_module
            (each name into a String pushed on the path)."""
            while entered and entered != names[:len(entered)]:
                heap.free(len(entered.pop().encode()), blocks.pop())
                path.len -= 1
            for name in names[len(entered):]:
                blocks.append(heap.alloc(len(name.encode())))
                path.push()
                entered.append(name)

        for param in params:
            enter(param.path.split(".") if param.path else [])
            self._map_float(sim, param, grads, lr)
        enter([])
        # the mapper drops: its path Vec, the groups' references, the learning rate's
        # groups; then the consumed GradientsParams
        path.drop()
        heap.free(POINTER_BYTES, group_refs)
        if layout.lr_group_bytes:
            heap.free(layout.lr_group_bytes, lr_groups)
        grads.drop()
        return module

    def _map_float(self, sim, param, grads, lr) -> None:
        """``ModuleOptimizerMapper::map_float`` for one parameter."""
        heap, layout = sim.heap, sim.layout
        handle = param.consume()
        grad = grads.remove(param.param_id)
        if grad is not None:
            sim.timing.optimizer_param()
            device = handle.device
            _check_devices(handle)                         # tensor.device() != device
            old = self._context.pop(param.param_id, None)
            path = len(param.path.encode())
            path_block = heap.alloc(path) if path else None    # self.path.join(".")
            if old is not None and old[0]:
                heap.free(old[0], old[1])                  # the old context's path
            inner = handle.move().without_autodiff()       # tensor.inner()
            del handle
            state_bytes = getattr(layout, self.state_key)
            if old is not None and old[2]:
                # to_device_dyn: the old state's Arc unwrapped, the moved state wrapped
                # again, and unwrapped by step_dyn
                heap.free(old[2], old[3])
                heap.free(old[2], heap.alloc(old[2], BOX_ALIGN))
            updated = self._update(sim, param, inner, grad, lr)
            del inner, grad
            state = heap.alloc(state_bytes, BOX_ALIGN) if state_bytes else None
            self._context[param.param_id] = (path, path_block, state_bytes, state)
            if self._table is None:
                self._table = RawTable(TableLayout(layout.optimizer_context_slot_bytes, 8,
                                                   layout.group_width), heap, named=True)
            self._table.fit(len(self._context))
            # ParameterContext::restore: from_inner (it reads the device), require_grad
            handle = updated.move().rewrap(device)     # the inner tensor moves in
            del updated
            _check_devices(handle)
            handle.require_grad()
        param.from_mapped_value(handle)

    def _update(self, sim, param, tensor, grad, lr) -> Tensor:
        """One parameter's new value (a plain tensor), from ``tensor`` and ``grad``."""
        raise NotImplementedError


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
