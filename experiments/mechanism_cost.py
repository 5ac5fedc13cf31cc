"""mechanism-cost: one mechanism's time at a time, each against a twin (Linux probe `mechanism-cost`).

The programs of `burn-probes mechanism-cost` (experiments/probes, src/mech.rs), one
fresh process per variant:

``page-fault``  a fresh 16-MiB block (glibc maps it), one byte written per 4-KiB page:
                ``ns_per_op`` per page made resident
``text-fault``  the first 4 MiB of the program's executable mapped read-only, one byte read
                per 4-KiB page: ``ns_per_op`` per 64-KiB fault-around window
``first-gemm``  plain Flex, lhs [64, 512] and rhs [512, 512] made first, then
                ``drop(lhs.clone().matmul(rhs.clone()))`` five times, each timed
                (``ms_per_step``, x = call): call 1 is the thread's first gemm
``param-init``  on flex.autodiff, ``Tensor::random([512, 512], Uniform)`` (a Linear(512,
                512)'s lazy weight init) five times, each timed and dropped
``sweep-free``  for N in 100 ... 10,000: N untracked adds c = a + b, then an unrelated
                backward, with the N outputs kept (``live``: the sweep visits N graphs
                with a live handle) or each dropped (``dead``: it also reads each node
                again and frees it); ``reps`` pairs; ``backward_ms`` of each (median)
                and ``ns_per_op`` at phase ``dead-minus-live`` (median of the pairs'
                difference / N): what freeing a dead node costs beyond visiting it
``merge``       blocks of ``merge_ops`` iterations x = a.detach().require_grad(), y
                likewise (two new graphs), ``merge``: c = x + y (y's graph merged into
                x's), ``twin``: drop(y), c = x.clone() + x; an unrelated backward after
                each block; ``ns_per_op`` of each (median) and ``merge-minus-twin``
``release``     blocks of ``release_ops`` iterations: c = a + b made untimed, ``drop(c)``
                timed alone, on flex.autodiff (``release``: the untracked output's last
                handle; a policy that releases on drop releases the node made just
                before) and on plain Flex (``plain``: the same buffers, no autodiff); an
                unrelated backward after each ``release`` block; ``ns_per_op`` of each
                (median) and ``release-minus-plain``: what the drop costs beyond its
                buffers (``drop_release_node_ns`` under drop-release, 0 unpatched); the
                simulation predicts that row only (the other two hold the probe's clock
                cost, and the model charges a buffer's free with the op that made it)
``read-scalar`` blocks of ``release_ops`` iterations: s = x.clone().sum() (x [1, 128]) made
                untimed, ``s.into_scalar()`` timed alone (``read``) against ``drop(s)``
                (``drop``), on plain Flex and on flex.autodiff (``autodiff-*``); the
                simulation predicts the two ``read-minus-drop`` rows only, as ``release``
``train-step``  train-validate's training step alone: Mlp(d, d, d) on flex.autodiff, loss =
                out.powi_scalar(2).mean(), ``from_grads(loss.backward())``, SGD's step; d = 4
                on a [1, 4] input (``d4``: the step's bookkeeping) and d = 128 on [32, 128]
                (``d128``); ``train_warm`` steps untimed, then the median of ``train_reps``
                blocks of ``train_steps`` (``ms_per_step``, x = d)
``mlp-sample``  train-validate's generation sample (model.valid() of an Mlp(128, 128, 128),
                z [1, 128] on plain Flex) as the module runs it (``module``), as the same
                ops through the tensor API (``ops``), with one weight matrix read twice
                (``one-weight``) and each op alone; ``ns_per_op`` per iteration of blocks of
                ``sample_ops``, and the differences (``module-minus-ops``: what
                ``Linear::forward``'s module path costs beyond its ops, twice)
``leak-replay`` (the probe runs it only when named) unpatched burn's leak at burn's own
                block sizes and order: op-cost's iteration of ``untracked-add`` (x + y,
                nothing requires grad) and ``tracked-mul_scalar`` (x requiring grad) traced
                on real burn and replayed without burn's code, the blocks an iteration
                keeps leaked (``leak``) against the same blocks freed at its end
                (``freed``), blocks of ``replay_ops`` iterations; the simulation predicts
                ``CASE-leak-minus-freed`` (what the kept blocks' heap pages cost: their
                faults and their first writes, ``page_fault_ns`` + ``heap_page_write_ns``
                per page) and ``CASE-beyond-faults`` (that less the faults: the pages'
                ``heap_page_write_ns``), per iteration, from the same op's heap growth after
                1,000 iterations; the ``leak`` and ``freed`` rows hold malloc's own time,
                which the model charges with the op
``leak-fault`` (the probe runs it only when named) what a page fault costs inside burn's
                own op: op-cost's ``tracked-mul_scalar`` and ``untracked-add`` iterations
                ([1, 128]), blocks of ``FAULT_OPS`` after ``FAULT_GROWN`` untimed from fresh
                inputs, with the heap's top resident (``reused``: unpatched burn's leak lands
                on resident pages), trimmed first (``fresh``: the leak faults fresh pages)
                or resident with an unrelated fresh page written before every k-th op
                (``injected``, k from ``fresh``'s faults per iteration), and those writes
                alone (``bare``); per fault: ``CASE-fresh-minus-reused-per-fault``,
                ``CASE-injected-minus-reused-per-fault``, ``CASE-bare-per-fault`` and
                ``CASE-injected-minus-bare-per-fault``. The model charges a page that
                burn's bookkeeping faults ``page_fault_ns`` and, for the op it interrupts,
                ``heap_page_write_ns`` (the leak's pages: the heap's growth), and a page
                faulted in a loop of nothing but writes ``page_fault_ns``; the replica runs
                the op ``FAULT_GROWN`` + ``FAULT_OPS`` times and reads ``fresh`` from the
                simulated time, ``reused`` as that less its fault time, and puts the
                injected faults at the probe's rate
``report-wake`` (the probe runs it only when named) train-validate's generation window:
                ``mlp-sample``'s ``module`` sample timed in windows of 5 samples as tv.rs's
                reporter times them, after nothing (``bare``), after the reporter's reads
                (``statm``: the counting allocator's snapshot and ``/proc/self/statm``) or
                after a whole report (``report``: the reads and its four rows formatted and
                echoed to stderr); ``ns_per_op`` per window (the probe: the median of 401
                alternated), and ``statm-minus-bare``, ``report-minus-bare``. The replica
                times one untimed and one timed window of each kind: every window holds one
                clock read (``clock_read_ns``) and the one after a report its wake
                (``report_wake_ns``); the reads cost the model nothing
``rehash``      a hash table's doubling, per item it moves: burn's five graph tables
                (``steps``, ``actions``, ``nodes``, ``leaves``, the locator's ``keys``), each
                filled to capacity at 256, 2,048 and 16,384 buckets, then one insert into it
                (it doubles) against the same insert into a twin made with room;
                ``ns_per_op`` = (grow - twin) / items moved, median of ``rehash_reps`` reps
                after 3 untimed, per table and their mean (``all``). The probe sets glibc's
                mmap and trim thresholds so that the timed inserts fault no page (its note
                counts 0 minor faults); the replica leaves out the fault time its allocator
                charges between the two clocks' reads, as the probe's mallopt does

``register-size`` (the probe runs it only when named) a tracked op's registration by the
                size of the graph it registers into: for N in ``size_nodes``, blocks of
                ``size_ops`` iterations ``c = x.clone().mul_scalar(2.0)`` (x [16] requiring
                grad), each block from a fresh leaf whose graph is grown untimed to N nodes
                (their outputs kept); ``steady`` drops each output (a policy that releases
                on drop keeps the graph at N nodes; unpatched it grows by the block),
                ``kept`` keeps them to the block's end; everything dropped and an unrelated
                backward after each block; ``ns_per_op`` per kind and N (median of
                ``size_reps`` blocks each)

``gen-window`` (the probe runs it only when named) train-validate's generation sample on each
                of its evaluators (``plain``: model.valid() and z on plain Flex;
                ``valid-model``: model.valid() and z on flex.autodiff; ``autodiff``: the
                model itself) and its parts (``linear``: the first layer's module::linear,
                ``relu``, ``sum-read``, ``clone``), each in 8 windows of 5 iterations after
                a training step (``EVALUATOR/KIND``, x = iterations so far, and the windows'
                mean at ``/all``); then the lift (``lift/lifted``: module::linear(z, w, None)
                with z on flex.autodiff and w model.valid()'s plain weight, which the
                dispatch lifts onto autodiff; ``lift/autodiff``: w's values on autodiff),
                ``lift/lifted-minus-autodiff`` and ``lift/lift`` (that plus an autodiff
                handle's clone less a plain one's: one lift, ``lift_ns``). The replica runs
                one untimed and one timed rep; every window holds one clock read

``clock-read``  an empty timed window: ``Instant::now()`` then ``elapsed()`` of the probes'
                clock, back to back (``ns_per_op``, the median of 20,001): one read of the
                clock, which every timed window of a probe holds once (its start's end and
                its end's start); wall time a vDSO read, the CPU clock (``PROBE_CPU_TIME``)
                a system call. The replica charges one read (``clock_read_ns``)

The probe reports first-gemm's and param-init's rows as medians over 9 fresh processes
(a first call happens once per process); the simulation is one process.
"""

from sim.burn.nn import Mlp, linear
from sim.burn.optim import GradientsParams, Sgd
from sim.burn.tensor import Tensor, drop

from common import ProbeSink, tiny_backward

EXPERIMENT = "mechanism-cost"
#: mlp-sample's rows: each kind's ns per iteration, then what the probe derives from them
SAMPLE_KINDS = ("module", "ops", "one-weight", "matmul", "bias-add", "relu", "sum-read", "clone")
SAMPLE_PHASES = SAMPLE_KINDS + ("parts", "module-minus-ops", "ops-minus-one-weight",
                                "ops-minus-parts")
#: report-wake's window kinds (what ran, untimed, before each window), the samples in a
#: window (train-validate --quick's report_every) and its rows
WAKE_KINDS = ("bare", "statm", "report")
WAKE_SAMPLES = 5
WAKE_PHASES = WAKE_KINDS + ("statm-minus-bare", "report-minus-bare")
#: gen-window's evaluators (train-validate's variants), kinds, windows a rep times and the
#: rows' phases (``EVALUATOR/KIND``, x = iterations since the evaluator was made, and
#: ``EVALUATOR/KIND/all``, x = 40: the mean over the windows)
GEN_EVALUATORS = ("plain", "valid-model", "autodiff")
GEN_KINDS = ("module", "linear", "relu", "sum-read", "clone")
GEN_WINDOWS = 8
#: the lift's twins: the weight plain (lifted by the op) or on flex.autodiff
LIFT_KINDS = ("lifted", "autodiff")
GEN_PHASES = tuple(f"{e}/{k}{a}" for e in GEN_EVALUATORS for k in GEN_KINDS
                   for a in ("", "/all")) + tuple(
                       f"lift/{k}" for k in LIFT_KINDS + ("lifted-minus-autodiff", "lift"))
#: leak-replay's cases: op-cost's iterations whose blocks the probe replays
LEAK_CASES = ("untracked-add", "tracked-mul_scalar")
LEAK_WARM = 1000
#: leak-fault's cases (the probe's order, one process), untimed iterations before a block,
#: the block's iterations, its kinds and the rows derived from them
FAULT_CASES = ("tracked-mul_scalar", "untracked-add")
FAULT_GROWN = 2000
FAULT_OPS = 1000
FAULT_PHASES = ("reused", "fresh", "injected", "bare", "fresh-minus-reused",
                "injected-minus-reused", "fresh-minus-reused-per-fault",
                "injected-minus-reused-per-fault", "bare-per-fault",
                "injected-minus-bare-per-fault")
X_UNITS = {"mechanism-cost": {"first-touch": "pages", "fault-around": "windows", "call": "call", "live": "nodes",
                              "dead": "nodes", "dead-minus-live": "nodes",
                              "merge": "iterations", "twin": "iterations",
                              "merge-minus-twin": "iterations", "release": "iterations",
                              "plain": "iterations", "release-minus-plain": "iterations",
                              "read-minus-drop": "iterations",
                              "autodiff-read-minus-drop": "iterations",
                              "d4": "features", "d128": "features", "window": "reads",
                              "steady": "nodes", "kept": "nodes",
                              **dict.fromkeys(("steps", "actions", "nodes", "leaves", "keys",
                                               "all"), "buckets"),
                              **dict.fromkeys(SAMPLE_PHASES, "iterations"),
                              **dict.fromkeys(WAKE_PHASES, "samples"),
                              **dict.fromkeys(GEN_PHASES, "iterations"),
                              **{f"{case}-{row}": "iterations" for case in LEAK_CASES
                                 for row in ("leak-minus-freed", "beyond-faults")},
                              **{f"{case}-{row}": "iterations" for case in FAULT_CASES
                                 for row in FAULT_PHASES}}}
SWEEP = False  # a replica of a Linux probe: run when named, not in the default sweep
VARIANTS = ("page-fault", "text-fault", "first-gemm", "param-init", "sweep-free", "merge",
            "release", "read-scalar", "train-step", "rehash", "mlp-sample", "clock-read",
            "leak-replay", "register-size", "report-wake", "gen-window", "leak-fault")
PARAMS = {"reps": 5, "calls": 5, "nodes": "100,300,1000,3000,10000", "merge_ops": 250,
          "merge_reps": 41, "release_ops": 250, "release_reps": 41,
          "train_warm": 20, "train_steps": 50, "train_reps": 11, "rehash_reps": 21,
          "sample_ops": 250, "replay_ops": 2000, "size_nodes": "0,1000,2000,3000,5000,10000,30000,60000",
          "size_ops": 1000, "size_reps": 7}
#: the probe's loops are the same under `--quick` (about two seconds), but a quick
#: comparison (and `sim host-profile`'s fit) simulates sweep-free up to N = 3,000 only:
#: N = 10,000 comes last in its process, so the others do not change, and it takes
#: minutes to simulate; its quick rows stay unpredicted
QUICK = {"nodes": "100,300,1000,3000"}
POSITIVE = ("reps", "calls", "merge_ops", "merge_reps", "release_ops", "release_reps",
            "train_warm", "train_steps", "train_reps", "rehash_reps", "sample_ops",
            "replay_ops", "size_ops", "size_reps")

#: rehash: buckets of the full table before its doubling, untimed reps first, and burn's
#: five graph tables (the simulation's table factory methods)
REHASH_BUCKETS = (256, 2048, 16384)
REHASH_WARM = 3
REHASH_TABLES = (("steps", "steps"), ("actions", "actions_builder"), ("nodes", "nodes"),
                 ("leaves", "leaves"), ("keys", "key_set"))

#: bytes of page-fault's block and the page it writes one byte of
FAULT_BYTES = 16 << 20
PAGE = 4096
#: bytes of the executable text-fault maps, and the fault-around window it reports per
TEXT_BYTES = 4 << 20
WINDOW = 64 << 10


def median(values):
    """The median (the mean of the two middle values of an even count), as the probe."""
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def run(sim, variant, reps, calls, nodes, merge_ops, merge_reps, release_ops, release_reps,
        train_warm, train_steps, train_reps, rehash_reps, sample_ops, replay_ops, size_nodes,
        size_ops, size_reps):
    if variant == "page-fault":
        heap = sim.heap
        per_page = []
        for _ in range(reps):
            start, written = sim.now_ns, sim.heap_write_bytes
            block = heap.alloc(FAULT_BYTES, PAGE)
            # one byte written per page, no block carved from it: where the block came from
            # the heap's top, the pages' first writes (heap_page_write_ns) are not made
            unwritten = _page_write_ns(sim, sim.heap_write_bytes - written)
            per_page.append((sim.now_ns - start - unwritten) / (FAULT_BYTES // PAGE))
            heap.free(FAULT_BYTES, block)
        sim.record(FAULT_BYTES // PAGE, "pages", "ns_per_op", round(median(per_page), 3),
                   phase="first-touch")
        yield sim.tick()
    elif variant == "text-fault":
        per_window = []
        for rep in range(reps):
            start = sim.now_ns
            sim.touched.touch_text(("executable", rep), TEXT_BYTES)
            per_window.append((sim.now_ns - start) / (TEXT_BYTES // WINDOW))
        sim.record(TEXT_BYTES // WINDOW, "windows", "ns_per_op", round(median(per_window), 3),
                   phase="fault-around")
        yield sim.tick()
    elif variant in ("first-gemm", "param-init"):
        yield from _calls(sim, variant, calls)
    elif variant == "sweep-free":
        yield from _sweep_free(sim, reps, [int(n) for n in str(nodes).split(",")])
    elif variant == "merge":
        yield from _merge(sim, merge_ops, merge_reps)
    elif variant == "release":
        yield from _release(sim, release_ops, release_reps)
    elif variant == "read-scalar":
        yield from _read_scalar(sim, release_ops, release_reps)
    elif variant == "train-step":
        yield from _train_step(sim, train_warm, train_steps, train_reps)
    elif variant == "rehash":
        yield from _rehash(sim, rehash_reps)
    elif variant == "mlp-sample":
        yield from _mlp_sample(sim, sample_ops)
    elif variant == "clock-read":
        start = sim.now_ns
        sim.timing.clock_read()
        sim.record(1, "reads", "ns_per_op", round(sim.now_ns - start, 3), phase="window")
        yield sim.tick()
    elif variant == "leak-replay":
        yield from _leak_replay(sim, replay_ops)
    elif variant == "register-size":
        yield from _register_size(sim, [int(n) for n in str(size_nodes).split(",")], size_ops,
                                  size_reps)
    elif variant == "report-wake":
        yield from _report_wake(sim)
    elif variant == "gen-window":
        yield from _gen_window(sim)
    elif variant == "leak-fault":
        yield from _leak_fault(sim)
    else:
        raise ValueError(variant)


def _report_wake(sim):
    """The generation sample timed in windows of :data:`WAKE_SAMPLES` after nothing, after
    the reporter's reads, after a report (the probe's src/sample.rs ``report_wake``): one
    untimed window of each kind, then one timed (the probe takes the median of 401)."""
    flex = sim.device("flex")
    model = Mlp(128, 128, 128, flex.autodiff())
    model.forward(Tensor.random((1, 128), flex.autodiff())).sum().into_scalar()
    net = model.valid()
    z = Tensor.random((1, 128), flex)
    ns = {}
    for _ in range(2):
        for kind in WAKE_KINDS:
            start = sim.now_ns
            if kind == "report":
                sim.timing.report_wake()
            for _ in range(WAKE_SAMPLES):
                net.forward(z.clone()).sum().into_scalar()
            sim.timing.clock_read()
            ns[kind] = sim.now_ns - start
    for kind in WAKE_KINDS[1:]:
        ns[f"{kind}-minus-bare"] = ns[kind] - ns["bare"]
    for phase in WAKE_PHASES:
        sim.record(WAKE_SAMPLES, "samples", "ns_per_op", round(ns[phase], 1) + 0.0, phase=phase)
    yield sim.tick()


def _gen_window(sim):
    """train-validate's generation on each evaluator in windows of :data:`WAKE_SAMPLES`
    after a training step, and the sample's parts, then the lift of a plain weight against
    the same matmul with its weight on autodiff (the probe's src/sample.rs ``gen_window``):
    one untimed rep, then one timed (the probe takes the median of 41)."""
    flex = sim.device("flex")
    device = flex.autodiff()
    model = Mlp(128, 128, 128, device)
    x = Tensor.random((32, 128), device)
    optim = Sgd(sim)
    ns = {}
    for rep in range(2):
        for evaluator in GEN_EVALUATORS:
            for kind in GEN_KINDS:
                loss = model.forward(x.clone()).powi_scalar(2).mean()
                grads = GradientsParams.from_grads(loss.backward(), model)
                del loss
                optim.step(1e-3, model, grads)
                net, input_device = ((model, device) if evaluator == "autodiff" else
                                     (model.valid(), device if evaluator == "valid-model" else flex))
                z = Tensor.random((1, 128), input_device)
                w, b = net.layers[0].weight.val(), net.layers[0].bias.val()
                body = {"module": lambda: net.forward(z.clone()).sum().into_scalar(),
                        "linear": lambda: drop(linear(z.clone(), w.clone(), b.clone())),
                        "relu": lambda: drop(z.clone().relu()),
                        "sum-read": lambda: z.clone().sum().into_scalar(),
                        "clone": lambda: drop(z.clone())}[kind]
                windows = []
                for _ in range(GEN_WINDOWS):
                    start = sim.now_ns
                    for _ in range(WAKE_SAMPLES):
                        body()
                    sim.timing.clock_read()
                    windows.append((sim.now_ns - start) / WAKE_SAMPLES)
                ns[evaluator, kind] = windows
                del net, z, w, b, body
                yield sim.tick()
    lift = {}
    for rep in range(2):
        for kind in LIFT_KINDS:
            loss = model.forward(x.clone()).powi_scalar(2).mean()
            grads = GradientsParams.from_grads(loss.backward(), model)
            del loss
            optim.step(1e-3, model, grads)
            valid = model.valid()
            z = Tensor.random((1, 128), device)
            w = valid.layers[0].weight.val() if kind == "lifted" else Tensor.random((128, 128), device)
            start = sim.now_ns
            for _ in range(GEN_WINDOWS):
                for _ in range(WAKE_SAMPLES):
                    drop(linear(z.clone(), w.clone()))
                sim.timing.clock_read()
            lift[kind] = (sim.now_ns - start) / (GEN_WINDOWS * WAKE_SAMPLES)
            del valid, z, w
            yield sim.tick()
    lift["lifted-minus-autodiff"] = lift["lifted"] - lift["autodiff"]
    # one lift: the twins' weights' clones made equal (an autodiff handle's clone less a
    # plain one's, from the evaluators' clone rows)
    lift["lift"] = (lift["lifted-minus-autodiff"] + sum(ns["valid-model", "clone"]) / GEN_WINDOWS
                    - sum(ns["plain", "clone"]) / GEN_WINDOWS)
    for kind, value in lift.items():
        sim.record(GEN_WINDOWS * WAKE_SAMPLES, "iterations", "ns_per_op", round(value, 1) + 0.0,
                   phase=f"lift/{kind}")
    for evaluator in GEN_EVALUATORS:
        for kind in GEN_KINDS:
            windows = ns[evaluator, kind]
            for i, value in enumerate(windows):
                sim.record((i + 1) * WAKE_SAMPLES, "iterations", "ns_per_op",
                           round(value, 1) + 0.0, phase=f"{evaluator}/{kind}")
            sim.record(GEN_WINDOWS * WAKE_SAMPLES, "iterations", "ns_per_op",
                       round(sum(windows) / GEN_WINDOWS, 1) + 0.0,
                       phase=f"{evaluator}/{kind}/all")
    yield sim.tick()


def _page_write_ns(sim, nbytes) -> float:
    """What the model charges ``nbytes`` of heap growth for its blocks' first writes."""
    return nbytes / sim.allocator.page_bytes * float(sim.profile.time["heap_page_write_ns"])


def _calls(sim, variant, calls):
    flex = sim.device("flex")
    if variant == "first-gemm":
        lhs = Tensor.random((64, 512), flex)
        rhs = Tensor.random((512, 512), flex)

        def call():
            drop(lhs.clone().matmul(rhs.clone()))
    else:
        device = flex.autodiff()

        def call():
            drop(Tensor.random((512, 512), device))
    # the child process keeps its rows in memory (not quick: no note); a row's small
    # blocks come after the call's dropped buffers, and glibc may carve them from a
    # freed 1-MiB buffer that could not merge into the top (param-init's call 2)
    rows = ProbeSink.for_run(sim, "auto", EXPERIMENT, variant)
    for k in range(1, calls + 1):
        start = sim.now_ns
        call()
        sim.timing.clock_read()         # the window's one read of the probe's clock
        ms = (sim.now_ns - start) / 1e6
        sim.record(k, "call", "ms_per_step", round(ms, 9), phase="call")
        if rows is not None:
            rows.row(k, "ms_per_step", ms, "ms", digits=6, x_unit="call", phase="call")
        yield sim.tick()


def _pair(sim):
    device = sim.device("flex").autodiff()
    return device, Tensor.from_floats([1.0] * 16, device), Tensor.from_floats([2.0] * 16, device)


def _timed_backward(sim, device) -> float:
    start = sim.now_ns
    tiny_backward(device, probe=True)
    sim.timing.clock_read()             # the window's one read of the probe's clock
    return (sim.now_ns - start) / 1e6


def _sweep_free(sim, reps, counts):
    device, a, b = _pair(sim)
    tiny_backward(device, probe=True)
    for n in counts:
        live, dead, diff = [], [], []
        for _ in range(reps):
            kept = [a.clone() + b.clone() for _ in range(n)]
            ms_live = _timed_backward(sim, device)
            del kept
            tiny_backward(device, probe=True)
            sim.repeat(n, lambda: drop(a.clone() + b.clone()))
            ms_dead = _timed_backward(sim, device)
            live.append(ms_live)
            dead.append(ms_dead)
            diff.append((ms_dead - ms_live) * 1e6 / n)
        sim.record(n, "nodes", "backward_ms", round(median(live), 6), phase="live")
        sim.record(n, "nodes", "backward_ms", round(median(dead), 6), phase="dead")
        sim.record(n, "nodes", "ns_per_op", round(median(diff), 3), phase="dead-minus-live")
        yield sim.tick()


def _merge(sim, merge_ops, merge_reps):
    device, a, b = _pair(sim)
    tiny_backward(device, probe=True)

    def merging():
        x = a.clone().detach().require_grad()
        y = b.clone().detach().require_grad()
        drop(x + y)

    def twin():
        x = a.clone().detach().require_grad()
        y = b.clone().detach().require_grad()
        drop(y)
        drop(x.clone() + x)

    def block(body) -> float:
        start = sim.now_ns
        sim.repeat(merge_ops, body)
        ns = (sim.now_ns - start) / merge_ops
        tiny_backward(device, probe=True)
        return ns

    merged, twins, diff = [], [], []
    for _ in range(merge_reps):
        m = block(merging)
        t = block(twin)
        merged.append(m)
        twins.append(t)
        diff.append(m - t)
    for phase, values in (("merge", merged), ("twin", twins), ("merge-minus-twin", diff)):
        sim.record(merge_ops, "iterations", "ns_per_op", round(median(values), 3), phase=phase)
    yield sim.tick()


def _release(sim, release_ops, release_reps):
    device, a, b = _pair(sim)
    flex = sim.device("flex")
    pa, pb = Tensor.from_floats([1.0] * 16, flex), Tensor.from_floats([2.0] * 16, flex)
    tiny_backward(device, probe=True)

    def timed_drops(x, y) -> float:
        ns = 0
        for _ in range(release_ops):
            c = x.clone() + y.clone()
            start = sim.now_ns
            drop(c)
            ns += sim.now_ns - start
        return ns / release_ops

    diff = []
    for _ in range(release_reps):
        r = timed_drops(a, b)
        tiny_backward(device, probe=True)
        diff.append(r - timed_drops(pa, pb))
    # only the difference: the probe's `release` and `plain` rows hold its clock's own
    # cost, and the model charges a buffer's free with the op that made it (buffer_ns)
    sim.record(release_ops, "iterations", "ns_per_op", round(median(diff), 3),
               phase="release-minus-plain")
    yield sim.tick()


def _read_scalar(sim, release_ops, release_reps):
    device, _, _ = _pair(sim)
    tiny_backward(device, probe=True)
    for prefix, dev in (("", sim.device("flex")), ("autodiff-", device)):
        x = Tensor.from_floats([[1.0] * 128], dev)

        def timed(read) -> float:
            ns = 0
            for _ in range(release_ops):
                s = x.clone().sum()
                start = sim.now_ns
                if read:
                    s.into_scalar()
                else:
                    drop(s)
                ns += sim.now_ns - start
            return ns / release_ops

        diff = [timed(True) - timed(False) for _ in range(release_reps)]
        # only the difference, as _release: the other two rows hold the probe's clock cost
        sim.record(release_ops, "iterations", "ns_per_op", round(median(diff), 3),
                   phase=f"{prefix}read-minus-drop")
        yield sim.tick()


def _train_step(sim, train_warm, train_steps, train_reps):
    device = sim.device("flex").autodiff()
    for d, batch in ((4, 1), (128, 32)):
        model = Mlp(d, d, d, device)
        x = Tensor.random((batch, d), device)
        optim = Sgd(sim)

        def step():
            loss = model.forward(x.clone()).powi_scalar(2).mean()
            grads = GradientsParams.from_grads(loss.backward(), model)
            del loss
            optim.step(1e-3, model, grads)

        blocks = []
        for block in range(train_reps + 1):
            n = train_warm if block == 0 else train_steps
            start = sim.now_ns
            sim.repeat(n, step)
            if block:
                blocks.append((sim.now_ns - start) / n / 1e6)
        sim.record(d, "features", "ms_per_step", round(median(blocks), 6), phase=f"d{d}")
        yield sim.tick()
        del model, x, optim


def _rehash(sim, rehash_reps):
    from sim.platform.hashbrown import capacity_of
    for buckets in REHASH_BUCKETS:
        cap = capacity_of(buckets)
        medians = []
        for phase, make in REHASH_TABLES:
            per_item = []
            for rep in range(REHASH_WARM + rehash_reps):
                full, twin = getattr(sim.tables, make)(), getattr(sim.tables, make)()
                twin.reserve(0, cap + 1)
                full.grow_to(cap)
                times = []
                for table in (full, twin):
                    start, faults = sim.now_ns, sim.fault_ps
                    table.fit(cap + 1)
                    times.append(sim.now_ns - start - (sim.fault_ps - faults) / 1000)
                if rep >= REHASH_WARM:
                    per_item.append((times[0] - times[1]) / cap)
                full.drop()
                twin.drop()
            medians.append(median(per_item))
            sim.record(buckets, "buckets", "ns_per_op", round(medians[-1], 3), phase=phase)
        sim.record(buckets, "buckets", "ns_per_op", round(sum(medians) / len(medians), 3),
                   phase="all")
        yield sim.tick()


def _leak_replay(sim, replay_ops):
    """What an op's kept blocks cost on the heap they make grow: op-cost's iteration after
    ``LEAK_WARM``, ``replay_ops`` more, their fault time per iteration (``leak-minus-freed``:
    freed blocks are reused, no page) and that less ``page_fault_ns`` per page faulted
    (``beyond-faults``)."""
    fault_ns = float(sim.profile.time["page_fault_ns"])
    page = sim.allocator.page_bytes
    for case in LEAK_CASES:
        device, x, y, body = _op_cost_body(sim, case)
        sim.repeat(LEAK_WARM, body)
        ps, nbytes = sim.fault_ps, sim.fault_bytes
        sim.repeat(replay_ops, body)
        leak = (sim.fault_ps - ps) / 1000 / replay_ops
        faults = (sim.fault_bytes - nbytes) / page / replay_ops
        sim.record(replay_ops, "iterations", "ns_per_op", round(leak, 3),
                   phase=f"{case}-leak-minus-freed")
        sim.record(replay_ops, "iterations", "ns_per_op", round(leak - faults * fault_ns, 3),
                   phase=f"{case}-beyond-faults")
        for t in (x, y):
            drop(t)
        yield sim.tick()


def _op_cost_body(sim, case):
    """op-cost's iteration of ``case`` (``tracked-mul_scalar``: ``x.clone().mul_scalar(2.0)``
    of a tracked [1, 128]; else ``x.clone() + y.clone()``, untracked), dropped at once:
    ``(device, x, y, body)``."""
    device = sim.device("flex").autodiff()
    x = Tensor.random((1, 128), device)
    y = Tensor.random((1, 128), device)
    if case == "tracked-mul_scalar":
        x = x.require_grad()

        def body():
            drop(x.clone().mul_scalar(2.0))
    else:
        def body():
            drop(x.clone() + y.clone())
    return device, x, y, body


def _leak_fault(sim):
    """A page fault inside burn's op (``leak-fault``): op-cost's iteration after
    ``FAULT_GROWN``, ``FAULT_OPS`` more; ``fresh`` is their simulated time per iteration,
    ``reused`` that less their fault time (``page_fault_ns`` and ``heap_page_write_ns`` per
    page of the heap's growth), ``injected`` ``reused`` with one unrelated page faulted
    every k-th op (k from ``fresh``'s faults per iteration, as the probe sets it), charged
    as a page the op's own bookkeeping faults, ``bare`` those faults alone
    (``page_fault_ns`` each)."""
    t = sim.profile.time
    fault_ns = float(t["page_fault_ns"])
    in_op_ns = fault_ns + float(t["heap_page_write_ns"])
    page = sim.allocator.page_bytes
    for case in FAULT_CASES:
        device, x, y, body = _op_cost_body(sim, case)
        sim.repeat(FAULT_GROWN, body)
        start, ps, nbytes = sim.now_ns, sim.fault_ps, sim.fault_bytes
        sim.repeat(FAULT_OPS, body)
        sim.timing.clock_read()         # the window's one read of the probe's clock
        fresh = (sim.now_ns - start) / FAULT_OPS
        fault_time = (sim.fault_ps - ps) / 1000 / FAULT_OPS
        faults = (sim.fault_bytes - nbytes) / page / FAULT_OPS
        every = max(1, round(1 / faults)) if faults else FAULT_OPS
        injected_faults = -(-FAULT_OPS // every) / FAULT_OPS
        reused = fresh - fault_time
        rows = {"reused": reused, "fresh": fresh,
                "injected": reused + injected_faults * in_op_ns,
                "bare": injected_faults * fault_ns,
                "fresh-minus-reused": fault_time,
                "injected-minus-reused": injected_faults * in_op_ns}
        if faults:
            rows["fresh-minus-reused-per-fault"] = fault_time / faults
        rows.update({"injected-minus-reused-per-fault": in_op_ns, "bare-per-fault": fault_ns,
                     "injected-minus-bare-per-fault": in_op_ns - fault_ns})
        for phase, ns in rows.items():
            sim.record(FAULT_OPS, "iterations", "ns_per_op", round(ns, 3), phase=f"{case}-{phase}")
        for tensor in (x, y):
            drop(tensor)
        tiny_backward(device, probe=True)
        yield sim.tick()


def _register_size(sim, sizes, size_ops, size_reps):
    """A tracked op's registration into a graph of N nodes (``register-size``): each block
    from a fresh leaf whose graph holds N kept outputs, ``size_ops`` iterations timed
    (one read of the probe's clock), the outputs dropped (``steady``) or kept to the
    block's end (``kept``); then everything dropped and an unrelated backward."""
    device, a, _ = _pair(sim)

    def block(nodes, keep) -> float:
        x = a.clone().detach().require_grad()
        grown = [x.clone().mul_scalar(2.0) for _ in range(nodes)]
        kept = []
        start = sim.now_ns
        for _ in range(size_ops):
            c = x.clone().mul_scalar(2.0)
            if keep:
                kept.append(c)
            else:
                drop(c)
        sim.timing.clock_read()         # the window's one read of the probe's clock
        ns = (sim.now_ns - start) / size_ops
        for t in kept + grown + [x]:
            drop(t)
        tiny_backward(device, probe=True)
        return ns

    tiny_backward(device, probe=True)
    block(sizes[-1], True)
    for nodes in sizes:
        steady, kept = [], []
        for _ in range(size_reps):
            steady.append(block(nodes, False))
            kept.append(block(nodes, True))
        sim.record(nodes, "nodes", "ns_per_op", round(median(steady), 3), phase="steady")
        sim.record(nodes, "nodes", "ns_per_op", round(median(kept), 3), phase="kept")
        yield sim.tick()


def _mlp_sample(sim, sample_ops):
    """train-validate's generation sample on plain Flex against its ops, run together and
    each alone (the probe's src/sample.rs): one untimed block of each kind, then one timed
    (the simulation repeats itself; the probe takes the median of 41)."""
    flex = sim.device("flex")
    model = Mlp(128, 128, 128, flex.autodiff())
    model.forward(Tensor.random((1, 128), flex.autodiff())).sum().into_scalar()
    net = model.valid()
    z = Tensor.random((1, 128), flex)
    w1, w2 = Tensor.random((128, 128), flex), Tensor.random((128, 128), flex)
    b1, b2 = Tensor.random((128,), flex), Tensor.random((128,), flex)

    def ops(w, b, w_, b_):
        a = (z.clone().matmul(w.clone()) + b.clone().unsqueeze()).relu()
        (a.matmul(w_.clone()) + b_.clone().unsqueeze()).sum().into_scalar()

    bodies = {"module": lambda: net.forward(z.clone()).sum().into_scalar(),
              "ops": lambda: ops(w1, b1, w2, b2), "one-weight": lambda: ops(w1, b1, w1, b1),
              "matmul": lambda: drop(z.clone().matmul(w1.clone())),
              "bias-add": lambda: drop(z.clone() + b1.clone().unsqueeze()),
              "relu": lambda: drop(z.clone().relu()),
              "sum-read": lambda: z.clone().sum().into_scalar(),
              "clone": lambda: drop(z.clone())}
    ns = {}
    for block in range(2):
        for kind in SAMPLE_KINDS:
            start = sim.now_ns
            for _ in range(sample_ops):
                bodies[kind]()
            ns[kind] = (sim.now_ns - start) / sample_ops
    ns["parts"] = (2 * ns["matmul"] + 2 * ns["bias-add"] + ns["relu"] + ns["sum-read"]
                   - 5 * ns["clone"])
    ns["module-minus-ops"] = ns["module"] - ns["ops"]
    ns["ops-minus-one-weight"] = ns["ops"] - ns["one-weight"]
    ns["ops-minus-parts"] = ns["ops"] - ns["parts"]
    for phase in SAMPLE_PHASES:
        sim.record(sample_ops, "iterations", "ns_per_op", round(ns[phase], 1) + 0.0,
                   phase=phase)
    yield sim.tick()
