"""train-validate: a training loop with periodic validation, then sample generation, on one autodiff device.

The "outside the training step" case of seeds/000: every training step ends with
a backward, whose orphan sweep frees what the step left behind; validation
forwards and sample generation on the autodiff device with the trainable model
record tracked ops (the parameters require grad) that no backward consumes.
Variants: validation and generation with the autodiff model (`autodiff`), with
`model.valid()` and an autodiff input (`valid-model`: untracked ops, one new
graph each), or fully off autodiff (`plain`). Reported every `report_every`
steps or samples: host heap growth since the start (bytes and blocks), mean ms per
step, and the process's RSS (the Linux probe `train-validate` measures the same).
"""

from sim.burn.nn import Mlp
from sim.burn.optim import GradientsParams, Sgd
from sim.burn.tensor import Tensor

from common import ProbeSink, event_steps, rss_bytes_paged

EXPERIMENT = "train-validate"
X_UNITS = {"train-validate": {"train": "step", "generate": "samples"}}
VARIANTS = ("autodiff", "valid-model", "plain")
PARAMS = {"steps": 200, "validate_every": 50, "val_batches": 20, "samples": 400,
          "report_every": 50, "batch": 32, "features": 128, "sink": "auto"}
CHOICES = {"sink": ProbeSink.CHOICES}
#: the probe's `--quick` run (tv.rs: every count divided by 10)
QUICK = {"steps": 20, "validate_every": 5, "val_batches": 2, "samples": 40, "report_every": 5}
#: the probe's note of each variant (burn-probes tv.rs variant_note)
VARIANT_NOTES = {
    "autodiff": "validation and generation with the trainable model itself and inputs on "
                "flex.autodiff",
    "valid-model": "validation and generation with model.valid() and inputs on "
                   "flex.autodiff",
    "plain": "validation and generation with model.valid() and inputs on plain "
             "Device::flex()",
}


def run(sim, variant, steps, validate_every, val_batches, samples, report_every, batch, features,
        sink="auto"):
    flex = sim.device("flex")
    device = flex.autodiff()
    model = Mlp(features, features, features, device)
    x = Tensor.random((batch, features), device)
    optim = Sgd(sim)
    heap0, blocks0 = sim.heap.live_bytes, sim.heap.live_blocks
    last = [sim.now_ns, 0, False]

    rows = ProbeSink.for_run(sim, sink, EXPERIMENT, variant)

    def report(x_value, unit, count):
        sim.timing.clock_read()     # the window's one read of the probe's clock (tv.rs: elapsed)
        ms = (sim.now_ns - last[0]) / max(count - last[1], 1) / 1e6
        last[0], last[1] = sim.now_ns, count
        kib, blocks, rss = ((sim.heap.live_bytes - heap0) / 1024,
                            sim.heap.live_blocks - blocks0, rss_bytes_paged(sim))
        sim.sample(x_value, unit, phase=phase, host_heap_delta=round(kib, 3),
                   heap_blocks_delta=blocks, ms_per_step=round(ms, 6), rss_bytes=rss)
        if rows is not None:
            # the probe's report (tv.rs): the two values and the first note made first,
            # four rows, then those strings dropped
            first = not last[2]
            last[2] = True
            values = rows.formatted(kib, 3), rows.formatted(ms, 4)
            note = (f"burn Flex+autodiff (no simd/rayon); fresh process per variant; "
                    f"{VARIANT_NOTES[variant]}; host_heap_delta = live heap now minus after "
                    "the model, input and optimizer were created (counting allocator, KiB = "
                    "1024 B; tensor data is host heap on Flex); ms_per_step = wall time since "
                    "the previous report / steps or samples since it (the first generate "
                    "report's time runs from the last train report)") if first else ""
            note_block = rows.heap.alloc(len(note)) if note else None
            rows.row(x_value, "host_heap_delta", values[0][0], "KiB", note, x_unit=unit,
                     phase=phase)
            rows.row(x_value, "heap_blocks_delta", blocks, "blocks", x_unit=unit, phase=phase)
            rows.row(x_value, "ms_per_step", values[1][0], "ms", x_unit=unit, phase=phase)
            rows.row(x_value, "rss_bytes", rss, "B", "process RSS" if first else "",
                     x_unit=unit, phase=phase)
            for value in values:
                rows.drop(value)
            if note:
                # made inside alloc::exclude, but the probe drops it as report() returns,
                # outside: its free is counted (the probe's heap rows after the first
                # report are one block and the note's bytes below the live heap)
                sim.heap.free(len(note), note_block)
        sim.timing.report_wake()    # what the report leaves the next window (its timer restarted)

    def evaluator():
        if variant == "autodiff":
            return model, device
        if variant == "valid-model":
            return model.valid(), device
        return model.valid(), flex

    def train_step():
        loss = model.forward(x.clone()).powi_scalar(2).mean()
        grads = GradientsParams.from_grads(loss.backward(), model)
        del loss
        optim.step(1e-3, model, grads)

    phase = "train"
    step = 0
    for event in event_steps(steps, validate_every, report_every):
        # the training steps between two events are loop iterations: fast-forwarded when identical
        sim.repeat(event - step, train_step)
        step = event
        if step % validate_every == 0:
            net, input_device = evaluator()
            xv = Tensor.random((batch, features), input_device)
            # the validation batches are loop iterations too
            sim.repeat(val_batches, lambda: net.forward(xv.clone()).sum().into_scalar())
            del net, xv
        if step % report_every == 0:
            report(step, "step", step)
        yield sim.tick()

    phase = "generate"
    last[1] = 0
    net, input_device = evaluator()
    z = Tensor.random((1, features), input_device)
    done = 0
    for i in event_steps(samples, report_every):
        # the samples up to the next report: loop iterations (fast-forwarded when identical)
        sim.repeat(i - done, lambda: net.forward(z.clone()).sum().into_scalar())
        done = i
        if i % report_every == 0:
            report(i, "samples", i)
            yield sim.tick()
