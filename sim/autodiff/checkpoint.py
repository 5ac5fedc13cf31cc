"""Checkpointing strategies and the per-step action builder
(burn-autodiff ``checkpoint/strategy.rs``, ``checkpoint/builder.rs``).

A :class:`CheckpointerBuilder` is what the server keeps in ``actions_builder``
for a registered node: two ``Vec<CheckpointingAction>`` (explicit, backup).

* ``Computed`` actions box a clone of a tensor primitive: the buffer stays alive
  until the builder is dropped (step consumed or freed). This is where activation
  memory is pinned.
* ``Recompute`` actions hold an ``Arc`` of the op's retro-forward (no buffer).

Strategies (the device's ``GradientCheckpointingStrategy``):

``disabled`` (``NoCheckpointing``, the default)
    memory-bound ops are treated as compute-bound; no backup actions.
``balanced`` (``BalancedCheckpointing``)
    a memory-bound op allocates its retro-forward ``Arc`` and records one backup
    action per tracked parent; an untracked parent resets the builder and the op
    falls back to compute-bound.
"""

from __future__ import annotations

__all__ = ["DISABLED", "BALANCED", "STRATEGIES", "CheckpointerBuilder"]

DISABLED, BALANCED = "disabled", "balanced"
STRATEGIES = (DISABLED, BALANCED)


class CheckpointerBuilder:
    """Explicit and backup actions of one node, with their heap blocks.

    Each action is ``(node_id, buffer_or_None, blocks)``: a buffer for ``Computed``
    (``blocks``: the boxed clone's strides and box, as ``(bytes, handle)``), None for
    ``Recompute``.
    """

    __slots__ = ("explicit", "backup", "_sim", "_vecs")

    def __init__(self, sim):
        self.explicit = []
        self.backup = []
        self._sim = sim
        #: list -> (bytes, handle) of its Vec's buffer
        self._vecs = {}

    def checkpoint(self, tensor, backup=False) -> None:
        """``CheckpointerBuilder::checkpoint``: record ``tensor``'s output for the backward
        (its time: ``Timing.checkpoint_save``): a ``Computed`` action clones the primitive
        (its own strides Vec, burn-flex Layout) and boxes it, then the action is pushed."""
        self._sim.timing.checkpoint_save()
        actions = self.backup if backup else self.explicit
        layout = self._sim.layout
        heap = self._sim.heap
        node = tensor.node  # None for a plain operand (lifted by from_inner: never memory-bound)
        if node is not None and node.memory_bound:
            action = (node.id, None, ())
        else:
            backend = tensor.device.backend
            strides = backend.stride_bytes * len(tensor.shape)
            blocks = ()
            if strides:
                blocks = ((strides, heap.alloc(strides)),)
            box = backend.primitive_bytes
            blocks += ((box, heap.alloc(box)),)
            tensor.prim.holders += 1  # the boxed clone holds the storage
            action = (node.id if node is not None else None, tensor.prim, blocks)
        n = len(actions)
        if n == 0 or (n >= 4 and n & (n - 1) == 0):
            # Vec<CheckpointingAction> grows 0 -> 4 -> 8 -> ... (a new buffer, the old freed)
            old = self._vecs.get(id(actions))
            new = layout.action_bytes * max(4, 2 * n)
            self._vecs[id(actions)] = (new, heap.alloc(new))
            if old:
                heap.free(*old)
        actions.append(action)

    def drop(self) -> None:
        """Free the builder's blocks and release the buffers it pinned: each list's actions
        in order (a boxed clone's storage, its strides, its box), then the list's buffer."""
        heap = self._sim.heap
        for actions in (self.explicit, self.backup):
            for i, (node_id, buf, blocks) in enumerate(actions):
                if buf is not None:
                    buf.holders -= 1
                    actions[i] = None
                    del buf       # the clone's Arc: the storage goes with its last holder
                for nbytes, block in blocks:
                    heap.free(nbytes, block)
            vec = self._vecs.pop(id(actions), None)
            if vec:
                heap.free(*vec)
        self.explicit = []
        self.backup = []
