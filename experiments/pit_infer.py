"""pit-infer: a 2-layer MLP doing 100 forwards on Metal, never backwarded (groups A, B, C).

Port of exp-burn/pb-pit `mem` (seeds/000, "有参数的模型"): Linear(512,512) -> Relu
-> Linear(512,512) with lazily initialised weights, input [256,512]; each forward
reads y.sum().into_scalar() and drops everything. Groups in sequence in one
process: A model and input on metal.autodiff; B model.valid() with the input on
autodiff; C valid model and input on plain metal. Reports after every 50
forwards: GPU pool bytes in use and host heap growth since the group's start.
"""

from sim.burn.nn import Mlp
from sim.burn.tensor import Tensor

from common import ProbeSink, event_steps, pit_groups, rss_bytes_paged

EXPERIMENT = "pit-infer"
X_UNITS = {"pit-infer": "forwards"}
VARIANTS = ("build", "A-model-and-input-autodiff", "B-valid-model-input-autodiff",
            "C-valid-model-input-plain")
PARAMS = {"forwards": 100, "report_every": 50, "batch": 256, "features": 512, "device": "metal"}

MiB = 1024 * 1024


#: the Linux probe's notes (pit.rs): each group's, and the first report's
NOTES = {
    "A-model-and-input-autodiff": "model and input on flex.autodiff; includes saved "
    "activations (tensor data lives on the host heap on Flex)",
    "B-valid-model-input-autodiff": "model.valid() (params off autodiff), input still on "
    "flex.autodiff",
    "C-valid-model-input-plain": "valid model, input on plain Device::flex()",
}
BUILD_NOTE = ("host heap growth from building the model on Device::flex().autodiff() (weights "
              "lazily initialised); on Flex tensor data is host heap, there is no GPU pool")


def run(sim, variant, forwards, report_every, batch, features, device="metal", sink="print"):
    # device "flex" is the Linux probe's protocol (pit_infer_flex.py): no GPU pool, the
    # tensor data is host heap; it also reports blocks, RSS and time per forward, and
    # keeps its rows in memory (sink: the probe's CSV sink on a Linux profile)
    heap0, blocks0 = sim.heap.live_bytes, sim.heap.live_blocks
    gpu = sim.device(device)
    ad = gpu.autodiff()
    model = Mlp(features, features, features, ad)
    rows = ProbeSink.for_run(sim, sink, "pit-infer-flex", "build") if device == "flex" else None

    def report(group, x, since, since_blocks=None, ms=None):
        if group == variant:
            metrics = {"host_heap_delta": round((sim.heap.live_bytes - since) / 1024, 3)}
            if device == "metal":
                in_use, reserved = gpu.memory_pool_usage()
                metrics["gpu_in_use"] = round(in_use / MiB, 4)
                # not printed by the seed: what the pool model predicts it holds
                metrics["gpu_reserved"] = round(reserved / MiB, 4)
            else:
                metrics["heap_blocks_delta"] = sim.heap.live_blocks - (
                    blocks0 if since_blocks is None else since_blocks)
                if ms is not None:
                    rss = rss_bytes_paged(sim)
                    metrics.update(rss=round(rss / 1e6, 3), rss_bytes=rss, ms_per_step=round(ms, 6))
            sim.sample(x, "forwards", **metrics)

    report("build", 0, heap0)
    if rows is not None:
        rows.row(0, "host_heap_delta", (sim.heap.live_bytes - heap0) / 1024, "KiB",
                 BUILD_NOTE, digits=1, x_unit="forwards")
        rows.row(0, "heap_blocks_delta", sim.heap.live_blocks - blocks0, "blocks",
                 x_unit="forwards")
    if variant == "build":
        return

    def probe_rows(group, i, start, start_blocks, ms):
        """pit.rs's report: the snapshot (taken by ``report``), /proc/self/statm read, the
        first report's note formatted, five rows, the note dropped."""
        heap = sim.heap
        rows.variant = group
        delta, blocks = heap.live_bytes - start, heap.live_blocks - start_blocks
        rows.read_rss()
        rss = rss_bytes_paged(sim)
        first = i == report_every
        note = (f"host heap growth relative to the start of group {group[0]} (after its input "
                f"was created); {NOTES.get(group, '')}") if first else ""
        # format!'s capacity: twice its literal pieces (48 + 32 B), grown once by the note
        note_block = rows.format_note(len(note), 48 + 32) if first else None
        rows.row(i, "host_heap_delta", delta / 1024, "KiB", note, digits=1, x_unit="forwards")
        rows.row(i, "heap_blocks_delta", blocks, "blocks", x_unit="forwards")
        rows.row(i, "rss", rss / 1e6, "MB", "process RSS, MB = bytes/1e6" if first else "",
                 digits=3, x_unit="forwards")
        rows.row(i, "rss_bytes", rss, "B", x_unit="forwards")
        rows.row(i, "ms_per_step", ms, "ms", "mean per forward since the previous row"
                 if first else "", digits=3, x_unit="forwards")
        if note_block is not None:
            rows.drop_note(note_block)

    def infer(group, net, input_device):
        x = Tensor.random((batch, features), input_device)
        start, start_blocks = sim.heap.live_bytes, sim.heap.live_blocks
        t0, last = sim.now_ns, 0

        def forward():
            y = net.forward(x.clone())
            y.sum().into_scalar()
            del y

        for i in event_steps(forwards, report_every):
            # the forwards up to the next report: loop iterations (fast-forwarded when
            # identical)
            sim.repeat(i - last, forward)
            if i % report_every == 0:
                sim.timing.clock_read()     # the window's one read of the probe's clock
                ms = (sim.now_ns - t0) / (i - last) / 1e6
                report(group, i, start, start_blocks, ms)
                if rows is not None:
                    probe_rows(group, i, start, start_blocks, ms)
                t0, last = sim.now_ns, i
                sim.timing.report_wake()    # what the report leaves the next window (pit.rs)
        yield sim.tick()

    yield from pit_groups(infer, model, ad, gpu, variant)
