"""Time model: what each piece of real work costs, in nanoseconds.

The bookkeeping and the backend report the work they do (an op of a given
kind and shape, a registration, a merge, a backward's tape and passes, an
orphan sweep's entries and node scans) and this model turns it into simulated
time, charged to the host thread that did it. Costs come from the profile's
``[time]`` table:

* compute: ``flops / (gflops * 1e9) + bytes / (gbps * 1e9) + op_overhead`` per
  op on the inner backend (per-backend ``[backend.<kind>]`` rates; a gemm hides
  ``gemm_overlap`` of the shorter of its two terms under the longer: its kernels stream
  their operands while they compute, so at 1 it costs the longer alone); ``gbps`` is the
  L2-resident rate, and on a backend with an L2 model (``[process] l2_bytes``,
  :mod:`sim.platform.l2_cache`) the bytes of operands not resident at the op's start cost
  ``1 / gbps_miss`` instead (:meth:`Timing.l2_missed` charges the difference);
* handles and buffers: ``clone_ns`` per tensor handle cloned (its drop included;
  ``autodiff_clone_ns`` more for an autodiff handle's node and ref-count Arcs)
  and ``buffer_ns`` per result buffer malloc'd instead of written in place (its free
  included), so a chain ``y = op(y)`` on a uniquely owned tensor pays neither; a view
  (reshape) pays ``layout_ns`` for its new Layout;
* bookkeeping: a fixed cost per tensor saved for the backward (``checkpoint_ns``),
  per registration, per tracked parent, per new
  graph, per merged graph, per tape step, per node visited by
  ``free_unavailable_nodes``;
* the orphan sweep (``cleanup_orphaned_entries``): per locator entry copied,
  per entry visited (lock + call), per node key read by ``maybe_useful``
  (``scan_node_ns``, the read of a line in the L1d), per node read by
  ``free_unused_roots`` of a graph with no live handle (``root_check_node_ns``: its
  ``clear_unused_roots`` looks every node's parents up in ``nodes``), per node freed;
  plus, per node read, what the reads that miss each cache level cost more (below).

The sweep's cache model. Every locator entry of a graph re-reads that graph's
structures, so a sweep re-reads the same bytes over and over: each node read
dereferences the key's ``Arc<NodeId>`` (one 64-B line of its own, anywhere in the
heap) and walks the ``nodes`` table's slots and control bytes. The working set
``W`` is, summed over the graphs of the sweep (their entries are visited
interleaved, in id order): the lines of the keys read per visit plus the part of
the ``nodes`` table block they span (a graph with a live handle: the scan prefix;
a graph without: all its nodes and its whole table; a run of dead single-node
graphs: every block its members hold). A read misses each level of the cache
hierarchy with :func:`sim.platform.l2_cache.set_miss_fraction` of ``W`` against that
level (``[process] l1d_bytes``/``l1d_ways``, ``l2_bytes``/``l2_ways``,
``l3_bytes``/``l3_ways``: the CPU's, nothing fitted) and then costs what the next
level out adds per read (``[time] sweep_l2_read_ns``, ``sweep_l3_read_ns``,
``sweep_dram_read_ns``: measured on the host with the ``sweep-scan`` probe, which
runs ``maybe_useful``'s loop over tables of the same shape, or from the CPU's published
latencies; :func:`sim.platform.l2_cache.hierarchy_read_ns`). The key reads are independent
loads, so the core overlaps many misses: a miss costs a fraction of the level's
latency. A graph whose first live key sits at a
random place in hash order (RandomState) has a random prefix: the expected cost
is integrated over the prefix length's distribution (the first of ``r`` live keys
among ``n``: ``n * (1 - (1 - u) ** (1 / r))`` for ``u`` uniform), so the predicted
mean includes the long, missing scans. A level of size 0 is not modelled.

The sweep's TLB model. The same reads also need their pages in the data TLB
(``[process] dtlb_entries``/``dtlb_ways``: the core's last-level data TLB for 4-KiB pages,
from cpuid, written by ``sim calibrate --tlb``). A graph's keys are not one to a line of a
packed block: each is a block the allocator placed among the program's other small blocks.
Where the allocator places blocks address by address (the glibc arena) the model counts the
pages the graph's keys lie on from their addresses (real burn's p10-ema detach: ~420 B of
heap per key, measured by the probes' key-page census; the simulated arena puts the keys on
the same pages within 2 %); elsewhere from the heap's small-block bytes kept per node
(``spacing``). A read of ``k`` of a graph's ``n`` keys (a random subset, in hash order)
touches that many of the pages they lie on, plus its share of the ``nodes`` table's pages.
Every pass reads the same keys in the same order, each page ``k / pages touched`` times at
random places in the pass. The fraction of those reads that miss the TLB is the host's
measured curve (``[time] sweep_tlb_miss_reads``, ``sweep_tlb_miss_reach``,
``sweep_tlb_miss``: the sweep-scan probe's ``tlbr`` rows, keys R to a page read in one
random order every pass, written by ``sim calibrate --tlb``; the EPYC profiles' at R = 1-8
and 10, so a prefix's reads per page fall between measured curves;
:class:`sim.platform.l2_cache.TlbMissCurve`) at the pages read over the TLB's reach and the
reads per page; a profile with a TLB and no curve takes it from the TLB's size and ways
(:func:`sim.platform.l2_cache.page_set_miss_fraction`, LRU within a set). Where the key
pages fall among other pages does not enter: the probe's pages filling 63 % of their span
(as burn's chains' do) miss as consecutive pages do. Each miss costs a page walk (``[time]
sweep_tlb_read_ns``, measured with the sweep-scan probe's ``tlb`` rows). Off when the
profile has no TLB (``dtlb_entries = 0``).

Three accumulators let observables split a step's time: ``compute_ns``,
``bookkeeping_ns`` and ``cleanup_ns`` (the sweep alone).
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import NamedTuple

import numpy as np

from .l2_cache import (TlbLayoutCurves, TlbMissCurve, hierarchy_read_ns,
                       hierarchy_read_ns_array, tlb_read_ns, touched_pages)

__all__ = ["Timing", "SweepRecord", "PassesRecord", "flops_and_bytes"]


class SweepRecord(NamedTuple):
    """One orphan sweep as :meth:`Timing.sweep` computed it: its counts, the graph
    records it read (``sets``), the terms of ``scanned`` in summation order
    (``parts``), its ns and the ps charged."""
    entries: int
    visits: int
    scanned: float
    freed: int
    sets: tuple
    parts: tuple
    ns: float
    ps: int


class PassesRecord(NamedTuple):
    """One ``free_unavailable_nodes`` as :meth:`Timing.free_unavailable` charged it: the
    nodes its passes visited, ``PopNodeSet``'s control-group reads, its ns and the ps
    charged (fast-forward recomputes it for a graph that grows,
    :mod:`sim.engine.fastforward.chainrun`)."""
    visited: int
    pop_groups: float
    ns: float
    ps: int


def flops_and_bytes(op, shapes):
    """(floating-point operations, bytes moved) of one forward op on f32 tensors.

    ``shapes`` is ``(output shape, (input shapes...))``. A view (an op whose facts say
    ``view``: ``reshape`` of a contiguous tensor, a new layout on the same storage) moves
    and computes nothing.
    """
    if op.view:
        return 0.0, 0
    out, ins = shapes
    n_out = math.prod(out)
    moved = 4 * (n_out + sum(math.prod(s) for s in ins))
    if op.gemm:
        lhs, rhs = ins
        k = lhs[-1]
        return 2.0 * n_out * k, moved
    return float(max(n_out, max((math.prod(s) for s in ins), default=0))), moved


def _kernel_ns(rates, flops, moved, gemm_calls=0, operands_ns=0.0) -> float:
    """ns of one kernel on the inner backend: its flops and bytes at the backend's
    ``rates``, the fixed cost per op, ``operands_ns`` for its tensor operands and
    ``gemm_calls`` times the fixed cost of a gemm call."""
    compute, stream = flops / rates["gflops"], moved / rates["gbps"]
    ns = compute + stream + rates["op_overhead_ns"] + operands_ns
    if gemm_calls:
        ns += gemm_calls * rates["gemm_call_ns"]
        overlap = rates.get("gemm_overlap", 0.0)
        if overlap:
            # gemm's kernels load their operands while the FMAs of earlier ones run: the
            # shorter of the two terms hides under the longer (``gemm_overlap`` of it)
            ns -= overlap * min(compute, stream)
    return ns


class Timing:
    """Charges modelled costs to the current host thread.

    Parameters
    ----------
    sim : sim.engine.simulation.Simulation
    params : dict
        The profile's ``[time]`` table (nanoseconds unless the key says otherwise).
    caches : sequence of (bytes, ways)
        The host core's L1d, L2 and L3 (:meth:`caches`: the sweep's cache terms).
    """

    def __init__(self, sim, params, caches=()):
        self.sim = sim
        self.p = dict(params)
        # the sweep's cache hierarchy: (capacity B, ways, ns more per read that misses it)
        # of the L1d, L2 and L3 (:meth:`levels`); a level of 0 B is off
        p = self.p
        self.levels = tuple(
            (int(capacity), int(ways), float(p.get(key, 0.0)))
            for (capacity, ways), key in zip(caches[:3], self.MISS_KEYS)
            if capacity and ways and p.get(key, 0.0))
        # the data TLB as a cache of pages: (reach B, ways, ns more per read that misses it)
        tlb = caches[3] if len(caches) > 3 else (0, 0)
        self.tlb = (((int(tlb[0]), int(tlb[1]), float(p.get(self.TLB_KEY, 0.0))),)
                    if tlb[0] and tlb[1] and p.get(self.TLB_KEY, 0.0) else ())
        #: the fraction of reads that miss it, as measured on the host (None: from its size):
        #: in the sweep's own order where the profile has it, else in a random order
        self.tlb_curve = None
        #: which: "order", "random" or "formula" ("" without a TLB)
        self.tlb_source = "formula" if self.tlb else ""
        for keys, source in ((self.TLB_CURVE_KEYS, "random"), (self.TLB_ORDER_KEYS, "order")):
            if self.tlb and p.get(keys[0]):
                self.tlb_curve = TlbMissCurve(*(p[key] for key in keys))
                self.tlb_source = source
        #: the sweep-order curves of several key layouts (by key spacing), where the profile
        #: has them (``sweep_tlb_order_spacing``): a graph reads those of its own spacing
        self.tlb_layouts = None
        if self.tlb_source == "order" and p.get(self.TLB_ORDER_SPACING_KEY):
            self.tlb_layouts = TlbLayoutCurves.from_rows(
                p[self.TLB_ORDER_SPACING_KEY], *(p[key] for key in self.TLB_ORDER_KEYS))
        self.compute_ns = 0.0
        self.bookkeeping_ns = 0.0
        self.cleanup_ns = 0.0
        # (op name, shapes, backend) -> (ns, ps) of its forward; (backend, autodiff) ->
        # (compute ns, bookkeeping ns, ps) of a handle's clone; (backend, count) -> (ns, ps)
        # of fresh buffers; n parents -> (ns, ps) of a registration, None -> of a new
        # graph: the charges of the hot path, each in one step (_add_ps)
        self._op_cache = {}
        self._clone_cache = {}
        self._buffer_cache = {}
        self._register_cache = {}
        # the graphs the current sweep read (sweep_live / sweep_dead / sweep_run), consumed
        # by sweep()
        self._sweep_sets = []
        #: an object told of each sweep, ``swept(sets)`` with the graphs it read (the
        #: records of :meth:`sweep_live`, :meth:`sweep_dead`, :meth:`sweep_run`), or None
        #: (fast-forward sets one while it watches an iteration: when a chain's ``nodes``
        #: table grew against its sweep, :class:`sim.engine.fastforward.chainrun.TableWatch`)
        self.tap = None
        # id of a graph's memory management -> its keys' pages (_KeyPages), for _key_spacing
        self._key_pages = {}
        #: a list that receives a :class:`SweepRecord` per sweep while fast-forward probes
        #: an iteration (None otherwise)
        self.log = None
        #: whether the sweep walks the locator's entries instead of cloning them (set once
        #: a ``dedup-sweep`` sweep ran: ``distinct_graphs`` reads each entry's graph origin
        #: through its Arc and inserts it into a set, with no copy of the map)
        self.sweep_walks_entries = False

    def _book(self, ns) -> None:
        self.bookkeeping_ns += ns
        self.sim.charge(ns)

    def _add_ps(self, ps, locked=False) -> None:
        """:meth:`~sim.engine.simulation.Simulation.charge` of work whose ps were rounded
        already (a cached cost: the same ps as charging its ns)."""
        sim = self.sim
        thread = sim.current
        if locked and sim.contended:
            thread.segments.append((thread.pending_ps, ps))
        thread.pending_ps += ps
        sim.work_ps += ps

    def _work(self, ns) -> None:
        self.compute_ns += ns
        self.sim.charge(ns)

    # -- compute -------------------------------------------------------------------
    def forward_op(self, op, shapes, backend) -> None:
        key = (op.name, shapes, backend)
        cost = self._op_cache.get(key)
        if cost is None:
            flops, moved = flops_and_bytes(op, shapes)
            rates = self.sim.backend_rates(backend)
            ns = _kernel_ns(rates, flops, moved, op.gemm,
                            len(shapes[1]) * rates["operand_ns"])
            if op.reduce:
                # a full reduction (burn-flex 0.22.1 without its ``simd`` feature sums an
                # f32 slice with ``iter().sum()``, ops/reduce.rs ``sum_f32_contiguous``; mean
                # divides that sum): one chain of f32 adds, each waiting for the previous
                # one, at the add's latency (``reduce_add_ns`` per element), not the bandwidth
                ns += math.prod(shapes[1][0]) * rates["reduce_add_ns"]
            cost = self._op_cache[key] = (ns, round(ns * 1000))
        self.compute_ns += cost[0]
        sim = self.sim                   # self._add_ps(cost[1]), inlined: once per op
        sim.current.pending_ps += cost[1]
        sim.work_ps += cost[1]

    def backward_op(self, op, shapes, cost=None, tracked=None, retrieved=0) -> None:
        """The backward of one step (``cost``: what :meth:`annotate` attached, unused here).

        ``tracked``: how many of its parents are tracked (None: all); burn computes a
        gradient for those only (``binary``'s closures run per tracked parent), so a
        matmul by a constant makes one gemm call, not two. ``retrieved``: tensors the step
        reads back from the checkpointer (``retrieve_node_output``). Besides the inner
        ops, every step costs ``backward_step_ns`` (the gradients container: the node's
        gradient consumed, its parents' registered; the step's dispatch) and
        ``checkpoint_retrieve_ns`` per retrieved tensor.
        """
        flops, moved = flops_and_bytes(op, shapes)
        n = op.arity if tracked is None else tracked
        # the backward of a binary op computes one gradient per tracked input (matmul: a
        # gemm call each); backward_factor counts the inner work of all of them
        share = op.backward_factor * n / op.arity
        self._compute(flops * share, moved * share, None,
                      share if op.gemm else 0)
        p = self.p
        ns = p["backward_step_ns"] + retrieved * p["checkpoint_retrieve_ns"]
        if ns:
            self._book(ns)

    def random_fill(self, n_elements, backend) -> None:
        """A random fill of ``n_elements`` (``Tensor::random``: burn-flex draws every
        element from its seeded ``StdRng`` through the distribution, ``TensorData::random``,
        before the buffer is built): ``random_element_ns`` per element."""
        ns = self.sim.backend_rates(backend)["random_element_ns"]
        if ns:
            self._work(ns * n_elements)

    def linear_call(self) -> None:
        """``Linear::forward`` ran burn-tensor's ``module::linear`` (the dispatch's
        ``ModuleOps::linear``, burn-backend's default: the operands' shapes read, the matmul
        transform's analysis and decision, the weight's ``unsqueeze_leading`` check), beyond
        the ops it issues and the parameters' handle clones (charged as those):
        ``linear_call_ns``."""
        ns = self.p["linear_call_ns"]
        if ns:
            self._work(ns)

    def clock_read(self) -> None:
        """The probe read its clock to end (or start) a timed window (burn-probes'
        ``clock::Instant``: ``elapsed`` then ``now``). A window runs from one read's sample
        to the next's, so it holds one read's cost in all, whichever clock (a vDSO read of
        the wall clock; a system call for the thread's CPU clock): ``clock_read_ns``,
        charged once per window by the workloads that mirror the probes' timers."""
        ns = self.p["clock_read_ns"]
        if ns:
            self._work(ns)

    def report_wake(self) -> None:
        """The window after a probe's report (burn-probes' reporters: tv.rs, ema.rs, pit.rs
        format their rows and echo each to stderr, a ``write`` system call, between two
        timed windows, the timer restarted after them) starts with what the report left in
        the caches, the TLB and the branch predictors: its first ops run slower than in a
        window after a window. ``report_wake_ns``, charged once in each window that follows a
        report by the workloads that mirror those reporters; measured by mechanism-cost's
        ``report-wake`` variant (a window after a report less one after nothing)."""
        ns = self.p["report_wake_ns"]
        if ns:
            self._work(ns)

    def lift(self) -> None:
        """An op on an autodiff device was handed a plain operand, which burn's dispatch
        lifts onto autodiff for the op (burn-backend-extension's routing:
        ``Autodiff::from_inner``, burn-autodiff's ``AutodiffTensor::new``: a fresh
        ``NodeId`` from the global atomic counter, a ``Node`` with its client, and the
        handle's ``Arc<NodeId>``, all dropped as the op returns): ``lift_ns`` per operand
        lifted, beyond the blocks' malloc and free (charged as any); measured by
        mechanism-cost's ``gen-window`` variant (``lift/lift``: a matmul with a plain weight
        on an autodiff input against the same weight on autodiff, the two handles' clones
        made equal)."""
        ns = self.p["lift_ns"]
        if ns:
            self._work(ns)

    def read_scalar(self, backend) -> None:
        """A tensor's value was read back (``into_scalar``: burn-flex's ``into_data`` builds a
        ``TensorData`` from the buffer, its first element is read and converted):
        ``read_scalar_ns``, beyond the drop of the tensor's buffers (charged as any drop)."""
        ns = self.sim.backend_rates(backend)["read_scalar_ns"]
        if ns:
            self._work(ns)

    def optimizer_param(self) -> None:
        """An optimizer step mapped one parameter with a gradient (burn-optim's
        ``ModuleOptimizerMapper::map_float``: the gradient removed from ``GradientsParams``,
        the path joined, the parameter's context looked up and stored, ``inner()``,
        ``from_inner`` and ``require_grad``), the update's own ops aside:
        ``optimizer_map_ns``."""
        ns = self.p["optimizer_map_ns"]
        if ns:
            self._book(ns)

    def sysfs_reads(self, count) -> None:
        """``count`` sysfs directories listed or files read (gemm-common's ``cache_info``,
        once per process: :func:`sim.platform.gemm_cache.read_cache_info`): ``sysfs_read_ns``
        each (the open, read or getdents and close system calls)."""
        ns = self.p.get("sysfs_read_ns", 0.0)
        if ns and count:
            self._work(ns * count)

    def elementwise(self, n_elements, backend, n_ops=1) -> None:
        """Plain elementwise work off autodiff (e.g. an optimizer update)."""
        self._compute(n_elements * n_ops, 12.0 * n_elements * n_ops, backend)

    def optimizer_update(self, n_elements, backend) -> None:
        """One parameter's SGD update off autodiff (burn: ``grad * lr``, then a subtraction)."""
        self.elementwise(n_elements, backend, n_ops=2)

    # -- seams of the API for the ``pytorch`` policy's ATen model (sim/policies/aten.py);
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
        """``nbytes`` (B) of an op's operands were not in the L2 (sim.platform.l2_cache): they
        stream at ``gbps_miss`` (GB/s = B/ns) instead of ``gbps``; charges the extra ns."""
        rates = self.sim.policy.rates(self.sim, backend)
        miss = rates.get("gbps_miss")
        if miss:
            self._work(nbytes * (1.0 / miss - 1.0 / rates["gbps"]))

    def handle_clone(self, backend, autodiff=False) -> None:
        """A tensor handle was cloned (``Tensor::clone``: the dispatch and backend
        wrappers' copies, their Arc increments and the Layout's strides) on a device of
        ``backend``: ``clone_ns``, which also pays for the extra handle's drop later; on an
        autodiff device ``autodiff_clone_ns`` more (the node's and the ref count's Arcs,
        cloned now and dropped with the handle). A chain ``y = op(y)`` moves its operand
        and pays nothing here."""
        cost = self._clone_cache.get((backend, autodiff))
        if cost is None:
            work = self.sim.backend_rates(backend)["clone_ns"]
            book = self.p["autodiff_clone_ns"] if autodiff else 0.0
            cost = self._clone_cache[(backend, autodiff)] = (
                work, book, round(work * 1000) + round(book * 1000))
        work, book, ps = cost
        if work:
            self.compute_ns += work
        if book:
            self.bookkeeping_ns += book
        if ps:
            sim = self.sim               # self._add_ps(ps), inlined: once per handle
            sim.current.pending_ps += ps
            sim.work_ps += ps

    def checkpoint_save(self) -> None:
        """A forward op saved a tensor for its backward (``CheckpointerBuilder::checkpoint``:
        the primitive's clone and the action pushed): ``checkpoint_ns``."""
        if self.p["checkpoint_ns"]:
            self._book(self.p["checkpoint_ns"])

    def fresh_buffers(self, backend, count=1) -> None:
        """``count`` buffers were allocated on the heap for a result (the data, its Bytes
        controller, FlexTensor's Arc) rather than written in place into a uniquely owned
        operand: ``buffer_ns`` each, their frees at the last handle's drop included."""
        cost = self._buffer_cache.get((backend, count))
        if cost is None:
            ns = self.sim.backend_rates(backend)["buffer_ns"] * count
            cost = self._buffer_cache[(backend, count)] = (ns, round(ns * 1000))
        if cost[0]:
            self.compute_ns += cost[0]
            sim = self.sim               # self._add_ps(cost[1]), inlined: once per buffer
            sim.current.pending_ps += cost[1]
            sim.work_ps += cost[1]

    def new_layout(self, backend) -> None:
        """A view was made of a uniquely owned operand (``FlexTensor::reshape``: a new
        Layout, its strides Vec allocated, the storage's Arc cloned; the operand's Layout
        and Arc dropped): ``layout_ns``. An in-place op keeps its operand's Layout and pays
        nothing here."""
        ns = self.sim.backend_rates(backend)["layout_ns"]
        if ns:
            self._work(ns)

    def _compute(self, flops, moved, backend, gemm_calls=0) -> None:
        self._work(_kernel_ns(self.sim.backend_rates(backend), flops, moved, gemm_calls))

    # -- bookkeeping -----------------------------------------------------------------
    def prepare(self, n_inputs) -> None:
        """burn-autodiff's preparation of an op with ``n_inputs`` tensor operands (their
        nodes read and cloned into the op's node array, the requirement computed), before
        the inner backend runs it."""
        ns = n_inputs * self.p["operand_node_ns"]
        if ns:   # 0 where a profile does not separate it (m2max-macos): skip the call
            self.bookkeeping_ns += ns
            self.sim.charge(ns)

    def register(self, n_parents) -> None:
        cost = self._register_cache.get(n_parents)
        if cost is None:
            p = self.p
            ns = p["register_ns"] + n_parents * p["register_parent_ns"]
            cost = self._register_cache[n_parents] = (ns, round(ns * 1000))
        self.bookkeeping_ns += cost[0]
        self._add_ps(cost[1], True)

    def new_graph(self) -> None:
        cost = self._register_cache.get(None)
        if cost is None:
            ns = self.p["new_graph_ns"]
            cost = self._register_cache[None] = (ns, round(ns * 1000))
        self.bookkeeping_ns += cost[0]
        self._add_ps(cost[1], True)

    def merge(self, n_graphs) -> None:
        self._book(n_graphs * self.p["merge_ns"])

    def tape(self, n_steps) -> None:
        self._book(n_steps * self.p["tape_step_ns"])

    def free_unavailable(self, visited, pop_groups=0.0) -> None:
        """``free_unavailable_nodes``: per node visited, plus ``pop_groups`` control-group
        reads of PopNodeSet::pop (quadratic in the number of leaves)."""
        ns = (visited * self.p["free_unavailable_node_ns"]
              + pop_groups * self.p["pop_scan_group_ns"])
        self._book(ns)
        if self.log is not None:
            self.log.append(PassesRecord(visited, pop_groups, ns, round(ns * 1000)))

    def handle_drop(self, n_nodes) -> None:
        """Work of a drop-time release (policies that free on drop)."""
        self._book(n_nodes * self.p["drop_release_node_ns"])

    def lookup_ns(self) -> float:
        """ns of one lookup of a small key in a hash table, derived: a node read by
        ``free_unused_roots`` (``root_check_node_ns``) is maybe_useful's read
        (``scan_node_ns``) plus two such lookups (``statuses`` and ``nodes``)."""
        p = self.p
        return max(0.0, p.get("root_check_node_ns", p["scan_node_ns"]) - p["scan_node_ns"]) / 2

    def lookups(self, n) -> None:
        """``n`` lookups of small keys in a hash table (bookkeeping)."""
        self._book(n * self.lookup_ns())

    # -- the orphan sweep --------------------------------------------------------------
    #: B per line a node read dereferences (the key's Arc<NodeId>), x86_64 and arm64
    LINE_BYTES = 64
    #: the [time] cost of a read that misses each level of ``caches`` (L1d, L2, L3)
    MISS_KEYS = ("sweep_l2_read_ns", "sweep_l3_read_ns", "sweep_dram_read_ns")
    #: the [time] cost of a read whose page misses the data TLB (``caches``' fourth entry)
    TLB_KEY = "sweep_tlb_read_ns"
    #: the [time] keys of the data TLB's measured miss curve (:class:`TlbMissCurve`'s
    #: arguments; empty lists: not measured)
    TLB_CURVE_KEYS = ("sweep_tlb_miss_reads", "sweep_tlb_miss_reach", "sweep_tlb_miss")
    #: the [time] keys of the miss curve measured in the sweep's own order and key spacing
    #: (the sweep-scan probe's `order` rows); where present it replaces the random-order one
    TLB_ORDER_KEYS = ("sweep_tlb_order_reads", "sweep_tlb_order_reach", "sweep_tlb_order_miss")
    #: the [time] key naming the key layout (B of heap per key) of each sweep-order curve,
    #: where they were measured on several (empty or missing: one layout, one curve set)
    TLB_ORDER_SPACING_KEY = "sweep_tlb_order_spacing"
    #: B per page of the heap the keys sit in: glibc's brk heap and mmapped chunks are
    #: base pages (the allocator does not madvise huge pages; THP is ``madvise`` on the
    #: measured hosts)
    PAGE_BYTES = 4096

    @staticmethod
    def caches(process):
        """The ``caches`` argument from a profile's ``[process]`` table: ``(bytes, ways)`` of
        the L1d, L2 and L3, and of the data TLB (its reach: entries x :attr:`PAGE_BYTES`)."""
        return ((process.l1d_bytes, process.l1d_ways), (process.l2_bytes, process.l2_ways),
                (process.l3_bytes, process.l3_ways),
                (process.dtlb_entries * Timing.PAGE_BYTES, process.dtlb_ways))
    #: points of the integral over a random scan prefix (quantiles of its distribution)
    PREFIX_POINTS = 16

    def sweep_live(self, memory, passes) -> None:
        """The sweep visits a graph with a live handle ``passes`` times: each visit reads
        its nodes in hash order up to the first live key (``memory``: the graph's
        :class:`~sim.burn.runtime.memory_management.GraphMemoryManagement`)."""
        n = memory.node_count()
        if n:
            self._sweep_sets.append((0, passes, n, memory.referenced, self._table_bytes(memory),
                                     id(memory), 1, self._key_spacing(memory, n)))

    def sweep_dead(self, memory, passes=1, maybe_useful=True) -> None:
        """``passes`` visits of a graph with no live handle (``maybe_useful`` reads every
        node, unless ``maybe_useful`` is false, then ``free_unused_roots`` reads every
        node again); call before the pass frees anything."""
        n = memory.node_count()
        if n:
            self._sweep_sets.append((1, passes, n, 0, self._table_bytes(memory), id(memory),
                                     2 if maybe_useful else 1, 0.0))

    def sweep_run(self, run, maybe_useful=True) -> None:
        """A run of ``run.count`` dead single-node graphs, each visited once (one read by
        ``maybe_useful`` unless ``maybe_useful`` is false, one by ``free_unused_roots``):
        as :meth:`sweep_dead` of each
        (a one-node ``nodes`` table of 4 buckets), so that a fast-forwarded run costs
        what the same graphs cost one by one."""
        self._sweep_sets.append((2, 1, run.count, 0, self.sim.tables.nodes_block_bytes(4),
                                 id(run), 2 if maybe_useful else 1, 0.0))

    def _key_spacing(self, memory, n):
        """B of heap per key of a graph of ``n`` nodes with a live handle: the pages its keys
        lie on over its keys (0 where the TLB is not modelled). A key is the node's
        ``ArcInner<NodeId>``, a block the allocator placed among the program's other small
        blocks; where the allocator places blocks address by address (the glibc arena:
        :mod:`sim.platform.ptmalloc`) the pages are those of the keys' own addresses (real
        burn, the counting allocator's key-page census of p10-ema detach and ema-balanced
        detach: 220 and 283 pages at step 500, 824 and 1,072 at step 2,000; the simulated arena
        puts the same keys on 217 and 284 at step 500). Otherwise, or for a graph of keys
        without an address, the heap's small-block bytes kept per node the graph gained since
        the sweep first read it (:meth:`_kept_spacing`). The pages are counted once per key: a
        graph read again with only new keys appended to its ``nodes`` map adds theirs
        (:class:`_KeyPages`)."""
        if not self.tlb:
            return 0.0
        key = id(memory)
        pages = self._key_pages.get(key)
        if pages is None or not pages.follow(memory.nodes):
            pages = _KeyPages(memory.nodes, self.PAGE_BYTES)
            if len(self._key_pages) >= self.KEY_PAGES_KEPT:
                del self._key_pages[next(iter(self._key_pages))]
            self._key_pages[key] = pages
        if pages.placed:
            return len(pages.keys) * self.PAGE_BYTES / pages.placed
        return self._kept_spacing(memory, n)

    #: graphs whose key pages the TLB model keeps counted between sweeps (the oldest dropped)
    KEY_PAGES_KEPT = 8

    def keys_moved(self, memory) -> None:
        """``memory``'s ``nodes`` map now holds some of its Arcs under other keys (fast-forward
        swapped two nodes' places): its key pages are counted afresh at the next sweep."""
        self._key_pages.pop(id(memory), None)

    def _kept_spacing(self, memory, n) -> float:
        """B of heap per key from the bytes the heap kept: a node's key is allocated among
        the blocks the program keeps while the graph grows (the node's own, its step's),
        freed small chunks are refilled first, and blocks past glibc's mmap threshold
        (tensor data, big tables) go elsewhere, so consecutive keys lie about as far apart
        as the small-block bytes the heap kept per node the graph gained: the heap's live
        bytes below :attr:`~sim.platform.heap.Heap.LARGE_BYTES` against the graph's nodes
        since the sweep first read it (its ``nodes`` table's ``born``); 0 where the graph
        has not grown since. (Requested bytes: without the allocator's chunk headers and
        holes, so it underestimates the spacing, ~350 B per node against the ~420 B of
        p10-ema detach's keys.)"""
        table = memory.nodes_table
        heap = self.sim.heap
        live = heap.live_bytes - heap.large_bytes
        if table.born is None:
            table.born = (live, n)
            return 0.0
        born_live, born_n = table.born
        if n <= born_n:
            return 0.0
        return max(0.0, live - born_live) / (n - born_n)

    @staticmethod
    def _table_bytes(memory) -> int:
        table = memory.nodes_table
        return table.layout.block_bytes(table.buckets) if table.buckets else 0

    def _take_sweep_sets(self):
        sets, self._sweep_sets = self._sweep_sets, []
        return sets

    def _sweep_reads(self, sets):
        """(node reads by free_unused_roots, extra ns of the reads that miss a cache level or
        the data TLB)."""
        cleared = 0.0
        for kind, passes, n, _, _, _, _, _ in sets:
            if kind:
                cleared += passes * n
        if not sets:
            return cleared, 0.0
        line, page = self.LINE_BYTES, self.PAGE_BYTES

        def lines(kind, k, n, table, spacing):
            if kind == 2:
                return k * (line + table)  # k single-node graphs, ``table`` B tables
            return k * line + (k / n) * table

        def touched(k, n, spacing):
            return touched_pages(k, n, spacing, page)

        def pages(kind, k, n, table, spacing):
            """B of the pages the reads touch (pages x page): the keys' and the table's."""
            if kind == 2 or spacing <= line:
                return lines(kind, k, n, table, spacing)
            return touched(k, n, spacing) * page + (k / n) * table

        def reads_per_page(kind, k, n, table, spacing):
            """The key reads of one pass per page they touch."""
            if kind == 2 or spacing <= line or k <= 0:
                return 1.0
            return max(1.0, k / touched(k, n, spacing))

        extra = 0.0
        if self.levels:
            extra += self._missed_ns(sets, self.levels, lines, hierarchy_read_ns)
        if self.tlb and self.tlb_layouts is not None:
            layouts = self.tlb_layouts

            def read_ns(nbytes, levels, reads_at):
                return tlb_read_ns(nbytes, levels, reads_at[0], layouts.at(reads_at[1]))

            def reads_at(kind, k, n, table, spacing):
                return reads_per_page(kind, k, n, table, spacing), spacing
            extra += self._missed_ns(sets, self.tlb, pages, read_ns, reads_at)
        elif self.tlb:
            curve = self.tlb_curve

            def read_ns(nbytes, levels, reads):
                return tlb_read_ns(nbytes, levels, reads, curve)
            extra += self._missed_ns(sets, self.tlb, pages, read_ns, reads_per_page)
        return cleared, extra

    def _missed_ns(self, sets, levels, footprint, read_ns, reuse=None) -> float:
        """ns more of the sweep's reads that miss ``levels`` (each graph's working set:
        ``footprint(kind, reads, n, table B, key spacing B)``; ``read_ns(working set,
        levels)``: ns more per read; ``reuse``, with the same arguments as ``footprint``:
        the graph's reads per page of it and pass, passed on to ``read_ns``)."""
        if reuse is not None:
            def cost(others, kind, k, n, table, spacing):
                return read_ns(others + footprint(kind, k, n, table, spacing), levels,
                               reuse(kind, k, n, table, spacing))
        else:
            def cost(others, kind, k, n, table, spacing):
                return read_ns(others + footprint(kind, k, n, table, spacing), levels)
        # each graph counts once in W, at its first record (a graph without a live handle
        # is recorded per pass, its first pass reading the most)
        mean_fp = []
        graph_fp = {}
        for kind, passes, n, r, table, key, _, spacing in sets:
            k = (n + 1) / (r + 1) if kind == 0 else n
            fp = footprint(kind, min(k, n), n, table, spacing)
            mean_fp.append(fp)
            graph_fp.setdefault(key, fp)
        total = sum(graph_fp.values())
        extra = 0.0
        q = self.PREFIX_POINTS
        for (kind, passes, n, r, table, key, per_node, spacing), fp in zip(sets, mean_fp):
            others = total - graph_fp[key]
            if kind == 0:
                if cost(others, 0, n, n, table, spacing) < 1e-12:
                    continue               # resident even when the whole graph is read
                # expected reads x ns more per read over the random prefix length
                acc = 0.0
                for i in range(q):
                    u = (i + 0.5) / q
                    k = n * (1.0 - (1.0 - u) ** (1.0 / r))
                    acc += k * cost(others, 0, k, n, table, spacing)
                extra += passes * acc / q
            else:
                extra += per_node * passes * n * cost(others, kind, n, n, table, spacing)
        return extra

    def sweep(self, entries, visits, scanned, freed, parts=()) -> None:
        """One ``cleanup_orphaned_entries`` (``scanned``: every node read, by
        ``maybe_useful`` and by ``free_unused_roots``; the graphs recorded by
        :meth:`sweep_live`, :meth:`sweep_dead` and :meth:`sweep_run` since the last sweep
        tell which reads were ``free_unused_roots``' and how many missed each cache level).

        ``parts``: the terms ``scanned`` was summed from, in order, as ``(key, reads)``
        (``key``: the ``id`` of the graph's memory management, or None); only
        :attr:`log` keeps them (fast-forward recomputes a sweep from them,
        :mod:`sim.engine.fastforward.chainrun`)."""
        sets = self._take_sweep_sets()
        if self.tap is not None:
            self.tap.swept(sets)
        ns = self.sweep_ns(entries, visits, scanned, freed, sets)
        self.cleanup_ns += ns
        self.sim.charge(ns)
        if self.log is not None:
            # the ps charge() adds (rounded once per call)
            self.log.append(SweepRecord(entries, visits, scanned, freed, tuple(sets),
                                        tuple(parts), ns, round(ns * 1000)))

    def sweep_ns(self, entries, visits, scanned, freed, sets) -> float:
        """ns of one sweep from its counts and the graphs it read (``sets``: the records
        of :meth:`sweep_live`, :meth:`sweep_dead` and :meth:`sweep_run`); pure."""
        p = self.p
        cleared, missed_ns = self._sweep_reads(sets)
        cleared = min(cleared, scanned)
        if self.sweep_walks_entries:
            # the origin read through the entry's Arc (as maybe_useful reads a key through
            # its Arc) and one set insert
            entry_ns = p["scan_node_ns"] + self.lookup_ns()
        else:
            entry_ns = p["sweep_copy_entry_ns"]
        return (p["sweep_fixed_ns"] + entries * entry_ns
                + visits * p["sweep_visit_ns"] + (scanned - cleared) * p["scan_node_ns"]
                + cleared * p.get("root_check_node_ns", p["scan_node_ns"])
                + freed * p["sweep_free_ns"] + missed_ns)


    def sweep_ns_many(self, entries, visits, scanned, freed, sets):
        """:meth:`sweep_ns` of many sweeps at once, each element bit for bit the scalar
        method's (the same operations in the same order on float64 arrays): ``entries``,
        ``visits`` and ``scanned`` are arrays (one element a sweep), and a field of a
        record in ``sets`` may be one too (a graph that grows from one sweep to the next:
        a chain fast-forward applies, :mod:`sim.engine.fastforward.chainrun`). A list of
        ns; None where the model reads the data TLB (its page counts are not taken here:
        call :meth:`sweep_ns` per sweep)."""
        if self.tlb or any(isinstance(r, np.ndarray) for _, _, _, r, _, _, _, _ in sets):
            return None
        p = self.p
        count = len(entries)
        cleared = 0.0
        for kind, passes, n, _, _, _, _, _ in sets:
            if kind:
                cleared = cleared + passes * n
        cleared = np.broadcast_to(np.asarray(cleared, dtype=float), (count,))
        missed = np.zeros(count)
        if sets and self.levels:
            missed = missed + self._missed_ns_many(sets, self.levels, count)
        cleared = np.where(scanned < cleared, scanned, cleared)
        if self.sweep_walks_entries:
            entry_ns = p["scan_node_ns"] + self.lookup_ns()
        else:
            entry_ns = p["sweep_copy_entry_ns"]
        ns = (p["sweep_fixed_ns"] + entries * entry_ns
              + visits * p["sweep_visit_ns"] + (scanned - cleared) * p["scan_node_ns"]
              + cleared * p.get("root_check_node_ns", p["scan_node_ns"])
              + freed * p["sweep_free_ns"] + missed)
        return ns.tolist()

    def _missed_ns_many(self, sets, levels, count):
        """:meth:`_missed_ns` of the cache levels (``footprint``: the node lines and the
        table, as :meth:`_sweep_reads` gives them) for :meth:`sweep_ns_many`."""
        line = self.LINE_BYTES

        def footprint(kind, k, n, table):
            if kind == 2:
                return k * (line + table)
            return k * line + (k / n) * table

        def cost(others, kind, ks, n, table):
            """The read costs at each of ``ks`` (one row each) in one array call."""
            rows = np.stack([np.broadcast_to(np.asarray(others + footprint(kind, k, n, table),
                                                        dtype=float), (count,))
                             for k in ks])
            return hierarchy_read_ns_array(rows.ravel(), levels).reshape(rows.shape)
        mean_fp, graph_fp = [], {}
        for kind, passes, n, r, table, key, _, _ in sets:
            if kind == 0:
                k = (n + 1) / (r + 1)
                k = np.where(n < k, n, k) if isinstance(k, np.ndarray) else min(k, n)
            else:
                k = n
            fp = footprint(kind, k, n, table)
            mean_fp.append(fp)
            graph_fp.setdefault(key, fp)
        total = 0
        for fp in graph_fp.values():
            total = total + fp
        extra = np.zeros(count)
        q = self.PREFIX_POINTS
        for (kind, passes, n, r, table, key, per_node, _), fp in zip(sets, mean_fp):
            others = total - graph_fp[key]
            if kind == 0:
                ks = [n * (1.0 - (1.0 - (i + 0.5) / q) ** (1.0 / r)) for i in range(q)]
                costs = cost(others, 0, [n] + ks, n, table)
                skip = costs[0] < 1e-12
                acc = np.zeros(count)
                for i in range(q):
                    acc = acc + ks[i] * costs[i + 1]
                extra = np.where(skip, extra, extra + passes * acc / q)
            else:
                extra = extra + per_node * passes * n * cost(others, kind, [n], n, table)[0]
        return extra


class _KeyPages:
    """The pages a graph's keys lie on (:meth:`Timing._key_spacing`): keys per page, the keys
    with an address (``placed``), counted over a ``nodes`` map. Keys are
    only appended to the map (a key read again keeps its place and its Arc), so a map whose
    last counted key is still there with exactly the counted keys before it has only gained
    the keys after it: :meth:`follow` counts those; anything else is counted afresh."""

    __slots__ = ("nodes", "page", "keys", "placed", "counted", "last", "last_rc")

    def __init__(self, nodes, page):
        self.nodes = nodes
        self.page = page
        self.keys = {}            # page number -> keys on it
        self.placed = 0
        self.counted = 0          # keys of ``nodes`` counted (placed or not)
        self.last = self.last_rc = None
        self._add(list(nodes))

    def _add(self, node_ids) -> None:
        nodes, keys, page = self.nodes, self.keys, self.page
        for node_id in node_ids:
            block = nodes[node_id][0]._block
            if type(block) is int:
                number = block // page
                keys[number] = keys.get(number, 0) + 1
                self.placed += 1
        self.counted += len(node_ids)
        if node_ids:
            self.last = node_ids[-1]
            self.last_rc = nodes[self.last][0]

    def follow(self, nodes) -> bool:
        """Count the keys appended to ``nodes`` since the last count; False where the map is
        another one or lost a counted key."""
        if nodes is not self.nodes or len(nodes) < self.counted:
            return False
        if self.counted == 0 or self.last not in nodes:
            return self.counted == 0 and not nodes
        if nodes[self.last][0] is not self.last_rc:
            return False
        new = []
        for node_id in reversed(nodes):
            if node_id == self.last:
                break
            new.append(node_id)
        if len(nodes) - len(new) != self.counted:
            return False
        new.reverse()
        self._add(new)
        return True
