"""Time model: what each piece of real work costs, in nanoseconds.

The bookkeeping and the backend report the work they do (an op of a given
kind and shape, a registration, a merge, a backward's tape and passes, an
orphan sweep's entries and node scans) and this model turns it into simulated
time, charged to the host thread that did it. Costs come from the profile's
``[time]`` table:

* compute: ``flops / (gflops * 1e9) + bytes / (gbps * 1e9) + op_overhead`` per
  op on the inner backend (per-backend ``[backend.<kind>]`` rates); ``gbps`` is the
  L2-resident rate, and on a backend with an L2 model (``l2_bytes``,
  :mod:`sim.costs.cache`) the bytes of operands not resident at the op's start cost
  ``1 / gbps_miss`` instead (:meth:`Timing.l2_missed` charges the difference);
* bookkeeping: a fixed cost per registration, per tracked parent, per new
  graph, per merged graph, per tape step, per node visited by
  ``free_unavailable_nodes``;
* the orphan sweep (``cleanup_orphaned_entries``): per locator entry copied,
  per entry visited (lock + call), per node key read by ``maybe_useful``, per
  node freed.

Three accumulators let observables split a step's time: ``compute_ns``,
``bookkeeping_ns`` and ``cleanup_ns`` (the sweep alone).
"""

from __future__ import annotations

import math
from contextlib import nullcontext

__all__ = ["Timing", "flops_and_bytes"]


def flops_and_bytes(op, shapes):
    """(floating-point operations, bytes moved) of one forward op on f32 tensors.

    ``shapes`` is ``(output shape, (input shapes...))``.
    """
    out, ins = shapes
    n_out = math.prod(out)
    moved = 4 * (n_out + sum(math.prod(s) for s in ins))
    if op.name == "matmul":
        lhs, rhs = ins
        k = lhs[-1]
        return 2.0 * n_out * k, moved
    return float(max(n_out, max((math.prod(s) for s in ins), default=0))), moved


class Timing:
    """Charges modelled costs to the current host thread.

    Parameters
    ----------
    sim : sim.engine.Simulation
    params : dict
        The profile's ``[time]`` table (nanoseconds unless the key says otherwise).
    """

    def __init__(self, sim, params):
        self.sim = sim
        self.p = dict(params)
        self.compute_ns = 0.0
        self.bookkeeping_ns = 0.0
        self.cleanup_ns = 0.0
        self._op_cache = {}

    def _book(self, ns) -> None:
        self.bookkeeping_ns += ns
        self.sim.charge(ns)

    # -- compute -------------------------------------------------------------------
    def forward_op(self, op, shapes, backend) -> None:
        key = (op.name, shapes, backend)
        ns = self._op_cache.get(key)
        if ns is None:
            flops, moved = flops_and_bytes(op, shapes)
            rates = self.sim.backend_rates(backend)
            ns = self._op_cache[key] = (flops / rates["gflops"] + moved / rates["gbps"]
                                        + rates["op_overhead_ns"])
        self.compute_ns += ns
        self.sim.charge(ns)

    def backward_op(self, op, shapes, cost=None) -> None:
        """The backward of one step (``cost``: what :meth:`annotate` attached, unused here)."""
        flops, moved = flops_and_bytes(op, shapes)
        # the backward of a binary op computes one gradient per input
        self._compute(flops * op.backward_factor, moved * op.backward_factor, None)

    def elementwise(self, n_elements, backend, n_ops=1) -> None:
        """Plain elementwise work off autodiff (e.g. an optimizer update)."""
        self._compute(n_elements * n_ops, 12.0 * n_elements * n_ops, backend)

    def optimizer_update(self, n_elements, backend) -> None:
        """One parameter's SGD update off autodiff (burn: ``grad * lr``, then a subtraction)."""
        self.elementwise(n_elements, backend, n_ops=2)

    # -- seams of the API for the ``pytorch`` policy's ATen model (sim/costs/aten.py);
    #    burn has nothing there: they cost nothing ------------------------------------
    def fused(self, name, bias=False):
        """The burn ops issued inside stand for one PyTorch call ``name``."""
        return nullcontext()

    def module_call(self) -> None:
        """A module's forward was called."""

    def python_view(self) -> None:
        """A view called from Python (``detach`` under PyTorch semantics)."""

    def optimizer_step(self, n_params) -> None:
        """One optimizer step over ``n_params`` parameters (before their updates)."""

    def annotate(self, step) -> None:
        """A step was registered (after :meth:`register`)."""

    def end_backward(self) -> None:
        """A backward's tape has run."""

    def l2_missed(self, nbytes, backend) -> None:
        """``nbytes`` (B) of an op's operands were not in the L2 (sim.costs.cache): they
        stream at ``gbps_miss`` (GB/s = B/ns) instead of ``gbps``; charges the extra ns."""
        rates = self.sim.policy.rates(self.sim, backend)
        miss = rates.get("gbps_miss")
        if miss:
            ns = nbytes * (1.0 / miss - 1.0 / rates["gbps"])
            self.compute_ns += ns
            self.sim.charge(ns)

    def _compute(self, flops, moved, backend) -> None:
        rates = self.sim.backend_rates(backend)
        ns = (flops / rates["gflops"] + moved / rates["gbps"]) + rates["op_overhead_ns"]
        self.compute_ns += ns
        self.sim.charge(ns)

    # -- bookkeeping -----------------------------------------------------------------
    def register(self, n_parents) -> None:
        p = self.p
        ns = p["register_ns"] + n_parents * p["register_parent_ns"]
        self.bookkeeping_ns += ns
        self.sim.charge(ns, True)

    def new_graph(self) -> None:
        ns = self.p["new_graph_ns"]
        self.bookkeeping_ns += ns
        self.sim.charge(ns, True)

    def merge(self, n_graphs) -> None:
        self._book(n_graphs * self.p["merge_ns"])

    def tape(self, n_steps) -> None:
        self._book(n_steps * self.p["tape_step_ns"])

    def free_unavailable(self, visited, pop_groups=0.0) -> None:
        """``free_unavailable_nodes``: per node visited, plus ``pop_groups`` control-group
        reads of PopNodeSet::pop (quadratic in the number of leaves)."""
        self._book(visited * self.p["free_unavailable_node_ns"]
                   + pop_groups * self.p["pop_scan_group_ns"])

    def handle_drop(self, n_nodes) -> None:
        """Work of a drop-time release (policies that free on drop)."""
        self._book(n_nodes * self.p["drop_release_node_ns"])

    def sweep(self, entries, visits, scanned, freed) -> None:
        """One ``cleanup_orphaned_entries``."""
        p = self.p
        ns = (p["sweep_fixed_ns"] + entries * p["sweep_copy_entry_ns"]
              + visits * p["sweep_visit_ns"] + scanned * p["scan_node_ns"]
              + freed * p["sweep_free_ns"])
        self.cleanup_ns += ns
        self.sim.charge(ns)
