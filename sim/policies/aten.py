"""Time model of the ``pytorch`` policy: the ATen ops eager PyTorch runs, op by op.

Under the ``pytorch`` policy a workload's burn-like calls stand for the PyTorch
program that does the same thing, and each call is charged as the ATen ops
PyTorch 2.x really dispatches for it (CPU, one thread), in the forward, in the
autograd backward and in ``torch.optim``. What each op costs:

``gemm``
    ``flops / pytorch.gflops``: PyTorch's macOS arm64 builds call Apple
    Accelerate's ``cblas_sgemm``, which runs on the AMX coprocessor, so the
    matmul rate has nothing to do with the elementwise bandwidth;
``kernel``
    a TensorIterator kernel or a reduction: ``bytes / pytorch.gbps`` for the f32
    traffic it reads and writes;
``view``
    a view (``t``, ``expand``, ``reshape`` of a contiguous tensor, ``detach``):
    no data, only ``pytorch.view_op_ns``;

plus fixed costs: ``op_overhead_ns`` per kernel or gemm (dispatcher,
TensorIterator set-up, output allocation), ``py_call_ns`` per call made from
Python, ``autograd_record_ns`` per autograd node created in the forward,
``autograd_exec_ns`` per node the engine runs in the backward (AccumulateGrad
included), ``module_call_ns`` per ``nn.Module.__call__``, ``backward_call_ns``
per ``loss.backward()`` and ``optimizer_step_ns`` + ``optimizer_param_ns`` per
parameter for one ``opt.zero_grad(); ...; opt.step()``.

Where the op lists come from (PyTorch source, paraphrased):

* ``nn.Linear`` -> ``F.linear`` -> ``at::linear``: for a 2-D input with bias,
  ``addmm(bias, input, weight.t())`` (``aten/src/ATen/native/Linear.cpp``);
  without bias ``matmul(input, weight.t())``. The CPU ``addmm`` first copies
  the broadcast bias into the output, then runs the gemm with ``beta=1``.
  Autograd records ``TBackward0`` (for ``weight.t()``) and ``AddmmBackward0``.
* ``tools/autograd/derivatives.yaml`` and ``FunctionsManual.cpp``:
  ``addmm``/``mm``: ``mat1`` gets ``grad.mm(mat2.t())``, ``mat2`` gets
  ``mat1.t().mm(grad)``; when ``mat2`` is column-major (``weight.t()``),
  ``mm_mat2_backward`` computes ``grad.t().mm(mat1).t()`` so the gradient comes
  out in the weight's own layout (no copy when it is accumulated). ``self``
  (the bias) gets ``grad`` (``beta == 1``: no op), reduced to the bias shape by
  the engine's ``validate_outputs`` (``sum_to``: one reduction).
  ``pow(self, 2)``: ``pow_backward`` = ``grad * (2 * self.pow(1))``: three
  kernels (``pow`` with exponent 1 is a copy, a scalar mul, a mul).
  ``mean``: ``mean_backward`` = ``grad.expand(sizes) / numel``: a view and one
  kernel. ``sub``: ``self`` gets ``grad`` (no op), ``other`` gets ``-grad``.
  ``add``: both ``grad`` (no op); ``mul``: ``grad * other``, ``grad * self``;
  scalar ops one kernel; ``relu`` ``threshold_backward``; ``exp``
  ``grad * result``; ``log`` ``grad / self``; views a view.
* ``mean`` on CPU is ``sum_out(...).div_(numel)`` (``ReduceOps.cpp``
  ``mean_out``): two kernels.
* ``loss.backward()`` creates the seed gradient with ``torch.ones_like``
  (``torch/autograd/__init__.py`` ``_make_grads``); the engine runs CPU graphs
  on the calling thread. With ``zero_grad(set_to_none=True)`` (the default in
  2.x) ``AccumulateGrad`` steals the incoming gradient: no copy.
* ``torch.optim.SGD`` with default arguments: ``foreach=None`` and
  ``fused=None`` -> ``_default_to_fused_or_foreach`` picks foreach only when
  every parameter is on a device with foreach kernels (CUDA, XPU, ...), never
  on CPU, so ``_single_tensor_sgd`` runs: per parameter one
  ``param.add_(grad, alpha=-lr)`` (``torch/optim/sgd.py``, ``optimizer.py``).

The burn-like API issues some of these as several burn ops (``Linear.forward``
is ``matmul`` + ``reshape`` + ``add``; ``powi_scalar(2)`` is ``mul(x, x)``);
the caller marks them with :meth:`Timing.fused`, and here they are charged as
the one PyTorch call they stand for, with its real op list and autograd nodes.
The burn op stream itself (buffers, registrations) is not changed.

Which inputs get a gradient is known when the op is recorded: the ``pytorch``
policy calls :meth:`AtenTiming.annotate` for each recorded step, which stores
the step's backward cost on the step (``Step.cost``).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import NamedTuple

from ..burn.op_facts import OPS
from ..platform.timing import Timing

__all__ = ["Op", "GEMM", "KERNEL", "VIEW", "forward_ops", "backward_ops", "fused_forward_ops",
           "fused_backward_ops", "optimizer_ops", "adam_ops", "AtenTiming"]

GEMM, KERNEL, VIEW = "gemm", "kernel", "view"
F32 = 4


class Op(NamedTuple):
    """One ATen op: ``kind`` is gemm / kernel / view; ``flops`` (gemm) or ``nbytes`` (kernel)."""
    name: str
    kind: str
    flops: float = 0.0
    nbytes: float = 0.0


def _n(shape) -> int:
    return math.prod(shape)


def _kernel(name, *element_counts) -> Op:
    """A TensorIterator kernel/reduction moving the given f32 element counts."""
    return Op(name, KERNEL, nbytes=F32 * sum(element_counts))


def _view(name) -> Op:
    return Op(name, VIEW)


def _gemm(name, flops) -> Op:
    return Op(name, GEMM, flops=float(flops))


# -- plain ops (one Python call each) -------------------------------------------------------

def _matmul_flops(out, ins):
    return 2.0 * _n(out) * ins[0][-1]


def _facts(name):
    facts = OPS.get(name)
    if facts is None or not facts.pytorch_forward:
        raise KeyError(f"no ATen mapping for op {name!r}")
    return facts


def forward_ops(name, out, ins):
    """ATen ops of the PyTorch call standing for burn op ``name`` (its
    :attr:`~sim.burn.op_facts.OpFacts.pytorch_forward`): the first moves the output
    and the operands, any further one (mean's ``div_``) the output."""
    facts = _facts(name)
    n_out = _n(out)
    if facts.gemm:
        # torch.matmul of 2-D (or batched) operands -> mm / bmm (Accelerate sgemm)
        return [_gemm("mm" if len(out) == 2 else "bmm", _matmul_flops(out, ins))]
    first, *rest = facts.pytorch_forward
    if facts.view:
        return [_view(first)]
    return ([_kernel(first, n_out, *map(_n, ins))]
            + [_kernel(aten, n_out, n_out) for aten in rest])


def _sum_to(out, shape):
    """The engine's ``validate_outputs``: a gradient of a broadcast input is reduced."""
    if tuple(shape) == tuple(out) or _n(shape) == _n(out):
        return []
    return [_kernel("sum", _n(out), _n(shape)), _view("view")]


def backward_ops(name, out, ins, needs):
    """ATen ops of the backward node of burn op ``name`` (derivatives.yaml): (ops, nodes).

    ``needs[i]`` says whether input ``i`` requires grad. Each needed operand's ops are its
    row's :attr:`~sim.burn.op_facts.OpFacts.pytorch_backward`, then for a broadcast
    operand the engine's ``sum_to``; a matmul's gradients are gemms.
    """
    facts = _facts(name)
    ops = []
    if facts.gemm:
        # each input's gradient is one gemm of the forward's size
        flops = _matmul_flops(out, ins)
        if needs[0]:   # mm_mat1_backward: grad.mm(mat2.t())
            ops += [_view("t"), _gemm("mm", flops)]
        if needs[1]:   # mm_mat2_backward: mat1.t().mm(grad)
            ops += [_view("t"), _gemm("mm", flops)]
        return ops, 1
    for i, derivative in enumerate(facts.pytorch_backward):
        if not needs[i]:
            continue
        ops += _derivative_ops(derivative, out, ins, i)
        if facts.broadcast:
            ops += _sum_to(out, ins[i])
    return ops, 1


def _derivative_ops(derivative, out, ins, i):
    """The ATen ops of one operand's derivative (``(op, tensors...)`` items, a view where
    no tensor is named), for operand ``i`` of an op with output ``out`` and inputs ``ins``."""
    counts = {"out": _n(out), "in": _n(ins[i]), "lhs": _n(ins[0]), "rhs": _n(ins[-1]),
              "other": _n(ins[len(ins) - 1 - i])}
    return [_kernel(aten, *(counts.get(t, t) for t in tensors)) if tensors else _view(aten)
            for aten, *tensors in derivative]


def _pow_backward(n):
    """``pow_backward`` (the ``powf_scalar`` row's derivative) on ``n`` elements."""
    return _derivative_ops(OPS["powf_scalar"].pytorch_backward[0], (n,), ((n,),), 0)


# -- fused calls: several burn ops standing for one PyTorch call ------------------------------

def fused_forward_ops(group, role, name, out, ins, bias=False):
    """Forward ops charged for the ``role``-th burn op inside ``group``.

    ``linear``: burn's matmul(x, W) [+ reshape(b) + add] is ``at::linear``:
    ``weight.t()`` (a view; ``TBackward0``) and ``addmm`` (bias copied into the
    output, then the gemm; ``AddmmBackward0``), or ``mm`` without bias.
    ``pow``: burn's ``mul(x, x)`` for ``powi_scalar(2)`` is ``pow(x, 2)``.
    """
    if group == "linear":
        if role == 0:
            return [_view("t"), _gemm("addmm" if bias else "mm", _matmul_flops(out, ins))]
        if name == "add":   # the bias: addmm copies it (broadcast) into the output first
            return [_kernel("addmm.bias_copy", _n(out), _n(ins[1]))]
        return []           # burn's reshape of the bias: PyTorch passes the bias as is
    if group == "pow":
        return [_kernel("pow", _n(out), _n(ins[0]))]
    raise KeyError(f"unknown fused call {group!r}")


def fused_backward_ops(group, role, name, out, ins, needs):
    """Backward ops charged for the ``role``-th burn op inside ``group``: (ops, nodes)."""
    if group == "linear":
        if role == 0:
            flops = _matmul_flops(out, ins)
            ops, nodes = [], 1                       # AddmmBackward0 (MmBackward0)
            if needs[0]:   # mm_mat1_backward: grad.mm(weight.t().t())
                ops += [_view("t"), _gemm("mm", flops)]
            if needs[1]:   # mm_mat2_backward, column-major mat2: grad.t().mm(x).t()
                ops += [_view("t"), _gemm("mm", flops), _view("t")]
                ops.append(_view("t"))               # TBackward0: grad.t()
                nodes += 1
            return ops, nodes
        if name == "add" and needs[1]:
            # AddmmBackward0's self: grad (beta 1), reduced to the bias shape by sum_to
            return _sum_to(out, ins[1]), 0
        return [], 0
    if group == "pow":
        return _pow_backward(_n(out)) if needs[0] else [], 1
    raise KeyError(f"unknown fused call {group!r}")


def optimizer_ops(n_elements):
    """torch.optim.SGD, default arguments, CPU: ``_single_tensor_sgd``, one in-place
    ``param.add_(grad, alpha=-lr)`` per parameter (reads param and grad, writes param)."""
    return [_kernel("add_", n_elements, n_elements, n_elements)]


def adam_ops(n_elements, first):
    """torch.optim.Adam, default arguments, CPU (``_single_tensor_adam``), one parameter:
    ``zeros_like`` twice on the first step, then ``step_t += 1``, ``exp_avg.lerp_``,
    ``exp_avg_sq.mul_().addcmul_()``, ``sqrt``, ``/ bias_correction2_sqrt``, ``add_(eps)``
    and ``param.addcdiv_``."""
    n = n_elements
    ops = [_kernel("fill", n), _kernel("fill", n)] if first else []
    return ops + [_kernel("add_", 1, 1), _kernel("lerp_", n, n, n), _kernel("mul_", n, n),
                  _kernel("addcmul_", n, n, n), _kernel("sqrt", n, n), _kernel("div", n, n),
                  _kernel("add_", n, n), _kernel("addcdiv_", n, n, n, n)]


# -- charging -----------------------------------------------------------------------------

class AtenTiming(Timing):
    """:class:`~sim.platform.timing.Timing` charging PyTorch's ATen ops (``[pytorch]`` rates).

    burn's bookkeeping costs (locator, graphs, sweep) do not exist in PyTorch and
    cost nothing here; PyTorch's own per-node work is ``autograd_record_ns`` and
    ``autograd_exec_ns``.

    ``trace``: set it to a list to record every ATen op charged, as
    ``(backwards so far, "forward" | "backward" | "optimizer", op name)``.
    """

    def __init__(self, sim, params, rates, caches=()):
        super().__init__(sim, params, caches)
        self.r = rates
        self.trace = None
        self._group = None       # [name, next role, bias] of the fused call being issued
        self._current = None     # (group, role, op name, shapes) of the last forward op
        self._tape = 0
        self._seen = 0

    # -- costing -------------------------------------------------------------------
    def cost(self, ops, py_calls=0, nodes_recorded=0, nodes_run=0):
        """(compute ns, overhead ns) of ``ops`` plus the fixed costs."""
        r = self.r
        compute = overhead = 0.0
        for op in ops:
            if op.kind == VIEW:
                overhead += r["view_op_ns"]
                continue
            overhead += r["op_overhead_ns"]
            if op.kind == GEMM:
                compute += op.flops / r["gflops"]
            else:
                compute += op.nbytes / r["gbps"]
        overhead += (py_calls * r["py_call_ns"] + nodes_recorded * r["autograd_record_ns"]
                     + nodes_run * r["autograd_exec_ns"])
        return compute, overhead

    def _log(self, kind, names) -> None:
        if self.trace is not None:
            b = self.sim.backwards
            self.trace.extend((b, kind, name) for name in names)

    def _charge(self, compute, overhead) -> None:
        self.compute_ns += compute
        self.bookkeeping_ns += overhead
        self.sim.charge(compute + overhead)

    # -- calls marked by the API --------------------------------------------------
    @contextmanager
    def fused(self, name, bias=False):
        """The burn ops issued inside are one PyTorch call ``name`` (one Python call)."""
        outer = self._group
        self._group = [name, 0, bias]
        self._charge(0.0, self.r["py_call_ns"])
        try:
            yield
        finally:
            self._group = outer

    def module_call(self) -> None:
        self._charge(0.0, self.r["module_call_ns"])

    def linear_call(self) -> None:
        """``nn.Linear``'s call is ``module_call_ns`` and its ``addmm``: burn's
        ``module::linear`` dispatch (``linear_call_ns``) is not PyTorch's."""

    def python_view(self) -> None:
        """A view called from Python (``detach``)."""
        self._log("forward", ("alias",))
        self._charge(*self.cost([_view("alias")], py_calls=1))

    # -- forward --------------------------------------------------------------------
    def forward_op(self, op, shapes, backend) -> None:
        out, ins = shapes
        group = self._group
        if group is None:
            self._current = (None, 0, op.name, shapes)
            ops = forward_ops(op.name, out, ins)
            self._log("forward", [o.name for o in ops])
            self._charge(*self.cost(ops, py_calls=1))
            return
        role = group[1]
        group[1] += 1
        self._current = (group[0], role, op.name, shapes)
        ops = fused_forward_ops(group[0], role, op.name, out, ins, group[2])
        self._log("forward", [o.name for o in ops])
        self._charge(*self.cost(ops))

    def prepare(self, n_inputs) -> None:
        """burn-autodiff's op preparation: nothing here (PyTorch's argument handling is
        in the Python call and the dispatcher, charged with the ATen ops)."""

    def lift(self) -> None:
        """burn's dispatch lifting a plain operand onto autodiff: nothing here (PyTorch
        has no autodiff tensor type to wrap an operand in)."""

    def handle_clone(self, backend, autodiff=False) -> None:
        """A tensor handle cloned: nothing here (a Python reference, no ATen op)."""

    def checkpoint_save(self) -> None:
        """burn's checkpointer: nothing here (autograd's SavedVariable is part of the
        node record charged by :meth:`annotate`)."""

    def register(self, n_parents) -> None:
        """burn's registration: nothing here; PyTorch's node records are charged by
        :meth:`annotate`, which knows which inputs require grad (a root is only a flag)."""

    def annotate(self, step) -> None:
        """A tracked op was recorded: charge its autograd nodes' creation and attach the
        cost of running them in the backward, knowing which inputs need grad."""
        current = self._current
        if current is None or step.op is None or current[2] != step.op.name \
                or current[3] != step.shapes:
            return
        group, role, name, shapes = current
        out, ins = shapes
        needs = tuple(p is not None for p in step.parent_nodes)
        if group is None:
            ops, nodes = backward_ops(name, out, ins, needs)
        else:
            ops, nodes = fused_backward_ops(group, role, name, out, ins, needs)
        self._charge(0.0, nodes * self.r["autograd_record_ns"])
        # (compute ns, overhead ns, nodes run, op names) of the step's backward node
        step.cost = self.cost(ops, nodes_run=nodes) + (nodes, tuple(o.name for o in ops))

    # -- backward -------------------------------------------------------------------
    def tape(self, n_steps) -> None:
        """``loss.backward()``: the Python entry, ``ones_like`` seed, engine set-up."""
        self._tape, self._seen = n_steps, 0
        self._log("backward", ("ones_like",))
        compute, overhead = self.cost([_kernel("ones_like", 1)], py_calls=1)
        self._charge(compute, overhead + self.r["backward_call_ns"])

    def backward_op(self, op, shapes, cost=None, tracked=None, retrieved=0) -> None:
        self._seen += 1
        aten = cost
        if aten is None:   # not recorded through annotate: every input needs grad
            out, ins = shapes
            ops, nodes = backward_ops(op.name, out, ins, (True,) * len(ins))
            aten = self.cost(ops, nodes_run=nodes) + (nodes, tuple(o.name for o in ops))
        self._log("backward", aten[3])
        self._charge(aten[0], aten[1])

    def end_backward(self) -> None:
        """The tape's other steps are leaves: one ``AccumulateGrad`` run each (it steals
        the gradient when ``.grad`` is None, as after ``zero_grad(set_to_none=True)``)."""
        leaves = max(0, self._tape - self._seen)
        self._tape = self._seen = 0
        self._charge(0.0, leaves * self.r["autograd_exec_ns"])

    # -- optimizer, creation --------------------------------------------------------
    def optimizer_step(self, n_params) -> None:
        """One ``opt.zero_grad()`` + ``opt.step()``: Python wrappers and per-parameter loops."""
        r = self.r
        self._charge(0.0, r["optimizer_step_ns"] + n_params * r["optimizer_param_ns"])

    def optimizer_update(self, n_elements, backend) -> None:
        self._log("optimizer", ("add_",))
        self._charge(*self.cost(optimizer_ops(n_elements), py_calls=1))

    def adam_update(self, n_elements, first) -> None:
        """One parameter's ``torch.optim.Adam`` update (:func:`adam_ops`), one Python call
        per op."""
        ops = adam_ops(n_elements, first)
        self._log("optimizer", tuple(op.name for op in ops))
        self._charge(*self.cost(ops, py_calls=len(ops)))

    def elementwise(self, n_elements, backend, n_ops=1) -> None:
        """Tensor creation (``torch.zeros``/``randn``): one kernel writing the output each."""
        self._log("forward", ("fill",) * n_ops)
        self._charge(*self.cost([_kernel("fill", n_elements)] * n_ops, py_calls=n_ops))

    # -- burn's bookkeeping: no counterpart in PyTorch ------------------------------
    def new_graph(self) -> None:
        pass

    def merge(self, n_graphs) -> None:
        pass

    def free_unavailable(self, visited, pop_groups=0.0) -> None:
        pass

    def handle_drop(self, n_nodes) -> None:
        pass

    def sweep(self, entries, visits, scanned, freed, parts=()) -> None:
        self._take_sweep_sets()
