"""alloc-trace: bytes and blocks a single op keeps, op by op (Linux probe `alloc-trace`, summary rows).

Protocol of `burn-probes alloc-trace` (experiments/probes, src/trace.rs): one
fresh process per case on flex.autodiff; steady-state cases run 1000 untraced
warm-up ops, then trace 12 consecutive ops one by one (x = op index). Per op the
probe reports the bytes and blocks allocated in the op's window and still live
when it closes (`kept_bytes`, `kept_blocks`) and the bytes it freed that were
allocated before (`freed_preexisting_bytes`). The per-allocation events are in
a separate trace file (alloc-trace-events.csv), not compared.

The simulated heap has no addresses: within an op's window a free is matched
with the latest unmatched allocation of the same size made in the window, an
unmatched free counts as pre-existing, and the unmatched allocations are kept.
Allocation and free CALL counts are not predicted: the model allocates what an
op keeps, not its transient temporaries. Cases the model cannot express
(first tensor creation, the optimizer steps, backwards after many untracked
ops, whose transient clone of the locator map the probe sees as pre-existing
frees) have no predicted rows.
"""

from common import tiny_backward
from sim.costs.heap import Heap
from sim.tensor import Tensor, drop

EXPERIMENT = "alloc-trace"
SWEEP = False  # a replica of a Linux probe: run when named, not in the default sweep
VARIANTS = (
    "first-tensor-creation", "first-op-ever", "untracked-add", "tracked-add", "require-grad",
    "detach-leaf", "tracked-matmul", "tracked-relu", "tracked-sum", "tracked-mean",
    "tracked-mul_scalar", "tracked-powi_scalar", "unrelated-backward-first",
    "unrelated-backward-second", "unrelated-backward-after-100-untracked",
    "unrelated-backward-after-10000-untracked", "sgd-step", "train-step",
)
PARAMS = {"warmup": 1000, "reps": 12}


class _Tracing(Heap):
    """The heap, logging (sign, size) of every event while an op is traced."""

    __slots__ = ()
    log = []

    def alloc(self, nbytes, align=0):
        if nbytes > 0:
            _Tracing.log.append((1, nbytes, 1))
        return Heap.alloc(self, nbytes, align)

    def realloc(self, old_nbytes, nbytes, block=None):
        if old_nbytes <= 0:
            return self.alloc(nbytes)       # a Vec's first block: an alloc
        _Tracing.log.append((-1, old_nbytes, 1))
        if nbytes > 0:
            _Tracing.log.append((1, nbytes, 1))
        return Heap.realloc(self, old_nbytes, nbytes, block)

    def free(self, nbytes, block=None):
        if nbytes > 0:
            _Tracing.log.append((-1, nbytes, 1))
        Heap.free(self, nbytes, block)

    def alloc_many(self, nbytes, count):
        if nbytes > 0 and count > 1:  # count == 1 goes through self.alloc
            _Tracing.log.append((1, nbytes, count))
        Heap.alloc_many(self, nbytes, count)

    def free_many(self, nbytes, count):
        if nbytes > 0 and count > 0:
            _Tracing.log.append((-1, nbytes, count))
        Heap.free_many(self, nbytes, count)


def traced(sim, op):
    """Run ``op()``; returns (its result, kept bytes, kept blocks, freed pre-existing bytes)."""
    _Tracing.log = []
    sim.heap.__class__ = _Tracing
    try:
        result = op()
    finally:
        sim.heap.__class__ = Heap
    open_allocs = {}  # size -> unmatched allocations in the window
    pre = 0
    for sign, size, count in _Tracing.log:
        if sign > 0:
            open_allocs[size] = open_allocs.get(size, 0) + count
        else:
            matched = min(count, open_allocs.get(size, 0))
            open_allocs[size] = open_allocs.get(size, 0) - matched
            pre += (count - matched) * size
    kept = sum(size * n for size, n in open_allocs.items())
    blocks = sum(open_allocs.values())
    return result, kept, blocks, pre


def record(sim, k, kept, blocks, pre):
    for metric, value in (("kept_bytes", kept), ("kept_blocks", blocks),
                          ("freed_preexisting_bytes", pre)):
        sim.record(k, "op", metric, value, phase="summary")


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
            out, kept, blocks, pre = traced(sim, (lambda: drop(op())) if drop_in_window else op)
            keep.append(out)
            record(sim, k, kept, blocks, pre)
        del keep

    if variant == "first-op-ever":
        a, b = t16(1.0), t16(2.0)
        for k in (1, 2):
            _, kept, blocks, pre = traced(sim, lambda: drop(a.clone() + b.clone()))
            record(sim, k, kept, blocks, pre)
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
            out, kept, blocks, pre = traced(sim, t.require_grad)
            kept_alive.append(out)
            record(sim, k, kept, blocks, pre)
            del t
    elif variant == "detach-leaf":
        p = t16(1.0).require_grad()
        rep(lambda: p.clone().detach(), drop_in_window=False)
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
            tiny_backward(ad)
        _, kept, blocks, pre = traced(sim, lambda: tiny_backward(ad))
        record(sim, 1, kept, blocks, pre)
    # other cases: not predicted (see the module doc)
    yield sim.tick()
