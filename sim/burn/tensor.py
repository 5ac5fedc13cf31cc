"""The burn-like tensor API workloads are written against.

Devices and tensors behave as burn 0.22.1's public API does (shapes only: the
simulator keeps no element values):

* ``sim.device("flex")`` / ``sim.device("metal")``; ``.autodiff()`` wraps a
  device in the autodiff backend (optionally ``checkpointing="balanced"``);
  devices compare equal regardless of autodiff, as in burn.
* ``Tensor.from_floats / random / zeros / ones`` create leaves that register
  nothing. ``clone()`` shares the buffer and the node (one more handle).
* A tensor handle lives until ``drop(t)`` or until Python drops the object
  (``del``, reassignment, end of scope). Nothing is notified on drop, as burn's
  ``AutodiffTensor`` has no ``Drop`` (the ``drop-release`` policy changes that).
* Float ops (``+ - *``, scalars, ``matmul``, ``sum``, ``mean``,
  ``powi_scalar``, ``relu``, ``reshape``/``unsqueeze``, ``exp``, ``log``) go
  through :func:`sim.burn.ops.float_op`.
* ``require_grad`` registers a RootStep; ``detach`` keeps ``require_grad``
  (a new leaf, a new graph); ``without_autodiff``/``inner`` moves the tensor off
  autodiff; ``backward`` returns :class:`Gradients`; ``into_scalar`` is a sync
  point and returns 0.0 (no values are simulated).
"""

from __future__ import annotations

import math
import sys

from .graph.node import GRAD, NONE, Node, NodeRefCount
from .ops import OPS, float_op, register_root
from .checkpoint import DISABLED, STRATEGIES
from ..errors import LimitExceeded, UserError
from ..paths import PACKAGE_PREFIX

__all__ = ["Device", "Tensor", "Gradients", "drop", "BurnPanic"]


class BurnPanic(Exception):
    """A panic the real program would hit (the simulated program stops there)."""


class Device:
    """A device: inner backend kind, autodiff or not, checkpointing strategy."""

    __slots__ = ("sim", "kind", "is_autodiff", "checkpointing", "backend", "device_box")

    def __init__(self, sim, kind, is_autodiff=False, checkpointing=DISABLED):
        if checkpointing not in STRATEGIES:
            raise UserError(f"unknown checkpointing strategy '{checkpointing}' "
                            f"(valid: {', '.join(STRATEGIES)})")
        self.sim = sim
        self.kind = kind
        self.is_autodiff = is_autodiff
        self.checkpointing = checkpointing
        #: the inner backend (:class:`sim.burn.backend.Backend`), one per kind and simulation
        self.backend = sim.backend(kind)
        #: bytes of the boxed inner device a clone of this autodiff device makes on a backend
        #: whose handles have strides (burn-flex), else 0: a read of a tensor's ``device()``
        #: (:func:`_check_devices`), a creation's options (:meth:`Tensor.zeros`)
        self.device_box = (sim.layout.device_box_bytes
                           if is_autodiff and self.backend.handle_stride_bytes else 0)

    def autodiff(self, checkpointing=DISABLED) -> "Device":
        """This device under the autodiff backend."""
        return Device(self.sim, self.kind, True, checkpointing)

    def inner(self) -> "Device":
        return Device(self.sim, self.kind, False)

    def __eq__(self, other):
        return isinstance(other, Device) and other.kind == self.kind and other.sim is self.sim

    def __hash__(self):
        return hash(self.kind)

    def __repr__(self):
        return f"Device({self.kind}{'.autodiff' if self.is_autodiff else ''})"

    def _pool(self):
        pool = self.backend.pool
        if pool is None:
            raise UserError(f"{self.kind} has no memory pool")
        return pool

    def memory_pool_usage(self):
        """``(bytes_in_use, bytes_reserved)`` of the GPU pool (metal only)."""
        pool = self._pool()
        return pool.bytes_in_use, pool.bytes_reserved

    def memory_pool_details(self):
        """``(allocations, bytes in use, padding, reserved)`` and ``(page size, pages)``
        of each page-carving pool (burn's ``memory_pool_usage`` and
        ``memory_pool_report``)."""
        pool = self._pool()
        return pool.usage(), pool.report()

    def memory_cleanup(self) -> None:
        """``Device::memory_cleanup``: the GPU pool gives back what it can."""
        self._pool().memory_cleanup()



def drop(tensor) -> None:
    """Drop a tensor handle now (Rust's ``drop(t)``); the object becomes unusable.

    What took the handle is kept for the error of a later use (:func:`_taker`), unless
    this call holds the only reference to it (a temporary: ``drop(a + b)``, counted as
    :data:`_TEMPORARY_REFS`): such a handle dies on return, nothing can use it again, and
    the stack walk is left out."""
    if tensor.prim is not None and sys.getrefcount(tensor) != _TEMPORARY_REFS:
        tensor.taken = _taker("dropped")
    tensor._release()


def _refs_seen(obj) -> int:
    """What ``getrefcount`` reports in a function of :func:`drop`'s shape."""
    return sys.getrefcount(obj)


def _refs_of_a_temporary():
    """:func:`_refs_seen` of an object only the call holds (CPython 3.11-3.13: 2, the
    callee's local and ``getrefcount``'s argument), or None if the interpreter reports the
    same for a named object (3.14 may borrow the caller's reference on its stack), where a
    count cannot tell a temporary."""
    named = object()
    temporary = _refs_seen(object())
    return temporary if _refs_seen(named) != temporary else None


#: ``getrefcount`` of a handle in :func:`drop` when only the call holds it (None: never
#: told apart, every drop keeps what took the handle)
_TEMPORARY_REFS = _refs_of_a_temporary()




def _taker(how):
    """``(how, API, path, line)`` of a handle taken now (``how``: ``"moved"`` or
    ``"dropped"``): API is the outermost function of the ``sim`` package on the stack
    (the program's call that took the handle, ``Mlp.forward``; empty when the program
    called ``move``/``drop`` itself), path and line the program's line that called it."""
    frame, api = sys._getframe(2), ""
    while frame is not None and frame.f_code.co_filename.startswith(PACKAGE_PREFIX):
        api = frame.f_code.co_qualname
        frame = frame.f_back
    if frame is None:
        return how, api, "", 0
    return how, api, frame.f_code.co_filename, frame.f_lineno


def _shape_of(values):
    shape = []
    while isinstance(values, (list, tuple)):
        shape.append(len(values))
        values = values[0] if values else None
    return tuple(shape)


class Tensor:
    """One tensor handle: shape, buffer, and (on autodiff devices) node and ref count."""

    __slots__ = ("device", "shape", "prim", "node", "rc", "_box", "_strides", "holds",
                 "_box_block", "_strides_block", "moved", "taken")

    def __init__(self, device, shape, prim, node=None, rc=None, boxed=True):
        self.device = device
        self.shape = shape if type(shape) is tuple else tuple(shape)
        self.prim = prim
        #: handed to the next op by value (:meth:`move`)
        self.moved = False
        # whether this handle counts as a holder of its storage (an op that writes in
        # place consumes its operand: see sim.burn.backend)
        if prim is not None:
            self.holds = True
            prim.holders += 1
        else:
            self.holds = False
        self.node = node
        self.rc = rc
        sim = device.sim
        self._box = 0
        self._box_block = None
        if device.is_autodiff:
            if node is None:
                node = self.node = Node(sim, sim.next_node_id(), (), 0, NONE)
                rc = self.rc = NodeRefCount(sim, node.id)
            rc.acquire()
            if boxed:   # self.box(), inlined (hot path)
                box = self._box = sim.layout.dispatch_box_bytes
                self._box_block = sim.heap.alloc(box)
        # burn-flex: every FlexTensor value has its Layout's strides Vec<isize> (layout.rs);
        # a fresh buffer's first handle takes the strides allocated with it (sim.burn.backend)
        strides = self._strides = device.backend.handle_stride_bytes * len(self.shape)
        self._strides_block = None
        if strides:
            if prim is not None and prim.strides:
                if prim.strides != strides:
                    raise AssertionError("a fresh buffer's first handle has another rank")
                self._strides_block = prim.strides_block
                prim.strides = 0
                prim.strides_block = None
            else:
                self._strides_block = sim.heap.alloc(strides)

    def box(self) -> None:
        """burn-dispatch wraps an autodiff tensor in its ``DispatchTensorKind::Autodiff(Box<..>)``
        (``layout.dispatch_box_bytes``): every autodiff handle owns one, allocated when the
        dispatch layer wraps the value it got back (after the op, or the clone)."""
        sim = self.device.sim
        box = self._box = sim.layout.dispatch_box_bytes
        self._box_block = sim.heap.alloc(box)

    def unbox(self) -> None:
        """burn-dispatch moves the value out of this handle's box and frees the box; the
        handle's other parts live on (the op consumes them)."""
        if self._box:
            self.device.sim.heap.free(self._box, self._box_block)
            self._box = 0
            self._box_block = None

    # -- lifetime ----------------------------------------------------------------
    def move(self) -> "Tensor":
        """Hand this handle to the next op or conversion by value, as Rust moves a tensor
        into a function: the op drops its parts where burn does (the primitive when the
        inner op returns, then the node and ref count, then the box) instead of when
        Python drops the object, and the handle is unusable afterwards. Without it an
        op borrows its operands, which drop when the caller lets them go. Under a policy
        that is not burn's ownership (``Policy.moves_operands``: the ``pytorch`` policy
        frees temporaries as Python does) a move changes nothing."""
        self._alive()
        if self.device.sim.policy.moves_operands:
            self.moved = True
            self.taken = _taker("moved")
        return self

    def _release_inner(self) -> None:
        """Drop the inner backend's tensor: its storage's ``Arc``, then its strides."""
        if self.holds:
            self.holds = False
            self.prim.holders -= 1
        self.prim = None
        if self._strides:
            self.device.sim.heap.free(self._strides, self._strides_block)
            self._strides = 0
            self._strides_block = None

    def _release_autodiff(self) -> None:
        """Drop the ``AutodiffTensor``'s node, then its ref count."""
        rc = self.rc
        self.node = None
        self.rc = None
        if rc is not None:
            rc.release()

    def _release(self) -> None:
        """Drop the handle, its parts in the order Rust drops them: the boxed value's
        ``FlexTensor`` (its storage's ``Arc``, then its strides), then the
        ``AutodiffTensor``'s node and ref count, then the box itself (the three steps of
        :meth:`_release_inner`, :meth:`_release_autodiff` and :meth:`unbox`, inlined:
        every handle's drop comes here)."""
        if self.holds:
            self.holds = False
            self.prim.holders -= 1
        self.prim = None
        strides, box = self._strides, self._box
        if strides or box:
            heap = self.device.sim.heap
            if strides:
                heap.free(strides, self._strides_block)
                self._strides = 0
                self._strides_block = None
        rc = self.rc
        self.node = None
        if rc is not None:
            self.rc = None
            rc.release()
        if box:
            heap.free(box, self._box_block)
            self._box = 0
            self._box_block = None

    def __del__(self) -> None:
        """A handle Python drops (``del``, end of scope) is released as by ``drop``
        (idempotent). A handle whose constructor did not finish (an interrupt, a budget's
        alarm) holds only what it got to: its slots set so far."""
        try:
            if self.prim is not None or self.rc is not None or self._box or self._strides:
                self._release()     # else a handle dropped or consumed already: nothing held
        except AttributeError:
            if all(hasattr(self, name) for name in Tensor.__slots__):
                raise

    def _alive(self):
        if self.prim is None:
            raise UserError(self._dropped_text())
        return self

    def _dropped_text(self) -> str:
        """The error of a use of this handle once dropped: which tensor, and what took it."""
        taken = getattr(self, "taken", None)
        what = f"use of a dropped tensor: the {list(self.shape)} tensor"
        if taken is None:
            return what + " was dropped before"
        how, api, path, line = taken
        where = f" at {path}:{line}" if path else ""
        if api:
            return (f"{what} was taken by {api}{where}, which consumed it (burn takes it by "
                    f"value: pass a .clone() to keep this handle)")
        if how == "moved":
            return f"{what} was moved (.move()) into an op{where}"
        return f"{what} was dropped (drop()){where}"

    # -- creation ----------------------------------------------------------------------
    @classmethod
    def from_floats(cls, values, device) -> "Tensor":
        """A leaf holding ``values`` (nested lists); only the shape is kept."""
        return cls.zeros(_shape_of(values), device)

    @classmethod
    def zeros(cls, shape, device, options_first=False) -> "Tensor":
        shape = tuple(int(d) for d in shape)
        if any(d <= 0 for d in shape):
            raise UserError(f"invalid tensor shape {list(shape)}")
        _check_size(shape, device.sim)
        device.sim.timing.elementwise(math.prod(shape), device.backend)
        if device.backend.pool is None:
            device.sim.touched.touch_code("creation")   # from_data / random fill on the CPU
        backend = device.backend
        # burn-tensor's from_data: its TensorCreationOptions clone the device (an autodiff
        # device's boxed inner device), dropped once the tensor is built; burn-flex's
        # from_data builds the new FlexTensor's strides before its Arc<Bytes>
        device_box = device.device_box
        prim = backend.alloc(shape, created=True, device_box=device_box,
                             options_first=options_first)
        tensor = cls(device, shape, prim)
        if device_box:
            device.sim.heap.free(device_box, prim.device_box_block)
            prim.device_box_block = None
        return tensor

    ones = zeros

    @classmethod
    def random(cls, shape, device) -> "Tensor":
        """``Tensor::random``: as :meth:`zeros`, but burn-tensor resolves the creation
        options (the device's clone, its default dtype) before the backend makes the data,
        where ``from_data`` has built its ``TensorData`` first; every element is drawn
        from the backend's generator (``Timing.random_fill``)."""
        tensor = cls.zeros(shape, device, options_first=True)
        device.backend.launch_random(tensor.shape)
        device.sim.timing.random_fill(math.prod(tensor.shape), device.backend)
        return tensor

    @classmethod
    def from_inner(cls, tensor, device) -> "Tensor":
        """``Tensor::from_inner``: a plain tensor put on ``device`` (autodiff), a new leaf."""
        return cls(device, tensor.shape, tensor._alive().prim)

    def clone(self) -> "Tensor":
        """A new handle on the same buffer and node (its time: ``Timing.handle_clone``)."""
        if self.prim is None:
            self._alive()
        device = self.device
        device.sim.timing.handle_clone(device.backend, device.is_autodiff)
        return Tensor(device, self.shape, self.prim, self.node, self.rc)

    # -- autodiff state -------------------------------------------------------------------
    def is_autodiff(self) -> bool:
        return self.device.is_autodiff

    def is_tracked(self) -> bool:
        return self.node is not None and self.node.requirement != NONE

    def is_require_grad(self) -> bool:
        return self.node is not None and self.node.requirement == GRAD

    def require_grad(self) -> "Tensor":
        """Mark this leaf as requiring grad (registers a RootStep); returns self."""
        self._alive()
        if not self.device.is_autodiff:
            return self
        if self.node.requirement == GRAD:
            return self
        if self.node.requirement != NONE:
            # burn checks the requirement, not the order: an untracked op's output
            # (requirement None, order >= 1) becomes a leaf that requires grad
            raise BurnPanic("Can't convert a non leaf tensor into a tracked tensor")
        register_root(self)
        return self

    def set_require_grad(self, flag: bool) -> "Tensor":
        if flag:
            return self.require_grad()
        if not self.device.is_autodiff:
            return self
        return Tensor(self.device, self.shape, self.prim)

    def detach(self) -> "Tensor":
        """``detach`` as the policy defines it (burn: a new leaf keeping require_grad)."""
        self._alive()
        if not self.device.is_autodiff:
            return self.clone()
        return self.device.sim.policy.detach(self)

    def without_autodiff(self) -> "Tensor":
        """The same buffer on the inner device; the node is left behind, nobody is told."""
        self._alive()
        if not self.device.is_autodiff:
            return self.clone()
        if self.device.backend.handle_stride_bytes:
            _check_devices(self)   # Tensor::without_autodiff reads the tensor's device
        return self.rewrap(self.device.inner())

    inner = without_autodiff

    def rewrap(self, device, then=None) -> "Tensor":
        """A new handle for this handle's primitive on ``device`` (a new leaf there if it is
        an autodiff device), as burn's conversions (``detach``, ``without_autodiff``) build
        one. A moved handle (:meth:`move`) hands its inner tensor over, strides included;
        its node and ref count drop before the new handle is boxed, its box after
        (``then(new handle)``: what the backend does to the new tensor before it returns,
        before the box). A borrowed one stays as it is, and the new handle clones the
        inner tensor."""
        if not self.moved:
            out = Tensor(device, self.shape, self.prim)
            if then is not None:
                then(out)
            return out
        prim = self.prim
        if self._strides:
            # the primitive moves into the new handle with its Layout
            prim.strides, prim.strides_block = self._strides, self._strides_block
            self._strides, self._strides_block = 0, None
        out = Tensor(device, self.shape, prim, boxed=False)
        self._release_inner()
        self._release_autodiff()
        if then is not None:
            then(out)
        if device.is_autodiff:
            out.box()
        self.unbox()
        return out

    def autodiff(self) -> "Tensor":
        return Tensor.from_inner(self, self.device.autodiff())

    def backward(self) -> "Gradients":
        """Backward from this tensor (burn asserts it is tracked)."""
        self._alive()
        sim = self.device.sim
        if not self.is_tracked():
            raise BurnPanic("backward requires a tracked autodiff tensor")
        root = self.clone()
        grads = sim.client.backward(root)
        return Gradients(grads, self.device)

    def grad(self, grads: "Gradients"):
        """This leaf's gradient as a plain tensor (a clone of the one ``grads`` keeps: its
        own strides, the same storage), or None."""
        if self.node is None or self.node.requirement != GRAD:
            return None
        kept = grads.raw.get(self.node.id)
        if kept is None:
            return None
        return Tensor(self.device.inner(), self.shape, kept.prim)

    def into_scalar(self) -> float:
        """Read the value (a device sync point); the handle is consumed. Values are not
        simulated: returns 0.0.

        On burn-flex, ``into_data`` takes a uniquely held storage out of its ``Arc`` (the
        ``ArcInner`` freed first), the handle's strides, node, ref count and box go, and
        the data, turned into a ``Vec`` (its controller's box freed), goes last; a shared
        storage is read and the handle dropped as any other."""
        self._alive()
        device = self.device
        device.sim.block_on()
        device.sim.sync(device)
        data = self.prim
        pool = device.backend.pool
        if pool is None:
            device.sim.timing.read_scalar(device.backend)   # the CPU backend's into_data
        else:
            pool.read(data.nbytes)   # the read's staging buffer (cubecl-wgpu read_resources)
        if (device.backend.handle_stride_bytes and self.holds and data.holders == 1
                and device.backend.pool is None):
            device.backend.take_bytes(data)
        else:
            data = None
        self._release()
        del data           # the read data goes last
        return 0.0

    def dims(self):
        return list(self.shape)

    # -- ops ------------------------------------------------------------------------------
    def _op(self, name, others, out_shape):
        if self.prim is None:
            self._alive()
        device = self.device
        for other in others:
            if other.prim is None:
                other._alive()
            if other.device is device:
                continue      # the same device: nothing to reconcile
            if other.device.is_autodiff and not device.is_autodiff:
                device = other.device
            if other.device.is_autodiff and device.is_autodiff and \
                    other.device.checkpointing != device.checkpointing:
                raise BurnPanic("autodiff inputs with different checkpointing strategies")
        return float_op(OPS[name], (self, *others), out_shape, device)

    def _binary(self, name, other):
        if isinstance(other, (int, float)):
            return self._op(OPS[name].scalar_op, (), self.shape)
        shape = self.shape if self.shape == other.shape else _broadcast(self.shape, other.shape)
        if shape != self.shape and shape != other.shape:   # both broadcast: a new size
            _check_size(shape, self.device.sim)
        _check_devices(self, other)
        return self._op(name, (other,), shape)

    def __add__(self, other):
        return self._binary("add", other)

    __radd__ = __add__

    def __sub__(self, other):
        return self._binary("sub", other)

    def __mul__(self, other):
        return self._binary("mul", other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        return self._binary("div", other)

    def add(self, other):
        return self + other

    def sub(self, other):
        return self - other

    def mul(self, other):
        return self * other

    def div(self, other):
        return self / other

    def mul_scalar(self, value):
        return self._op("mul_scalar", (), self.shape)

    def add_scalar(self, value):
        return self._op("add_scalar", (), self.shape)

    def div_scalar(self, value):
        return self._op("div_scalar", (), self.shape)

    def matmul(self, other):
        if len(self.shape) < 2 or len(other.shape) < 2 or self.shape[-1] != other.shape[-2]:
            raise UserError(f"matmul shapes {list(self.shape)} x {list(other.shape)} do not match")
        batch = _broadcast(self.shape[:-2], other.shape[:-2])
        _check_size(batch + (self.shape[-2], other.shape[-1]), self.device.sim)
        _check_devices(self, other)   # TensorCheck::matmul reads both devices
        return self._op("matmul", (other,), batch + (self.shape[-2], other.shape[-1]))

    def sum(self):
        return self._op("sum", (), (1,))

    def mean(self):
        return self._op("mean", (), (1,))

    def relu(self):
        return self._op("relu", (), self.shape)

    def exp(self):
        return self._op("exp", (), self.shape)

    def log(self):
        return self._op("log", (), self.shape)

    def sqrt(self):
        return self._op("sqrt", (), self.shape)

    def square(self):
        """burn's ``square``: ``powi_scalar(2)``, one Mul of x by itself."""
        return self.powi_scalar(2)

    def powi_scalar(self, k: int):
        """Integer power as burn 0.22.1's dispatch routes it: k=2 is one Mul of x by itself."""
        if k == 1:
            return self.clone()
        if k == 0:
            return Tensor.ones(self.shape, self.device)
        if k == 2:
            # one pow call in PyTorch (PowBackward0), a Mul of x by a clone of itself in
            # burn's dispatch (the clone's cost is in the op's: not charged apart); burn
            # calls float_mul(x.clone(), x): the clone is the lhs
            other = Tensor(self.device, self.shape, self.prim, self.node, self.rc).move()
            with self.device.sim.timing.fused("pow"):
                return other._op("mul", (self,), self.shape)
        return self._op("powf_scalar", (), self.shape)

    def reshape(self, shape):
        shape = tuple(int(d) for d in shape)
        if math.prod(shape) != math.prod(self.shape):
            raise UserError(f"cannot reshape {list(self.shape)} to {list(shape)}")
        if self.device.backend.handle_stride_bytes:
            # burn-tensor's reshape: Shape::reshape (cubecl-zspace) pushes the new dims into
            # a Vec<usize> (capacity 4; a longer shape's reallocs are taken as one block of
            # the final capacity), freed once the Shape holds them
            heap = self.device.sim.heap
            cap = 1 << max(2, (len(shape) - 1).bit_length())
            heap.free(8 * cap, heap.alloc(8 * cap))
        return self._op("reshape", (), shape)

    def unsqueeze(self, dim=0):
        shape = list(self.shape)
        shape.insert(dim, 1)
        return self.reshape(shape)

    def __repr__(self):
        state = "dropped" if self.prim is None else (
            f"node={self.node.id}" if self.node is not None else "plain")
        return f"Tensor({list(self.shape)}, {self.device!r}, {state})"


def _check_devices(*tensors) -> None:
    """burn-tensor's operand checks (``TensorCheck::binary_ops_ew``) read each operand's
    ``device()``: an autodiff tensor's device is a new ``AutodiffDevice`` whose inner
    device is boxed (``layout.device_box_bytes``); the devices drop after the check, the
    last one first."""
    boxes = 0
    for t in tensors:
        if t.device.device_box:
            boxes += 1
            device = t.device
    if boxes:
        heap, nbytes = device.sim.heap, device.device_box
        if boxes == 2:   # a binary op's two devices (the hot path: no list of blocks)
            first = heap.alloc(nbytes)
            heap.free(nbytes, heap.alloc(nbytes))
            heap.free(nbytes, first)
            return
        blocks = []
        for _ in range(boxes):
            blocks.append(heap.alloc(nbytes))
        for block in reversed(blocks):
            heap.free(nbytes, block)


def _check_size(shape, sim) -> None:
    """A tensor of ``shape`` is refused if it has more elements than the run's limit
    (``Limits.max_tensor_elements``, ``--max-elements``): a mistyped shape would
    otherwise be simulated, and predict terabytes."""
    limit = sim.limits.max_tensor_elements
    count = math.prod(shape)
    if limit is not None and count > limit:
        raise LimitExceeded(f"tensor shape {list(shape)} has {count:.3g} elements, more than "
                            f"the limit of {limit:,} (raise --max-elements)")


def _broadcast(a, b):
    if a == b:
        return a
    if len(a) != len(b):
        if not a or not b:
            return tuple(a or b)
        raise UserError(f"shapes {list(a)} and {list(b)} have different ranks")
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise UserError(f"shapes {list(a)} and {list(b)} cannot broadcast")
        out.append(max(x, y))
    return tuple(out)


class Gradients:
    """What ``backward()`` returns: the server's container
    (:class:`sim.burn.runtime.server.Gradients`), which owns its blocks and the gradients."""

    __slots__ = ("device", "_container")

    def __init__(self, grads, device):
        self._container = grads
        self.device = device

    @property
    def raw(self):
        """Leaf id -> gradient (a plain tensor the container keeps)."""
        return self._container.grads

    def remove(self, tensor):
        """``grad_remove``: take the gradient of ``tensor`` out (a plain tensor: the one the
        container kept, its box freed) or None."""
        if tensor.node is None:
            return None
        return self._container.remove(tensor.node.id)

    def __len__(self):
        return len(self.raw)
