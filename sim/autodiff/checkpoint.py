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

    Each action is ``(node_id, buffer_or_None)``: a buffer for ``Computed``,
    None for ``Recompute``.
    """

    __slots__ = ("explicit", "backup", "_sim", "_blocks")

    def __init__(self, sim):
        self.explicit = []
        self.backup = []
        self._sim = sim
        self._blocks = []

    def checkpoint(self, tensor, backup=False) -> None:
        """``CheckpointerBuilder::checkpoint``: record ``tensor``'s output for the backward
        (its time: ``Timing.checkpoint_save``)."""
        self._sim.timing.checkpoint_save()
        actions = self.backup if backup else self.explicit
        layout = self._sim.layout
        heap = self._sim.heap
        n = len(actions)
        if n == 0 or (n >= 4 and n & (n - 1) == 0):
            # Vec<CheckpointingAction> grows 0 -> 4 -> 8 -> ...
            old = layout.action_bytes * n if n else 0
            new = layout.action_bytes * max(4, 2 * n)
            heap.alloc(new)
            self._blocks.append(new)
            if old:
                heap.free(old)
                self._blocks.remove(old)
        node = tensor.node  # None for a plain operand (lifted by from_inner: never memory-bound)
        if node is not None and node.memory_bound:
            actions.append((node.id, None))
        else:
            backend = tensor.device.backend
            box = backend.primitive_bytes
            heap.alloc(box)
            self._blocks.append(box)
            strides = backend.stride_bytes * len(tensor.shape)
            if strides:  # the boxed clone's own strides Vec (burn-flex Layout)
                heap.alloc(strides)
                self._blocks.append(strides)
            tensor.prim.holders += 1  # the boxed clone holds the storage
            actions.append((node.id if node is not None else None, tensor.prim))

    def drop(self) -> None:
        """Free the builder's blocks and release the buffers it pinned."""
        heap = self._sim.heap
        for nbytes in self._blocks:
            heap.free(nbytes)
        self._blocks = []
        for _, buf in self.explicit + self.backup:
            if buf is not None:
                buf.holders -= 1
        self.explicit = []
        self.backup = []
