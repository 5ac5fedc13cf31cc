"""Launch metadata of burn-cubecl's kernels on wgpu: the info words each launch stages
in a uniform buffer (cubecl 0.11.x), which :class:`sim.platform.gpu_pool.MetadataInfoCache`
keys its buffers by. See docs/burn-notes/gpu-pool.md, "The uniform memory".

How the words are laid out (paraphrased from the released crates):

* cubecl-core 0.11.4 ``codegen/info.rs`` (``InfoBuilder::finish``): scalars first, one
  group per scalar type in the order the types were first registered, each group's bytes
  padded to 8 (``scalars.rs`` ``len_aligned``); then the static metadata, one address-sized
  word per buffer length and two (shape and stride offsets) per tensor, packed two to a
  u64 under 32-bit addressing; then every tensor's shape and strides, packed the same way.
* cubecl-core ``compute/launcher.rs``: a tensor argument registers its buffer length,
  shape and strides; a buffer (slice) argument only its length; an argument aliasing an
  input (an in-place output) registers no buffer. ``frontend/container/tensor/launch.rs``:
  a ``Tensor`` argument also registers its ``TensorMeta`` (length and rank, index scalars).
* cubecl-std 0.11.4 ``tensor/layout/linear.rs`` (``LinearViewLayout::register``): a linear
  view of a contiguous buffer is a plain layout (its length, an index scalar); a view
  broadcast to a reference shape of another shape is a permuted layout
  (``layout/permuted.rs``: one ``FastDivmod`` per dim, the strides, the length).
  ``fast_math.rs``: a ``FastDivmod<usize>`` registers its divisor and, where the device
  has 64-bit integers (lavapipe has), its multiplier (index) and shift (u32) too.

Lengths are counted in elements: cubecl divides them by the vector width the kernel
picks, which follows the shapes, so which launches share words is unchanged. Units: one
word is 8 bytes. Everything here is the 32-bit addressing the probes' tensors use.
"""

from __future__ import annotations

import itertools
import math
import struct

__all__ = ["LaunchInfo", "prng_uniform", "full", "elementwise", "mask_fill", "shared_sum",
           "reduce_dim", "matmul", "INFO_WORD_BYTES"]

INFO_WORD_BYTES = 8

_FORMATS = {"f32": "<f", "u32": "<I", "index": "<I"}


class LaunchInfo:
    """One launch's info, built as cubecl's ``InfoBuilder`` does; :meth:`words` is the
    cache key, ``8 * len(words)`` the uniform's bytes."""

    def __init__(self):
        self.scalars = {}         # type -> bytes, in the order types were first pushed
        self.buffer_lens = []
        self.tensors = []         # (shape, strides)

    def scalar(self, kind, value) -> "LaunchInfo":
        self.scalars.setdefault(kind, bytearray()).extend(struct.pack(_FORMATS[kind], value))
        return self

    def buffer(self, length) -> "LaunchInfo":
        self.buffer_lens.append(int(length))
        return self

    def tensor(self, shape, strides=None) -> "LaunchInfo":
        """A ``Tensor`` argument: its buffer, shape and strides, then its ``TensorMeta``."""
        strides = strides or contiguous_strides(shape)
        self.buffer_lens.append(math.prod(shape))
        self.tensors.append((tuple(shape), tuple(strides)))
        self.scalar("index", math.prod(shape)).scalar("index", len(shape))
        return self

    def view(self, shape, strides=None, reference=None, alias=False) -> "LaunchInfo":
        """A ``LinearView`` of a buffer of ``shape`` (broadcast to ``reference``, if any):
        the buffer (none if ``alias``), then its layout."""
        strides = strides or contiguous_strides(shape)
        if not alias:
            self.buffer(math.prod(shape))
        if reference is not None and tuple(reference) != tuple(shape):
            ref_strides = broadcast_strides(shape, strides, reference)
            for dim in reference:
                # FastDivmod<usize> on a device with 64-bit integers: divisor, multiplier
                # (index scalars) and shift (u32)
                self.scalar("index", dim).scalar("index", _multiplier(dim)).scalar(
                    "u32", _shift(dim))
            for stride in ref_strides:
                self.scalar("index", stride)
            self.scalar("index", math.prod(reference))
        else:
            self.scalar("index", math.prod(shape))
        return self

    def words(self) -> tuple:
        out = []
        for data in self.scalars.values():
            data = bytes(data) + b"\0" * (-len(data) % INFO_WORD_BYTES)
            out.extend(struct.unpack(f"<{len(data) // 8}Q", data))
        static = list(self.buffer_lens)
        offsets = list(itertools.accumulate((len(s) for s, _ in self.tensors), initial=0))[:-1]
        base = sum(len(s) for s, _ in self.tensors)
        static += offsets + [base + o for o in offsets]
        dynamic = [d for s, _ in self.tensors for d in s] + \
                  [d for _, st in self.tensors for d in st]
        out.extend(_pack_u32(static))
        out.extend(_pack_u32(dynamic))
        return tuple(out)


def _shift(divisor) -> int:
    """``find_params_u32``'s shift: ceil(log2(divisor))."""
    return max(int(divisor) - 1, 0).bit_length()


def _multiplier(divisor) -> int:
    """``find_params_u32``'s multiplier: 2^32 * (2^shift - d) / d + 1, as a u32."""
    shift = _shift(divisor)
    return ((1 << 32) * ((1 << shift) - divisor) // divisor + 1) & 0xFFFFFFFF


def _pack_u32(values) -> list:
    values = list(values) + [0] * (len(values) % 2)
    return [values[i] | (values[i + 1] << 32) for i in range(0, len(values), 2)]


def contiguous_strides(shape) -> tuple:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def broadcast_strides(shape, strides, reference) -> tuple:
    """``strides_ref``: the buffer's strides against the reference's dims (0 where the
    buffer has a dim of 1 or none)."""
    pad = len(reference) - len(shape)
    shape = (1,) * pad + tuple(shape)
    strides = (0,) * pad + tuple(strides)
    return tuple(0 if s == 1 and r != 1 else st for s, st, r in zip(shape, strides, reference))


# -- burn-cubecl 0.22.1's kernels, as each registers its arguments ----------------------

def prng_uniform(out_shape, seeds):
    """cubek-random 0.3.1 ``base.rs`` ``prng_kernel``: the output's linear view, the four
    seed words, the distribution's two bounds, the vectors per unit. The seeds are drawn
    from the process's generator at each launch: no two launches share their info."""
    info = LaunchInfo().view(out_shape)
    for seed in seeds:
        info.scalar("u32", seed & 0xFFFFFFFF)
    return info.scalar("f32", 0.0).scalar("f32", 1.0).scalar("u32", 1)


def full(out_shape, value):
    """burn-cubecl ``ops/numeric.rs`` ``full``: the output's linear view and the value."""
    return LaunchInfo().view(out_shape).scalar("f32", value)


def elementwise(inputs, out_shape, scalars=(), alias=None):
    """A ``KernelBinop``/unary/scalar kernel: each input's view like the output, then the
    output's view (``alias``: the input it writes over, which registers no buffer)."""
    info = LaunchInfo()
    for shape in inputs:
        info.view(shape, reference=out_shape)
    info.view(out_shape, alias=alias is not None)
    for value in scalars:
        info.scalar("f32", value)
    return info


def mask_fill(shape, value, in_place):
    """burn-cubecl ``kernel/mask/mask_fill.rs``: input, mask and output views and the value
    (the output aliasing the input under ``MaskFillStrategy::Inplace``)."""
    info = LaunchInfo().view(shape, reference=shape).view(shape, reference=shape)
    return info.view(shape, alias=in_place).scalar("f32", value)


def shared_sum(in_shape):
    """cubek-reduce 0.3.1 ``routines/shared_sum.rs``: the input's linear view and the
    ``[1]`` output as a ``Tensor`` of atomics."""
    return LaunchInfo().view((math.prod(in_shape),)).tensor((1,))


def reduce_dim(in_shape, dim):
    """cubek-reduce 0.3.1 ``launch/base.rs`` ``reduce_kernel`` (``TensorArgs``): input and
    output tensors, the reduced axis and the output's vectorised axis (both ``usize``;
    the latter's value, a function of the shapes, is taken as the last axis here)."""
    out_shape = tuple(1 if d == dim else n for d, n in enumerate(in_shape))
    return LaunchInfo().tensor(in_shape).tensor(out_shape).scalar("index", dim).scalar(
        "index", len(in_shape) - 1)


def matmul(lhs, rhs, lhs_strides=None, rhs_strides=None):
    """cubek-matmul 0.3.1 ``matmul_entry`` with ``TensorArgs`` (``multi_level/args.rs``):
    lhs, rhs and output views, each with a ``GlobalLayout`` (rows and cols as u32, row
    and col strides as index scalars: ``components/global/memory/layout.rs``
    ``from_handle``) and a batch layout with no dims for 2-d operands; then the
    ``CubeMapping`` (cubek-std ``cube_count/hypercube/cube_mapping.rs``): the unit
    matmul's selector takes the ``Flattened`` plan on a device that reports no SM count
    (``routines/selector/unit.rs``), whose mapping holds the cube counts along m and n,
    two u32 (here the output's rows and cols stand for them: a function of the shapes)."""
    out = tuple(lhs[:-1]) + (rhs[-1],)
    info = LaunchInfo()
    for shape, strides in ((lhs, lhs_strides), (rhs, rhs_strides), (out, None)):
        strides = strides or contiguous_strides(shape)
        info.buffer(math.prod(shape))
        info.scalar("u32", shape[-2]).scalar("u32", shape[-1])
        info.scalar("index", strides[-2]).scalar("index", strides[-1])
    return info.scalar("u32", out[-2]).scalar("u32", out[-1])

