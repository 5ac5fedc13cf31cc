"""pit-infer: a 2-layer MLP doing 100 forwards on Metal, never backwarded (groups A, B, C).

Port of exp-burn/pb-pit `mem` (seeds/000, "有参数的模型"): Linear(512,512) -> Relu
-> Linear(512,512) with lazily initialised weights, input [256,512]; each forward
reads y.sum().into_scalar() and drops everything. Groups in sequence in one
process: A model and input on metal.autodiff; B model.valid() with the input on
autodiff; C valid model and input on plain metal. Reports after every 50
forwards: GPU pool bytes in use and host heap growth since the group's start.
"""

from sim.nn import Mlp
from sim.tensor import Tensor

from common import rss_bytes_paged

EXPERIMENT = "pit-infer"
VARIANTS = ("build", "A-model-and-input-autodiff", "B-valid-model-input-autodiff",
            "C-valid-model-input-plain")
PARAMS = {"forwards": 100, "report_every": 50, "batch": 256, "features": 512, "device": "metal"}

MiB = 1024 * 1024


def run(sim, variant, forwards, report_every, batch, features, device="metal"):
    # device "flex" is the Linux probe's protocol (pit_infer_flex.py): no GPU pool, the
    # tensor data is host heap; it also reports blocks, RSS and time per forward
    heap0, blocks0 = sim.heap.live_bytes, sim.heap.live_blocks
    gpu = sim.device(device)
    ad = gpu.autodiff()
    model = Mlp(features, features, features, ad)

    def report(group, x, since, since_blocks=None, ms=None):
        if group == variant:
            metrics = {"host_heap_delta": round((sim.heap.live_bytes - since) / 1024, 3)}
            if device == "metal":
                in_use, _ = gpu.memory_pool_usage()
                metrics["gpu_in_use"] = round(in_use / MiB, 4)
            else:
                metrics["heap_blocks_delta"] = sim.heap.live_blocks - (
                    blocks0 if since_blocks is None else since_blocks)
                if ms is not None:
                    rss = rss_bytes_paged(sim)
                    metrics.update(rss=round(rss / 1e6, 3), rss_bytes=rss, ms_per_step=round(ms, 6))
            sim.sample(x, "forwards", **metrics)

    report("build", 0, heap0)
    if variant == "build":
        return

    def infer(group, net, input_device):
        x = Tensor.random((batch, features), input_device)
        start, start_blocks = sim.heap.live_bytes, sim.heap.live_blocks
        t0, last = sim.now_ns, 0
        for i in range(1, forwards + 1):
            y = net.forward(x.clone())
            y.sum().into_scalar()
            del y
            if i % report_every == 0:
                report(group, i, start, start_blocks, (sim.now_ns - t0) / (i - last) / 1e6)
                t0, last = sim.now_ns, i
        yield sim.tick()

    yield from infer("A-model-and-input-autodiff", model, ad)
    if variant == "A-model-and-input-autodiff":
        return
    valid = model.valid()
    yield from infer("B-valid-model-input-autodiff", valid, ad)
    if variant == "B-valid-model-input-autodiff":
        return
    yield from infer("C-valid-model-input-plain", valid, gpu)
