"""Per-op facts: one table, one row per float op, every module reads it.

What an op does in burn-autodiff 0.22.1 (``ops/tensor.rs``, ``ops/activation.rs``: its
``Backward`` impl and state), in burn-flex 0.22.1 (the inner CPU backend: in place or
not, its temporaries) and in eager PyTorch 2.x (the ATen ops the ``pytorch`` reference
framework charges, :mod:`sim.policies.aten`). The rows are :data:`OPS` (name ->
:class:`OpFacts`); the columns:

====================  ==========================================================
column                meaning
====================  ==========================================================
``name``              burn's op (``float_add`` -> ``add``)
``arity``             tensor operands
``memory_bound``      ``memory_bound()`` in its autodiff op: under balanced
                      checkpointing it is recomputed, not saved
``state``             the parts of the step's backward state (their sizes come
                      from the profile's layout: ``shape``, ``option_node_id``,
                      ``broadcast``, ``scalar``, ``node_id``, ``scalar_f64``)
``saves``             which operands the tracked op checkpoints for its backward:
                      ``cross`` (each operand when the OTHER is tracked: mul,
                      matmul), ``div`` (the divisor whenever tracked, the
                      dividend when the divisor is), ``input`` (the input), ``""``
``backward_factor``   the backward's inner work, in forwards of the op
``pass_through``      operands whose gradient is the incoming one itself when the
                      operand has the output's shape (``broadcast_shape`` returns
                      it unchanged; add_scalar's backward is the identity;
                      reshape's a view of it)
``gradient_in_place`` the backward computes an operand's gradient of the output's
                      shape with one last elementwise op on the incoming gradient
                      (``grad * rhs``, ``grad * recip(rhs)``, ``grad * c``, sub's
                      ``neg(grad)``, ``relu_backward``), which burn-flex writes
                      into it where uniquely held, else into a new storage (the
                      saved operands are not considered; their intermediates,
                      recip, exp..., are not modelled); matmul's gradients are
                      new staged outputs, a reduction's new ones multiplied in
                      place, a broadcast operand's a new reduced one
``reduce``            a full reduction: its backward broadcasts the incoming
                      gradient onto ones of the input's shape; its forward is one
                      chain of dependent adds on burn-flex (``sum_f32``)
``gemm``              a matmul: the forward and each operand's gradient are gemm
                      calls (the saved operand transposed first)
``broadcast``         burn-flex runs it through ``binary_op``, which broadcasts
                      operands of different shapes (and the backward sums a
                      broadcast operand's gradient back)
``view``              returns a view of its operand's storage (no data moved)
``in_place``          burn-flex writes the output into a uniquely held operand of
                      the output's shape
``staged``            burn-flex creates the output with ``FlexTensor::empty``: a
                      zeroed Vec copied into an aligned block (two blocks at once)
``strides_first``     burn-flex builds the output's Layout before its data (the
                      unary float ops; the malloc-log traces)
``shape_temp_bytes``  bytes of the temporary Vec the output's Shape is built from
                      (a full sum's ``vec![1]`` of i32), 0 for none
``shape_vec``         burn-flex builds the output dims in a ``Vec<usize>`` before
                      allocating the output (``matmul_2d_strided``)
``code_path``         the backend's code path whose text the op faults in
                      (:data:`sim.platform.rss.CODE_PATHS`)
``scalar_op``         the op a scalar right operand turns this binary op into
                      (``x - c`` is ``add_scalar`` of ``-c``), or None
``pytorch_forward``   the ATen ops PyTorch runs for the call (matmul: ``mm``, or
                      ``bmm`` when batched); each moves the output and its operands,
                      the ones after the first the output only
``pytorch_backward``  the ATen ops of its derivative (``derivatives.yaml``), per
                      operand (run when the operand requires grad): ``(op,
                      tensors...)``, each tensor the element count it moves
                      (``out``, ``in``: the operand, ``lhs``, ``rhs``, ``other``:
                      the other operand, or a number); an op without tensors is a
                      view. A broadcast operand's gradient is then reduced
                      (``sum_to``); a matmul's are gemms, in
                      :func:`sim.policies.aten.backward_ops`
====================  ==========================================================

Examples
--------
>>> OPS["mul"].saves, OPS["mul"].scalar_op, OPS["add"].pass_through
('cross', 'mul_scalar', (0, 1))
>>> sorted(name for name, op in OPS.items() if op.reduce)
['mean', 'sum']
"""

from __future__ import annotations

__all__ = ["OpFacts", "OPS"]


class OpFacts:
    """One row of :data:`OPS` (columns: the module docstring)."""

    __slots__ = ("name", "arity", "memory_bound", "state", "saves", "backward_factor",
                 "pass_through", "gradient_in_place", "reduce", "gemm", "broadcast", "view",
                 "in_place", "staged", "strides_first", "shape_temp_bytes", "shape_vec",
                 "code_path", "scalar_op", "pytorch_forward", "pytorch_backward")

    def __init__(self, name, arity, memory_bound, state=(), saves="", backward_factor=1.0, *,
                 pass_through=(), gradient_in_place=False, reduce=False, gemm=False,
                 broadcast=False, view=False, in_place=False, staged=False,
                 strides_first=False, shape_temp_bytes=0, shape_vec=False,
                 code_path="elementwise", scalar_op=None, pytorch_forward=(),
                 pytorch_backward=()):
        self.name = name
        self.arity = arity
        self.memory_bound = memory_bound
        self.state = state
        self.saves = saves
        self.backward_factor = backward_factor
        self.pass_through = pass_through
        self.gradient_in_place = gradient_in_place
        self.reduce = reduce
        self.gemm = gemm
        self.broadcast = broadcast
        self.view = view
        self.in_place = in_place
        self.staged = staged
        self.strides_first = strides_first
        self.shape_temp_bytes = shape_temp_bytes
        self.shape_vec = shape_vec
        self.code_path = code_path
        self.scalar_op = scalar_op
        self.pytorch_forward = pytorch_forward
        self.pytorch_backward = pytorch_backward

    def __repr__(self):
        return f"OpFacts({self.name})"


_BINARY_BROADCAST = ("option_node_id", "option_node_id", "broadcast")
#: an elementwise op burn-flex writes into a uniquely held operand
_ELEMENTWISE = dict(in_place=True)
#: a unary float op: its Layout is built before its data
_UNARY = dict(in_place=True, strides_first=True)

#: name -> facts; states as in burn-autodiff 0.22.1's Backward impls
OPS = {op.name: op for op in (
    OpFacts("add", 2, True, ("shape", "shape"), pass_through=(0, 1), broadcast=True,
            scalar_op="add_scalar", pytorch_forward=("add",), pytorch_backward=((), ()),
            **_ELEMENTWISE),
    OpFacts("sub", 2, True, ("shape", "shape"), pass_through=(0,), gradient_in_place=True,
            broadcast=True, scalar_op="add_scalar", pytorch_forward=("sub",),
            pytorch_backward=((), (("neg", "out", "out"),)), **_ELEMENTWISE),
    OpFacts("mul", 2, True, _BINARY_BROADCAST, "cross", 2.0, gradient_in_place=True,
            broadcast=True, scalar_op="mul_scalar", pytorch_forward=("mul",),
            pytorch_backward=((("mul", "out", "out", "other"),),) * 2, **_ELEMENTWISE),
    OpFacts("matmul", 2, False, _BINARY_BROADCAST, "cross", 2.0, gemm=True, staged=True,
            shape_vec=True, code_path="matmul", pytorch_forward=("mm",)),
    # burn: lhs gradient recip and mul; rhs gradient neg, square, div and mul. PyTorch:
    # self: grad / other; other: -grad * ((self / other) / other)
    OpFacts("div", 2, True, _BINARY_BROADCAST, "div", 6.0, gradient_in_place=True,
            broadcast=True, scalar_op="div_scalar", pytorch_forward=("div",),
            pytorch_backward=((("div", "out", "out", "rhs"),),
                              (("div", "out", "lhs", "rhs"), ("div", "out", "out", "rhs"),
                               ("mul", "out", "out", "out"), ("neg", "out", "out"))),
            **_ELEMENTWISE),
    OpFacts("mul_scalar", 1, True, ("scalar",), gradient_in_place=True,
            pytorch_forward=("mul",), pytorch_backward=((("mul", "out", "out"),),), **_ELEMENTWISE),
    OpFacts("div_scalar", 1, True, ("scalar",), gradient_in_place=True,
            pytorch_forward=("div",), pytorch_backward=((("div", "out", "out"),),), **_ELEMENTWISE),
    OpFacts("add_scalar", 1, True, (), pass_through=(0,), pytorch_forward=("add",),
            pytorch_backward=((),), **_ELEMENTWISE),
    OpFacts("sum", 1, False, ("shape",), reduce=True, shape_temp_bytes=4, code_path="reduce",
            pytorch_forward=("sum",), pytorch_backward=((("expand",),),)),
    # ReduceOps.cpp mean_out on CPU: sum_out(...).div_(numel); mean_backward:
    # grad.expand(sizes) / numel
    OpFacts("mean", 1, False, ("shape",), reduce=True, shape_temp_bytes=4,
            code_path="reduce", pytorch_forward=("sum", "div_"),
            pytorch_backward=((("expand",), ("div", "in", 1)),)),
    OpFacts("reshape", 1, True, ("shape", "shape"), pass_through=(0,), view=True,
            pytorch_forward=("view",), pytorch_backward=((("view",),),)),
    OpFacts("relu", 1, True, ("node_id",), "input", gradient_in_place=True,
            pytorch_forward=("relu",), pytorch_backward=((("threshold_backward", "out", "out", "out"),),),
            **_UNARY),
    # pow_backward: grad * (exponent * self.pow(exponent - 1))
    OpFacts("powf_scalar", 1, True, ("node_id", "scalar_f64"), "input", 2.0,
            gradient_in_place=True, pytorch_forward=("pow",),
            pytorch_backward=((("pow", "out", "out"), ("mul", "out", "out"),
                               ("mul", "out", "out", "out")),), **_ELEMENTWISE),
    OpFacts("exp", 1, True, ("node_id",), "input", gradient_in_place=True,
            pytorch_forward=("exp",), pytorch_backward=((("mul", "out", "out", "out"),),), **_UNARY),
    OpFacts("log", 1, True, ("node_id",), "input", gradient_in_place=True,
            pytorch_forward=("log",), pytorch_backward=((("div", "out", "out", "out"),),), **_UNARY),
    # derivatives.yaml: grad / (2 * result)
    OpFacts("sqrt", 1, True, ("node_id",), "input", gradient_in_place=True,
            pytorch_forward=("sqrt",),
            pytorch_backward=((("mul", "out", "out"), ("div", "out", "out", "out")),), **_UNARY),
)}
