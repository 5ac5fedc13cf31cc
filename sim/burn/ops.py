"""Op preparation and registration (burn-autodiff ``ops/base.rs``, ``ops/tensor.rs``,
``ops/activation.rs``; see docs/burn-notes/ops.md for the source lines).

Every float op on an autodiff device goes through :func:`float_op`:

1. plain (non-autodiff) operands are lifted with ``from_inner``: a fresh node id
   and node, never registered (a constant for this op);
2. ``Requirement::from_nodes``: tracked if any input requires grad;
3. the checkpoint strategy decides the compute property: under ``balanced`` a
   memory-bound op allocates its retro-forward and records backup actions for
   its tracked parents (an untracked parent resets them, compute-bound); a
   tracked op records its explicit checkpoints (the buffers its backward needs);
4. the inner op computes the output (and drops the primitives of the operands
   it was handed by value, :meth:`sim.burn.tensor.Tensor.move`);
5. ``from_parents`` creates the output node (tracked parents only, order =
   max + 1) and its ``Arc<NodeId>``; a tracked op registers an ``OpsStep``, an
   untracked op an ``UntrackedOpsStep`` through the policy seam
   ``register_untracked`` (burn registers it: with no tracked parent, it starts
   a new graph);
6. the dispatch layer boxes the output and drops what is left of the moved
   operands (the heap events in burn's order: docs/burn-notes/heap-order.md).

:data:`~sim.burn.op_facts.OPS` is the table of ops (:mod:`sim.burn.op_facts`):
arity, memory-bound or not, the state their step keeps, which inputs they checkpoint,
backward work, and what the backends do with them.
"""

from __future__ import annotations

from operator import attrgetter

from .checkpoint import BALANCED, CheckpointerBuilder
from .graph.node import GRAD, GRAD_IN_BACKWARD, NONE, Node, NodeRefCount
from .op_facts import OPS
from .graph.step import OPS as OPS_STEP
from .graph.step import UNTRACKED, Step

__all__ = ["OPS", "float_op", "step_bytes"]

_SHAPE = attrgetter("shape")


def _state_bytes(op, layout) -> int:
    sizes = {
        "shape": layout.shape_bytes,
        "option_node_id": layout.option_node_id_bytes,
        "broadcast": 2 * layout.shape_bytes + 8,  # enum { Broadcasted(Shape, Shape), None }
        "scalar": layout.scalar_bytes,
        "node_id": layout.node_id_bytes,
        "scalar_f64": 8,
    }
    return sum(sizes[part] for part in op.state)


def step_bytes(op, layout, tracked: bool) -> int:
    """Bytes of the boxed step: ``Ops { parents: [Option<NodeRef>; N], node, state }``."""
    base = op.arity * layout.option_node_ref_bytes + 8
    return base + (_state_bytes(op, layout) if tracked else 0)


def float_op(op, inputs, out_shape, device):
    """Run ``op`` on ``inputs`` (tensors) producing a tensor of ``out_shape`` on ``device``."""
    sim = device.sim
    backend = device.backend
    shapes = (out_shape, tuple(map(_SHAPE, inputs)))
    # one tuple per distinct signature: steps keep their shapes for the backward
    shapes = sim.shapes.setdefault(shapes, shapes)
    out_shape, in_shapes = shapes
    sim.timing.forward_op(op, shapes, backend)
    # on_op acts on an op's first run on these shapes (the backend's first op, gemm's
    # workspace on the first matmul included), and per kernel context where kernels compile
    if backend.kernel_bytes or backend.first_run(op.name, shapes):
        context = ("plain" if not device.is_autodiff else
                   "tracked" if any(t.is_tracked() for t in inputs) else "untracked")
        backend.on_op((op.name, out_shape, in_shapes, context))
    moved = [t for t in inputs if t.moved] if inputs[0].moved or inputs[-1].moved else ()
    if not device.is_autodiff:
        out = backend.output(op.name, inputs, out_shape)
        # the op took its moved operands by value: they drop as it returns, last one first
        for t in reversed(moved):
            t._release()
        return type(inputs[0])(device, out_shape, out)   # the API's Tensor, above this module
    if moved and len(inputs) == 2 and inputs[1].moved:
        # burn-dispatch moves the rhs out of its box first (the lhs's box goes at the end:
        # the malloc-log traces)
        inputs[1].unbox()
    # burn-autodiff's op preparation and the graph client: their text, on the first op
    sim.touched.touch_code("autodiff")
    sim.timing.prepare(len(inputs))
    nodes, parents, order, lifted = prepare(sim, inputs)
    tracked = bool(parents)  # Requirement::from_nodes
    if op.memory_bound and device.checkpointing == BALANCED:
        actions, memory_bound, retro = compute_property(sim, op, device, inputs, nodes)
    else:
        actions, memory_bound, retro = None, False, None   # compute-bound
    if tracked and op.saves:
        actions = checkpoint_saved(sim, op, inputs, nodes, actions)
    # the inner op, which drops the primitives of its moved operands (last one first)
    buffer = backend.output(op.name, inputs, out_shape)
    for t in reversed(moved):
        t._release_inner()
    # OpsPrep::finish: from_parents builds the output's node (tracked parents only, order =
    # max + 1), then its ref count and the step
    node = Node(sim, sim.next_node_id(), parents, order + 1,
                GRAD_IN_BACKWARD if tracked else NONE, memory_bound)
    if retro is not None:
        node.retro = retro
    out = finish(op, device, shapes, buffer, node, nodes, actions, type(inputs[0]))
    if moved or lifted is not None:   # else nothing of the operands drops here
        drop_operands(inputs, moved, nodes, lifted)
    del nodes   # the operands' nodes go with the preparation
    out.box()
    for t in moved:
        t.unbox()
    return out


def prepare(sim, inputs) -> tuple:
    """burn's ``OpsPrep`` of an op on an autodiff device: the operands' nodes (a plain
    operand lifted by ``from_inner``: a fresh node id and node, never registered, a
    constant for this op), the tracked parents ``(id, is_leaf)`` (``from_parents``), the
    highest order and, by input index, the lifted handles' ref counts (None if none):
    ``(nodes, parents, order, lifted)``."""
    nodes = []
    parents = []
    lifted = None
    order = 0
    for i, t in enumerate(inputs):
        n = t.node
        if n is None:
            n, rc = _lift(sim)
            if lifted is None:
                lifted = {}
            lifted[i] = rc
        nodes.append(n)
        if n.requirement != NONE:
            parents.append((n.id, n.order == 0))
        if n.order > order:
            order = n.order
    return nodes, tuple(parents), order, lifted


def compute_property(sim, op, device, inputs, nodes) -> tuple:
    """Under balanced checkpointing (the caller's test: other ops and strategies are
    compute-bound) a memory-bound op allocates its retro-forward ``Arc`` and records a
    backup per tracked parent (``checkpoint_parents``); an untracked parent resets it
    (compute-bound, the ``Arc`` dropped at once). Returns ``(checkpoint actions or None,
    memory bound, retro-forward or None)``."""
    if all(n.requirement != NONE for n in nodes):
        retro = _Retro(sim)
        actions = CheckpointerBuilder(sim)
        for t in inputs:
            actions.checkpoint(t, backup=True)
        return actions, True, retro
    sim.heap.alloc(sim.layout.retro_arc_bytes)
    sim.heap.free(sim.layout.retro_arc_bytes)
    return None, False, None


def checkpoint_saved(sim, op, inputs, nodes, actions):
    """``checkpoint``: the tracked op's explicit checkpoints of the operands its backward
    reads (:attr:`~sim.burn.op_facts.OpFacts.saves`), cloned before the inner op runs.
    Returns the actions (``actions``, or new ones)."""
    for i, t in enumerate(inputs):
        saves = op.saves
        if saves == "div":
            # float_div: the dividend if the divisor is tracked; the divisor always
            saves = "input" if i == 1 else "cross"
        other_tracked = saves == "cross" and nodes[1 - i].requirement != NONE
        if saves == "input" or other_tracked:
            if actions is None:
                actions = CheckpointerBuilder(sim)
            actions.checkpoint(t, index=i)
    return actions


def finish(op, device, shapes, buffer, node, nodes, actions, tensor_class):
    """``finish`` once ``from_parents`` built ``node``: its ref count and the output tensor
    (a ``tensor_class``: the API's Tensor, which sits above the mirror), then the step
    registered: an ``OpsStep``, or an ``UntrackedOpsStep`` through the policy seam
    ``register_untracked`` (with no tracked parent, it starts a new graph). Returns the
    output tensor."""
    sim = device.sim
    rc = NodeRefCount(sim, node.id)
    out = tensor_class(device, shapes[0], buffer, node, rc, boxed=False)
    tracked = bool(node.parents)
    nbytes = sim.step_bytes.get((op, tracked))
    if nbytes is None:
        nbytes = sim.step_bytes[(op, tracked)] = step_bytes(op, sim.layout, tracked)
    if tracked:
        parent_nodes = tuple([n if n.requirement != NONE else None for n in nodes])
        sim.client.register(rc, Step(OPS_STEP, op, node, parent_nodes, nbytes, actions, shapes))
    else:
        sim.policy.register_untracked(sim.client, rc,
                                      Step(UNTRACKED, op, node, (), nbytes, actions, shapes),
                                      device)
    return out


def drop_operands(inputs, moved, nodes, lifted) -> None:
    """The autodiff op returns: what is left of its moved operands (their node and ref
    count) drops, last one first; a plain operand came in as ``from_inner``'s new handle,
    moved in too: its node and ref count drop in its place among them."""
    if lifted is None:
        for t in reversed(moved):
            t._release_autodiff()
        return
    for i in range(len(inputs) - 1, -1, -1):
        rc = lifted.get(i)
        if rc is not None:
            nodes[i] = None
            rc.release()
        elif inputs[i].moved:
            inputs[i]._release_autodiff()


class _Retro:
    """``Arc<RetroForward>`` of a memory-bound node under balanced checkpointing."""

    __slots__ = ("_heap", "_nbytes")

    def __init__(self, sim):
        self._heap = sim.heap
        self._nbytes = sim.layout.retro_arc_bytes
        self._heap.alloc(self._nbytes)

    def __del__(self):
        self._heap.free(self._nbytes)


def _lift(sim):
    """``from_inner`` of a plain operand: a fresh, never registered node and its ref
    count (``(node, ref count)``), which go when the op returns."""
    node = Node(sim, sim.next_node_id(), (), 0, NONE)
    rc = NodeRefCount(sim, node.id)
    rc.acquire()
    sim.timing.lift()
    return node, rc


def register_root(tensor) -> None:
    """``require_grad`` on a leaf: a new node with the same id, a RootStep registered."""
    sim = tensor.device.sim
    node = Node(sim, tensor.node.id, (), 0, GRAD)
    tensor.node = node
    step = Step("root", None, node, (), sim.layout.root_step_bytes)
    sim.client.register(tensor.rc, step)
    # Tensor::require_grad takes the tensor by value: the dispatch layer boxes the
    # returned tensor anew and drops the old box
    if tensor._box:
        old = tensor._box_block
        tensor.box()
        sim.heap.free(sim.layout.dispatch_box_bytes, old)
