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

from ..platform.vec import RustVec

__all__ = ["DISABLED", "BALANCED", "STRATEGIES", "CheckpointerBuilder", "Checkpointer"]

DISABLED, BALANCED = "disabled", "balanced"
STRATEGIES = (DISABLED, BALANCED)


class CheckpointerBuilder:
    """Explicit and backup actions of one node (or, in a backward, of the whole tape), with
    their heap blocks.

    Each action is ``(node_id, buffer_or_None, blocks)``: a buffer for ``Computed``
    (``blocks``: the boxed clone's strides and box, as ``(bytes, handle)``), None for
    ``Recompute``. Each list lives in a ``Vec<CheckpointingAction>`` (``action_bytes`` per
    action, grown as Rust grows a ``Vec``).
    """

    __slots__ = ("explicit", "backup", "_sim", "_vecs", "moved", "inputs")

    def __init__(self, sim):
        self.explicit = []
        self.backup = []
        #: the op's operand index each explicit action saved (None: not an operand's)
        self.inputs = []
        self._sim = sim
        #: the two lists' Vec blocks (explicit, backup), allocated by their first push
        self._vecs = (RustVec(sim.heap, sim.layout.action_bytes),
                      RustVec(sim.heap, sim.layout.action_bytes))
        #: after :meth:`extend` moved them out: ((id, operand index) of each explicit
        #: action, how many actions there were), what the node's backward retrieves
        self.moved = None

    def checkpoint(self, tensor, backup=False, index=None) -> None:
        """``CheckpointerBuilder::checkpoint``: record ``tensor``'s output for the backward
        (its time: ``Timing.checkpoint_save``): a ``Computed`` action clones the primitive
        (its own strides Vec, burn-flex Layout) and boxes it, then the action is pushed."""
        self._sim.timing.checkpoint_save()
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
        self._push(1 if backup else 0, action)
        if not backup:
            self.inputs.append(index)

    def _push(self, which, action) -> None:
        self._vecs[which].push()
        (self.backup if which else self.explicit).append(action)

    def extend(self, other: "CheckpointerBuilder") -> None:
        """``CheckpointerBuilder::extend``: ``other`` 's explicit actions pushed here, its
        explicit ``Vec`` freed, then the same for its backup actions."""
        other.moved = (list(zip([a[0] for a in other.explicit], other.inputs)),
                       len(other.explicit) + len(other.backup))
        for which, actions in ((0, other.explicit), (1, other.backup)):
            for action in actions:
                self._push(which, action)
            other._vecs[which].drop()
        other.explicit, other.backup = [], []

    def build(self, parents_of) -> "Checkpointer":
        """``CheckpointerBuilder::build`` at the end of ``build_tape`` (``parents_of``: the
        tape's tree, node id -> parent ids). Its blocks, in burn's order: the stop nodes'
        ``Vec`` (the ``Computed`` ids), the ``n_required`` map (per explicit ``Computed``
        action one more use of its node; per ``Recompute`` one more of the node and, the
        first time, of its ancestors up to the stop nodes), the stop nodes dropped; then
        each counted node's action taken out of the lists into the states map (a
        ``Recompute`` also into the retro-forwards map), iterating the map (here in
        insertion order: burn's is its hash order); the map dropped; the builder dropped
        with the actions no node counted (a node saved twice is counted once per action
        but taken once) and its ``Vec`` s."""
        sim = self._sim
        heap, tables = sim.heap, sim.tables
        stop = RustVec(heap, sim.layout.node_id_bytes)
        stop_ids = set()
        for node_id, buf, _ in self.explicit + self.backup:
            if buf is not None:
                stop.push()
                stop_ids.add(node_id)
        counts, counts_t = {}, tables.n_required()

        def count(node_id) -> bool:
            new = node_id not in counts
            counts[node_id] = counts.get(node_id, 0) + 1
            if new:
                counts_t.fit(len(counts))
            return new

        def count_parents(node_id) -> None:
            if count(node_id) and node_id not in stop_ids:
                for parent in parents_of.get(node_id, ()):
                    count_parents(parent)

        for node_id, buf, _ in self.explicit:
            if buf is not None:
                count(node_id)
            else:
                count_parents(node_id)
        stop.drop()
        checkpointer = Checkpointer(sim)
        for node_id, n_required in counts.items():
            action = _take_action(self.explicit, node_id) or _take_action(self.backup, node_id)
            if action is None:
                raise AssertionError(f"node {node_id} is needed but never checkpointed")
            checkpointer.insert(node_id, n_required, action)
        counts_t.drop()
        self.drop()
        return checkpointer

    def drop(self) -> None:
        """Free the builder's blocks and release the buffers it pinned: each list's actions
        in order (a boxed clone's storage, its strides, its box), then the list's buffer."""
        heap = self._sim.heap
        for which, actions in ((0, self.explicit), (1, self.backup)):
            for i in range(len(actions)):
                node_id, buf, blocks = actions[i]
                actions[i] = None
                if buf is not None:
                    buf.holders -= 1
                    del buf       # the clone's Arc: the storage goes with its last holder
                for nbytes, block in blocks:
                    heap.free(nbytes, block)
            self._vecs[which].drop()
        self.explicit = []
        self.backup = []


def _take_action(actions, node_id):
    """``actions.remove(position of node_id)``: the first action of ``node_id``, or None."""
    for i, action in enumerate(actions):
        if action[0] == node_id:
            return actions.pop(i)
    return None


class Checkpointer:
    """burn-autodiff's ``Checkpointer`` (``checkpoint/base.rs``, ``state.rs``) a backward
    builds from its tape's actions: ``backward_states`` (node id -> ``State``: a boxed saved
    tensor and how many retrievals remain, or a ``Recompute`` count) and
    ``retro_forwards``, each a hashbrown map.

    :meth:`retrieve` is ``retrieve_node_output``: ``topological_sort`` (a ``visited`` set
    and the ``sorted`` ``Vec``, the set dropped first), then ``get_state``: the state's
    count drops by one; while others remain, the saved tensor is cloned (its strides
    ``Vec`` copied, a hold on the storage), else it is unboxed (the box freed) and handed
    over. A ``Recompute`` state is retrieved without re-running its forward here (the
    balanced strategy's retro-forward is not modelled block by block)."""

    __slots__ = ("_sim", "states", "_states_t", "_retro_t", "_retros")

    def __init__(self, sim):
        self._sim = sim
        self.states = {}           # node_id -> [n_required, buf or None, blocks]
        self._states_t = sim.tables.backward_states()
        self._retro_t = sim.tables.retro_forwards()
        self._retros = 0           # entries of the retro-forwards map

    def insert(self, node_id, n_required, action) -> None:
        _, buf, blocks = action
        if buf is None:
            self._retros += 1
            self._retro_t.fit(self._retros)
        self.states[node_id] = [n_required, buf, blocks]
        self._states_t.fit(len(self.states))

    def retrieve(self, node_id):
        """The saved tensor of ``node_id`` as the backward gets it: ``[buffer, strides
        block]`` to release with :meth:`release` once the step's backward is done, or None
        (a ``Recompute`` state, or none saved)."""
        state = self.states.get(node_id)
        if state is None:
            return None
        sim = self._sim
        heap, tables = sim.heap, sim.tables
        visited = tables.key_set()
        visited.fit(1)
        order = RustVec(heap, sim.layout.node_id_bytes)
        order.push()
        visited.drop()
        order.drop()
        state[0] -= 1
        buf, blocks = state[1], state[2]
        if buf is None:
            if state[0] <= 0:
                del self.states[node_id]
            return None
        strides = blocks[0] if len(blocks) > 1 else None
        if state[0] > 0:
            buf.holders += 1          # a clone: its own strides, a hold on the storage
            if strides is not None:
                strides = (strides[0], heap.alloc(strides[0]))
            return [buf, strides]
        del self.states[node_id]
        box = blocks[-1]
        heap.free(*box)               # unboxed: the tensor moves out of its box
        return [buf, strides]

    def release(self, saved) -> None:
        """A retrieved tensor (``[buffer, strides]``) is dropped: its storage hold (the
        storage goes with its last holder), then its strides."""
        buf, strides = saved
        saved[0] = saved[1] = None
        buf.holders -= 1
        del buf
        if strides is not None:
            self._sim.heap.free(*strides)

    def drop(self) -> None:
        """The checkpointer is dropped after the tape ran: the states left (a saved tensor
        the backward did not reach: its storage, strides, box), their map, the
        retro-forwards' map."""
        heap = self._sim.heap
        for node_id in list(self.states):
            _, buf, blocks = self.states.pop(node_id)
            if buf is not None:
                buf.holders -= 1
                del buf
            for nbytes, block in blocks:
                heap.free(nbytes, block)
        self._states_t.drop()
        self._retro_t.drop()
