"""``burn-0.22.1``: today's bookkeeping (also burn main as of 2026-10)."""

from __future__ import annotations

from ..burn.graph.node import GRAD
from ..burn.optim import burn_adam
from ..burn.runtime.graph import GraphCleaner, GraphLocator, GraphMutexClient
from ..burn.runtime.memory_management import GraphMemoryManagement
from ..burn.runtime.server import AutodiffServer
from ..burn.tensor import Tensor

__all__ = ["Policy"]


class Policy:
    """burn 0.22.1; every seam does what burn does, every mirror class is burn's.
    Subclasses override a seam, or replace a mirror class (:mod:`sim.policies.mirror`)
    with a subclass whose method is the patched one."""

    name = "burn-0.22.1"
    changes = ("Nothing: untracked ops register an UntrackedOpsStep and start a new graph; "
               "nodes are released only by backward(): free_unavailable_nodes on its graph, then "
               "cleanup_orphaned_entries clones the locator's graphs map and visits every entry "
               "(maybe_useful scans the graph's nodes until a live handle). detach keeps "
               "require_grad.")
    expected = "Reference behaviour: the seeds' growth (untracked records, EMA chain, target panic)."
    semantic_change = False
    #: a past version of burn's bookkeeping, not a candidate fix
    history = False
    #: whether a tensor handed to an op by value (``Tensor.move``) is dropped inside the op,
    #: as Rust's ownership does; a Python framework frees it when the interpreter drops its
    #: last reference, after the call
    moves_operands = True
    #: the framework whose program the run simulates: a workload that records another
    #: experiment for PyTorch (p10-ema-pytorch) asks this, not the policy's name
    framework = "burn"
    #: how tables and figures label a policy that models another framework (a reference
    #: beside the fixes, never a fix candidate); None for burn's bookkeeping and its fixes
    reference = None

    # -- mirror classes the simulation builds (sim.policies.mirror) ----------------------
    GraphMutexClient = GraphMutexClient
    GraphLocator = GraphLocator
    GraphCleaner = GraphCleaner
    AutodiffServer = AutodiffServer
    GraphMemoryManagement = GraphMemoryManagement

    def __init__(self, sim):
        self.sim = sim

    # -- seams ------------------------------------------------------------------------
    def register_untracked(self, client, rc, step, device) -> None:
        """An op with no tracked input: burn registers its step (a new graph)."""
        client.register(rc, step)

    def after_backward(self, client) -> None:
        """After a backward: burn's orphan sweep (the seam ``cleanup_orphaned_entries``)."""
        self.cleanup_orphaned_entries(client)

    def cleanup_orphaned_entries(self, client) -> None:
        """The orphan sweep: burn clones the locator's map and visits every entry."""
        client.cleanup_orphaned_entries()

    def detach(self, tensor):
        """``float_detach``: a new leaf (new id, new graph) that keeps ``require_grad``
        (the backend's ``require_grad``, before the dispatch layer boxes the result)."""
        grad = tensor.node.requirement == GRAD
        return tensor.rewrap(tensor.device, then=_require_grad if grad else None)

    def on_last_handle(self, server, rc) -> None:
        """A registered node lost its last tensor handle: burn is not told."""

    def in_place(self, kind) -> bool:
        """Whether ops on inner backend ``kind`` write into uniquely owned operands
        (burn-flex does; see :mod:`sim.burn.backend`)."""
        return kind in ("flex", "metal")

    def sgd_update(self, backend, inner, grad, shape):
        """The updated parameter's buffer: burn-optim ``sgd.rs``, ``delta = grad * lr``
        then ``tensor - delta``, each an elementwise op that writes in place where it can."""
        delta = Tensor(inner.device, shape, backend.output("mul_scalar", (grad,), shape))
        grad._release()      # moved into mul_scalar: nothing of the handle is left
        out = backend.output("sub", (inner, delta), shape)
        del delta            # moved into sub: its storage, then its strides
        return out

    def adam_update(self, adam, tensor, grad, state, lr):
        """One parameter's Adam update: ``(updated tensor, state)``; burn-optim
        ``adam.rs`` op by op on the inner backend (:func:`sim.burn.optim.burn_adam`)."""
        return burn_adam(adam, tensor, grad, state, lr)

    def may_compact(self) -> bool:
        """Exact mode: whether dead single-node graphs may be kept as records
        (:meth:`GraphLocator.compact`); False for policies that index node ids
        themselves and remove them entry by entry."""
        return True

    def on_register(self, client, rc, step) -> None:
        """After each registration: burn does nothing more."""

    def on_node_removed(self, memory, node_id, parents) -> None:
        """A node left a graph's ``nodes`` map: burn keeps no other index to update."""

    def first_backward(self) -> None:
        """The process's first backward: lazy global state and one-time warm-up."""
        sim = self.sim
        process = sim.profile.process
        if process.first_backward_blocks:
            each = process.first_backward_bytes // process.first_backward_blocks
            for _ in range(process.first_backward_blocks):
                sim.heap.alloc(each)
        sim.charge(sim.profile.time["process_warmup_ns"])

    def rates(self, sim, backend):
        """Compute rates of an inner backend (``None``: the CPU backend)."""
        kind = "flex" if backend is None else backend.kind
        return sim.profile.backends[kind]

    @classmethod
    def describe(cls) -> str:
        return f"{cls.changes} Expected: {cls.expected}"


def _require_grad(tensor) -> None:
    tensor.require_grad()
