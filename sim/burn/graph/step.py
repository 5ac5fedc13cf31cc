"""Backward steps (burn-autodiff ``graph/base.rs``, ``ops/base.rs``, ``tensor.rs``).

A step is the boxed ``dyn Step`` a graph's server keeps per registered node:

``RootStep``
    registered by ``require_grad`` (and by ``detach`` of a leaf that requires
    grad); holds the node; backward does nothing.
``UntrackedOpsStep``
    registered by an op none of whose inputs requires grad; holds the node and
    ``[None; N]`` parents; backward does nothing.
``OpsStep``
    a tracked op: holds ``Ops { parents: [Option<NodeRef>; N], node, state }``
    and the op's backward; ``state`` is what the op saved (shapes, scalars,
    tensor primitives, which keep their buffers alive until the step goes).

The Python object mirrors the Box: it holds the node and the tracked parents'
nodes (keeping those ``Arc<Node>`` alive); the buffers it keeps sit in its checkpoint
actions (``actions_builder``). It frees its
box bytes when it is dropped by the server.
"""

from __future__ import annotations

__all__ = ["Step", "ROOT", "UNTRACKED", "OPS"]

ROOT, UNTRACKED, OPS = "root", "untracked", "ops"


class Step:
    """One boxed step.

    Parameters
    ----------
    kind : {"root", "untracked", "ops"}
    op : sim.burn.op_facts.OpFacts or None
        The op (None for a root step).
    node : Node
        ``ops.node``: the output's node.
    parent_nodes : tuple of Node
        Tracked parents' nodes (``ops.parents``).
    nbytes : int
        Size of the boxed step.
    actions : sim.burn.checkpoint.CheckpointerBuilder or None
        Checkpoint actions registered with the step (``actions_builder`` entry).
    shapes : tuple
        ``(output shape, input shapes)``.

    ``cost`` is free for the time model to attach what the step's backward will
    cost (the ``pytorch`` policy's ATen model does); None otherwise. ``block`` is the
    allocator's handle of the box (``register`` sets it; None where the box was made by
    a fast-forward replay, whose frees go by size).
    """

    __slots__ = ("kind", "op", "node", "parent_nodes", "nbytes", "actions", "shapes", "cost",
                 "block")

    def __init__(self, kind, op, node, parent_nodes, nbytes, actions=None, shapes=()):
        self.kind = kind
        self.op = op
        self.node = node
        self.parent_nodes = parent_nodes
        self.nbytes = nbytes
        self.actions = actions
        self.shapes = shapes
        self.cost = None
        self.block = None

    @property
    def parents(self):
        """``Step::parents``: the node's tracked parents as ``(id, is_leaf)``."""
        return self.node.parents

    @property
    def depth(self) -> int:
        """``Step::depth``: the node's order."""
        return self.node.order

    def __repr__(self):
        name = self.op.name if self.op is not None else "root"
        return f"Step({self.kind}:{name}, node={self.node.id})"
