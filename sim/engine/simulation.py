"""The simulation: one environment passed to everything that needs it.

:class:`Simulation` owns the SimPy environment (simulated time in
nanoseconds), the host heap and its allocator, the inner backends, the
autodiff client (locator, graphs) and the policy. Workloads are plain
generator functions ``run(sim, ...)`` written against :mod:`sim.burn.tensor`; they
run as SimPy processes, one per host thread.

Time. Ops do not yield: the work they do is charged (:meth:`charge`) to the
current host thread as pending time, and the pending time becomes one SimPy
timeout when the thread yields (``yield sim.tick()``, a sample, a sync). With a
single host thread nothing can interleave, so this batching is exact. With
several threads, time charged while holding the locator mutex is replayed
through a ``simpy.Resource`` so that threads queue for it.

Observations. ``sim.sample(x=..., x_unit=..., **metrics)`` records rows in
the measured schema (experiment, variant, phase, x, x_unit, metric, value,
unit, note) plus the bookkeeping observables (live graphs, nodes, locator
entries, registered steps, heap bytes and blocks, simulated and cleanup time).
"""

from __future__ import annotations

from collections import Counter
import gc
import math
import numbers
import sys
import weakref

import simpy

from ..burn.backend import Backend, DeviceSettingsRegistry
from ..platform.heap import Heap
from ..platform.rss import FAULT_AROUND_BYTES, Allocator, TouchedPages
from ..platform.hashbrown import RawTable, TableLayout
from ..platform.timing import Timing
from .profile import mallopt
from ..burn.graph.runs import NodeRun
from ..errors import LimitExceeded, UserError, shown
from ..userfile import suspended_frames
from ..burn.tensor import Device, BurnPanic
from ..burn.graph.traversal import TapeConsumed
from .fastforward.repeat import repeat
from .interrupts import _in_finalizer
from ..units import METRICS, OBSERVABLES
from ..paths import PACKAGE_PREFIX
from ..policies import get_policy
from ..policies.base import Policy
from ..burn.runtime.graph import GraphLocator
from ..burn.runtime.memory_management import GraphMemoryManagement
from ..burn.runtime.server import AutodiffServer
from ..policies.trace import traced, NAME_READ

__all__ = ["Simulation", "Limits", "LimitExceeded", "HostThread"]


#: the largest float: an int past it is read back as an infinity
_FLOAT_MAX = sys.float_info.max


def _finite_number(value) -> bool:
    """Whether ``value`` is a real number a CSV row can hold and a comparison read back
    (a numpy scalar too; not a bool, a string, None, NaN, an infinity or an int too large
    for a float, which a comparison reads back as one)."""
    try:
        return (isinstance(value, numbers.Real) and not isinstance(value, bool)
                and math.isfinite(value))
    except OverflowError:           # an int too large for a float
        return False


class Limits:
    """Budgets that stop a run instead of exhausting the machine.

    ``max_ops`` registered steps, ``max_live_nodes`` locator entries held as
    individual objects (about 1-2 KB of Python memory each; fast-forwarded runs and
    the dead single-node graphs exact mode keeps as run records do
    not count; a glibc arena's chunks, each placed and kept on its own at about 200 B,
    count as ``1 / ARENA_CHUNKS_PER_NODE`` node each), ``max_wall_s`` seconds of real
    time (checked every 4096 registrations and at every yield, and by an alarm:
    :class:`_WallBudget`), and ``max_tensor_elements`` elements in one tensor (checked where a
    shape is made: creation, broadcasting, matmul).
    """

    #: elements of one tensor at most, by default: 2^32 (16 GiB of f32)
    MAX_TENSOR_ELEMENTS = 2 ** 32

    #: glibc-arena chunks that count as one live node against ``max_live_nodes``
    ARENA_CHUNKS_PER_NODE = 4

    def __init__(self, max_ops=50_000_000, max_live_nodes=5_000_000, max_wall_s=None,
                 max_tensor_elements=MAX_TENSOR_ELEMENTS):
        self.max_ops = max_ops
        self.max_live_nodes = max_live_nodes
        self.max_wall_s = max_wall_s
        self.max_tensor_elements = max_tensor_elements

    def arena_chunks(self):
        """The most glibc-arena chunks a run may hold (None: no memory budget)."""
        if self.max_live_nodes is None:
            return None
        return self.max_live_nodes * self.ARENA_CHUNKS_PER_NODE


class TableFactory:
    """Hash tables of the bookkeeping, each with its slot size on this platform."""

    def __init__(self, layout, heap):
        w = layout.group_width
        self.heap = heap
        self._steps = TableLayout(layout.steps_slot_bytes, 8, w)
        self._actions = TableLayout(layout.actions_slot_bytes, 8, w)
        self._nodes = TableLayout(layout.nodes_slot_bytes, 8, w)
        self._leaves = TableLayout(layout.leaves_slot_bytes, 8, w)
        self._statuses = TableLayout(layout.statuses_slot_bytes, 8, w)
        self._key_set = TableLayout(layout.key_set_slot_bytes, 8, w)
        self._device_settings = TableLayout(layout.device_settings_slot_bytes, 8, w)
        self._device_settings_cache = TableLayout(layout.device_settings_cache_slot_bytes, 8, w)
        self._n_required = TableLayout(layout.n_required_slot_bytes, 8, w)
        self._gradients = TableLayout(layout.grads_slot_bytes, 8, w)
        # build_tape's tree: HashMap<NodeId, Vec<NodeId>> (a Vec is 24 B)       [layout]
        self._tape_tree = TableLayout(layout.node_id_bytes + 24, 8, w)
        # a backward's Checkpointer maps: NodeId -> State (an enum of a Box<dyn Any> and
        # a count: 24 B), NodeId -> Arc<dyn RetroForward> (16 B)                 [layout]
        self._backward_states = TableLayout(layout.node_id_bytes + 24, 8, w)
        self._retro_forwards = TableLayout(layout.node_id_bytes + 16, 8, w)
        #: the first blocks of a graph's ``leaves``, ``nodes``, ``steps`` and
        #: ``actions_builder`` tables, in the order its first registration allocates them
        self.first_graph_blocks = tuple(t.first_bytes for t in (
            self._leaves, self._nodes, self._steps, self._actions))

    def nodes_block_bytes(self, buckets) -> int:
        """Bytes of a ``nodes`` table block of ``buckets`` buckets (the sweep's cache model)."""
        return self._nodes.block_bytes(buckets)

    def steps(self):
        return RawTable(self._steps, self.heap, named=True)

    def actions_builder(self):
        return RawTable(self._actions, self.heap, named=True)

    def nodes(self):
        return RawTable(self._nodes, self.heap, named=True)

    def leaves(self):
        return RawTable(self._leaves, self.heap, named=True)

    def statuses(self):
        return RawTable(self._statuses, self.heap, named=True)

    def key_set(self):
        return RawTable(self._key_set, self.heap, named=True)

    def device_settings(self):
        """burn-backend's device settings ``REGISTRY`` (``sim.burn.backend``)."""
        return RawTable(self._device_settings, self.heap, named=True)

    def device_settings_cache(self):
        """A thread's ``LOCAL_CACHE`` of device settings."""
        return RawTable(self._device_settings_cache, self.heap, named=True)

    def n_required(self):
        """A backward's ``n_required`` map, parent id -> uses (``sim.burn.runtime.server``)."""
        return RawTable(self._n_required, self.heap, named=True)

    def gradients(self):
        """A ``Gradients`` container's table, node id -> boxed gradient."""
        return RawTable(self._gradients, self.heap, named=True)

    def tape_tree(self):
        """A backward's tape ``tree``, node id -> its parents' ids (``sim.burn.runtime.server``)."""
        return RawTable(self._tape_tree, self.heap, named=True)

    def backward_states(self):
        """A backward's checkpointer states, node id -> saved state (``sim.burn.checkpoint``)."""
        return RawTable(self._backward_states, self.heap, named=True)

    def retro_forwards(self):
        """A backward's checkpointer retro-forwards, node id -> its ``Arc``."""
        return RawTable(self._retro_forwards, self.heap, named=True)


class HostThread:
    """One host thread of the simulated program: pending time and its lock segments."""

    __slots__ = ("name", "pending_ps", "segments")

    def __init__(self, name):
        self.name = name
        self.pending_ps = 0
        self.segments = []


#: the RSS metrics whose predicted rows carry ``text_share`` (:meth:`Simulation.text_share`)
TEXT_SHARE_METRICS = frozenset({"rss", "rss_bytes", "rss_delta"})
#: the RSS metrics whose predicted rows carry ``top_trims`` (:meth:`Simulation.top_trims`)
TOP_TRIM_METRICS = TEXT_SHARE_METRICS | {"rss_growth_per_step"}
#: the keys of a predicted row that are no column of predicted.csv but what a comparison
#: reads to grade the row (:func:`sim.analysis.compare.join`): a row handed on from the
#: process that simulated it (a cell's rows, the cell cache) keeps them
GRADING_KEYS = ("text_share", "top_trims", "untrimmed_bytes")


def _weak_method(method):
    """``method`` (a bound method), called through a weak reference to its object."""
    ref = weakref.WeakMethod(method)

    def call(*args):
        return ref()(*args)
    return call


class Simulation:
    """Everything one simulated program run needs.

    Parameters
    ----------
    profile : sim.engine.profile.Profile
    policy : str
        Name of a bookkeeping policy (see :mod:`sim.policies`).
    experiment, variant : str
        Labels of the rows this run records.
    limits : Limits, optional
    fast_forward : bool
        Apply identical loop iterations in closed form (:mod:`sim.engine.fastforward.repeat`).
    compact : bool, optional
        Keep dead single-node graphs as run records instead of objects
        (:meth:`~sim.burn.runtime.graph.GraphLocator.compact`); default: in exact
        mode only (fast-forward probes need the objects to measure an iteration).
    policy_reads : set, optional
        Collects the names of the policy's attributes the run reads
        (:func:`sim.policies.trace.traced`; ``sim sweep`` reuses a cell's rows for a
        policy that defines all of them alike).

    Examples
    --------
    >>> from sim.engine.profile import load_profile
    >>> sim = Simulation(load_profile("m2max-macos"))
    >>> from sim.burn.tensor import Tensor
    >>> dev = sim.device("flex").autodiff()
    >>> a = Tensor.from_floats([1.0] * 16, dev)
    >>> c = a.clone() + a.clone()
    >>> sim.live_graphs()
    1
    """

    def __init__(self, profile, policy="burn-0.22.1", experiment="", variant="", limits=None,
                 fast_forward=True, compact=None, policy_reads=None):
        self.profile = profile
        #: the policy's class (the policy object's may be a subclass recording its reads)
        self.policy_class = get_policy(policy)
        # the profile's struct sizes, with the fields the policy's mirror classes add to
        # burn's (a patch's new field of GraphMemoryManagement lives in Arc<Graph>)
        self.layout = self.policy_class.GraphMemoryManagement.layout_of(profile.layout)
        if policy_reads is not None:
            policy_reads.add("GraphMemoryManagement.layout_of")
        self.allocator = Allocator.from_classes(profile.process.allocator,
                                                mallopt(profile.process))
        self.heap = Heap(self.allocator)
        # when this simulation is collected, or the interpreter exits with it alive, its
        # program is over: what Python frees afterwards is not the program freeing its
        # heap (Heap.close; run() closes it as soon as the workload returns)
        weakref.finalize(self, self.heap.close)
        # text of code paths and written buffer pages, resident from their first use
        self.touched = TouchedPages(profile.code)
        self.tables = TableFactory(self.layout, self.heap)
        self.timing = Timing(self, profile.time, Timing.caches(profile.process))
        self.env = simpy.Environment()
        self.locator_mutex = simpy.Resource(self.env, capacity=1)
        self._policy_reads = policy_reads
        self._policy_name = policy
        self.policy = (self.policy_class if policy_reads is None
                       else traced(self.policy_class, policy_reads))(self)
        # the autodiff client of the policy's mirror classes (sim.policies.mirror)
        self.client = self.policy.GraphMutexClient(self)
        self.experiment = experiment
        self.variant = variant
        self.limits = limits or Limits()
        self.rows = []
        # the glibc arena's trims of its top when the last sample was taken (top_trims)
        self.trims_at_sample = 0
        self.threads = []
        self.current = HostThread("main")
        self.contended = False
        self._next_id = 0
        # (op, tracked) -> bytes of its boxed step on this profile (sim.burn.ops)
        self.step_bytes = {}
        # (output shape, input shapes) of ops, interned (sim.burn.ops)
        self.shapes = {}
        self._backends = {}
        self.device_settings = DeviceSettingsRegistry(self)
        self.burn_config_loaded = False
        self._rng_threads = set()
        self._block_on_threads = set()
        self._rates = {}
        self.registered = 0
        self.backwards = 0
        self.in_backward = False
        self.rss_extra_bytes = 0
        self.panic = None
        self.fast_forward = fast_forward
        # exact mode keeps dead single-node graphs as run records (GraphLocator.compact),
        # where the policy allows it
        self.compact = (((not fast_forward) if compact is None else compact)
                        and self.policy.may_compact())
        #: whether an untracked op's new graph is built only when something asks for its
        #: server (:class:`~sim.burn.runtime.graph.SingleNodeGraph`): in exact mode, where
        #: dead single-node graphs are compacted, under burn's locator, server, memory
        #: management and last-handle seam (a run recording its policy's reads builds
        #: every graph, so that each read is made where burn's objects make it)
        self.defer_servers = (self.compact and not fast_forward and policy_reads is None
                              and _burns_graph_classes(self.policy_class))
        self.work_ps = 0
        # page faults: memory that becomes resident costs page_fault_ns per page of the
        # platform's page size, charged where it happens (Allocator.fault, TouchedPages.fault)
        self.fault_bytes = 0      # bytes made resident so far (cumulative)
        self.fault_mapped = 0     #   of which mapped blocks (faulted again after an unmap)
        self.fault_ps = 0         # their time so far (ps)
        self._fault_ps_per_byte = (1000.0 * float(profile.time["page_fault_ns"])
                                   / self.allocator.page_bytes)
        # a heap page made resident by the allocator's growth is then written block by
        # block as its small blocks are carved (a leak's fresh heap): heap_page_write_ns per
        # page beyond its fault, in fault_ps with the fault (mechanism-cost leak-replay);
        # only past the heap's highest resident size so far (``heap_high``): a page faulted
        # again after a trim of the top is charged as trims are (trim_page_ns), not here
        self.heap_write_bytes = 0
        self.heap_resident = 0    # the heap's resident bytes: its faults less its trims
        self.heap_high = 0        #   and their highest value so far
        self._write_ps_per_byte = (1000.0 * float(profile.time["heap_page_write_ns"])
                                   / self.allocator.page_bytes)
        if self._fault_ps_per_byte or self._write_ps_per_byte:
            # weakly: the heap's finalizer (above) holds the heap, and the heap's allocator
            # holding this simulation's method would keep the simulation alive to the end
            # of the process (every simulation with page faults did, before 2026-12-06)
            self.allocator.fault = _weak_method(self.page_fault)
            self.touched.fault = _weak_method(self.touched_page_fault)
        # a trim of the glibc arena's top (ptmalloc's systrim): trim_cycle_ns per trim (its
        # brk cut, and the brk that grows the break again when the top is next carved: in a
        # loop each trim is followed by one growth) plus trim_page_ns per page given back,
        # charged where the arena trims (arena.trim; fast-forward's arena windows likewise)
        self.trims_charged = 0    # trims charged so far, and the bytes they gave back
        self.trim_bytes = 0
        self.trim_ps = 0          # their time so far (ps)
        self._trim_ps_per_cycle = 1000.0 * float(profile.time["trim_cycle_ns"])
        self._trim_ps_per_byte = (1000.0 * float(profile.time["trim_page_ns"])
                                  / self.allocator.page_bytes)
        arena = getattr(self.allocator, "arena", None)
        if arena is not None and (self._trim_ps_per_cycle or self._trim_ps_per_byte
                                  or self._write_ps_per_byte):
            arena.trim = _weak_method(self.trim)
        # a hash table's growth: rehash_item_ns per item it moves into the new block
        # (sim.platform.hashbrown.RawTable._resize), charged where the table grows
        self._rehash_ps_per_item = 1000.0 * float(profile.time["rehash_item_ns"])
        if self._rehash_ps_per_item:
            self.heap.rehash = _weak_method(self.rehash)
        # text faults: a code path's first run maps its resident text one fault-around window
        # at a time, text_fault_ns per window (TouchedPages.text_fault)
        self.text_fault_bytes = 0
        self.text_fault_ps = 0
        self._text_ps_per_byte = (1000.0 * float(profile.time["text_fault_ns"])
                                  / FAULT_AROUND_BYTES)
        if self._text_ps_per_byte:
            self.touched.text_fault = _weak_method(self.text_fault)
        # index of the current iteration of the innermost sim.repeat (0-based)
        self.loop_index = 0
        if self.allocator.arena is not None:
            # entering a carve run's chunks one by one counts against the memory budget
            self.allocator.arena.chunk_budget = self.limits.arena_chunks()
        # fast-forwarded iterations a glibc arena placed in closed form (carve runs) and
        # by replaying their heap events one iteration at a time (sim.engine.fastforward.repeat)
        self.arena_carved = 0
        self.arena_replayed = 0
        # fast-forwarded iterations of loops that grow a chain (sim.engine.fastforward.chainrun)
        self.chain_applied = 0
        #   of which a glibc arena took as a shifted window (sim.engine.fastforward.arenawindow)
        self.arena_shifted = 0
        # tables of a chain's graph grown inside fast-forwarded batches (chainrun)
        self.chain_grown = 0
        # iterations fast-forwarded by replaying their heap events (sim.engine.fastforward.repeat, drift)
        self.drift_applied = 0
        self.leak_applied = 0
        #: iterations fast-forward applied in closed form, by the shape of their effect
        #: ("none", "steady", "chain", ...: sim.engine.fastforward.repeat)
        self.ff_applied = Counter()
        #: (iterations done, of how many) while fast-forward works through a long batch
        #: one iteration at a time (the heartbeat shows it), else None
        self.ff_progress = None
        #: loop body (its code) -> (its calls of ``repeat`` in a row whose probes found no
        #: repeating iteration, calls still to run without probing): sim.engine.fastforward.repeat
        self.ff_misses = {}
        #: called with the simulation whenever it checks its budgets (sim.commands.progress.Heartbeat)
        self.heartbeat = None

    # -- identity and devices ----------------------------------------------------------
    def next_node_id(self) -> int:
        """``NodeId::new``: one process-wide ascending counter."""
        node_id = self._next_id
        self._next_id += 1
        return node_id

    def burn_config(self) -> None:
        """burn-std's ``config()``: the first read in the process loads the global
        ``Arc<BurnConfig>`` (``layout.burn_config_arc_bytes``, kept for good)."""
        if not self.burn_config_loaded:
            self.burn_config_loaded = True
            self.heap.alloc(self.layout.burn_config_arc_bytes)

    def thread_rng(self) -> None:
        """rand's ``rand::rng()`` on the current thread (burn-std's ``IdGenerator``: every
        ``ParamId``): the thread's first call creates its RNG (``layout.thread_rng_bytes``,
        kept while the thread lives), and libc records the thread-local's destructor."""
        self._thread_local(self._rng_threads, self.layout.thread_rng_bytes)

    def block_on(self) -> None:
        """futures-lite's ``block_on`` on the current thread (burn-tensor's
        ``try_into_data_sync_impl``: every ``into_data``/``into_scalar``): the thread's first
        call makes its ``CACHE`` of a parker and its waker (``parking::Parker::new``: one
        ``Arc``, ``layout.block_on_cache_bytes``, kept while the thread lives), and libc
        records the thread-local's destructor."""
        if self.layout.block_on_cache_bytes:
            self._thread_local(self._block_on_threads, self.layout.block_on_cache_bytes)

    def _thread_local(self, made, nbytes) -> None:
        """A thread-local the current thread makes on its first call (``made``: the threads
        that have theirs): ``nbytes`` kept while the thread lives, and libc's record of the
        thread-local's destructor."""
        thread = self.current.name
        if thread not in made:
            made.add(thread)
            self.heap.alloc(nbytes)
            self.heap.libc_alloc(self.profile.process.tls_dtor_bytes, zeroed=True)

    def device(self, kind: str) -> Device:
        """A plain device of ``kind`` (``flex`` or ``metal``)."""
        if kind not in ("flex", "metal"):
            raise UserError(f"unknown device '{kind}' (valid: flex, metal)")
        self.backend(kind)  # a GPU device initialises its runtime when created
        if kind == "flex":
            self.touched.touch_code("device")
        return Device(self, kind)

    def backend(self, kind) -> Backend:
        backend = self._backends.get(kind)
        if backend is None:
            backend = self._backends[kind] = Backend(self, kind, self.profile.backends[kind])
            if kind == "metal":
                self.heap.alloc(int(self.profile.backends["metal"]["device_init_bytes"]))
        return backend

    def pool_state(self) -> tuple:
        """The GPU memory pools' state, device by device (fast-forward compares it)."""
        return tuple((kind, b.pool.state()) for kind, b in self._backends.items()
                     if b.pool is not None)

    def backend_rates(self, backend):
        """The compute rates of ``backend`` (None: the CPU backend) under the policy: the
        profile's ``[backend.<kind>]`` keys the time model reads, 0 where a table has no
        such key (the ``pytorch`` policy's rates). Fixed for a run: built once per backend."""
        rates = self._rates.get(backend)
        if rates is None:
            spec = self.policy.rates(self, backend)
            rates = self._rates[backend] = {
                "gflops": spec["gflops"], "gbps": spec["gbps"],
                "op_overhead_ns": spec["op_overhead_ns"],
                **{key: spec.get(key, 0.0) for key in (
                    "gemm_call_ns", "gemm_overlap", "operand_ns", "reduce_add_ns", "clone_ns", "buffer_ns",
                    "layout_ns", "random_element_ns", "read_scalar_ns")}}
        return rates

    # -- time --------------------------------------------------------------------------------
    def charge(self, ns: float, locked: bool = False) -> None:
        """Add ``ns`` of work to the current host thread."""
        # integer picoseconds: equal work sums to equal time at any magnitude
        ps = round(ns * 1000)
        thread = self.current
        if locked and self.contended:
            thread.segments.append((thread.pending_ps, ps))
        thread.pending_ps += ps
        self.work_ps += ps

    def page_fault(self, nbytes, mapped=False, heap=True) -> None:
        """``nbytes`` of memory become resident (first touch of their pages): charge
        ``page_fault_ns`` per page, and for the heap's growth (not ``mapped``, ``heap``) past
        its highest resident size so far also ``heap_page_write_ns`` per page: its blocks'
        first writes (a page faulted again after a trim is the trim's). The time is that of the
        cumulative bytes, rounded to ps once, so any split of the same faults (exact or
        fast-forwarded) sums alike."""
        new = self.fault_bytes = self.fault_bytes + nbytes
        if mapped:
            self.fault_mapped += nbytes
        total = round(new * self._fault_ps_per_byte)
        if self._write_ps_per_byte:
            if heap and not mapped:
                self.heap_resident += nbytes
                if self.heap_resident > self.heap_high:
                    self.heap_write_bytes += self.heap_resident - self.heap_high
                    self.heap_high = self.heap_resident
            total += round(self.heap_write_bytes * self._write_ps_per_byte)
        ps = total - self.fault_ps
        if ps:
            self.fault_ps = total
            self.current.pending_ps += ps
            self.work_ps += ps

    def touched_page_fault(self, nbytes) -> None:
        """A page of a block the program touches lazily (:class:`TouchedPages`: gemm's slab)
        becomes resident: its fault only, no heap growth's first writes."""
        self.page_fault(nbytes, heap=False)

    def trim(self, nbytes, count=1) -> None:
        """``count`` trims of the arena's top gave ``nbytes`` back to the kernel: charge
        ``trim_cycle_ns`` each and ``trim_page_ns`` per page, on the cumulative count and
        bytes as :meth:`page_fault` does (any split of the same trims sums alike)."""
        self.heap_resident = max(0, self.heap_resident - nbytes)
        self.trims_charged += count
        new = self.trim_bytes = self.trim_bytes + nbytes
        total = round(self.trims_charged * self._trim_ps_per_cycle + new * self._trim_ps_per_byte)
        ps = total - self.trim_ps
        if ps:
            self.trim_ps = total
            self.current.pending_ps += ps
            self.work_ps += ps

    def rehash(self, items) -> None:
        """A hash table grew and moved ``items`` items into its new block (each key hashed
        again, its slot found and copied): ``rehash_item_ns`` each, as bookkeeping."""
        ns = items * self._rehash_ps_per_item / 1000
        self.timing.bookkeeping_ns += ns
        ps = round(items * self._rehash_ps_per_item)
        self.current.pending_ps += ps
        self.work_ps += ps

    def text_fault(self, nbytes) -> None:
        """``nbytes`` of the binary's text become resident (a code path's first run):
        charge ``text_fault_ns`` per fault-around window, on the cumulative bytes as
        :meth:`page_fault` does."""
        new = self.text_fault_bytes = self.text_fault_bytes + nbytes
        total = round(new * self._text_ps_per_byte)
        ps = total - self.text_fault_ps
        if ps:
            self.text_fault_ps = total
            self.current.pending_ps += ps
            self.work_ps += ps

    @property
    def now_ns(self) -> float:
        """Simulated time of the current thread, pending work included (ns)."""
        return self.env.now + self.current.pending_ps / 1000

    def repeat(self, n: int, body) -> None:
        """Run ``body()`` ``n`` times; identical iterations are fast-forwarded
        (:mod:`sim.engine.fastforward.repeat`) unless the simulation runs in exact mode.
        ``sim.loop_index`` is the index of the iteration being run (for labels: fast-forward
        sees the simulated state, not the body's Python state, so a body must do the same
        thing every iteration; nest ``repeat`` calls for a loop with a periodic branch)."""
        repeat(self, n, body)

    def tick(self):
        """An event a workload yields to let its pending time pass (a flush point)."""
        return _FLUSH

    def sync(self, device) -> None:
        """A device sync (``into_scalar``): nothing is pending on a simulated device."""

    # -- processes ----------------------------------------------------------------------------
    def spawn(self, generator, name="main") -> simpy.Process:
        """Run ``generator`` as a host thread (a SimPy process)."""
        thread = HostThread(name)
        self.threads.append(thread)
        self.contended = len(self.threads) > 1
        return self.env.process(self._drive(thread, generator))

    def _drive(self, thread, generator):
        value = None
        while True:
            self.current = thread
            try:
                event = generator.send(value)
            except StopIteration:
                self._check_limits()
                break
            except (BurnPanic, TapeConsumed) as exc:
                self.panic = exc
                self.on_panic(exc)
                self._check_limits()
                break
            # not on another exception: a budget check would replace an interrupt (or the
            # workload's own error) with its own message
            try:
                self._check_limits()
            except LimitExceeded as exc:
                # seen at the program's yield: the line that yielded names where it stopped
                exc.suspended = suspended_frames(generator)
                raise
            yield from self._flush(thread)
            if event is _FLUSH or event is None:
                value = None
            elif isinstance(event, simpy.Event):
                value = yield event
            else:
                raise UserError(_bad_yield(generator, event))
        yield from self._flush(thread)

    def _flush(self, thread):
        pending = thread.pending_ps
        if not pending:
            return
        segments = thread.segments
        thread.pending_ps = 0
        thread.segments = []
        done = 0
        for start, ps in segments:
            if start > done:
                yield self.env.timeout((start - done) / 1000)
            with self.locator_mutex.request() as req:
                yield req
                yield self.env.timeout(ps / 1000)
            done = start + ps
        if pending > done:
            yield self.env.timeout((pending - done) / 1000)

    @property
    def policy_name(self) -> str:
        """The policy as it was named (a run that reads it may depend on which policy it
        is: :data:`sim.policies.trace.NAME_READ`)."""
        if self._policy_reads is not None:
            self._policy_reads.add(NAME_READ)
        return self._policy_name

    def run(self, workload, params):
        """Run a workload (``workload.run(sim, **params)``) to completion; returns the rows.

        A time budget (``Limits.max_wall_s``) is kept by the checks at every yield and
        every few thousand registrations and by an alarm (:class:`_WallBudget`; a timer
        thread outside the main thread) that also stops a workload looping in its own
        Python code.
        """
        gc_was_enabled = gc.isenabled()
        gc.disable()
        import time
        self._wall0 = time.perf_counter()
        self._over_time = False
        budget = _WallBudget(self)
        try:
            budget.arm()
            result = workload(self, **params)
            if result is not None:
                self.spawn(result)
                self.env.run()
        except _TimeUp as exc:     # the alarm of a run outside the main thread
            raise self.over_time() from exc
        finally:
            try:
                budget.disarm()
            except _TimeUp:        # that alarm's error, landed as the run ended
                budget.disarm()
            # what Python collects from here on is not the program freeing its heap
            self.heap.close()
            if gc_was_enabled:
                gc.enable()
        return self.rows

    def on_panic(self, exc) -> None:
        """Record the panic as an event row at the current x."""
        self.record(self.last_x, self.last_x_unit, "panic", 1, note=str(exc).split(".")[0])

    # -- observations -----------------------------------------------------------------------------
    last_x = 0
    last_x_unit = ""

    def record(self, x, x_unit, metric, value, phase="", note="", experiment=None,
               variant=None) -> None:
        """Record one observation in the schema (``metric``: a name of
        :data:`sim.units.METRICS`, which gives its unit, any other is a
        :class:`~sim.errors.UserError` listing them; ``value``: a finite number, else
        one naming it)."""
        known = METRICS.get(metric)
        if known is None:
            raise UserError(f"unknown metric {shown(metric)} (valid: {', '.join(METRICS)}; "
                            f"docs/api.md, Metrics, gives each its unit)")
        if not (value.__class__ is int and -_FLOAT_MAX <= value <= _FLOAT_MAX
                or value.__class__ is float and value - value == 0) \
                and not _finite_number(value):
            if (isinstance(value, numbers.Real) and not isinstance(value, (bool, int))
                    and not math.isfinite(value)):
                raise UserError(f"metric {metric}: the value is {shown(value)}; a sampled "
                                "value must be a finite number")
            raise UserError(f"metric {metric}: the value must be a number, not "
                            f"{type(value).__name__} {shown(value)}")
        unit = known.unit
        row = {
            "experiment": experiment or self.experiment,
            "variant": variant if variant is not None else self.variant,
            "phase": phase, "x": x, "x_unit": x_unit, "metric": metric,
            "value": value, "unit": unit, "note": note,
        }
        if metric in TEXT_SHARE_METRICS:
            # not a column: what a comparison needs to tell a row the binary's text pages
            # dominate (sim.analysis.compare.join)
            row["text_share"] = self.text_share()
        if metric in TOP_TRIM_METRICS and self.top_trims():
            # nor these: what tells a row the top's trims place between levels, and how
            # far above this one the level of a run whose latest trim did not happen is
            row["top_trims"] = self.top_trims()
            row["untrimmed_bytes"] = self.untrimmed_bytes()
        self.rows.append(row)

    def top_trims(self) -> int:
        """How many times the glibc arena returned its top to the kernel since the last
        sample (0 on other allocators).

        A loop whose arena trims between samples keeps its top near the trim threshold
        (2 x the dynamic mmap threshold): whether a step ends trimmed or not then turns on
        where small chunks landed, which in burn follows the hash order of its maps
        (``RandomState``, random per process), and RSS at a sample is one of several
        levels a run can be at; the model's one order gives one of them."""
        arena = self.allocator.arena
        return 0 if arena is None else arena.trims - self.trims_at_sample

    def untrimmed_bytes(self) -> int:
        """Resident bytes the heap would hold beyond its pages now had the arena's latest
        trim of its top not happened (the pages it gave back, less those it faulted in
        again since): the other level of an RSS row whose loop trims (:meth:`top_trims`).
        In a run whose hash order leaves a small chunk in use just below the top at that
        free, glibc's ``systrim`` finds no top above the threshold and keeps those pages;
        0 on other allocators or before any trim."""
        arena = self.allocator.arena
        if arena is None or not arena.trim_from:
            return 0
        page = arena.page
        return max(0, -(-arena.trim_from // page) * page - -(-arena.resident_end // page) * page)

    def text_share(self) -> float:
        """The share of the binary's resident text (code paths run so far) in what the
        program added to its RSS beyond the process's baseline, now (0 with no text)."""
        text = self.touched.text_bytes()
        if not text:
            return 0.0
        added = self.rss_bytes() - self.profile.process.baseline_rss_bytes
        return text / added if added > 0 else 1.0

    def at(self, x, x_unit):
        """Set the loop position: the x of the next panic row, and what the progress of
        `sim run` (after 2 s) and `sim sweep`'s bar show for this run (``starting`` until
        a workload calls it; ``sim.sample`` calls it too)."""
        self.last_x = x
        self.last_x_unit = x_unit

    def sample(self, x, x_unit, phase="", observables=True, **metrics):
        """Record ``metrics`` (name=value) at ``x`` plus the bookkeeping observables.

        Returns a flush event for the workload to yield. A metric named like an
        observable (``heap_bytes``, ``sim_time_ms``...) is an error unless
        ``observables=False``: the sample records those itself, so the row would be there
        twice.
        """
        if observables and not metrics.keys().isdisjoint(OBSERVABLES):
            raise self._observable_named(metrics)
        self.at(x, x_unit)
        for name, value in metrics.items():
            self.record(x, x_unit, name, value, phase=phase)
        if observables:
            for name, value in self.observables().items():
                self.record(x, x_unit, name, value, phase=phase)
        self.trims_at_sample += self.top_trims()
        return _FLUSH

    @staticmethod
    def _observable_named(metrics) -> UserError:
        named = [m for m in metrics if m in OBSERVABLES]
        return UserError(
            f"sim.sample({', '.join(f'{m}=...' for m in named)}): "
            f"{' and '.join(named)} {'is' if len(named) == 1 else 'are'} recorded by every "
            f"sample as bookkeeping observable{'s' if len(named) > 1 else ''} "
            f"({', '.join(OBSERVABLES)}); leave {'it' if len(named) == 1 else 'them'} out, or "
            f"pass observables=False to record only your own metrics")

    def observables(self) -> dict:
        """Bookkeeping state now, in the schema's units."""
        locator = self.client.locator
        t = self.timing
        return {
            "live_graphs": self.live_graphs(),
            "live_nodes": self.live_nodes(),
            "locator_entries": 0 if locator is None else locator.entry_count(),
            "registered_steps": self.registered,
            "heap_bytes": self.heap.live_bytes,
            "heap_blocks": self.heap.live_blocks,
            "sim_time_ms": round(self.now_ns / 1e6, 6),
            "cleanup_ms": round(t.cleanup_ns / 1e6, 6),
        }

    def live_graphs(self) -> int:
        """Graphs in the locator (a fast-forwarded run of single-node graphs counts each)."""
        locator = self.client.locator
        if locator is None:
            return 0
        return sum(g.count if g.__class__ is NodeRun else 1 for g in locator.live)

    def live_nodes(self) -> int:
        """Nodes held by the graphs' memory management."""
        locator = self.client.locator
        if locator is None:
            return 0
        return sum(g.count if g.__class__ is NodeRun else g.server.memory_management.node_count()
                   for g in locator.live)

    def rss_bytes(self) -> int:
        """Process RSS: baseline + one-time runtime + the allocator's resident heap + the
        pages resident since their first use (code paths' text, gemm's slab)."""
        return (self.profile.process.baseline_rss_bytes + self.rss_extra_bytes
                + self.allocator.resident_bytes() + self.touched.resident_bytes())

    _over_time = False

    def over_time(self) -> "LimitExceeded":
        """The error of a run past its time budget."""
        return LimitExceeded(f"time budget exceeded: more than {self.limits.max_wall_s:g} s of "
                             f"wall time (raise --timeout)")

    def _check_limits(self) -> None:
        limits = self.limits
        locator = self.client.locator
        if (limits.max_live_nodes is not None and locator is not None
                and len(locator.graphs) > limits.max_live_nodes):
            raise LimitExceeded(f"memory budget exceeded: more than {limits.max_live_nodes} "
                                f"live simulated nodes held individually (raise --max-nodes, "
                                f"or let sim.repeat fast-forward the loop)")
        arena, chunks = self.allocator.arena, limits.arena_chunks()
        if arena is not None and chunks is not None and len(arena.inuse) > chunks:
            raise LimitExceeded(f"memory budget exceeded: the glibc arena model holds more than "
                                f"{chunks} chunks, each placed on its own (raise --max-nodes, "
                                f"or use a profile with a size-class allocator such as "
                                f"m2max-macos)")
        if self.registered > limits.max_ops:
            raise LimitExceeded(f"op budget exceeded: more than {limits.max_ops} registered steps "
                                f"(raise --max-ops)")
        if limits.max_wall_s is not None:
            import time
            if self._over_time or time.perf_counter() - self._wall0 > limits.max_wall_s:
                raise self.over_time()
        if self.heartbeat is not None:
            self.heartbeat(self)


def _burns_graph_classes(policy) -> bool:
    """Whether the policy class ``policy`` keeps burn's locator, server and memory
    management and does nothing when a node loses its last handle."""
    return (policy.GraphLocator is GraphLocator and policy.AutodiffServer is AutodiffServer
            and policy.GraphMemoryManagement is GraphMemoryManagement
            and policy.on_last_handle is Policy.on_last_handle)


def _bad_yield(generator, event) -> str:
    """The error of a program that yielded something the simulation cannot wait for,
    at the line of the yield (in the innermost generator a ``yield from`` reached)."""
    while getattr(generator, "gi_yieldfrom", None) is not None \
            and getattr(generator.gi_yieldfrom, "gi_frame", None) is not None:
        generator = generator.gi_yieldfrom
    frame = getattr(generator, "gi_frame", None)
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}: " if frame is not None else ""
    return (f"{where}the program yielded {shown(event)} ({type(event).__name__}): a workload "
            f"yields what sim.sample(...) or sim.tick() returns (where the real program would "
            f"print or sync), or an event of sim.env (a SimPy event)")


class _WallBudget:
    """The time budget of a run, as an alarm at its end (SIGALRM in the main thread).

    The budget checks of :meth:`Simulation._check_limits` run at every yield and every
    4096 registrations; a workload that loops in its own Python code reaches neither.
    The alarm raises the budget's error where the workload's code runs (a frame the
    simulation's driver called directly), so that no bookkeeping of the simulator is
    left half-done; anywhere else it marks the run over time (the next check raises)
    and rings again 50 ms later, raising wherever it lands, a finalizer aside (an
    error raised in a ``__del__`` is lost), once the run is :data:`GRACE_S` past its
    budget. Outside the main thread (a dask worker runs cells in its threads; a signal
    reaches the main thread only) a :class:`_ThreadAlarm` does the same. No alarm in the
    main thread if one is set already, nor for a budget past :data:`LONGEST_S`
    (``--timeout inf``: an interval timer cannot hold it, and no run reaches it); there
    the checks alone keep the budget.
    """

    GRACE_S = 0.5
    RETRY_S = 0.05
    #: the longest alarm set (2^31 s, 68 years: within every platform's ``time_t``)
    LONGEST_S = 2.0 ** 31

    def __init__(self, sim):
        self.sim = sim
        self.previous = None
        self.thread_alarm = None

    def arm(self) -> None:
        import signal
        import threading
        budget = self.sim.limits.max_wall_s
        if budget is None or budget > self.LONGEST_S:
            return
        if threading.current_thread() is not threading.main_thread():
            self.thread_alarm = _ThreadAlarm(self, budget)
            return
        if not hasattr(signal, "setitimer") or signal.getitimer(signal.ITIMER_REAL)[0] > 0:
            return
        self.previous = signal.signal(signal.SIGALRM, self._ring)
        signal.setitimer(signal.ITIMER_REAL, budget)

    def may_raise(self, frame) -> bool:
        """Whether the budget's error may be raised where ``frame`` runs (the alarm rang):
        in the workload's code, or anywhere but a finalizer :data:`GRACE_S` past the end."""
        import time
        sim = self.sim
        late = time.perf_counter() - sim._wall0 - sim.limits.max_wall_s
        return not _in_finalizer(frame) and (late >= self.GRACE_S or _in_workload(frame))

    def disarm(self) -> None:
        import signal
        if self.thread_alarm is not None:
            self.thread_alarm.stop()
            self.thread_alarm = None
        if self.previous is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
            self.previous = None

    def _ring(self, signum, frame) -> None:
        import signal
        self.sim._over_time = True
        if not self.may_raise(frame):
            signal.setitimer(signal.ITIMER_REAL, self.RETRY_S)
            return
        raise self.sim.over_time()


class _TimeUp(BaseException):
    """A run's time budget, raised in its thread by a :class:`_ThreadAlarm` (an exception
    class without arguments: how one thread raises in another); :meth:`Simulation.run`
    raises the budget's error in its place. Not an ``Exception``: a workload's ``except
    Exception`` does not take it."""


class _ThreadAlarm:
    """The alarm of :class:`_WallBudget` for a run outside the main thread: a timer thread
    that, ``seconds`` after it starts, marks the run over time and then, every
    :data:`_WallBudget.RETRY_S`, looks where the run's thread is until
    :meth:`_WallBudget.may_raise` lets it raise :class:`_TimeUp` there, once, as the
    signal's alarm raises once (``PyThreadState_SetAsyncExc``: that thread waits for the
    interpreter lock at that bytecode boundary and raises it when it takes the lock back;
    a second error could land in the handler of the first, in :meth:`Simulation.run`).
    :meth:`stop`, from the run's thread, ends it and takes back an error sent and not yet
    raised."""

    def __init__(self, budget, seconds):
        import ctypes   # noqa: F401 -- loaded here: an import in the timer could let the
        import threading    # run's thread move on between the look and the raise
        self.budget = budget
        self.target = threading.get_ident()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        threading.Thread(target=self._watch, args=(seconds,), daemon=True,
                         name="sim-time-budget").start()

    def _watch(self, seconds) -> None:
        budget = self.budget
        if self.stopped.wait(seconds):
            return
        budget.sim._over_time = True
        while True:
            frame = sys._current_frames().get(self.target)
            with self.lock:
                if self.stopped.is_set():
                    return
                if frame is not None and budget.may_raise(frame):
                    _raise_in(self.target, _TimeUp)
                    return
            del frame
            if self.stopped.wait(budget.RETRY_S):
                return

    def stop(self) -> None:
        with self.lock:
            self.stopped.set()
            _raise_in(self.target, None)


def _raise_in(thread_id, exc_class) -> None:
    """Raise ``exc_class`` in the thread ``thread_id`` at its next bytecode boundary (None:
    take back one sent and not yet raised)."""
    import ctypes
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exc_class)
                                               if exc_class is not None else None)


_DRIVERS = frozenset({"_drive", "run"})


def _in_workload(frame) -> bool:
    """Whether ``frame``'s innermost frame of the ``sim`` package is the driver of the
    workload (:meth:`Simulation._drive`, :meth:`Simulation.run`): the frames above it
    are the workload's own code (or the standard library's, called by it)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(PACKAGE_PREFIX):
            return (frame.f_code.co_filename == __file__
                    and frame.f_code.co_name in _DRIVERS)
        frame = frame.f_back
    return False


class _Flush:
    """Marker a workload yields to flush its pending time."""

    __repr__ = lambda self: "FLUSH"  # noqa: E731


_FLUSH = _Flush()
