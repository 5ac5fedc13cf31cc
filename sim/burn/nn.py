"""Modules as burn-nn 0.22.1 builds them (see docs/burn-notes/ops.md section 2).

* :class:`Param` is lazily initialised: the tensor is created at the first
  ``val()`` (inside the GPU pool's persistent window), and ``require_grad`` then
  registers a RootStep in a new graph.
* ``Linear.forward`` on a rank-2 input issues three ops, as burn's dispatch
  layer does (its fused ``linear`` is not reached in 0.22.1): ``matmul(x, W)``,
  ``reshape(bias, [1, d_out])``, ``add``.
* ``valid()`` returns a copy whose parameters are moved off autodiff
  (``without_autodiff``), forcing their lazy init first.
"""

from __future__ import annotations

from ..platform.vec import RustVec
from .tensor import Tensor

__all__ = ["Param", "Linear", "Relu", "Mlp"]


#: alignment of a parameter's ``Arc<LazyInitState>`` (its cache-line-aligned fields: the
#: probe's traces allocate it with posix_memalign, align 64)
PARAM_STATE_ALIGN = 64

class Param:
    """A module parameter: a tensor, created on first use when lazy.

    Host blocks as burn-core's ``Param`` owns them: its ``Arc<LazyInitState>``
    (``param_state_bytes``), and while lazy the boxed init closure and the block it
    owns (``param_init_bytes``, ``param_init_extra_bytes``), freed by the first
    ``val()``. ``path`` is the module path burn-optim joins for the parameter
    (``hidden.weight``).
    """

    __slots__ = ("shape", "device", "tensor", "require_grad", "param_id", "path", "_heap",
                 "_state", "_init", "_state_block")

    _ids = 0

    def __init__(self, shape, device, require_grad=True, tensor=None, path=""):
        self.shape = tuple(shape)
        self.device = device
        self.tensor = tensor
        self.require_grad = require_grad
        self.path = path
        Param._ids += 1
        self.param_id = Param._ids
        sim = device.sim
        layout = sim.layout
        heap = self._heap = sim.heap
        # Param::uninitialized / Param::initialized: LazyInitState::{uninitialized, initialized};
        # in the order of the probe's trace: the closure's own block, the ParamId (random:
        # the thread's RNG on its first use), the boxed closure, the state
        # (self._init: (bytes, handle) of each, the closure's own block first)
        sizes = () if tensor is not None else tuple(
            b for b in (layout.param_init_extra_bytes, layout.param_init_bytes) if b)
        init = [(sizes[0], heap.alloc(sizes[0]))] if sizes else []
        sim.thread_rng()
        init += [(nbytes, heap.alloc(nbytes)) for nbytes in sizes[1:]]
        self._init = tuple(init)
        self._state = layout.param_state_bytes
        self._state_block = heap.alloc(self._state, PARAM_STATE_ALIGN) if self._state else None

    def __del__(self):
        heap = self._heap
        # a Box<dyn FnOnce> dropped uncalled: the closure (its block), then the box
        for nbytes, block in self._init:
            heap.free(nbytes, block)
        if self._state:
            heap.free(self._state, self._state_block)

    def val(self) -> Tensor:
        """A handle on the parameter (initialising it on first use)."""
        if self.tensor is None:
            backend = self.device.backend
            pool = backend.pool
            if pool is not None:
                pool.persistent_window += 1
            try:
                tensor = Tensor.random(self.shape, self.device)
            finally:
                if pool is not None:
                    pool.persistent_window -= 1
            if self.require_grad and self.device.is_autodiff:
                tensor.require_grad()
            self.tensor = tensor
            # the FnOnce init closure ran: calling a Box<dyn FnOnce> frees the box, then
            # the closure's body ends and drops what it owned
            for nbytes, block in reversed(self._init):
                self._heap.free(nbytes, block)
            self._init = ()
        return self.tensor.clone()

    def consume(self) -> Tensor:
        """``Param::consume``: a handle on the value (``val()``), then the ``Param`` is
        dropped: its ``LazyInitState`` ``Arc`` with the handle it held."""
        handle = self.val()
        self.tensor = None
        if self._state:
            self._heap.free(self._state, self._state_block)
            self._state_block = None
        return handle

    def from_mapped_value(self, tensor) -> None:
        """``Param::from_mapped_value``: the same id around ``tensor``, in a new
        ``LazyInitState`` ``Arc`` (after :meth:`consume`)."""
        if self._state:
            self._state_block = self._heap.alloc(self._state, PARAM_STATE_ALIGN)
        self.tensor = tensor

    def is_initialized(self) -> bool:
        return self.tensor is not None

    def valid(self) -> "Param":
        """The parameter off autodiff (initialised first)."""
        inner = self.val().without_autodiff()
        return Param(self.shape, inner.device, False, inner, self.path)


class Linear:
    """``Linear(d_in, d_out)`` with lazily initialised weight ``[d_in, d_out]`` and bias."""

    def __init__(self, d_in, d_out, device, bias=True):
        device.sim.touched.touch_code("module")   # LinearConfig::init's code
        self.weight = Param((d_in, d_out), device, path="weight")
        self.bias = Param((d_out,), device, path="bias") if bias else None
        self.d_out = d_out

    def forward(self, x: Tensor) -> Tensor:
        """burn-nn's ``Linear::forward``: the weight's and the bias's handles (``val()``),
        then ``module::linear`` (:func:`linear`)."""
        timing = x.device.sim.timing
        timing.module_call()
        timing.linear_call()
        weight = self.weight.val()
        bias = self.bias.val() if self.bias is not None else None
        # one call in PyTorch (F.linear -> addmm), three ops in burn's dispatch
        with timing.fused("linear", bias=bias is not None):
            return linear(x.move(), weight.move(), bias.move() if bias is not None else None)

    def params(self):
        return [p for p in (self.weight, self.bias) if p is not None]

    def valid(self) -> "Linear":
        copy = Linear.__new__(Linear)
        copy.weight = self.weight.valid()
        copy.bias = self.bias.valid() if self.bias is not None else None
        copy.d_out = self.d_out
        return copy


def linear(x: Tensor, weight: Tensor, bias=None) -> Tensor:
    """burn-tensor's ``module::linear``, which the dispatch hands to the backend's
    ``ModuleOps::linear`` (burn-backend ``modules/linear.rs``) op by op: ``float_matmul``,
    then, with a bias, ``unsqueeze_leading`` (``vec![1; rank - 1]`` extended by the bias's
    dims: a ``Vec<usize>`` that grows, then becomes the reshape's ``Shape``) and
    ``float_add``. Backend-level ops: no ``TensorCheck`` reads the operands' devices, as
    the tensor API's ``matmul`` and ``+`` do. The operands are moved in."""
    out_shape = x.shape[:-1] + (weight.shape[-1],)
    out = x._op("matmul", (weight,), out_shape)
    if bias is None:
        return out
    rank = len(out_shape)
    if rank > len(bias.shape):
        shape = (1,) * (rank - len(bias.shape)) + bias.shape
        if bias.device.backend.handle_stride_bytes:
            heap = bias.device.sim.heap
            dims = RustVec(heap, 8, capacity=rank - len(bias.shape))   # vec![1usize; n]
            dims.push(len(bias.shape))                                 # ... the bias's dims
            dims.drop()                                                # into the Shape
        bias = bias._op("reshape", (), shape).move()
    return out.move()._op("add", (bias,), out_shape)


class Relu:
    """``Relu``: one relu op (its step saves the input)."""

    def forward(self, x: Tensor) -> Tensor:
        x.device.sim.timing.module_call()
        return x.relu()

    def params(self):
        return []

    def valid(self):
        return self


class Mlp:
    """``Linear(d, h) -> Relu -> Linear(h, d)``: a module with fields ``hidden``,
    ``activation``, ``output`` (its parameters' paths: ``hidden.weight`` ...)."""

    def __init__(self, d_in, hidden, d_out, device):
        self.layers = [Linear(d_in, hidden, device), Relu(), Linear(hidden, d_out, device)]
        for name, layer in (("hidden", self.layers[0]), ("output", self.layers[2])):
            for param in layer.params():
                param.path = f"{name}.{param.path}"

    def forward(self, x: Tensor) -> Tensor:
        x.device.sim.timing.module_call()
        for layer in self.layers:
            x = layer.forward(x)
        return x

    def params(self):
        return [p for layer in self.layers for p in layer.params()]

    def valid(self) -> "Mlp":
        copy = Mlp.__new__(Mlp)
        copy.layers = [layer.valid() for layer in self.layers]
        return copy
