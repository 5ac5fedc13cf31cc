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

from .tensor import Tensor

__all__ = ["Param", "Linear", "Relu", "Mlp"]


class Param:
    """A module parameter: a tensor, created on first use when lazy."""

    __slots__ = ("shape", "device", "tensor", "require_grad", "param_id")

    _ids = 0

    def __init__(self, shape, device, require_grad=True, tensor=None):
        self.shape = tuple(shape)
        self.device = device
        self.tensor = tensor
        self.require_grad = require_grad
        Param._ids += 1
        self.param_id = Param._ids

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
        return self.tensor.clone()

    def is_initialized(self) -> bool:
        return self.tensor is not None

    def valid(self) -> "Param":
        """The parameter off autodiff (initialised first)."""
        inner = self.val().without_autodiff()
        return Param(self.shape, inner.device, False, inner)


class Linear:
    """``Linear(d_in, d_out)`` with lazily initialised weight ``[d_in, d_out]`` and bias."""

    def __init__(self, d_in, d_out, device, bias=True):
        device.sim.touched.touch_code("module")   # LinearConfig::init's code
        self.weight = Param((d_in, d_out), device)
        self.bias = Param((d_out,), device) if bias else None
        self.d_out = d_out

    def forward(self, x: Tensor) -> Tensor:
        timing = x.device.sim.timing
        timing.module_call()
        # one call in PyTorch (F.linear -> addmm), three ops in burn's dispatch
        with timing.fused("linear", bias=self.bias is not None):
            out = x.matmul(self.weight.val())
            if self.bias is not None:
                out = out + self.bias.val().reshape((1, self.d_out))
        return out

    def params(self):
        return [p for p in (self.weight, self.bias) if p is not None]

    def valid(self) -> "Linear":
        copy = Linear.__new__(Linear)
        copy.weight = self.weight.valid()
        copy.bias = self.bias.valid() if self.bias is not None else None
        copy.d_out = self.d_out
        return copy


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
    """``Linear(d, h) -> Relu -> Linear(h, d)``."""

    def __init__(self, d_in, hidden, d_out, device):
        self.layers = [Linear(d_in, hidden, device), Relu(), Linear(hidden, d_out, device)]

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
