"""Simulator side of the train-validate probe's PROBE_PARTS lines: RSS, resident text, heap and gemm slab after the same parts (first validation only).
Usage: PYTHONPATH=. python experiments/probes/tools/tv_parts_sim.py [autodiff|valid-model|plain] [PROFILE]
(PROFILE: linux-x86_64 unless given, e.g. amd-epyc-zen4, the host of the s54/s55 parts)
(heapres includes the 2 MiB slab MemBuffer, which "extra" takes back out of RSS)."""
import sys
from sim.engine.profile import load_profile
from sim.engine.simulation import Simulation
from sim.burn.nn import Mlp
from sim.burn.optim import GradientsParams, Sgd
from sim.burn.tensor import Tensor
variant = sys.argv[1] if len(sys.argv) > 1 else "autodiff"
prof = load_profile(sys.argv[2] if len(sys.argv) > 2 else "linux-x86_64")
sim = Simulation(prof, experiment="train-validate", variant=variant, fast_forward=False)
base = prof.process.baseline_rss_bytes
def pt(name):
    t = sim.touched
    slab = sum(t.buffers.values())
    print(f"{name:<22} rss {sim.rss_bytes()/1024:9.1f}  text {t.text_bytes()/1024:8.1f}  heapres {sim.allocator.resident_bytes()/1024:8.1f}  slab {slab/1024:6.1f}  extra {sim.rss_extra_bytes/1024:7.1f}  live {sim.heap.live_bytes/1024:8.1f}  paths {sorted(t.paths)}")
pt("start")
flex = sim.device("flex"); device = flex.autodiff(); pt("device")
model = Mlp(128,128,128, device); pt("model")
x = Tensor.random((32,128), device); optim = Sgd(sim); pt("setup")  # Sgd(sim): as train_validate.py
def evaluator():
    if variant == "autodiff": return model, device
    if variant == "valid-model": return model.valid(), device
    return model.valid(), flex
for step in range(1, 51):
    out = model.forward(x.clone())
    if step == 1: pt("1 forward")
    loss = out.powi_scalar(2).mean(); del out
    grads = GradientsParams.from_grads(loss.backward(), model)
    if step == 1: pt("1 backward")
    del loss
    optim.step(1e-3, model, grads)
    del grads
    if step == 1: pt("1 sgd")
pt("50 train")
net, dev = evaluator()
xv = Tensor.random((32,128), dev)
for i in range(20):
    net.forward(xv.clone()).sum().into_scalar()
    if i == 0: pt("val 1")
del net, xv
pt("50 validated")
