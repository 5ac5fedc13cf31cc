"""alloc-trace: bytes and blocks a single op keeps, op by op (Linux probe `alloc-trace`, summary rows).

Protocol of `burn-probes alloc-trace` (experiments/probes, src/trace.rs): one
fresh process per case on flex.autodiff; steady-state cases run 1000 untraced
warm-up ops, then trace 12 consecutive ops one by one (x = op index). Per op the
probe reports the bytes and blocks allocated in the op's window and still live
when it closes (`kept_bytes`, `kept_blocks`) and the bytes it freed that were
allocated before (`freed_preexisting_bytes`). The per-allocation events are in
a separate trace file (alloc-trace-events.csv), not compared.

A free is matched with the allocation it frees where the allocator places blocks
one by one (the glibc arena of a Linux profile: every block has a handle, and a
free that names one made before the window frees a pre-existing block, as
`require_grad`'s replaced node and handle box do); a free that names no block
(or an allocator without handles: macOS small blocks) is matched with the latest
unmatched allocation of the same size made in the window. An unmatched free
counts as pre-existing, and the unmatched allocations are kept.
Allocation and free calls are counted as the probe counts them (a realloc is
one of each). Every case of the probe is replicated, the first tensor creation of a fresh
process (flex's lazy state, the device box) included.
"""

from typing import NamedTuple

from common import tiny_backward
from sim.platform.heap import HeapTap
from sim.burn.tensor import Tensor, drop

EXPERIMENT = "alloc-trace"
X_UNITS = {"alloc-trace": "op"}
SWEEP = False  # a replica of a Linux probe: run when named, not in the default sweep
VARIANTS = (
    "first-tensor-creation", "first-op-ever", "untracked-add", "tracked-add", "require-grad",
    "detach-leaf", "tracked-matmul", "tracked-relu", "tracked-sum", "tracked-mean",
    "tracked-mul_scalar", "tracked-powi_scalar", "unrelated-backward-first",
    "unrelated-backward-second", "unrelated-backward-after-100-untracked",
    "unrelated-backward-after-10000-untracked", "sgd-step", "train-step",
)
PARAMS = {"warmup": 1000, "reps": 12}


class _Tracing(HeapTap):
    """The heap's tap while an op is traced: logs (sign, size, count, handle) of every
    event (handle: the allocator's, or None where it has none) and passes it on. A tap,
    so that the heap's runs of events (``pairs``, ``alloc_run``, ``nested``...) come one
    by one, as the probe's allocator sees them."""

    __slots__ = ()
    log = []

    def alloc(self, heap, nbytes, align=0):
        handle = heap.untapped(heap.alloc, nbytes, align)
        if nbytes > 0:
            _Tracing.log.append((1, nbytes, 1, handle))
        return handle

    def realloc(self, heap, old_nbytes, nbytes, block):
        if old_nbytes <= 0:
            return self.alloc(heap, nbytes)     # a Vec's first block: an alloc
        handle = heap.untapped(heap.realloc, old_nbytes, nbytes, block)
        _Tracing.log.append((-1, old_nbytes, 1, block))
        if nbytes > 0:
            _Tracing.log.append((1, nbytes, 1, handle))
        return handle

    def free(self, heap, nbytes, block):
        if nbytes > 0:
            _Tracing.log.append((-1, nbytes, 1, block))
        heap.untapped(heap.free, nbytes, block)

    def alloc_many(self, heap, nbytes, count):
        if count == 1:
            self.alloc(heap, nbytes)
            return
        if nbytes > 0 and count > 1:
            _Tracing.log.append((1, nbytes, count, None))
        heap.untapped(heap.alloc_many, nbytes, count)

    def free_many(self, heap, nbytes, count):
        if nbytes > 0 and count > 0:
            _Tracing.log.append((-1, nbytes, count, None))
        heap.untapped(heap.free_many, nbytes, count)

    def transient(self, heap, nbytes, count):
        _Tracing.log += [(1, nbytes, count, None), (-1, nbytes, count, None)]
        heap.untapped(heap.transient, nbytes, count)


class Window(NamedTuple):
    """What one traced op did, as the probe's summary rows count it."""
    kept_bytes: int
    kept_blocks: int
    freed_preexisting_bytes: int
    alloc_calls: int     # allocations, a realloc counted as one (and as one free)
    free_calls: int


def traced(sim, op):
    """Run ``op()``; returns (its result, its :class:`Window`)."""
    _Tracing.log = []
    previous, sim.heap.tap = sim.heap.tap, _Tracing()
    try:
        result = op()
    finally:
        sim.heap.tap = previous
    open_allocs = {}    # size -> unmatched allocations in the window without a handle
    open_handles = {}   # handle -> sizes of the unmatched allocations in the window, oldest
    #                     first (a glibc arena's carve run may hand out a position again
    #                     while its earlier block lives on: sim.platform.ptmalloc)
    made = set()        # (handle, size) of every allocation in the window
    pre = 0
    for sign, size, count, handle in _Tracing.log:
        if sign > 0:
            if handle is not None:
                open_handles.setdefault(handle, []).append(size)
                made.add((handle, size))
            else:
                open_allocs[size] = open_allocs.get(size, 0) + count
        elif handle is not None and (handle, size) not in made:
            pre += size         # a named block made before the window
        elif handle is not None and size in open_handles.get(handle, ()):
            sizes = open_handles[handle]
            del sizes[len(sizes) - 1 - sizes[::-1].index(size)]
        else:
            # by size (a free naming a window block that an anonymous free of its size
            # took already frees another, as the arena does): the newest unmatched
            matched = min(count, open_allocs.get(size, 0))
            open_allocs[size] = open_allocs.get(size, 0) - matched
            rest = count - matched
            for h in [h for h, s in reversed(open_handles.items()) if size in s][:rest]:
                s = open_handles[h]
                del s[len(s) - 1 - s[::-1].index(size)]
                rest -= 1
            pre += rest * size
    kept = (sum(size * n for size, n in open_allocs.items())
            + sum(sum(s) for s in open_handles.values()))
    blocks = sum(open_allocs.values()) + sum(len(s) for s in open_handles.values())
    allocs = sum(count for sign, _, count, _ in _Tracing.log if sign > 0)
    return result, Window(kept, blocks, pre, allocs, sum(c for _, _, c, _ in _Tracing.log) - allocs)


def record(sim, k, window):
    for metric in ("kept_bytes", "kept_blocks", "alloc_calls", "free_calls",
                   "freed_preexisting_bytes"):
        sim.record(k, "op", metric, getattr(window, metric), phase="summary")


def run(sim, variant, warmup, reps):
    ad = sim.device("flex").autodiff()

    def t16(v):
        return Tensor.from_floats([v] * 16, ad)

    def m44(v):
        return Tensor.from_floats([[v] * 4] * 4, ad)

    def rep(op, drop_in_window=True):
        """The probe's `rep`: warm-up ops dropped, then `reps` traced ops."""
        sim.repeat(warmup, lambda: drop(op()))
        keep = []
        for k in range(1, reps + 1):
            out, window = traced(sim, (lambda: drop(op())) if drop_in_window else op)
            keep.append(out)
            record(sim, k, window)
        del keep

    if variant == "first-tensor-creation":
        t, window = traced(sim, lambda: t16(1.0))
        record(sim, 1, window)
        del t
    elif variant == "first-op-ever":
        a, b = t16(1.0), t16(2.0)
        for k in (1, 2):
            _, window = traced(sim, lambda: drop(a.clone() + b.clone()))
            record(sim, k, window)
    elif variant in ("untracked-add", "tracked-add"):
        a, b = t16(1.0), t16(2.0)
        if variant == "tracked-add":
            a.require_grad()
        rep(lambda: a.clone() + b.clone())
    elif variant == "require-grad":
        fresh = [t16(float(i)) for i in range(warmup + reps)]
        kept_alive = [fresh.pop().require_grad() for _ in range(warmup)]
        for k in range(1, reps + 1):
            t = fresh.pop()
            out, window = traced(sim, t.require_grad)
            kept_alive.append(out)
            record(sim, k, window)
            del t
    elif variant == "detach-leaf":
        p = t16(1.0).require_grad()
        rep(lambda: p.clone().move().detach(), drop_in_window=False)
    elif variant.startswith("tracked-"):
        m = m44(0.5).require_grad()
        b = m44(0.25)
        ops = {
            "tracked-matmul": lambda: m.clone().matmul(b.clone()),
            "tracked-relu": lambda: m.clone().relu(),
            "tracked-sum": lambda: m.clone().sum().reshape((1, 1)),
            "tracked-mean": lambda: m.clone().mean().reshape((1, 1)),
            "tracked-mul_scalar": lambda: m.clone().mul_scalar(2.0),
            "tracked-powi_scalar": lambda: m.clone().powi_scalar(2),
        }
        rep(ops[variant])
    elif variant in ("unrelated-backward-first", "unrelated-backward-second"):
        if variant.endswith("second"):
            tiny_backward(ad, probe=True)
        _, window = traced(sim, lambda: tiny_backward(ad, probe=True))
        record(sim, 1, window)
    elif variant.startswith("unrelated-backward-after-"):
        a, b = t16(1.0), t16(2.0)
        tiny_backward(ad, probe=True)
        sim.repeat(int(variant.split("-")[3]), lambda: drop(a.clone() + b.clone()))
        for k in (1, 2) if variant.endswith("10000-untracked") else (1,):
            _, window = traced(sim, lambda: tiny_backward(ad, probe=True))
            record(sim, k, window)
    elif variant in ("sgd-step", "train-step"):
        train_steps(sim, ad, reps, full=variant == "train-step")
    yield sim.tick()


def train_steps(sim, ad, reps, full):
    """The probe's ``sgd-step`` and ``train-step``: ``Linear(512, 512)``, x ``[64, 512]``,
    SGD (lr 1e-3); 3 untraced steps, then ``reps`` traced ones: the whole step
    (``train-step``: forward, ``powi_scalar(2).mean()``, backward,
    ``GradientsParams::from_grads``, ``optim.step``; the loss drops as the step returns)
    or only ``optim.step`` (``sgd-step``: the gradients made untraced, the loss dropped
    after the window)."""
    from sim.burn.nn import Linear
    from sim.burn.optim import GradientsParams, Sgd

    x = Tensor.random((64, 512), ad)
    state = {"model": Linear(512, 512, ad)}
    optim = Sgd(sim)

    def loss_of(model):
        return model.forward(x.clone().move()).move().powi_scalar(2).move().mean()

    def step():
        model = state.pop("model")
        loss = loss_of(model)
        grads = GradientsParams.from_grads(loss.backward(), model)
        out = optim.step(1e-3, model, grads)
        del grads, loss
        return out

    for k in range(3 + reps):
        if full:
            if k < 3:
                state["model"] = step()
                continue
            state["model"], window = traced(sim, step)
        else:
            model = state.pop("model")
            loss = loss_of(model)
            grads = GradientsParams.from_grads(loss.backward(), model)
            if k < 3:
                state["model"] = optim.step(1e-3, model, grads)
            else:
                state["model"], window = traced(sim, lambda: optim.step(1e-3, model, grads))
            del grads, loss, model
            if k < 3:
                continue
        record(sim, k - 2, window)
