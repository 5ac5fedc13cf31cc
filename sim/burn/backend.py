"""Inner backends: where tensor buffers live and what an op costs to compute.

burn's autodiff backend decorates an inner backend (``Autodiff<B>``); the
simulator's inner backends are

``flex``
    the CPU backend: buffers are host-heap blocks (they count in the heap and
    in RSS like any allocation);
``metal``
    the GPU backend through cubecl/wgpu: buffers come from
    :class:`~sim.platform.gpu_pool.MemoryPool`; each live handle also keeps a small
    host-side handle block.

A :class:`Buffer` is the tensor primitive's storage, shared by clones of a
tensor and by the steps and checkpoints that saved it: Python's reference count
keeps it alive, and it is freed when the last holder drops it. ``holders``
counts what Rust's ``Arc`` on the storage would count (tensor handles, boxed
checkpoint clones, gradient containers), which is what decides whether an op
may write into an operand.

In place (burn-flex 0.22.1, ``ops/binary.rs`` ``binary_op_f32``/``binary_op_typed``,
``scalar_op_typed``, ``ops/unary.rs`` ``unary_op_typed``): an elementwise op
whose operand's storage is uniquely owned (``Arc::strong_count == 1``), contiguous
and as large as the output writes into that operand (lhs first, then rhs) and
returns it instead of allocating; ``reshape`` of a contiguous tensor is a view on
the same storage (``FlexTensor::reshape``). The operand, taken by value in Rust,
is consumed: its handle no longer counts. The metal backend always allocates.
"""

from __future__ import annotations

import math
from operator import attrgetter

from .op_facts import OPS
from ..platform import kernels
from ..platform.l2_cache import L2Cache
from ..platform.gpu_pool import MemoryPool
from ..platform.ptmalloc import ZEROED
from ..platform.gemm_cache import read_cache_info

__all__ = ["Buffer", "Backend", "DeviceSettingsRegistry", "ELEMENT_BYTES"]

#: f32
ELEMENT_BYTES = 4
#: a tensor's buffer's memory in the L2 model
_CHUNK = attrgetter("prim.chunk")

#: gemm-common 0.19 (gemm.rs ``gemm_basic_generic``): a gemm whose rhs is not column-contiguous
#: and whose m exceeds the packing threshold packs the rhs into a per-call
#: ``dyn_stack::MemBuffer`` of ``kc * nc`` f32 (rounded to the 128-B SIMD alignment) that it
#: frees on return. In a backward the rhs gradient ``lhs^T @ grad`` is such a gemm (the
#: row-major ``grad`` is the packed rhs, k = the batch rows): the Linux alloc-trace probe's
#: train-step shows one 132,096-B block (align 128) per weight gradient, allocated after the
#: staged output and freed before the gemm returns. ``kc * nc`` is 64 x 516 there: nc is the
#: 512 columns plus one NR = 4 panel of kernel_params' rounding (cache.rs), taken from the
#: trace rather than ported.
PACK_EXTRA_COLUMNS = 4
#: the MemBuffer's alignment (posix_memalign: the trace's align column)
PACK_ALIGN = 128
#: cubecl-environment 0.11.3 bytes/default_controller.rs MAX_ALIGN (align_of::<u128>()): a
#: copy into an aligned allocation (alloc_with_data) rounds its capacity up to a multiple
MAX_ALIGN = 16
#: byte offset of the L2 slab's data in its first page: glibc serves the 2 MiB MemBuffer
#: (align 128) from an mmapped chunk whose 16-B header pushes the data to the next 128 B
SLAB_OFFSET = 128


def gemm_is_gemv(m, n, k) -> bool:
    """Whether one f32 gemm of gemm's own ``(m, n, k)`` runs gemm-common 0.19's
    matrix-vector kernels (``gemm_basic_generic`` dispatches to its ``gemv`` module where
    ``m <= 1`` or ``n <= 1`` once ``k > 2``, for unit-stride operands, which every dense 2-D
    layout burn-flex passes is; ``k <= 2`` is the vector-vector kernel): code of its own, apart from the blocked
    kernels, so its text comes in the first time such a gemm runs (a single-row forward:
    ``[1, k] x [k, n]``, which gemm sees as ``(n, 1, k)``).

    >>> gemm_is_gemv(128, 1, 128), gemm_is_gemv(512, 64, 512), gemm_is_gemv(1, 1, 2)
    (True, False, False)
    """
    return k > 2 and m > 0 and n > 0 and (m <= 1 or n <= 1)


def gemm_takes_slab(m, n, k, mr, kc_max, mc_max, l2_bytes, lhs_unit_stride=True,
                    elem=ELEMENT_BYTES) -> bool:
    """Whether one f32 gemm of gemm's own ``(m, n, k)`` packs its lhs through the thread's
    L2 slab, the ``L2_SLAB`` thread-local that gemm-common 0.19 (``gemm.rs``
    ``gemm_basic_generic``) allocates the first time a gemm of the thread reaches it.
    Operands are burn-flex's contiguous row-major tensors as gemm sees them (module
    docstring of :func:`gemm_slab_written`): its lhs has unit row stride unless
    ``lhs_unit_stride`` is False (a transposed view), its rhs unit row stride. The gemms
    that return before the slab take none:

    * ``k <= 2``: the vector-vector kernel (``gevv``);
    * ``m <= 1`` or ``n <= 1``: a matrix-vector kernel (``gemv``; with ``m == 1`` also the
      small-output kernels, which need the lhs's column stride, ``m``, to be 1);
    * a prepacked lhs (``m <= 2 mc`` and m not a multiple of the SIMD width ``mr / 2``, or
      a strided lhs): the per-call buffer holds it.

    >>> gemm_takes_slab(512, 64, 512, 16, 1024, 128, 2 << 20)   # p10-ema forward
    True
    >>> gemm_takes_slab(4, 4, 4, 16, 1024, 128, 2 << 20)        # 4 x 4: prepacked lhs
    False
    """
    if m == 0 or n == 0 or k <= 2 or m <= 1 or n <= 1:
        return False
    _, mc = _gemm_blocking(m, n, k, mr, kc_max, mc_max, l2_bytes, elem)
    lanes = mr // 2
    return not (m <= 2 * mc and (m % lanes != 0 or not lhs_unit_stride))


def _gemm_blocking(m, n, k, mr, kc_max, mc_max, l2_bytes, elem) -> tuple:
    """gemm-common 0.19's ``(kc, mc)`` for gemm's own ``(m, n, k)`` (see
    :func:`gemm_slab_written`)."""
    if m <= 64 and n <= 64:
        kc = min(k, 512)
        return kc, (l2_bytes // elem // kc) // mr * mr
    k_iter = -(-k // kc_max)
    return -(-k // k_iter), min(-(-m // mr) * mr, mc_max)


def gemm_call_blocks(m, n, k, mr, nr, kc_max, mc_max, l2_bytes, lhs_unit_stride=True,
                     rhs_unit_stride=True, elem=ELEMENT_BYTES) -> tuple:
    """The heap blocks one f32 gemm call of gemm's own ``(m, n, k)`` allocates and frees
    before it returns: ``(buffer, flags)`` bytes, 0 for none.

    Paraphrase of gemm-common 0.19 (``gemm.rs`` ``gemm_basic_generic``) with its x86_64 FMA
    kernels (MR = ``mr``, NR = ``nr``, SIMD width ``mr / 2``, horizontal kernels up to 2 x 2,
    rhs packing threshold 128), one thread (burn-flex without rayon); operands as in
    :func:`gemm_takes_slab`, ``rhs_unit_stride`` False for a transposed rhs view. Nothing
    is allocated by the kernels that return first (``k <= 2``, matrix-vector shapes, and
    the horizontal kernels for ``m n <= 256`` with a column-contiguous lhs). Otherwise:

    * ``buffer``: a ``dyn_stack::MemBuffer`` (posix_memalign, 128-B alignment) when the rhs
      is packed (strided and ``m > 2 mr``, or ``m > 128 mr``: ``kc * nc`` elements, ``nc``
      = n rounded up to ``nr``, as kernel_params gives while an L3 holds the rhs
      macropanel) or the lhs prepacked (``kc * mr`` elements per ``mr`` rows), each part
      rounded up to 128 B (``StackReq::and``);
    * ``flags``: ``did_pack_lhs``, ``vec![false; mc / mr]`` (a zeroed block of ``mc / mr``
      bytes), freed before the buffer.

    >>> gemm_call_blocks(512, 512, 64, 16, 6, 1024, 128, 1 << 20, rhs_unit_stride=False)
    (132096, 8)
    >>> gemm_call_blocks(4, 4, 4, 16, 6, 1024, 128, 1 << 20)     # 4 x 4: prepacked lhs
    (256, 4096)
    """
    if m == 0 or n == 0 or k <= 2 or m <= 1 or n <= 1:
        return 0, 0
    if not lhs_unit_stride and rhs_unit_stride and m * n <= 16 * 16:
        return 0, 0                # the horizontal kernels
    kc, mc = _gemm_blocking(m, n, k, mr, kc_max, mc_max, l2_bytes, elem)
    nc = -(-n // nr) * nr
    pack_rhs = m > 2 * mr if not rhs_unit_stride else m > 128 * mr
    prepack_lhs = m <= 2 * mc and (m % (mr // 2) != 0 or not lhs_unit_stride)
    buffer = 0
    if pack_rhs or prepack_lhs:
        rhs = kc * nc * elem if pack_rhs else 0
        lhs = kc * mr * -(-m // mr) * elem if prepack_lhs else 0
        buffer = -(-rhs // PACK_ALIGN) * PACK_ALIGN + -(-lhs // PACK_ALIGN) * PACK_ALIGN
    return buffer, mc // mr


def gemm_slab_written(m, n, k, mr, nr, kc_max, mc_max, l2_bytes, lhs_unit_stride=True,
                      elem=ELEMENT_BYTES) -> int:
    """Bytes from the start of gemm's thread-local L2 slab that one f32 gemm writes.

    Paraphrase of gemm-common 0.19 (``gemm.rs`` ``gemm_basic_generic``, ``cache.rs``
    ``kernel_params``) for one thread (``Parallelism::None``, burn-flex without rayon). ``m, n,
    k`` are the problem gemm sees: the ``gemm`` crate transposes a row-major destination, so
    for ``out[M, N] = lhs[M, K] @ rhs[K, N]`` it is ``(N, M, K)`` and gemm's lhs is burn's rhs.

    * blocking: small problems (m, n <= 64) take ``kc = min(k, 512)`` and an L2-sized ``mc``;
      others ``kc = k`` split evenly into chunks of at most ``kc_max`` and ``mc`` = m rounded
      up to ``mr``, at most ``mc_max`` (kernel_params caps it at 8 mr; its L2 split only
      matters for m beyond what the cap already cuts);
    * nothing is written where the gemm takes no slab (:func:`gemm_takes_slab`: small
      kernels, or the lhs prepacked into the per-call buffer);
    * otherwise each row block of ``mc`` rows is packed (``do_pack_lhs``: here n exceeds the
      packing threshold 8 nr, or the lhs is strided) into the slab, micro-panel ``i`` at
      ``i * kc * mr`` elements, ``k_chunk * mr`` elements each: the written extent is
      ``(ceil(mc / mr) - 1) * kc * mr + k_chunk * mr`` elements from the slab's start
      (later blocks reuse the same prefix).

    >>> gemm_slab_written(512, 64, 512, 16, 6, 1024, 128, 2 << 20)   # p10-ema forward
    262144
    """
    if not gemm_takes_slab(m, n, k, mr, kc_max, mc_max, l2_bytes, lhs_unit_stride, elem):
        return 0
    kc, mc = _gemm_blocking(m, n, k, mr, kc_max, mc_max, l2_bytes, elem)
    lanes = mr // 2
    m_chunk = min(mc, m)
    n_chunk = n
    if not (m_chunk % lanes != 0 or not lhs_unit_stride or n_chunk > 8 * nr):
        return 0   # the lhs is read in place
    panels = -(-m_chunk // mr)
    return ((panels - 1) * kc * mr + min(kc, k) * mr) * elem


class Buffer:
    """Storage of one tensor primitive (``nbytes`` of f32 data); ``holders``: the
    handles, checkpoints and gradient containers that hold it (Rust's strong count)."""

    __slots__ = ("nbytes", "holders", "_free", "_token", "chunk", "strides", "strides_block",
                 "device_box_block")

    def __init__(self, nbytes, free, token, chunk=None, strides=0, strides_block=None):
        self.nbytes = nbytes
        self.holders = 0
        self._free = free
        self._token = token
        # its memory in the backend's L2 model (sim.platform.l2_cache), None where not modelled
        self.chunk = chunk
        #: bytes of the strides Vec allocated with it for its first handle (burn-flex
        #: builds a new FlexTensor's Layout before its Arc<Bytes>); the handle takes them
        self.strides = strides
        self.strides_block = strides_block
        self.device_box_block = None

    def __del__(self):
        self._free(self._token)
        if self.chunk is not None:
            self.chunk.release()



class DeviceSettingsRegistry:
    """burn-backend 0.22.1's device settings (``backend/device.rs``), as heap blocks.

    Creating a tensor without an explicit dtype (``from_data``, ``zeros``, ``ones``,
    ``random``) resolves the device's default dtypes through
    ``get_or_init_device_settings``: the first time in the process for a device, the
    process-wide ``REGISTRY`` map gains an entry (its table grows as hashbrown's do) holding
    a new ``Arc<OnceLock<DeviceSettings>>``; the first time on a thread, that thread's
    ``LOCAL_CACHE`` map gains one too. Nothing is removed while the process runs. A device
    is its kind here (an autodiff device shares its inner device's settings: the probe
    sees no new entry for the first autodiff tensor after a plain one).
    """

    __slots__ = ("sim", "_arc", "_registry", "_keys", "_caches")

    def __init__(self, sim):
        self.sim = sim
        self._arc = sim.layout.device_settings_arc_bytes
        self._registry = sim.tables.device_settings()
        self._keys = set()
        # thread name -> (its LOCAL_CACHE table, the devices in it)
        self._caches = {}

    def get_or_insert(self, kind) -> None:
        """``get_or_init_device_settings`` for device ``kind`` on the current thread."""
        thread = self.sim.current.name
        cache = self._caches.get(thread)
        if cache is None:
            # the thread's LOCAL_CACHE comes to life: libc records its destructor
            self.sim.heap.libc_alloc(self.sim.profile.process.tls_dtor_bytes, zeroed=True)
            cache = self._caches[thread] = (self.sim.tables.device_settings_cache(), set())
        table, cached = cache
        if kind in cached:
            return
        if kind not in self._keys:
            # REGISTRY.write().entry(key).or_default(): the table's slot, then the Arc
            self._keys.add(kind)
            self._registry.fit(len(self._keys))
            self.sim.heap.alloc(self._arc)
        cached.add(kind)
        table.fit(len(cached))


class Backend:
    """One inner backend of a simulation.

    Parameters
    ----------
    sim : sim.engine.simulation.Simulation
    kind : {"flex", "metal"}
    spec : dict
        The profile's ``[backend.<kind>]`` table: ``primitive_bytes`` (size of
        the tensor primitive, boxed by each ``Computed`` checkpoint),
        ``handle_bytes`` (host block per live handle), and for metal the pool
        ``alignment``.
    """

    def __init__(self, sim, kind, spec):
        self.sim = sim
        self.kind = kind
        self.primitive_bytes = int(spec["primitive_bytes"])
        self.handle_bytes = int(spec.get("handle_bytes", 0))
        # burn-flex: a cloned FlexTensor copies its Layout's strides Vec<isize> (one
        # block of stride_bytes per dimension), e.g. the clone a checkpoint boxes
        self.stride_bytes = int(spec.get("stride_bytes", 0))
        # gemm-common 0.19: the first matmul on a thread allocates the thread-local
        # L2_SLAB (the core's L2 cache size), kept for the thread's life: the threads
        # whose slab exists
        self.workspace_bytes = int(spec.get("matmul_workspace_bytes", 0))
        self.workspace_threads = set()
        # gemm-common's CACHE_INFO: read once per process (sim.platform.gemm_cache), by the first
        # gemm that reaches kernel_params (only this CPU backend runs gemm)
        self.cache_info_read = False
        # gemm blocking (gemm_slab_written); gemm_mr = 0: slab residency not modelled
        self.gemm = tuple(int(spec.get(key, 0)) for key in
                          ("gemm_mr", "gemm_nr", "gemm_kc_max", "gemm_mc_max"))
        # thread -> op name -> shape signatures already run on that thread: code paths are
        # per process, but gemm's slab (its allocation and the prefix a gemm writes) is per thread
        self.seen = {}
        # (thread, forward shapes) of matmul backwards already run: their slab extent is known
        self.backward_seen = set()
        self.pool = None
        self.prng_draws = 0
        self.kernel_bytes = int(spec.get("kernel_bytes", 0))
        self.first_op_bytes = int(spec.get("first_op_bytes", 0))
        self.compiled = set()
        self.used = False
        # burn-flex writes into uniquely owned operands; cubecl's pool always allocates here
        self.in_place = sim.policy.in_place(kind)
        # burn-flex 0.22.1 FlexTensor { data: Arc<Bytes>, .. } (tensor.rs: FlexTensor::new,
        # from_data) around cubecl-environment 0.11.3's Bytes { controller: Box<dyn
        # AllocationController>, len } (bytes/base.rs from_elems: Box::new of a
        # NativeAllocationController { ptr, size, align }): besides its data, every buffer
        # owns the boxed controller and the ArcInner<Bytes>, freed with it (the pytorch
        # policy's CPU tensors are not burn-flex's: like staging, only where flex semantics hold)
        flex = self.in_place and kind == "flex"
        self.bytes_box_bytes = int(spec.get("bytes_box_bytes", 0)) if flex else 0
        self.bytes_arc_bytes = int(spec.get("bytes_arc_bytes", 0)) if flex else 0
        # burn-flex 0.22.1 layout.rs Layout { shape, strides: Vec<isize>, .. }: every FlexTensor
        # value (each tensor handle: a clone, an op's output, a new leaf) allocates its strides
        self.handle_stride_bytes = self.stride_bytes if flex else 0
        # a backward's gradients container (sim.burn.runtime.server.Gradients) boxes each gradient
        # as a Box<TensorPrimitive<Flex>>; utils::duplicate collects a binary op's gradient
        # clones in a Vec<Option<FlexTensor>> (Option adds nothing to FlexTensor's size: its
        # Arc is never null), primitive_bytes per parent. 0 where flex semantics do not hold
        self.grad_entry_bytes = int(spec.get("grad_entry_bytes", 0)) if flex else 0
        self.option_primitive_bytes = self.primitive_bytes if flex else 0
        if kind == "metal":
            self.pool = MemoryPool(alignment=int(spec.get("alignment", 256)),
                                   max_page_size=int(spec.get("max_page_size", 256 * 2 ** 20)))
        # the CPU core's L2 (sim.platform.l2_cache): which buffers an op finds resident
        self.cache = None
        l2 = int(sim.profile.process.l2_bytes)
        if l2 > 0 and self.pool is None:
            self.cache = L2Cache(l2)

    def first_run(self, op_name, shapes) -> bool:
        """Whether ``op_name`` on ``shapes`` (interned) has not run on this backend's
        current thread yet."""
        seen = self.seen.get(self.sim.current.name)
        seen = seen and seen.get(op_name)
        return not seen or shapes not in seen

    def on_op(self, key) -> None:
        """An op runs on this backend: first-execution residency, then per-kernel caches.

        On the CPU backend the op's code path (``OpFacts.code_path``) faults in its text the
        first time (``sim.touched``), and a matmul writes its packed lhs into gemm's L2
        slab (:meth:`gemm_ran`); a GPU backend's first op allocates ``first_op_bytes`` on
        the host, and each new kernel (op, shapes, autodiff context) keeps a compiled
        pipeline of ``kernel_bytes``.
        """
        name, out_shape, in_shapes = key[0], key[1], key[2]
        thread = self.sim.current.name
        self.seen.setdefault(thread, {}).setdefault(name, set()).add((out_shape, in_shapes))
        if self.pool is None:
            self.sim.touched.touch_code(OPS[name].code_path)
        if not self.used:
            self.used = True
            if self.pool is not None and self.first_op_bytes:
                self.sim.heap.alloc(self.first_op_bytes)
        if OPS[name].gemm and self.pool is None:
            (*_, m, k), (*_, n) = in_shapes[0], in_shapes[1]
            if gemm_is_gemv(n, m, k):
                self.sim.touched.touch_code("gemv")
            self.gemm_ran(n, m, k)   # a row-major destination: gemm sees the transpose
        if self.kernel_bytes and key not in self.compiled:
            self.compiled.add(key)
            self.sim.heap.alloc(self.kernel_bytes)

    def gemm_ran(self, m, n, k, lhs_unit_stride=True) -> None:
        """A CPU gemm of gemm's own ``(m, n, k)`` ran on this thread. The first gemm of the
        thread that packs through gemm's L2 slab (:func:`gemm_takes_slab`) allocates it
        (``matmul_workspace_bytes``; where the profile has no gemm blocking, ``gemm_mr`` 0,
        the thread's first gemm does); the pages of the slab a gemm writes
        (:func:`gemm_slab_written`, from the slab's offset in its first page) become
        resident and stay (the slab lives as long as the thread)."""
        if not self.workspace_bytes:
            return
        mr, nr, kc_max, mc_max = self.gemm
        if mr and not gemm_takes_slab(m, n, k, mr, kc_max, mc_max, self.workspace_bytes,
                                      lhs_unit_stride):
            return
        thread = self.sim.current.name
        if not mr:
            if thread not in self.workspace_threads:
                self.workspace_threads.add(thread)
                self._allocate_slab()
            return
        written = gemm_slab_written(m, n, k, mr, nr, kc_max, mc_max, self.workspace_bytes,
                                    lhs_unit_stride)
        if written:
            page = self.sim.allocator.page_bytes
            self.sim.touched.touch_buffer(("l2-slab", thread),
                                          -(-(SLAB_OFFSET + written) // page) * page)

    def gemm_call(self, m, n, k, count=1, lhs_unit_stride=True, rhs_unit_stride=True) -> None:
        """``count`` gemm calls of gemm's own ``(m, n, k)`` on a CPU backend (one per batch
        matrix), where the profile derives gemm's blocking (``gemm_mr`` > 0), in
        ``gemm_basic_generic``'s order: the first call of the process that gets past the
        small kernels reads the host's caches (:func:`sim.platform.gemm_cache.read_cache_info`);
        each allocates its per-call buffer and flags (:func:`gemm_call_blocks`); the
        thread's first call that packs through the L2 slab (:func:`gemm_takes_slab`)
        creates it there, between the flags and their free."""
        mr, nr, kc_max, mc_max = self.gemm
        if not mr or self.pool is not None:
            return
        buffer, flags = gemm_call_blocks(m, n, k, mr, nr, kc_max, mc_max,
                                         self.workspace_bytes, lhs_unit_stride,
                                         rhs_unit_stride)
        if not flags:
            return                 # a small kernel returned before kernel_params
        heap = self.sim.heap
        if not self.cache_info_read:
            self.cache_info_read = True
            self.sim.timing.sysfs_reads(read_cache_info(heap, self.sim.profile.sysfs))
        thread = self.sim.current.name
        slab = (self.workspace_bytes and thread not in self.workspace_threads
                and gemm_takes_slab(m, n, k, mr, kc_max, mc_max, self.workspace_bytes,
                                    lhs_unit_stride))
        for _ in range(count):
            block = heap.alloc(buffer, PACK_ALIGN) if buffer else None
            flags_block = heap.alloc(flags, ZEROED)
            if slab:
                slab = False
                self.workspace_threads.add(thread)
                self._allocate_slab(PACK_ALIGN)
            heap.free(flags, flags_block)
            if buffer:
                heap.free(buffer, block)

    def _allocate_slab(self, align=0) -> None:
        """gemm's thread-local L2 slab (a ``MemBuffer``, aligned to ``align`` B where gemm's
        per-call blocks are modelled), and libc's record of its destructor: it counts on
        the heap but is not resident (a MemBuffer this large is mmapped, above the
        allocator's mmap threshold, and gemm touches only the pages it packs into, so RSS
        does not grow by its size)."""
        allocator = self.sim.allocator
        resident = allocator.resident_bytes()
        fault, allocator.fault = allocator.fault, None   # nor does it fault: gemm_ran
        try:
            self.sim.heap.alloc(self.workspace_bytes, align)
        finally:
            allocator.fault = fault
        self.sim.rss_extra_bytes -= allocator.resident_bytes() - resident
        self.sim.heap.libc_alloc(self.sim.profile.process.tls_dtor_bytes, zeroed=True)

    def backward_op(self, op_name, shapes) -> None:
        """The backward of ``op_name`` (forward ``shapes``: (out, inputs)) runs on this
        backend: a matmul's gradients are two gemms, ``grad @ rhs^T`` (gemm sees
        ``(K, M, N)``, its lhs is ``rhs`` read strided) and ``lhs^T @ grad`` (``(N, K, M)``)."""
        if OPS[op_name].gemm and self.pool is None:
            key = (self.sim.current.name, shapes)
            if key in self.backward_seen:
                return   # the same gemms wrote the same slab prefix on this thread before
            self.backward_seen.add(key)
            (*_, m, k), (*_, n) = shapes[1][0], shapes[1][1]
            self.gemm_ran(k, m, n, lhs_unit_stride=False)
            self.gemm_ran(n, k, m)

    def output(self, op_name, inputs, out_shape) -> Buffer:
        """The output buffer of op ``op_name`` on ``inputs`` (tensors): an operand's
        storage where this backend writes in place (module docstring), else a new one."""
        cache = self.cache
        if cache is not None:
            # what the op reads, before an in-place op consumes its operand: whole buffers
            # (a tensor's buffer holds exactly its shape's elements; a view keeps the count)
            chunks = list(map(_CHUNK, inputs))
        op = OPS[op_name]
        if self.in_place and op.view:
            # FlexTensor::reshape: a new Layout for the output (its strides), then the
            # operand's is dropped; the storage is shared
            strides = self.handle_stride_bytes * len(out_shape)
            block = self.sim.heap.alloc(strides) if strides else None
            buf = _take(inputs[0])
            if strides:
                buf.strides, buf.strides_block = strides, block
            self.sim.timing.new_layout(self)
            return buf
        views = ()
        if (op.broadcast and self.handle_stride_bytes and len(inputs) == 2
                and inputs[0].shape != inputs[1].shape):
            views = self._broadcast_binary(inputs, out_shape)
        out = self.writable_operand(op_name, inputs, out_shape)
        if out is None:
            if op.shape_vec:
                self.shape_vec(op_name, out_shape)
            out = self.alloc(out_shape, self.staged(op_name), layout_first=True,
                             strides_first=op.strides_first,
                             shape_temp=op.shape_temp_bytes)
            if op.gemm:
                (*_, m, k), (*_, n) = inputs[0].shape, inputs[1].shape
                self.gemm_call(n, m, k, math.prod(out_shape[:-2]))
        for nbytes, block in reversed(views):
            self.sim.heap.free(nbytes, block)   # the borrowed operands' views go with the op
        if self.pool is not None and not op.view:
            alias = next((i for i, t in enumerate(inputs) if t.prim is out), None)
            self.launch_forward(op_name, [t.shape for t in inputs], out_shape, alias)
        if cache is not None and not op.view:
            chunks.append(out.chunk)
            missed = cache.touch(chunks)
            if missed:
                self.sim.timing.l2_missed(missed, self)
        return out

    def launch(self, *infos) -> None:
        """Kernel launches with these infos (:mod:`sim.platform.kernels`) on the GPU: their
        metadata uniforms (:meth:`sim.platform.gpu_pool.MemoryPool.launch`)."""
        for info in infos:
            self.pool.launch(info.words())

    def launch_random(self, shape) -> None:
        """``Tensor::random`` on the GPU: a prng launch, seeded anew each time."""
        if self.pool is not None:
            self.prng_draws += 1
            self.launch(kernels.prng_uniform(shape, (self.prng_draws, 0, 0, 0)))

    def launch_forward(self, op_name, in_shapes, out_shape, alias) -> None:
        """The launches burn-cubecl 0.22.1 makes for ``op_name`` (``alias``: the input the
        output overwrites, or None): ``relu`` is a ``lower_equal_elem`` mask and a
        ``mask_fill``; a full ``sum`` fills its output with zeros and runs the shared sum
        (burn-cubecl ``kernel/reduce/base.rs`` ``sum``, one-shot where atomics add; a
        ``mean`` is taken as the same two launches, not traced); other ops one
        elementwise kernel (scalar ops' values are not simulated: 0, so two scalar ops of
        one shape share a uniform here where different values would not)."""
        if op_name == "matmul":
            self.launch(kernels.matmul(*in_shapes))
        elif op_name == "relu":
            self.launch(kernels.elementwise(in_shapes, out_shape, scalars=(0.0,)),
                        kernels.mask_fill(out_shape, 0.0, alias is not None))
        elif op_name in ("sum", "mean"):
            self.launch(kernels.full((1,), 0.0), kernels.shared_sum(in_shapes[0]))
        else:
            scalars = (0.0,) if op_name.endswith("_scalar") else ()
            self.launch(kernels.elementwise(in_shapes, out_shape, scalars=scalars, alias=alias))

    def launch_gradient(self, op_name, index, shapes, target, in_place) -> None:
        """The launches of one parent's gradient (``index``) of ``op_name`` (forward
        ``shapes``), computed into a buffer of ``target``'s shape (``in_place``: the
        incoming gradient's): a matmul's is a matmul with the other operand transposed (a
        view: its strides swapped); a full sum's is ones of the input's shape times the
        gradient broadcast (in place into the ones); relu's the mask of its output and an
        in-place ``mask_fill``; a broadcast operand's gradient is summed (``sum_dim``) over
        each dim it had as 1; other ops one elementwise kernel."""
        if self.pool is None:
            return
        out_shape, in_shapes = shapes
        if op_name == "matmul":
            lhs, rhs = in_shapes
            if index == 0:
                self.launch(kernels.matmul(out_shape, rhs[:-2] + (rhs[-1], rhs[-2]),
                                           rhs_strides=(1, rhs[-1])))
            else:
                self.launch(kernels.matmul(lhs[:-2] + (lhs[-1], lhs[-2]), out_shape,
                                           lhs_strides=(1, lhs[-1])))
        elif op_name in ("sum", "mean"):
            self.launch(kernels.full(target, 1.0),
                        kernels.elementwise([target, (1,) * len(target)], target, alias=0))
        elif op_name == "relu":
            self.launch(kernels.elementwise([target], target, scalars=(0.0,)),
                        kernels.mask_fill(target, 0.0, in_place))
        elif target != out_shape and len(target) == len(out_shape):
            shape = out_shape
            for dim, (kept, full) in enumerate(zip(target, out_shape)):
                if kept == 1 and full != 1:
                    self.launch(kernels.reduce_dim(shape, dim))
                    shape = shape[:dim] + (1,) + shape[dim + 1:]
        else:
            self.launch(kernels.elementwise([out_shape], target, alias=0 if in_place else None))

    def shape_vec(self, op_name, out_shape) -> None:
        """The output dims ``op_name`` builds in a ``Vec<usize>`` before creating its output
        (``OpFacts.shape_vec``: matmul_2d_strided's ``Shape::from(vec![m, n])``), freed
        once the Shape holds them."""
        if OPS[op_name].shape_vec and self.handle_stride_bytes:
            nbytes = 8 * len(out_shape)
            self.sim.heap.free(nbytes, self.sim.heap.alloc(nbytes))

    def _broadcast_binary(self, inputs, out_shape):
        """burn-flex's ``broadcast_binary`` (ops/expand.rs) for operands of different
        shapes: ``broadcast_shape`` builds the target's dims in a zeroed ``Vec`` (freed
        into a Shape); each operand of another shape is ``expand`` ed: its dims and
        strides copied into ``Vec`` s, the view's strides built, the copies freed, then
        the operand's own Layout (a moved tensor is ``expand``'s parameter, dropped after
        the function's locals). A moved
        operand's handle takes its view's strides (dropped with it after the op); a
        borrowed one keeps its own, and the view's are returned ``((bytes, block), ...)``
        for the caller to free when the op is done."""
        heap = self.sim.heap
        rank = len(out_shape)
        dims = 8 * rank
        heap.free(dims, heap.alloc(dims, ZEROED))
        views = []
        for t in inputs:
            if t.shape == out_shape:
                continue
            src = 8 * len(t.shape)
            src_dims, src_strides = heap.alloc(src), heap.alloc(src)
            strides = self.handle_stride_bytes * rank
            view = heap.alloc(strides)
            heap.free(src, src_strides)
            heap.free(src, src_dims)
            if t.moved and t._strides:
                # expand's parameter, dropped after its locals
                heap.free(t._strides, t._strides_block)
                t._strides, t._strides_block = strides, view
            else:
                views.append((strides, view))
        return views

    def writable_operand(self, op_name, inputs, out_shape):
        """The storage of the operand ``op_name`` writes its output into on this backend (the
        first of ``inputs`` that is uniquely held, contiguous, of the output's shape and not
        also another operand; the operand is consumed: :func:`_take`), or None."""
        if self.in_place and OPS[op_name].in_place:
            for t in inputs:
                buf = t.prim
                if (buf.holders == 1 and t.holds and t.shape == out_shape
                        and sum(1 for u in inputs if u.prim is buf) == 1):
                    return _take(t, keep_layout=True)
        return None

    def staged(self, op_name) -> bool:
        """Whether this backend creates ``op_name``'s output (and a gradient of it) staged."""
        return self.in_place and OPS[op_name].staged

    def alloc(self, shape, staged=False, packed=None, created=False, device_box=0,
              layout_first=False, strides_first=False, shape_temp=0, zeroed=False,
              free_after_box=None, options_first=False) -> Buffer:
        """A new buffer for an f32 tensor of ``shape``; ``packed``: the (k, n) of a gemm that
        packs its rhs into a transient per-call buffer while it writes this output;
        ``created``: a new tensor's data (``from_data``, ``zeros``...), whose creation
        resolves the device's default dtype (:class:`DeviceSettingsRegistry`) once its data
        is in its ``Bytes`` and before the ``FlexTensor`` is built; ``device_box``: bytes of
        the creation options' clone of an autodiff device allocated then (its handle in
        :attr:`Buffer.device_box_block`; the caller frees it); the new
        ``FlexTensor``'s strides follow it, before its ``Arc<Bytes>`` (burn-flex
        ``from_data``, as the probe's allocation trace shows); ``layout_first``: an op's
        output, whose ``Layout`` (its strides) is likewise built before the ``Arc`` (the
        malloc-log traces: data, controller, strides, Arc), where other new storage (a
        backward's ``ones``) is wrapped in its ``Arc`` first and its handle's strides
        come after; ``options_first``: the creation options (the device box, the default
        dtype) were resolved before the data (``Tensor::random``). Strides allocated here
        go to the buffer's first handle (:attr:`Buffer.strides`). ``zeroed``: the data is a
        zeroed block (``calloc``); ``free_after_box``: a ``(bytes, handle)`` the caller
        allocated before, freed once the data's controller is boxed (a dims ``Vec`` that
        becomes the output's Shape); ``staged``: :meth:`_staged_data`."""
        nbytes = math.prod(shape) * ELEMENT_BYTES
        sim = self.sim
        if self.pool is not None:
            return self._alloc_gpu(nbytes, created)
        heap = sim.heap
        device_box_block = None
        if created and options_first:
            device_box_block = self._creation_options(device_box)
        sim.timing.fresh_buffers(self, 2 if staged else 1)
        strides = self.handle_stride_bytes * len(shape) if created or layout_first else 0
        strides_block = None
        if strides and strides_first:
            strides_block = heap.alloc(strides)
        if staged:
            size, block, box_block = self._staged_data(nbytes, packed)
        else:
            size = nbytes
            block = heap.alloc(nbytes, ZEROED if zeroed else 0)
            box_block = heap.alloc(self.bytes_box_bytes)
            if shape_temp:
                heap.free(shape_temp, heap.alloc(shape_temp))
            if free_after_box is not None:
                heap.free(*free_after_box)
        if created and not options_first:
            device_box_block = self._creation_options(device_box)
        if strides and not strides_first:
            # the new FlexTensor's strides (its first handle's)
            strides_block = heap.alloc(strides)
        # FlexTensor::new: Arc::new(bytes)
        arc_block = heap.alloc(self.bytes_arc_bytes)
        # the allocator's handles name the blocks, so that their placements are freed
        chunk = None if self.cache is None else self.cache.claim(nbytes)
        buf = Buffer(nbytes, self._free_cpu, (size, block, box_block, arc_block), chunk,
                     strides, strides_block)
        buf.device_box_block = device_box_block
        return buf

    def _alloc_gpu(self, nbytes, created) -> Buffer:
        """:meth:`alloc` on a GPU backend: ``nbytes`` from the pool, and the host's handle of
        it (``created``: the device's default dtype resolved first)."""
        if created:
            self.sim.device_settings.get_or_insert(self.kind)
        token = self.pool.alloc(nbytes)
        if self.handle_bytes:
            self.sim.heap.alloc(self.handle_bytes)
        return Buffer(nbytes, self._free_gpu, token)

    def _creation_options(self, device_box):
        """A new tensor's creation options: the autodiff device's clone (``device_box``
        bytes, 0: none; returns its block) and the device's default dtype resolved
        (:class:`DeviceSettingsRegistry`)."""
        block = self.sim.heap.alloc(device_box) if device_box else None
        self.sim.device_settings.get_or_insert(self.kind)
        return block

    def _staged_data(self, nbytes, packed) -> tuple:
        """``FlexTensor::empty``'s data: a zeroed ``Vec<u8>`` (align 1: alloc_zeroed, a
        calloc) that ``Bytes::from_bytes_vec`` copies into a ``MAX_ALIGN`` allocation, then
        frees; each of the two has its boxed controller (``Bytes::from_elems``, then
        ``try_enforce_runtime_align``). ``packed``: as :meth:`alloc`'s. Returns ``(size,
        block, controller's box block)`` of the kept allocation."""
        heap = self.sim.heap
        box = self.bytes_box_bytes
        staging = heap.alloc(nbytes, ZEROED)
        staging_box = heap.alloc(box)
        size = -(-nbytes // MAX_ALIGN) * MAX_ALIGN
        block = heap.alloc(size)
        box_block = heap.alloc(box)
        heap.free(nbytes, staging)
        heap.free(box, staging_box)
        if packed is not None and not self.gemm[0]:
            # where gemm's blocking is not derived (gemm_mr = 0), the one per-call
            # block of the x86_64 trace: the rhs gradient's packed rhs
            k, n = packed
            pack = k * (n + PACK_EXTRA_COLUMNS) * ELEMENT_BYTES
            pack = -(-pack // 128) * 128
            heap.free(pack, heap.alloc(pack, PACK_ALIGN))
        return size, block, box_block

    def _free_cpu(self, token) -> None:
        heap = self.sim.heap
        size, block, box_block, arc_block = token
        if arc_block is _TAKEN:
            # the Bytes taken out of its Arc became a Vec: the controller's box, the data
            heap.free(self.bytes_box_bytes, box_block)
            heap.free(size, block)
            return
        heap.free(size, block)
        heap.free(self.bytes_box_bytes, box_block)
        heap.free(self.bytes_arc_bytes, arc_block)

    def take_bytes(self, buf) -> None:
        """``Arc::try_unwrap`` of ``buf``, a uniquely held CPU storage (``into_data``): its
        ``ArcInner`` is freed now; the data and its controller go with the buffer, the
        controller's box first (the ``Bytes`` became a ``Vec``)."""
        size, block, box_block, arc_block = buf._token
        if arc_block is not _TAKEN:
            self.sim.heap.free(self.bytes_arc_bytes, arc_block)
            buf._token = (size, block, box_block, _TAKEN)

    def _free_gpu(self, token) -> None:
        self.pool.free(token)
        if self.handle_bytes:
            self.sim.heap.free(self.handle_bytes)


#: a token's Arc block once :meth:`Backend.take_bytes` freed it
_TAKEN = object()


def _take(tensor, keep_layout=False) -> Buffer:
    """Consume ``tensor``'s hold on its storage (Rust moved it into the op), and its
    Layout: an op writing in place (``keep_layout``) hands the operand's strides on to
    its output, the storage's next handle (:attr:`Buffer.strides`); a view builds a new
    one (the output's own strides block) and the operand's is freed."""
    if tensor.holds:
        tensor.holds = False
        tensor.prim.holders -= 1
    buf = tensor.prim
    if tensor._strides:
        if keep_layout:
            buf.strides, buf.strides_block = tensor._strides, tensor._strides_block
        else:
            tensor.device.sim.heap.free(tensor._strides, tensor._strides_block)
        tensor._strides = 0
        tensor._strides_block = None
    return buf
