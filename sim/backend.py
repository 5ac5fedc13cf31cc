"""Inner backends: where tensor buffers live and what an op costs to compute.

burn's autodiff backend decorates an inner backend (``Autodiff<B>``); the
simulator's inner backends are

``flex``
    the CPU backend: buffers are host-heap blocks (they count in the heap and
    in RSS like any allocation);
``metal``
    the GPU backend through cubecl/wgpu: buffers come from
    :class:`~sim.costs.pool.MemoryPool`; each live handle also keeps a small
    host-side handle block.

A :class:`Buffer` is the tensor primitive's storage, shared by clones of a
tensor and by the steps and checkpoints that saved it: Python's reference count
plays the handle count, and the buffer is freed when the last holder drops it.
"""

from __future__ import annotations

import math

__all__ = ["Buffer", "Backend", "ELEMENT_BYTES"]

#: f32
ELEMENT_BYTES = 4


class Buffer:
    """Storage of one tensor primitive (``nbytes`` of f32 data)."""

    __slots__ = ("nbytes", "_free", "_token")

    def __init__(self, nbytes, free, token):
        self.nbytes = nbytes
        self._free = free
        self._token = token

    def __del__(self):
        self._free(self._token)


class Backend:
    """One inner backend of a simulation.

    Parameters
    ----------
    sim : sim.engine.Simulation
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
        # L2_SLAB (the core's L2 cache size), kept for the thread's life
        self.workspace_bytes = int(spec.get("matmul_workspace_bytes", 0))
        self.workspace_pending = self.workspace_bytes > 0
        self.pool = None
        self.kernel_bytes = int(spec.get("kernel_bytes", 0))
        self.first_op_bytes = int(spec.get("first_op_bytes", 0))
        self.compiled = set()
        self.used = False
        if kind == "metal":
            from .costs.pool import MemoryPool
            self.pool = MemoryPool(alignment=int(spec.get("alignment", 256)))

    def on_op(self, key) -> None:
        """An op runs on this backend: one-time runtime warm-up, then per-kernel caches.

        The CPU backend's first op makes resident ``process.runtime_init_bytes``
        (thread-locals, code pages); a GPU backend's first op allocates
        ``first_op_bytes`` on the host, and each new kernel (op, shapes, autodiff
        context) keeps a compiled pipeline of ``kernel_bytes``.
        """
        if not self.used:
            self.used = True
            if self.pool is None:
                self.sim.rss_extra_bytes += self.sim.profile.process.runtime_init_bytes
            elif self.first_op_bytes:
                self.sim.heap.alloc(self.first_op_bytes)
        if self.workspace_pending and key[0] == "matmul":
            self.workspace_pending = False
            # the slab counts on the heap but is not resident: a MemBuffer this large is
            # mmapped (above the allocator's mmap threshold) and gemm touches only the
            # pages it packs into, so RSS does not grow by its size
            resident = self.sim.allocator.resident_bytes()
            self.sim.heap.alloc(self.workspace_bytes)
            self.sim.rss_extra_bytes -= self.sim.allocator.resident_bytes() - resident
        if self.kernel_bytes and key not in self.compiled:
            self.compiled.add(key)
            self.sim.heap.alloc(self.kernel_bytes)

    def alloc(self, shape) -> Buffer:
        """A new buffer for an f32 tensor of ``shape``."""
        nbytes = math.prod(shape) * ELEMENT_BYTES
        heap = self.sim.heap
        if self.pool is None:
            # the allocator's handle names the block, so that its placement is freed
            return Buffer(nbytes, self._free_cpu, (nbytes, heap.alloc(nbytes)))
        token = self.pool.alloc(nbytes)
        if self.handle_bytes:
            heap.alloc(self.handle_bytes)
        return Buffer(nbytes, self._free_gpu, token)

    def _free_cpu(self, token) -> None:
        self.sim.heap.free(*token)

    def _free_gpu(self, token) -> None:
        self.pool.free(*token)
        if self.handle_bytes:
            self.sim.heap.free(self.handle_bytes)
