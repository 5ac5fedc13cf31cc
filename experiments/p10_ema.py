"""p10-ema: an EMA of a Linear's weight kept across 2000 SGD steps (detach vs without_autodiff).

Port of pita-t p10 (seeds/002): Linear(512,512), input [64,512], SGD lr 1e-3,
each step `ema = ema * 0.99 + snapshot(w) * 0.01` after the optimizer step.
Modes: detach (snapshot = w.detach(), kept: a tracked chain), target (the EMA
also enters the loss; the second backward panics), without / target-without
(snapshot = w.without_autodiff()), log (a detached norm read each step, not
kept), ema-only (the update alone). Each printed ms/step is the mean over the
steps since the previous print; rss_delta is relative to the mode's start.
`report_at` lists the steps it prints at, each in 1..steps (the last step is always
printed); the default, the probe's schedule for 2000 steps, is cut at a shorter run.
Under the `pytorch` policy the same program gives the experiment p10-ema-pytorch.
`--set optimizer=adam` trains with burn's Adam (default config) instead of SGD: the
experiment p10-ema-adam (experiments/p10_ema_adam.py replicates its Linux probe).
`sink` is how the program reports: `print` (the seed program prints its lines: nothing
kept), `probe` (the Linux probe's CSV sink keeps every row in memory:
common.ProbeSink), `auto` (probe on a Linux profile, the platform the probe measured).
"""

from sim.burn.nn import Linear
from sim.burn.optim import OPTIMIZERS, GradientsParams
from sim.errors import UserError
from sim.burn.tensor import Tensor

from common import ProbeSink, rss_bytes_paged

EXPERIMENT = "p10-ema"
MEASURED = ("p10-ema", "p10-ema-pytorch")
X_UNITS = {"p10-ema": "step", "p10-ema-pytorch": "step"}
# log-no-ema: the Linux probe's log mode, which creates no ema (the seed's log most likely
# kept the one its program creates before the loop for every mode)
VARIANTS = ("detach", "target", "without", "target-without", "log", "ema-only", "log-no-ema")
PARAMS = {"steps": 2000, "batch": 64, "features": 512, "lr": 1e-3,
          "report_at": "1,50,100,200,500,1000,2000", "optimizer": "sgd", "sink": "auto"}
POSITIVE = ("steps", "batch", "features", "lr")
CHOICES = {"optimizer": tuple(OPTIMIZERS), "sink": ProbeSink.CHOICES}
#: the probe's `--quick` run (ema.rs run_mode: 200 steps, its report points up to them)
QUICK = {"steps": 200}
#: the probe's note of each mode (burn-probes ema.rs mode_note), in its first row's note
MODE_NOTES = {
    "detach": "ema = ema*0.99 + w.detach()*0.01 kept across steps",
    "target": "ema (w.detach() snapshots) enters the loss as a target network: "
              "(out - x.matmul(ema))^2 mean",
    "without": "snapshot = w.without_autodiff()",
    "target-without": "snapshot = w.without_autodiff(); ema enters the loss as a target "
                      "network",
    "log-no-ema": "each step the norm of w.detach() is read with into_scalar() and not "
                  "kept; no ema",
    "ema-only": "the detach EMA update alone without forward/backward/optimizer",
}
#: what the probe appends to every note of an Adam run (ema.rs Optim::note)
ADAM_NOTE = ("optimizer Adam with burn's default config (AdamConfig::new().init(): beta_1 "
             "0.9, beta_2 0.999, epsilon 1e-5, no amsgrad, weight decay or clipping), lr 1e-3")

MiB = 1024 * 1024


def report_steps(report_at, steps, clip=False):
    """The steps a run of ``steps`` steps reports at, ascending: the comma-separated step
    numbers of ``report_at``, and always the last step.

    Each must be in 1..steps; with ``clip`` the ones beyond ``steps`` are left out instead
    (a schedule made for a longer run). Anything else -- no step numbers at all, one that
    is not an integer, one < 1 or (without ``clip``) one > ``steps`` -- is a UserError
    naming the value and the valid range.

    >>> report_steps("1,50, 20", 60), report_steps("1,50,100", 60, clip=True)
    ([1, 20, 50, 60], [1, 50, 60])
    >>> report_steps("1,100", 60)
    Traceback (most recent call last):
    sim.errors.UserError: --set report_at=1,100: step 100 is outside 1..60 (steps=60)
    """
    text = str(report_at)
    try:
        wanted = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"--set report_at={text}: expected comma-separated step numbers "
                        f"in 1..{steps}") from None
    if not wanted:
        raise UserError(f"--set report_at={text}: expected at least one step number "
                        f"in 1..{steps}")
    for step in wanted:
        if step < 1 or (step > steps and not clip):
            raise UserError(f"--set report_at={text}: step {step} is outside 1..{steps} "
                            f"(steps={steps})")
    return sorted({s for s in wanted if s <= steps} | {steps})


def _reports(report_at, steps):
    """The steps a run reports at; the default schedule, the probe's for its 2000 steps,
    is cut at a shorter run, a schedule given is checked whole (:func:`report_steps`)."""
    return report_steps(report_at, steps, clip=str(report_at) == PARAMS["report_at"])


def check(variant, steps, report_at, **_):
    """Every cell's parameters before anything runs: its report steps (``report_at``
    against ``steps``)."""
    _reports(report_at, steps)


def run(sim, variant, steps, batch, features, lr, report_at, optimizer="sgd", sink="auto"):
    if sim.policy.framework == "pytorch":
        sim.experiment = "p10-ema-pytorch" + ("" if optimizer == "sgd" else f"-{optimizer}")
    elif optimizer != "sgd":
        sim.experiment = f"p10-ema-{optimizer}"
    reports = _reports(report_at, steps)
    # the probe's reference point is before the device (ema.rs: rss0, text0)
    rss0 = sim.rss_bytes()
    device = sim.device("flex").autodiff()
    heap0 = sim.heap.live_bytes

    def text(phase, x):
        # resident text since the start, after each part of the set-up and of step 1 (KiB)
        sim.sample(x, "step", phase=phase, observables=False,
                   text_rss_delta=sim.touched.text_bytes() / 1024)

    text("device", 0)
    model = Linear(features, features, device)
    text("model", 0)
    x = Tensor.random((batch, features), device)
    optim = OPTIMIZERS[optimizer](sim)
    uses_detach = variant in ("detach", "target", "log", "ema-only", "log-no-ema")

    def snapshot():
        w = model.weight.val().move()
        return w.detach() if uses_detach else w.without_autodiff()

    state = {"model": model, "ema": snapshot() if variant != "log-no-ema" else None, "base": 0}
    text("setup", 0)
    # the Linux measurements come from burn-probes, which keeps its rows in memory
    rows = None if sim.policy.framework == "pytorch" else ProbeSink.for_run(
        sim, sink, sim.experiment, variant, ADAM_NOTE if optimizer == "adam" else "")

    def train_step():
        first = state["base"] + sim.loop_index == 0
        number = state["base"] + sim.loop_index + 1
        sim.at(number, "step")
        # the probe names each part of the steps it shows (ProbeSink.phase)
        phase = rows.phase if rows is not None else (lambda step, name: None)
        model = state["model"]
        # tensors are moved where the Rust program moves them (Tensor.move): each op
        # drops its operands' parts where burn does
        if variant != "ema-only":
            out = model.forward(x.clone().move())
            phase(number, "forward")
            first and text("forward", 1)
            if variant.startswith("target"):
                ema = state["ema"].clone()      # the Rust program clones the EMA first
                target = x.clone().move().matmul(ema.move())
                del ema
                loss = (out.move() - target.move()).move().powi_scalar(2).move().mean()
                del target
            else:
                loss = out.move().powi_scalar(2).move().mean()
            del out
            grads = GradientsParams.from_grads(loss.backward(), model)
            phase(number, "backward")
            first and text("backward", 1)
            state["model"] = optim.step(lr, model, grads)
            phase(number, "sgd")
            first and text("sgd", 1)
            del grads, loss     # the Rust program's block ends: the loss goes
        if variant in ("log", "log-no-ema"):
            # the norm of the snapshot, read and not kept (ema.rs: powi, sum, sqrt)
            snapshot().move().powi_scalar(2).move().sum().move().sqrt().into_scalar()
        else:
            ema = state.pop("ema")
            state["ema"] = (ema.move() * 0.99).move() + (snapshot().move() * 0.01).move()
            del ema
            phase(number, "ema")
            first and text("ema", 1)

    last_t, last_step = sim.now_ns, 0
    rss_first = heap_first = None
    step = 0
    for report in reports:
        if step == 0:
            sim.loop_index = 0
            train_step()
            step = 1
            rss_first, heap_first = sim.rss_bytes(), sim.heap.live_bytes
        # the steps up to the next print are loop iterations: fast-forwarded when identical
        # (the steps the probe shows are loops of their own: ProbeSink.SHOWN)
        stops = [s for s in (rows.loop_stops() if rows is not None else ()) if step < s < report]
        for stop in stops + [report]:
            if stop > step:
                state["base"] = step
                sim.repeat(stop - step, train_step)
                step = stop
        sim.timing.clock_read()     # the window's one read of the probe's clock
        ms = (sim.now_ns - last_t) / (step - last_step) / 1e6
        if rows is not None:
            rows.read_rss()          # the probe reads /proc/self/statm before it measures
        rss = sim.rss_bytes() - rss0
        # every mode reports what the Linux probe reports (experiments/probes, ema.rs):
        # RSS and live-heap deltas since the mode's start, and from step 2 on the mean
        # growth per step after the first (which allocates the model and the EMA)
        extra = {}
        if step > 1:
            growth = (sim.rss_bytes() - rss_first) / (step - 1)
            extra = dict(rss_growth_per_step=round(growth / 1e3, 6),
                         heap_growth_per_step=round(
                             (sim.heap.live_bytes - heap_first) / (step - 1), 3))
        rss_paged, heap_delta = rss_bytes_paged(sim), sim.heap.live_bytes - heap0
        sim.sample(step, "step", ms_per_step=round(ms, 6), rss_delta=round(rss / MiB, 6),
                   text_rss_delta=sim.touched.text_bytes() / 1024,
                   rss_bytes=rss_paged, heap_bytes_delta=heap_delta, **extra)
        if rows is not None:
            # the probe records its rows after it measured (ema.rs), in this order
            first = last_step == 0
            ema = state.get("ema")
            note = ("burn Flex+autodiff (no simd/rayon); fresh process per mode; ms_per_step "
                    "= mean over the steps since the previous row; rss_delta = RSS now minus "
                    f"RSS at mode start (MiB = 2^20 B); {MODE_NOTES.get(variant, '')}; "
                    f"ema.is_tracked={str(ema is not None and ema.is_tracked()).lower()} "
                    f"is_require_grad="
                    f"{str(ema is not None and ema.is_require_grad()).lower()}"
                    if first else "")
            rows.row(step, "ms_per_step", ms, "ms", note, digits=4)
            rows.row(step, "rss_delta", rss / MiB, "MiB", digits=3)
            rows.row(step, "rss_bytes", rss_paged, "B")
            rows.row(step, "heap_bytes_delta", heap_delta, "B",
                     "live heap now minus at mode start (counting allocator)" if first else "")
            if step > 1:
                after_first = last_step == 1
                rows.row(step, "rss_growth_per_step", extra["rss_growth_per_step"], "KB",
                         "(RSS now - RSS after step 1)/(steps - 1), KB = 1e3 B"
                         if after_first else "", digits=3)
                rows.row(step, "heap_growth_per_step", extra["heap_growth_per_step"], "B",
                         "(live heap now - after step 1)/(steps - 1)" if after_first else "",
                         digits=1)
        last_t, last_step = sim.now_ns, step
        sim.timing.report_wake()    # what the report leaves the next window (ema.rs)
        yield sim.tick()
