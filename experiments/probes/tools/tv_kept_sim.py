# Diagnostics of the train-validate block gap (branch blocks-investigation); see the commit message.
# Usage: tv_trace_parse.py ERR (PROBE_TRACE_GEN stderr); tv_kept_net.py ERR (PROBE_TRACE_KEPT stderr);
# PYTHONPATH=. python tv_trace_sim.py VARIANT; PYTHONPATH=. python tv_kept_sim.py VARIANT train|start
"""Simulated train-validate: blocks allocated and still live from heap0 to the first train report
(train) or from the last train report to the first generate sample (start), by size (LIFO matching)."""
import sys, collections
from sim.platform.heap import Heap
from sim.engine.simulation import Simulation
from sim.engine.profile import load_profile
from sim.burn.nn import Mlp
from sim.burn.optim import GradientsParams, Sgd
from sim.burn.tensor import Tensor

variant, window = sys.argv[1], sys.argv[2]
log = []
on = [False]
class Tr(Heap):
    __slots__ = ()
    def alloc(self, n, align=0):
        if on[0] and n > 0: log.append((1, n))
        return Heap.alloc(self, n, align)
    def free(self, n, block=None):
        if on[0] and n > 0: log.append((-1, n))
        Heap.free(self, n, block)
    def alloc_many(self, n, c):
        if on[0]:
            for _ in range(c): log.append((1, n))
        Heap.alloc_many(self, n, c)
    def free_many(self, n, c):
        if on[0]:
            for _ in range(c): log.append((-1, n))
        Heap.free_many(self, n, c)
for name in ("alloc", "free", "alloc_many", "free_many"):
    setattr(Tr, "_orig_" + name, getattr(Heap, name))
_a, _f, _am, _fm = Heap.alloc, Heap.free, Heap.alloc_many, Heap.free_many
def alloc(self, n, align=0):
    if on[0] and n > 0: log.append((1, n))
    return _a(self, n, align)
def free(self, n, block=None):
    if on[0] and n > 0: log.append((-1, n))
    _f(self, n, block)
def alloc_many(self, n, c):
    if on[0] and c > 1:
        for _ in range(c): log.append((1, n))
    _am(self, n, c)
def free_many(self, n, c):
    if on[0]:
        for _ in range(c): log.append((-1, n))
    _fm(self, n, c)
Heap.alloc, Heap.free, Heap.alloc_many, Heap.free_many = alloc, free, alloc_many, free_many
sim = Simulation(load_profile("linux-x86_64"), fast_forward=False)
flex = sim.device("flex"); device = flex.autodiff()
model = Mlp(128, 128, 128, device)
x = Tensor.random((32, 128), device)
optim = Sgd()
def evaluator():
    if variant == "autodiff": return model, device
    if variant == "valid-model": return model.valid(), device
    return model.valid(), flex
b0 = sim.heap.live_blocks
on[0] = window == "train"
for step in range(1, 201):
    loss = model.forward(x.clone()).powi_scalar(2).mean()
    grads = GradientsParams.from_grads(loss.backward(), model)
    del loss
    optim.step(1e-3, model, grads); del grads
    if step % 50 == 0:
        net, dev = evaluator()
        xv = Tensor.random((32, 128), dev)
        for _ in range(20):
            net.forward(xv.clone()).sum().into_scalar()
        del net, xv
        if step == 50 and window == "train":
            on[0] = False; print("blocks delta at train report", sim.heap.live_blocks - b0); break
if window == "start":
    on[0] = True
    net, dev = evaluator()
    z = Tensor.random((1, 128), dev)
    on[0] = False
open_ = collections.defaultdict(int); pre = collections.Counter()
for s, n in log:
    if s > 0: open_[n] += 1
    elif open_[n]: open_[n] -= 1
    else: pre[n] += 1
kept = {n: c for n, c in sorted(open_.items()) if c}
print("kept", sum(kept.values()), kept)
print("pre-existing frees", sum(pre.values()), dict(pre))
