# Diagnostics of the train-validate block gap (branch blocks-investigation); see the commit message.
# Usage: tv_trace_parse.py ERR (PROBE_TRACE_GEN stderr); tv_kept_net.py ERR (PROBE_TRACE_KEPT stderr);
# PYTHONPATH=. python tv_trace_sim.py VARIANT; PYTHONPATH=. python tv_kept_sim.py VARIANT train|start
import sys, collections
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from alloc_trace import _Tracing
from sim.platform.heap import HeapTap
from sim.engine.simulation import Simulation
from sim.engine.profile import load_profile
from sim.burn.nn import Mlp
from sim.burn.optim import GradientsParams, Sgd
from sim.burn.tensor import Tensor

variant = sys.argv[1] if len(sys.argv) > 1 else "autodiff"
sim = Simulation(load_profile("linux-x86_64"), fast_forward=False)
flex = sim.device("flex"); device = flex.autodiff()
model = Mlp(128, 128, 128, device)
x = Tensor.random((32, 128), device)
optim = Sgd()
for step in range(3):
    loss = model.forward(x.clone()).powi_scalar(2).mean()
    grads = GradientsParams.from_grads(loss.backward(), model)
    del loss
    optim.step(1e-3, model, grads); del grads
net, dev = {"autodiff": (model, device), "valid-model": (model.valid(), device), "plain": (model.valid(), flex)}[variant]
z = Tensor.random((1, 128), dev)
for i in range(19):
    net.forward(z.clone()).sum().into_scalar()
# one sample op by op, whole-sample window; events tagged with the op
log = []
cur = ["?"]
class Tr(HeapTap):
    # a tap, not a swapped class: the heap's runs (pairs, alloc_run, free_run, nested)
    # then come one by one, as a swapped class's overrides would not see them
    __slots__ = ()
    def alloc(self, heap, n, align=0):
        if n > 0: log.append((cur[0], 1, n))
        return heap.untapped(heap.alloc, n, align)
    def free(self, heap, n, block=None):
        if n > 0: log.append((cur[0], -1, n))
        heap.untapped(heap.free, n, block)
    def alloc_many(self, heap, n, c):
        assert c <= 1 or n <= 0
        if c == 1:
            return self.alloc(heap, n)
        heap.untapped(heap.alloc_many, n, c)
    def free_many(self, heap, n, c):
        for _ in range(c): log.append((cur[0], -1, n))
        heap.untapped(heap.free_many, n, c)
    def realloc(self, heap, old, n, block):
        if old <= 0:
            return self.alloc(heap, n)      # a Vec's first block: an alloc
        return heap.untapped(heap.realloc, old, n, block)
    # a realloc of a block passed on unlogged and a transient run as one block through
    # the tap (HeapTap.transient), as the class this replaced saw them
previous, sim.heap.tap = sim.heap.tap, Tr()
def T(label, fn):
    cur[0] = label
    return fn()
h, o = net.layers[0], net.layers[2]
zc = T("z.clone", lambda: z.clone())
w = T("w1.val", lambda: h.weight.val())
a = T("matmul1", lambda: zc.matmul(w)); cur[0] = "matmul1"; del w, zc
bv = T("b1.val", lambda: h.bias.val())
br = T("reshape b1", lambda: bv.reshape((1, 128))); del bv
a = T("add1", lambda: a + br); del br
a = T("relu", lambda: a.relu())
w = T("w2.val", lambda: o.weight.val())
a = T("matmul2", lambda: a.matmul(w)); del w
bv = T("b2.val", lambda: o.bias.val())
br = T("reshape b2", lambda: bv.reshape((1, 128))); del bv
a = T("add2", lambda: a + br); del br
s = T("sum", lambda: a.sum()); del a
T("into_scalar", lambda: s.into_scalar()); del s
sim.heap.tap = previous
open_ = collections.defaultdict(list)  # size -> stack of op labels
pre = []
for op, sign, n in log:
    if sign > 0: open_[n].append(op)
    elif open_[n]: open_[n].pop()
    else: pre.append((op, n))
kept = collections.defaultdict(list)
for n, ops in open_.items():
    for op in ops: kept[op].append(n)
tn = tb = 0
for op in ["z.clone","w1.val","matmul1","b1.val","reshape b1","add1","relu","w2.val","matmul2","b2.val","reshape b2","add2","sum","into_scalar"]:
    k = sorted(kept.get(op, [])); tn += len(k); tb += sum(k)
    print(f"{op:12s} kept {len(k):2d} blk {sum(k):5d} B: {k}")
    print(f"{'':12s} events {' '.join(('+' if s>0 else '-')+str(n) for o,s,n in log if o==op)}")
print("TOTAL", tn, tb, "pre-existing frees", pre)
