"""The per-graph server (burn-autodiff ``runtime/server.rs``).

:class:`AutodiffServer` holds one graph's ``steps`` and ``actions_builder`` maps
and its :class:`~sim.burn.runtime.memory_management.GraphMemoryManagement`.

``backward`` follows burn 0.22.1: validate the tape (``collect_steps``), build
it by removing every reached step (``consume_node`` on each; the tape's
``n_required`` table of parent ids), run the steps by decreasing depth into a
:class:`Gradients` container, then ``free_unavailable_nodes`` and remove the
consumed ids' locator entries. Simulated work is reported to the timing model.
Gradients are built with the class of the tensors at hand (``type(root)``): the
mirror sits below the tensor API (:mod:`sim.burn.tensor`) and does not import it.
"""

from __future__ import annotations

import math

from ..backend import _take
from ...platform.ptmalloc import ZEROED
from ...platform import kernels
from ...platform.vec import CapacityOneVecs, RustVec
from ..checkpoint import CheckpointerBuilder
from ..graph.node import GRAD
from ..graph.step import OPS
from ..graph.traversal import collect_steps

__all__ = ["AutodiffServer", "Gradients"]


class _Tape:
    """What ``build_tape`` returns: the steps, the ``n_required`` table, and (where burn's
    own blocks are modelled) the tape's ``Vec`` s and its ``tree`` map."""

    __slots__ = ("steps", "n_required", "outer", "inner", "tree", "trees", "checkpointer")

    def __init__(self, n_required):
        self.steps = []
        self.n_required = n_required
        self.outer = self.inner = self.tree = self.checkpointer = None
        self.trees = []


def _saved_operand(saves, i):
    """The operand whose saved tensor the backward reads for operand ``i`` 's gradient:
    the other one where each operand is saved for the other's gradient (``cross``: mul,
    matmul), the input of a unary op; None where both are read (div)."""
    if saves == "cross":
        return 1 - i
    if saves == "input":
        return 0
    return None


def _retrieved(actions) -> int:
    """Tensors a step's backward reads back from the checkpointer (its actions' moved
    count, else its explicit and backup checkpoints)."""
    if actions is None:
        return 0
    if actions.moved is not None:
        return actions.moved[1]
    return len(actions.explicit) + len(actions.backup)


class Gradients:
    """burn-autodiff 0.22.1's ``Gradients`` (``grads.rs``): node id -> gradient, and the
    heap blocks the container owns.

    A gradient is a plain tensor of the inner backend (:class:`sim.burn.tensor.Tensor`: a hold
    on its storage and its own strides block); several may share one storage (a gradient
    ``add`` passes on is a clone of its incoming one:
    :attr:`~sim.burn.op_facts.OpFacts.pass_through`).

    With std, ``AutodiffTensor::backward`` (``tensor.rs``) always runs the backward in
    ``BackwardMode::Distributed``: the server passes the tape's ``GradSyncContext`` (its
    ``n_required`` map and an empty map of distributed parameters), cloned, to a factory
    that boxes a ``DistributedGradientRegistration`` (``distributed.rs``) owning both, and
    ``Gradients::new_distributed`` boxes an ``on_register`` closure around that. So besides
    its gradients a container owns, in the order a backward creates them (sizes: profile
    keys; x86_64 values):

    * the clone of ``n_required``: a block of the original's bucket count
      (``layout.n_required_slot_bytes``, 16 B slots ``(NodeId, usize)``), none if empty;
    * the registration box (``layout.grads_registration_bytes``, 96 B: two std
      ``HashMap``) and the closure box (``layout.grads_hook_bytes``, 16 B: the
      ``Box<dyn DistributedRegistration>`` it captures);
    * its ``TensorContainer`` table (burn-std ``tensor/container.rs``:
      ``layout.grads_slot_bytes``, 24 B slots ``(u64, Box<dyn Any>)``), grown as
      hashbrown's and never shrunk (:class:`~sim.platform.hashbrown.RawTable`);
    * per entry the ``Box<TensorPrimitive<B>>`` (``entry_bytes``: the inner backend's
      ``grad_entry_bytes``, 184 B on burn-flex), allocated by each ``register`` and freed
      by each ``remove``.

    Dropped (``__del__``): each entry (its tensor, then its box), the table, then the
    hook: the ``n_required`` clone, the registration box, the closure box. The model drops
    the entries in insertion order, burn in its table's (per-process random) order.
    """

    __slots__ = ("sim", "grads", "boxes", "table", "required", "entry_bytes", "hook_bytes",
                 "hook_blocks")

    def __init__(self, sim, n_required, entry_bytes):
        """``n_required``: the tape's table (a :class:`~sim.platform.hashbrown.RawTable`), cloned;
        ``entry_bytes``: bytes of one boxed entry."""
        self.sim = sim
        #: node id -> gradient (plain tensor), in insertion order
        self.grads = {}
        #: node id -> the allocator's handle of its entry's box
        self.boxes = {}
        self.entry_bytes = entry_bytes
        self.required = n_required.clone()
        layout = sim.layout
        self.hook_bytes = (layout.grads_registration_bytes, layout.grads_hook_bytes)
        self.hook_blocks = tuple(sim.heap.alloc(nbytes) for nbytes in self.hook_bytes)
        self.table = sim.tables.gradients()

    def __del__(self):
        heap = self.sim.heap
        boxes = self.boxes
        for node_id, value in self.grads.items():
            value._release()
            heap.free(self.entry_bytes, boxes.get(node_id))
        self.grads = {}
        self.boxes = {}
        self.table.drop()
        self.required.drop()
        for nbytes, block in zip(self.hook_bytes, self.hook_blocks):
            heap.free(nbytes, block)
        self.hook_bytes = self.hook_blocks = ()

    def register(self, node_id, value) -> None:
        """``Gradients::register``: ``value`` (a plain tensor, moved in) becomes ``node_id``'s
        gradient; where there is one already it is removed and the two are added
        (``float_add``: into a uniquely held operand where burn-flex writes in place,
        :meth:`sim.burn.backend.Backend.writable_operand`, else a new storage; the operands drop
        with the add). The add's compute is not charged (no step's cost includes it)."""
        old = self.remove(node_id)
        if old is not None:
            backend, shape = value.device.backend, value.shape
            summed = backend.writable_operand("add", (value, old), shape)
            if summed is None:
                summed = backend.alloc(shape)
            if backend.pool is not None:
                alias = 0 if summed is value.prim else 1 if summed is old.prim else None
                backend.launch(kernels.elementwise([shape, shape], shape, alias=alias))
            total = type(value)(value.device, shape, summed)
            value._release()
            old._release()
            value = total
        # Box::new(value) first, then the table's insert (which may grow it)
        self.boxes[node_id] = self.sim.heap.alloc(self.entry_bytes)
        grads = self.grads
        grads[node_id] = value
        self.table.fit(len(grads))

    def remove(self, node_id):
        """``TensorContainer::remove``: take ``node_id``'s gradient out (its box is freed,
        the tensor moves to the caller), or None."""
        value = self.grads.pop(node_id, None)
        if value is not None:
            self.sim.heap.free(self.entry_bytes, self.boxes.pop(node_id, None))
        return value

    def get(self, node_id):
        """``node_id``'s gradient (the container keeps it), or None."""
        return self.grads.get(node_id)

    def duplicate(self, grad, parents) -> list:
        """``utils::duplicate`` of a binary op's incoming gradient ``grad``: a clone per
        tracked parent (each clone's own strides; the storage shared), None for an
        untracked one. The clones are collected into a ``Vec<Option<primitive>>`` of the
        arity (allocated first, freed when it becomes an array) and ``grad`` drops last."""
        heap = self.sim.heap
        backend = grad.device.backend
        vec = backend.option_primitive_bytes * len(parents)
        block = heap.alloc(vec)
        clones = [None if parent is None else
                  type(grad)(grad.device, grad.shape, grad.prim) for parent in parents]
        heap.free(vec, block)
        grad._release()
        return clones

    def __contains__(self, node_id):
        return node_id in self.grads

    def __len__(self):
        return len(self.grads)


class AutodiffServer:
    """``steps``, ``actions_builder`` and memory management of one graph."""

    __slots__ = ("sim", "steps", "steps_table", "actions_table", "memory_management")

    def __init__(self, sim):
        self.sim = sim
        self.steps = {}
        tables = sim.tables
        self.steps_table = tables.steps()
        self.actions_table = tables.actions_builder()
        self.memory_management = sim.policy.GraphMemoryManagement(self)

    # -- registration ------------------------------------------------------------
    def register(self, rc, step) -> None:
        """Record ``step`` for node ``rc`` (memory management, ``steps``, ``actions_builder``)."""
        memory = self.memory_management
        memory.register(rc, step.node.parents)
        steps = self.steps
        node_id = rc.id
        old = steps.get(node_id)
        steps[node_id] = step
        n = len(steps) + memory.run_nodes
        if old is None:
            self.steps_table.fit(n)
            self.actions_table.fit(n)
        else:
            # the same id again (another RootStep): each insert reserves a slot first, so
            # full tables grow though nothing is added (sim.platform.hashbrown)
            self.steps_table.reinsert(n)
            self._drop_step(old)
            self.actions_table.reinsert(n)

    def extend(self, other: "AutodiffServer") -> None:
        """Absorb ``other``'s steps, actions and nodes (a merge moves them here)."""
        mine = self.memory_management.run_nodes
        n, extra = len(self.steps) + mine, len(other.steps) + other.memory_management.run_nodes
        reserve = extra if n == 0 else (extra + 1) // 2
        # steps.extend(other.steps): reserve, move, the other table dropped; then the
        # same for actions_builder
        self.steps_table.reserve(n, reserve)
        before = len(self.steps) + mine
        for node_id, step in other.steps.items():
            self.steps[node_id] = step
            self.steps_table.fit(len(self.steps) + mine)
        other.steps = {}
        other.steps_table.drop()
        self.actions_table.reserve(n, reserve)
        for count in range(before + 1, len(self.steps) + mine + 1):
            self.actions_table.fit(count)
        other.actions_table.drop()
        self.memory_management.extend(other.memory_management)

    def _drop_step(self, step) -> None:
        """Drop a boxed step: its fields first (its ``Arc<Node>`` s: a node no tensor
        holds any more goes with it), then the box; then its checkpoint actions."""
        step.node = step.parent_nodes = None
        self.sim.heap.free(step.nbytes, step.block)
        if step.actions is not None:
            step.actions.drop()

    def remove_step(self, node_id) -> None:
        """Drop ``node_id``'s step and actions (``steps.remove`` + ``actions_builder.remove``)."""
        step = self.steps.pop(node_id, None)
        if step is not None:
            self._drop_step(step)

    def drop(self) -> None:
        """The graph is dropped: every step, action and node goes with it."""
        for step in self.steps.values():
            self._drop_step(step)
        self.steps = {}
        self.steps_table.drop()
        self.actions_table.drop()
        self.memory_management.drop()

    # -- backward ------------------------------------------------------------------
    def backward(self, root, cleaner) -> Gradients:
        """Run the backward from tensor ``root``; ``cleaner.clean(id)`` drops locator entries.

        Raises :class:`~sim.burn.graph.traversal.TapeConsumed` (before any change)
        when the tape reaches a consumed step.
        """
        sim = self.sim
        timing = sim.timing
        # burn's own blocks of the walk, the tape and its tree: where flex semantics hold
        traced = root.device.backend.handle_stride_bytes > 0
        if traced:
            ids, nodes_vec = collect_steps(root.node.id, self.steps, sim)
        else:
            ids, nodes_vec = collect_steps(root.node.id, self.steps), None
        tape = self._build_tape(ids, traced)
        timing.tape(len(ids))
        grads = self._execute(root, tape)
        memory = self.memory_management
        # useful_propagation pops its to_explore PopNodeSet (a clone of the leaves set,
        # same bucket count) with iter().next(), which scans the control groups from
        # the start past the buckets already emptied: ~ leaves x groups / 2 group reads
        n_leaves = len(memory.leaves) + memory.run_nodes
        pop_groups = n_leaves * memory.leaves_table.buckets / (2 * sim.layout.group_width)
        visited = memory.free_unavailable_nodes(
            lambda node_id: (self.remove_step(node_id), cleaner.clean(node_id)),
            cleaner.clean_run, cleaner.clean_member)
        timing.free_unavailable(visited, pop_groups)
        for node_id in ids:
            cleaner.clean(node_id)
        # the backward returns: what is left of the tape (its n_required map), then the
        # walk's ids
        tape.n_required.drop()
        if nodes_vec is not None:
            nodes_vec.drop()
        return grads

    def _build_tape(self, ids, traced) -> "_Tape":
        """``build_tape``: every reached step removed (``consume_node`` on each) and put in
        the tape by depth; the ``n_required`` table of parent ids; with ``traced``, also
        burn's blocks for them: the tape's ``Vec`` per depth (capacity 1, grown by push)
        inside one ``Vec`` of ``root depth + 1`` (24 B each), and the ``tree`` map of each
        step's parent ids (a ``Vec`` collected per step, 8 B per id)."""
        sim = self.sim
        heap = sim.heap
        memory = self.memory_management
        tape = _Tape(sim.tables.n_required())
        root_depth = self.steps[ids[0]].depth
        if traced:
            tape.outer = RustVec(heap, 24, capacity=root_depth + 1)
            tape.inner = CapacityOneVecs(heap, root_depth + 1)   # one per depth
            tape.tree = sim.tables.tape_tree()
            builder, parents_of = CheckpointerBuilder(sim), {}
        required = set()
        for node_id in ids:
            step = self.steps.pop(node_id)
            memory.consume_node(node_id)
            depth = step.depth
            if depth <= root_depth:
                vec = RustVec(heap, sim.layout.node_id_bytes) if traced else None
                for parent_id, _ in step.parents:
                    if parent_id not in required:       # n_required.entry(..).or_insert
                        required.add(parent_id)
                        tape.n_required.fit(len(required))
                    if traced and parent_id != node_id:
                        vec.push()      # collect: the first item allocates (sim.platform.vec)
                if traced:
                    parents_of[node_id] = [p for p, _ in step.parents if p != node_id]
                    tape.trees.append(vec)
                    tape.tree.fit(len(tape.trees))
                    tape.inner.push(depth)
                tape.steps.append(step)
            if traced and step.actions is not None:
                builder.extend(step.actions)            # actions_builder.remove(&id)
        if traced:
            tape.checkpointer = builder.build(parents_of)
        return tape

    def _execute(self, root, tape) -> Gradients:
        """Run the steps by decreasing depth into a new :class:`Gradients` container (which
        clones ``tape.n_required``); what it holds at the end are the gradients of the
        leaves that require grad. Each depth's ``Vec`` goes once its steps ran, then the
        tape's, then the checkpointer with the tape's tree (its ids' ``Vec`` s, its table)."""
        sim = self.sim
        device = root.device.inner()
        backend = device.backend
        Tensor = type(root)
        # the tape builder and the steps' backward code: resident from the first backward
        sim.touched.touch_code("backward")
        grads = Gradients(sim, tape.n_required, backend.grad_entry_bytes)
        # Gradients::new: the root's gradient is ones of its shape; the root primitive it
        # was given drops once that is registered (its strides; the loss keeps the storage)
        grads.register(root.node.id, Tensor(device, root.shape, backend.alloc(root.shape)))
        if backend.pool is not None:
            backend.launch(kernels.full(root.shape, 1.0))
        _take(root)
        by_depth = {}
        for step in tape.steps:
            by_depth.setdefault(step.depth, []).append(step)
        for depth in sorted(by_depth, reverse=True):
            if tape.inner is not None:
                tape.inner.drop_to(depth + 1)    # the deeper depths, without steps
            for step in by_depth[depth]:
                if (step.kind == OPS and step.node.id in grads
                        and step.node.requirement != GRAD):
                    self._step_backward(step, grads, device, tape.checkpointer)
                self._drop_step(step)
            if tape.inner is not None:
                tape.inner.drop_to(depth)
        if tape.inner is not None:
            tape.inner.drop_to(0)
            tape.outer.drop()
            # execute_steps returns: the checkpointer goes (its states, maps, tree)
            tape.checkpointer.drop()
            for vec in tape.trees:
                vec.drop()
            tape.tree.drop()
        return grads

    def _step_backward(self, step, grads, device, checkpointer=None) -> None:
        """One tracked op's backward (``ops/backward.rs`` ``unary``/``binary``): its node's
        gradient is removed from ``grads`` (``consume`` of a ``GradInBackward`` node), a
        binary op's is duplicated for its parents, and each tracked parent's gradient
        (:meth:`_parent_gradient`) is registered."""
        saved = self._retrieve_saved(step, checkpointer)
        self.sim.timing.backward_op(step.op, step.shapes, step.cost, len(step.parents),
                                    _retrieved(step.actions))
        grad = grads.remove(step.node.id)
        parents = step.parent_nodes
        incoming = grads.duplicate(grad, parents) if len(parents) == 2 else [grad]
        del grad
        device.backend.backward_op(step.op.name, step.shapes)
        # the storage of the last gradient computed stays held until the step's backward
        # returns, even where the gradient was summed away before (on a glibc arena the
        # order of that free places later blocks)
        held = [None]
        for i, parent in enumerate(parents):
            if parent is None:
                continue
            value = incoming[i]
            incoming[i] = None
            grads.register(parent.id, self._parent_gradient(step, i, value, saved, device,
                                                            checkpointer, held))
        for _, got in saved:
            checkpointer.release(got)       # the rest go with the op's backward

    def _retrieve_saved(self, step, checkpointer) -> list:
        """What the op's backward takes out of the checkpointer first (``retrieve_node_output``,
        which logs through ``log_autodiff``, reading the config): ``[(operand index,
        [buffer, strides]), ...]``."""
        actions = step.actions
        if _retrieved(actions):
            self.sim.burn_config()
        saved = []
        if checkpointer is not None and actions is not None and actions.moved is not None:
            for node_id, index in actions.moved[0]:
                got = checkpointer.retrieve(node_id)
                if got is not None:
                    saved.append((index, got))
        return saved

    def _parent_gradient(self, step, i, grad, saved, device, checkpointer, held):
        """``func_lhs``/``func_rhs`` of ``binary`` (``func`` of ``unary``): operand ``i``'s
        gradient from ``grad``, its share of the incoming gradient (moved in): a full
        reduction's broadcast (:meth:`_reduce_backward`), the incoming one passed on
        (:attr:`~sim.burn.op_facts.OpFacts.pass_through`; a reshape's as a view), or a
        new tensor (:meth:`_computed_gradient`); a broadcast operand's is then summed back
        to its shape (``BinaryOpsBroadcast::backward_*``)."""
        op = step.op
        out_shape, in_shapes = step.shapes
        shape = in_shapes[i]
        strided = device.backend.handle_stride_bytes
        if op.reduce and strided:
            return self._reduce_backward(grad, shape, device)
        broadcast = (op.broadcast and shape != out_shape and len(shape) == len(out_shape)
                     and strided)
        target = out_shape if broadcast else shape
        if i in op.pass_through and (target == out_shape or op.view):
            if op.view:
                # a view with the parent's shape: new strides, the same storage
                view = type(grad)(device, shape, grad.prim)
                grad._release()
                grad = view
        else:
            grad = self._computed_gradient(step, i, grad, target, saved, device, checkpointer,
                                           held)
        if broadcast:
            grad = self._reduce_broadcasted(grad, shape, device)
        return grad

    def _computed_gradient(self, step, i, grad, target, saved, device, checkpointer, held):
        """Operand ``i``'s gradient as a new tensor of ``target``'s shape: written into the
        incoming ``grad``'s storage where it is uniquely held and the op's last gradient
        op is elementwise (:attr:`~sim.burn.op_facts.OpFacts.gradient_in_place`),
        else a new storage (a matmul's: a gemm into a staged output, the saved operand
        transposed). The gradient's op drops its operands: the incoming gradient, then the
        saved tensor it read. ``held[0]``: the new storage (see :meth:`_step_backward`)."""
        op = step.op
        backend = device.backend
        out_shape, in_shapes = step.shapes
        used = _saved_operand(op.saves, i)
        got = next((k for k, (index, _) in enumerate(saved) if index == used), None)
        if op.gemm and got is not None:
            self._transpose(saved[got][1])
        held[0] = buf = None
        if op.gradient_in_place and target == out_shape:
            # any elementwise op's rule (OpFacts.in_place): "mul" stands for it
            buf = backend.writable_operand("mul", (grad,), target)
        backend.launch_gradient(op.name, i, step.shapes, target, buf is not None)
        if buf is None:
            # the rhs gradient lhs^T @ grad packs grad (k = lhs rows): sim.burn.backend
            staged = backend.staged(op.name)
            packed = ((in_shapes[0][-2], in_shapes[i][-1])
                      if staged and i == 1 and len(in_shapes[i]) >= 2 else None)
            backend.shape_vec(op.name, target)   # a matmul gradient's vec![m, n]
            buf = backend.alloc(target, staged, packed, layout_first=True)
            if op.gemm:
                self._gradient_gemm(backend, i, in_shapes)
        held[0] = buf
        computed = type(grad)(device, target, buf)
        grad._release()
        if got is not None:
            checkpointer.release(saved.pop(got)[1])
        return computed

    def _transpose(self, got) -> None:
        """burn-flex's ``float_transpose`` of a retrieved saved tensor (``[buffer,
        strides]``) before a matmul gradient reads it: the swapped layout's strides and
        dims ``Vec`` s built, the dims freed into its Shape, the old strides freed."""
        strides = got[1]
        if strides is None:
            return
        heap = self.sim.heap
        nbytes, old = strides
        new = heap.alloc(nbytes)
        heap.free(nbytes, heap.alloc(nbytes))
        heap.free(nbytes, old)
        got[1] = (nbytes, new)

    @staticmethod
    def _gradient_gemm(backend, i, in_shapes) -> None:
        """The gemm computing a matmul's gradient ``i`` into its new output: ``grad @
        rhs^T`` for the lhs (gemm sees ``(K, M, N)``; its lhs, burn's rhs, read through
        the transposed view), ``lhs^T @ grad`` for the rhs (``(N, K, M)``; its rhs, burn's
        lhs, strided)."""
        (*batch, m, k), (*_, n) = in_shapes[0], in_shapes[1]
        count = math.prod(batch)
        if i == 0:
            backend.gemm_call(k, m, n, count, lhs_unit_stride=False)
        else:
            backend.gemm_call(n, k, m, count, rhs_unit_stride=False)

    def _reduce_broadcasted(self, grad, shape, device):
        """A broadcast operand's gradient (burn-autodiff ``BinaryOpsBroadcast``'s
        ``reduce_broadcasted``): the gradient's dims copied into a ``Vec``, then a
        ``sum_dim`` over each dim the operand had as 1 (:meth:`_sum_dim`); returns the
        summed gradient (of ``shape``)."""
        heap = self.sim.heap
        rank = len(grad.shape)
        dims = 8 * max(4, rank)
        block = heap.alloc(dims)                            # grad.shape()
        for d in range(rank):
            if shape[d] == 1 and grad.shape[d] != 1:
                grad = self._sum_dim(grad, d, device)
        heap.free(dims, block)
        return grad

    def _sum_dim(self, grad, dim, device):
        """burn-flex's ``sum_dim`` (``reduce_dim_f32``) of the moved ``grad`` over ``dim``:
        the tensor cloned (its strides ``Vec``), the output dims copied into a ``Vec``, the
        zeroed result, its box, the dims freed into the output's Shape, its strides and
        ``Arc``; then the clone and the operand go. Returns the new tensor."""
        heap = self.sim.heap
        backend = device.backend
        rank = len(grad.shape)
        strides = backend.handle_stride_bytes * rank
        clone = heap.alloc(strides)                         # tensor.clone()
        out_dims = 8 * rank
        dims = heap.alloc(out_dims)                         # shape.to_vec()
        out_shape = grad.shape[:dim] + (1,) + grad.shape[dim + 1:]
        buf = backend.alloc(out_shape, layout_first=True, zeroed=True,
                            free_after_box=(out_dims, dims))
        out = type(grad)(device, out_shape, buf)
        heap.free(strides, clone)
        grad._release()
        return out

    def _reduce_backward(self, grad, shape, device):
        """The gradient of a full ``sum`` or ``mean`` (burn-autodiff ``Sum``/``Mean``
        backward on burn-flex), block by block: ``float_ones`` of the input's shape (a
        mean scales it in place); ``unsqueeze_like`` builds the incoming gradient's new
        dims in a ``Vec`` (freed into the Shape) and reshapes it (new strides, the old
        freed); ``float_mul(ones, grad)`` broadcasts: ``broadcast_shape`` zeroes a dims
        ``Vec``, ``expand`` copies the gradient's dims and strides, builds the view's
        strides and drops the reshaped gradient's Layout, then writes in place into the
        ones (uniquely held); the view goes with the op (the gradient's storage, its
        strides). Returns the new gradient (the ones' storage)."""
        heap = self.sim.heap
        Tensor = type(grad)
        backend = device.backend
        ones = Tensor(device, shape, backend.alloc(shape))
        rank = len(shape)
        dims = 8 * rank
        heap.free(dims, heap.alloc(dims))                   # vec![1; rank] into a Shape
        strides = backend.handle_stride_bytes * rank
        reshaped = heap.alloc(strides)                      # float_reshape's new Layout
        heap.free(grad._strides, grad._strides_block)
        grad._strides, grad._strides_block = 0, None
        if all(d == 1 for d in shape):
            # the reshaped gradient has the ones' shape: broadcast_binary returns both
            # operands as they are (no broadcast_shape, no expand)
            view = reshaped
        else:
            heap.free(dims, heap.alloc(dims, ZEROED))       # broadcast_shape: vec![0; rank]
            src_dims, src_strides = heap.alloc(dims), heap.alloc(dims)
            view = heap.alloc(strides)                      # the expanded view's strides
            heap.free(strides, reshaped)                    # expand consumed the reshape
            heap.free(dims, src_strides)
            heap.free(dims, src_dims)
        buf = backend.writable_operand("mul", (ones,), shape)
        out = Tensor(device, shape, buf)
        grad._release_inner()                               # the view: storage, strides
        heap.free(strides, view)
        ones._release()
        return out

    # -- orphan sweep ----------------------------------------------------------------
    def maybe_useful(self) -> bool:
        return self.memory_management.maybe_useful()

    def free_unused_roots(self, on_free, on_free_run=None) -> int:
        """Free this graph's unreferenced roots; returns nodes read."""
        return self.memory_management.free_unused_roots(
            lambda node_id: (self.remove_step(node_id), on_free(node_id)), on_free_run)

    def add_run(self, run) -> None:
        """Fast-forward: ``run``'s nodes join this graph (steps and actions tables grow too)."""
        self.memory_management.add_run(run)
        n = len(self.steps) + self.memory_management.run_nodes
        self.steps_table.grow_to(n)
        self.actions_table.grow_to(n)
