"""The per-graph server (burn-autodiff ``runtime/server.rs``).

:class:`AutodiffServer` holds one graph's ``steps`` and ``actions_builder`` maps
and its :class:`~sim.autodiff.memory.GraphMemoryManagement`.

``backward`` follows burn 0.22.1: validate the tape (``collect_steps``), build
it by removing every reached step (``consume_node`` on each), run the steps by
decreasing depth, then ``free_unavailable_nodes`` and remove the consumed ids'
locator entries. Simulated work is reported to the timing model.
"""

from __future__ import annotations

from .memory import GraphMemoryManagement
from .step import OPS
from .traversal import collect_steps

__all__ = ["AutodiffServer", "Gradients"]


class Gradients:
    """Gradients of one backward: node id -> gradient buffer, for leaves that require grad.

    The container holds each buffer (a strong count on its storage) until the
    gradient is removed or the container dropped."""

    __slots__ = ("grads",)

    def __init__(self, grads=None):
        self.grads = grads if grads is not None else {}
        for buf in self.grads.values():
            buf.holders += 1

    def __del__(self):
        for buf in self.grads.values():
            buf.holders -= 1

    def get(self, node_id):
        return self.grads.get(node_id)

    def remove(self, node_id):
        buf = self.grads.pop(node_id, None)
        if buf is not None:
            buf.holders -= 1
        return buf

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
        self.memory_management = GraphMemoryManagement(self)

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
            # full tables grow though nothing is added (sim.costs.tables)
            self.steps_table.reinsert(n)
            self._drop_step(old)
            self.actions_table.reinsert(n)
        self.sim.heap.alloc(step.nbytes)

    def extend(self, other: "AutodiffServer") -> None:
        """Absorb ``other``'s steps, actions and nodes (a merge moves them here)."""
        mine = self.memory_management.run_nodes
        n, extra = len(self.steps) + mine, len(other.steps) + other.memory_management.run_nodes
        reserve = extra if n == 0 else (extra + 1) // 2
        self.steps_table.reserve(n, reserve)
        self.actions_table.reserve(n, reserve)
        for node_id, step in other.steps.items():
            self.steps[node_id] = step
            n = len(self.steps) + mine
            self.steps_table.fit(n)
            self.actions_table.fit(n)
        other.steps = {}
        other.steps_table.drop()
        other.actions_table.drop()
        self.memory_management.extend(other.memory_management)

    def _drop_step(self, step) -> None:
        self.sim.heap.free(step.nbytes)
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

        Raises :class:`~sim.autodiff.traversal.TapeConsumed` (before any change)
        when the tape reaches a consumed step.
        """
        sim = self.sim
        timing = sim.timing
        ids = collect_steps(root.node.id, self.steps)
        tape = []
        memory = self.memory_management
        for node_id in ids:
            step = self.steps.pop(node_id)
            memory.consume_node(node_id)
            tape.append(step)
        timing.tape(len(ids))
        grads = self._execute(root, tape)
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
        return grads

    def _execute(self, root, tape) -> Gradients:
        """Run the steps by decreasing depth; keep the gradients of leaves that require grad."""
        from .node import GRAD
        sim = self.sim
        backend = root.device.backend
        # the tape builder and the steps' backward code: resident from the first backward
        sim.touched.touch_code("backward")
        pending = {root.node.id: (backend.alloc(root.shape), root.node)}
        tape.sort(key=lambda s: -s.depth)
        for step in tape:
            node = step.node
            if step.kind == OPS and node.id in pending and node.requirement != GRAD:
                del pending[node.id]
                actions = step.actions
                retrieved = (len(actions.explicit) + len(actions.backup)
                             if actions is not None else 0)
                if retrieved:
                    # retrieve_node_output logs through log_autodiff, which reads the config
                    sim.burn_config()
                sim.timing.backward_op(step.op, step.shapes, step.cost, len(step.parents),
                                       retrieved)
                backend.backward_op(step.op.name, step.shapes)
                # a matmul's gradients are matmuls too (staged outputs on flex: sim.backend)
                staged = backend.staged(step.op.name)
                for i, (parent, shape) in enumerate(zip(step.parent_nodes, step.shapes[1])):
                    if parent is not None:
                        # the rhs gradient lhs^T @ grad packs grad (k = lhs rows): sim.backend
                        packed = ((step.shapes[1][0][-2], shape[-1])
                                  if staged and i == 1 and len(shape) >= 2 else None)
                        # a new buffer; when accumulating, it replaces the previous sum
                        pending[parent.id] = (backend.alloc(shape, staged, packed), parent)
            self._drop_step(step)
        return Gradients({node_id: buf for node_id, (buf, node) in pending.items()
                          if node.requirement == GRAD})

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
