"""Growth of memory and time along a run's loop, and panics, read off predicted rows.

The question a sweep answers per workload is which policies remove the
growth that burn 0.22.1 shows. The summary figure (``summary.png``) and the
report's tables ("Which fix, and at what price", "Every run") read the verdicts of
this module (:attr:`Growth.memory_grows`, :attr:`Growth.time_grows`, and
:func:`memory_level`, which grades a series against the reference from the same
verdict): one definition of "grows", stated in :data:`MEMORY_RULE` and
:data:`TIME_RULE`.

Series. A run is a cell's rows (workload, variant, policy, params). Its
*series* is its samples along the loop axis ``x``:

* the rows without a phase, when they are at more than one x (one-time phase
  rows beside them, as p10-ema's per-phase text residency at steps 0 and 1,
  are not part of the loop);
* else each phase whose rows are at more than one x is a series of its own
  (``train-validate``: ``train`` in steps, then ``generate`` in samples;
  ``two-thread-infer``: one per thread), and gets a :class:`Growth` of its own;
* else (every sample at one x, e.g. ``adleak-count``'s phases after the loop)
  the first ``*_delta`` memory metric of the first phase: a growth from the
  loop's start, over the loop.

A run with none of these (one sample, e.g. ``pit-infer``'s build) still gets a
:class:`Growth`, without figures, whose ``note`` says why.

Memory. The metric judged (:attr:`Growth.memory_metric`) is the process's
resident memory where the series records it (``rss_bytes``, else ``rss``,
else ``rss_delta``), else the live host heap (``heap_bytes``); plus the GPU
pool bytes in use (``gpu_in_use``) where recorded. RSS is preferred because
it is what a user watches and it holds what the live heap does not show: the
pages an allocator keeps after a sweep or free (a bounded sawtooth of the
heap leaves RSS flat) and memory a policy models outside the heap (the
``pytorch`` policy's per-step allocator drift, ``rss_extra_bytes``, is in
RSS only). Where the run is judged by RSS, the live heap's verdict is kept
beside it (:attr:`Growth.heap_grows`) so that a report can name the cells
where the two disagree.

Memory *grows* when the highest value of the late half of the series (its
last ``floor(n/2)`` samples) exceeds the highest value of the early half (the
first ``ceil(n/2)``, which hold the warm-up: first allocations, pages made
resident once) by more than :data:`GROWS_BYTES` (64 KiB). A leak's maxima keep
rising; a sawtooth's do not, nor does a one-time rise at the start. The
growth per loop unit (:attr:`Growth.memory_bytes`) is that rise divided by
the x span from the last early sample to the last sample, in bytes per
reported unit (per 100k iterations for ``iterations`` / ``k_iterations``
axes, per step, per forward, per sample, ...). A live heap alone, sampled
more sparsely than a sawtooth's period, cannot be told from growth by its
samples (they alias: 727608, 347352, 1073528, 693464 B); RSS, which keeps the
pages of the peaks, can (flat at 3.715 MB there).

Time. The simulated ms per loop unit over the first interval between samples
and over the last (from ``sim_time_ms``; from the recorded ``ms_per_step``
where the series has no ``sim_time_ms`` and the x unit is the step itself).
Time *grows* when the last interval is slower than the first by more than the
time tolerance (15 %).

Panics: the x of the first ``panic`` event, on the series of its phase (or
the run's first series).

A run sampled once per phase at one x (the third kind above) is judged by its
``*_delta`` metric over the whole loop, against the same 64 KiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .compare import SLACK, TOLERANCE
from ..units import BYTES_PER, METRICS

__all__ = ["Growth", "growth_of_runs", "GROWS_BYTES", "HEAP_METRICS", "HEAP_WHERE_FLAT_RULE",
           "FLAT_HEAP_BYTES", "per_unit", "late_rise", "phase_ranks",
           "run_label", "singular_unit", "x_words",
           "memory_level", "LEVEL_RATIOS", "MEMORY_RULE", "TIME_RULE", "RSS_METRICS",
           "Verdict", "verdict", "higher_plateau", "time_ratio", "ratio_text", "VERDICT_RULE"]

#: rise of the late half's maximum over the early half's above which memory grows (B)
GROWS_BYTES = 64 * 1024

#: resident-memory metrics, in order of preference, that a series is judged by
RSS_METRICS = ("rss_bytes", "rss", "rss_delta")

#: bounds of :func:`memory_level`'s classes 1-3: a growing series' growth over the
#: reference's under half, under 0.9, up to 1.1 (as much as the reference)
LEVEL_RATIOS = (0.5, 0.9, 1.1)

#: the rule, as the report and the summary figure state it
MEMORY_RULE = (f"memory grows when the highest value of the late half of a run's samples "
               f"is more than {GROWS_BYTES // 1024} KiB above the highest of the early half "
               f"(the warm-up); judged by resident memory (RSS) where the workload records "
               f"it, else by the live heap; plus the GPU pool in use where recorded")
TIME_RULE = (f"time grows when the last interval's ms per loop unit is more than "
             f"{TOLERANCE['time'] * 100:g} % above the first's")

#: x unit -> (x units per reported unit, name of the reported unit)
_PER = {"k_iterations": (100, "per 100k iterations"),
        "iterations": (100_000, "per 100k iterations")}


def per_unit(x_unit: str):
    """``(scale, label)``: growth per x unit times ``scale`` is growth per ``label``.

    Examples
    --------
    >>> per_unit("k_iterations")
    (100, 'per 100k iterations')
    >>> per_unit("step")
    (1, 'per step')
    >>> per_unit("forwards")
    (1, 'per forward')
    """
    if x_unit in _PER:
        return _PER[x_unit]
    unit = x_unit[:-1] if x_unit.endswith("s") else x_unit
    return 1, f"per {unit or 'x'}"


def x_words(x, x_unit: str) -> str:
    """A position ``x`` in the schema's ``x_unit`` as a reader says it.

    Examples
    --------
    >>> x_words(40, "k_iterations")
    '40k iterations'
    >>> x_words(200, "step"), x_words(1, "step"), x_words(40, "samples")
    ('200 steps', '1 step', '40 samples')
    """
    if x_unit == "k_iterations":
        return f"{x:g}k iterations"
    return f"{x:g} {singular_unit(x_unit)}{'' if x == 1 else 's'}"


def late_rise(xs, values):
    """``(rise, span)`` of a series sampled at increasing ``xs``: how far the highest of
    its late half rises above the highest of its early half (in the values' unit), and
    the x span it rose over (last early x to last x).

    The early half is the first ``ceil(n/2)`` samples, the late half the rest; a
    series of two samples rises from the first to the second.

    >>> late_rise([0, 1, 2, 3], [0, 100, 0, 100])      # a sawtooth: bounded
    (0, 2)
    >>> late_rise([0, 1, 2, 3], [0, 10, 20, 30])       # a leak: 10 per x
    (20, 2)
    """
    if len(xs) < 2 or len(xs) != len(values):
        raise ValueError("late_rise needs two or more samples, one value each")
    k = (len(xs) + 1) // 2
    return max(values[k:]) - max(values[:k]), xs[-1] - xs[k - 1]


@dataclass
class Growth:
    """Growth figures of one series of a run: ``workload``, ``variant``, ``policy``,
    ``params`` and the ``phase`` the series is (empty: the run's loop).

    Bytes are bytes; ``memory_bytes`` / ``heap_bytes`` are bytes per ``unit``;
    ``ms_first`` / ``ms_last`` are simulated ms per ``unit``; ``panic_x`` is in
    ``x_unit``. ``None``: no figure (``note`` says why where a figure is missing).
    """

    workload: str
    variant: str
    policy: str
    params: str
    unit: str = ""                   # "per step", "per 100k iterations"
    memory_bytes: float | None = None  # memory growth per unit (B), late half
    memory_total_bytes: float | None = None  # the late half's rise (B): the verdict's figure
    ms_first: float | None = None    # simulated ms per unit, first interval
    ms_last: float | None = None     # simulated ms per unit, last interval
    panic_x: float | None = None
    x_unit: str = ""
    phase: str = ""                  # the series' phase ("": the run's loop)
    memory_metric: str = ""          # what memory is judged by: "rss_bytes + gpu_in_use", ...
    memory_peak_bytes: float | None = None  # highest sample of the judged metric (B)
    heap_bytes: float | None = None  # live heap (+ GPU) growth per unit, when judged by RSS
    heap_total_bytes: float | None = None  # the live heap's late-half rise (B), idem
    note: str = ""                   # why a figure is missing
    x_last: float | None = None      # the series' last sample (in ``x_unit``)

    @property
    def run(self) -> tuple:
        """``(workload, variant, phase, params)``: the summary row / table row of the series."""
        return (self.workload, self.variant, self.phase, self.params)

    @property
    def label(self) -> str:
        """``workload / variant (phase) [params]``, as the report names the row."""
        return run_label(self.run)

    @property
    def has_figures(self) -> bool:
        """Whether the series has a loop to grow along (more than one sample) or a panic."""
        return (self.memory_bytes is not None or self.ms_last is not None
                or self.panic_x is not None)

    @property
    def memory_grows(self):
        """Whether memory grows (the module's rule); ``None``: not measured."""
        if self.memory_total_bytes is None:
            return None
        return self.memory_total_bytes > GROWS_BYTES

    @property
    def heap_grows(self):
        """Whether the live heap (+ GPU) grows by the same rule, where the series is
        judged by RSS; ``None`` otherwise."""
        if self.heap_total_bytes is None:
            return None
        return self.heap_total_bytes > GROWS_BYTES

    @property
    def time_grows(self):
        """Whether the last interval is slower than the first by more than 15 %."""
        if self.ms_first is None or self.ms_last is None or self.ms_first <= 0:
            return None
        return self.ms_last > self.ms_first * (1 + TOLERANCE["time"])


def run_label(run) -> str:
    """``workload / variant (phase) [params]`` of a :attr:`Growth.run` key."""
    workload, variant, phase, params = run
    return (f"{workload} / {variant}" + (f" ({phase})" if phase else "")
            + (f" [{params}]" if params else ""))


def memory_level(g, ref):
    """Severity class of series ``g``'s memory growth for the summary, from the same
    verdict as the report (:attr:`Growth.memory_grows`), against ``ref`` (the reference
    policy's series beside it, or None): None where there is no figure; 0 where memory
    does not grow; else by ``g``'s growth per loop unit over ``ref``'s, 1 under
    :data:`LEVEL_RATIOS`' first bound (half), 2 under its second (0.9), 3 up to its third
    (1.1, "as much"), 4 above, or where ``ref`` does not grow (or is missing)."""
    if g is None or g.memory_grows is None:
        return None
    if not g.memory_grows:
        return 0
    if ref is None or not ref.memory_grows or (ref.memory_bytes or 0) <= 0:
        return 4
    ratio = g.memory_bytes / ref.memory_bytes
    half, most, same = LEVEL_RATIOS
    return 1 if ratio < half else 2 if ratio < most else 3 if ratio <= same else 4


#: how :func:`verdict` judges a policy against the reference on the same run
VERDICT_RULE = (
    "Each policy is judged against burn-0.22.1 on the same run (same workload, variant, "
    "phase and parameters). Memory: *removed* where burn-0.22.1's memory grows and the "
    "policy's does not; *reduced* where both grow and the policy by under "
    f"{LEVEL_RATIOS[1] * 100:g} % of burn-0.22.1's growth; *new* where only the policy's "
    "grows. Where a policy's memory does not grow, its price is the height it plateaus at "
    "(*peak*: the highest sample of the judged metric); where burn-0.22.1's does not grow "
    "either, a plateau more than "
    f"{TOLERANCE['memory'] * 100:g} % and {GROWS_BYTES // 1024} KiB above burn-0.22.1's peak "
    "is *higher* (a price too: a higher steady level, not a growth). Time: the policy's ms "
    "per loop unit over the run's last interval over burn-0.22.1's over the same interval, "
    "as *x faster* "
    f"or *x slower* (within {TOLERANCE['time'] * 100:g} %: *same time*); where burn-0.22.1 "
    "slows down along the run, a policy *removes* the slowdown when its last interval is "
    f"within {TOLERANCE['time'] * 100:g} % of burn-0.22.1's first, and *reduces* it when it "
    "is faster than burn-0.22.1's last but not back to that")


@dataclass(frozen=True)
class Verdict:
    """A policy's series judged against the reference's series of the same run
    (:func:`verdict`). ``None``: no figure to judge by.

    ``memory``: ``"removed"``, ``"reduced"`` or ``"kept"`` where the reference's memory
    grows; ``"new"``, ``"higher"`` (:func:`higher_plateau`) or ``"flat"`` where it does
    not; ``"grows"``/``"flat"`` without a reference figure. ``peak_bytes``: where the
    policy's memory does not grow, the height it plateaus at (its highest sample, bytes);
    ``ref_peak_bytes``: the reference's, where the policy's is ``"higher"``. ``time``: ``"removed"``, ``"reduced"``,
    ``"kept"`` or ``"slower"`` where the reference slows down along the run;
    ``"faster"``, ``"same"`` or ``"slower"`` where it does not. ``ratio``: the policy's
    ms per loop unit over the reference's, last interval (:func:`time_ratio`).
    ``panic``: ``"removed"``, ``"kept"``, ``"new"`` or ``"none"``.
    """

    memory: str | None
    peak_bytes: float | None
    time: str | None
    ratio: float | None
    panic: str | None
    ref_peak_bytes: float | None = None


def higher_plateau(g, ref) -> bool:
    """Whether series ``g``, whose memory does not grow beside a reference ``ref`` whose
    memory does not grow either, plateaus higher than it: its peak (the highest sample of
    the judged metric) more than the memory tolerance (5 %) and :data:`GROWS_BYTES` above
    the reference's. The price of a fix that holds memory longer without leaking it (a
    sweep every 4th backward keeps each step's logged graph three backwards longer).

    >>> ref = Growth("w", "log", "burn-0.22.1", "", memory_peak_bytes=7.03 * 2**20)
    >>> higher_plateau(Growth("w", "log", "fix", "", memory_peak_bytes=10 * 2**20), ref)
    True
    >>> higher_plateau(Growth("w", "log", "fix", "", memory_peak_bytes=7.2 * 2**20), ref)
    False
    """
    if g.memory_peak_bytes is None or ref is None or ref.memory_peak_bytes is None:
        return False
    rise = g.memory_peak_bytes - ref.memory_peak_bytes
    return (rise > GROWS_BYTES
            and g.memory_peak_bytes > ref.memory_peak_bytes * (1 + TOLERANCE["memory"]))


def time_ratio(g, ref):
    """``g``'s simulated ms per loop unit over ``ref``'s, both over the run's last
    interval (> 1: ``g`` is slower); None where either has no time figure.

    >>> round(time_ratio(Growth("w", "v", "fix", "", ms_last=2.49),
    ...                  Growth("w", "v", "burn-0.22.1", "", ms_last=81.6)), 4)
    0.0305
    """
    if g is None or ref is None or g.ms_last is None or ref.ms_last is None \
            or ref.ms_last <= 0:
        return None
    return g.ms_last / ref.ms_last


def ratio_text(ratio) -> str:
    """A :func:`time_ratio` as a reader compares it: "32.8x faster", "1350x slower",
    "same time (1.08x)" within the time tolerance, "—" without one.

    >>> ratio_text(2.49 / 81.6), ratio_text(242_400 / 179), ratio_text(820.7 / 760.7)
    ('32.8x faster', '1354x slower', 'same time (1.08x)')
    """
    if ratio is None:
        return "—"
    tol = 1 + TOLERANCE["time"]
    if ratio < 1 / tol:
        return f"{_times(1 / ratio)}x faster"
    if ratio > tol:
        return f"{_times(ratio)}x slower"
    return "same time" if round(ratio, 2) == 1 else f"same time ({ratio:.2f}x)"


def _times(v) -> str:
    """A factor with 3 significant digits, never an exponent ("32.8", "1354")."""
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def verdict(g, ref):
    """:class:`Verdict` of series ``g`` against ``ref``, the reference policy's series of
    the same run (or None), by :data:`VERDICT_RULE`.

    >>> ref = Growth("w", "v", "burn-0.22.1", "", memory_total_bytes=10**8,
    ...              memory_bytes=10**8, ms_first=0.95, ms_last=81.6)
    >>> fix = Growth("w", "v", "dedup-sweep", "", memory_total_bytes=0, memory_bytes=0,
    ...              memory_peak_bytes=80_330_752, ms_first=0.95, ms_last=2.49)
    >>> v = verdict(fix, ref)
    >>> v.memory, v.peak_bytes, v.time, ratio_text(v.ratio), v.panic
    ('removed', 80330752, 'reduced', '32.8x faster', 'none')
    """
    if g is None:
        return Verdict(None, None, None, None, None)
    tol = 1 + TOLERANCE["time"]
    grows = g.memory_grows
    ref_grows = ref.memory_grows if ref is not None else None
    if grows is None:
        memory = None
    elif ref_grows is None:
        memory = "grows" if grows else "flat"
    elif ref_grows:
        if not grows:
            memory = "removed"
        elif (ref.memory_bytes or 0) > 0 and g.memory_bytes / ref.memory_bytes < LEVEL_RATIOS[1]:
            memory = "reduced"
        else:
            memory = "kept"
    else:
        memory = "new" if grows else "higher" if higher_plateau(g, ref) else "flat"
    ratio = time_ratio(g, ref)
    if ratio is None:
        time = None
    elif ref.time_grows:
        if g.ms_last <= ref.ms_first * tol:
            time = "removed"
        elif ratio < 1 / tol:
            time = "reduced"
        else:
            time = "slower" if ratio > tol else "kept"
    else:
        time = "faster" if ratio < 1 / tol else "slower" if ratio > tol else "same"
    if ref is None:
        panic = None if g.panic_x is None else "new"
    elif ref.panic_x is not None:
        panic = "kept" if g.panic_x is not None else "removed"
    else:
        panic = "new" if g.panic_x is not None else "none"
    return Verdict(memory, g.memory_peak_bytes if grows is False else None, time, ratio,
                   panic, ref.memory_peak_bytes if memory == "higher" else None)


def growth_of_runs(rows, workload_of, heap_where_flat=False) -> list:
    """The :class:`Growth` of every series of every run in ``rows`` (predicted rows,
    numeric x and value): one per run, or one per phase where the run's loop is
    phased (see the module's docstring).

    A run is an (experiment, variant, policy, params) group; ``workload_of``
    maps a row to its workload's name. Runs come back in the order their first
    row appears, a run's phases in the order of their first row.

    ``heap_where_flat``: :data:`HEAP_WHERE_FLAT_RULE` (the verdicts of real burn with
    and without a fix, ``sim fixes``): a series whose RSS rises while the live heap it
    also records stays flat is judged by the heap.
    """
    runs = {}
    for row in rows:
        key = (workload_of(row), row["variant"], row["policy"],
               row.get("params", ""))
        runs.setdefault(key, []).append(row)
    return [g for key, run_rows in runs.items()
            for g in _growths(key, run_rows, heap_where_flat)]


#: the live-heap metrics a series may record beside RSS, in order of preference: the
#: heap in use (simulated), its change since the loop's start (the probes' allocator
#: counts), the host heap's change (pit-infer, train-validate)
HEAP_METRICS = ("heap_bytes", "heap_bytes_delta", "host_heap_delta")

#: a live heap whose late half rises no more than this (B) is flat: the tolerance of a heap
#: measurement (``sim compare``'s slack for ``heap_bytes_delta`` and ``host_heap_delta``,
#: 2 KiB); a heap that leaks a little in a short run (pit-infer-flex B: 32 KiB in 5
#: forwards, 250 blocks) is not
FLAT_HEAP_BYTES = SLACK["heap_bytes_delta"]

#: :func:`growth_of_runs`' ``heap_where_flat`` rule, as ``sim fixes`` states it
HEAP_WHERE_FLAT_RULE = (
    "where a run records the live heap beside RSS and the heap is flat (its late half at "
    f"most {FLAT_HEAP_BYTES // 1024} KiB above its early half, a heap measurement's "
    "tolerance) while RSS grows, the run is judged by "
    "the heap: RSS above a flat heap is pages outside what the process holds live (the "
    "binary's text made resident as code paths first run, free arena pages a step's "
    "transient blocks touched and glibc has not trimmed), bounded in a loop that repeats "
    "the same code, and no fix and no part of burn-0.22.1's model keeps memory outside the "
    "heap (the pytorch policy's allocator drift, the one model of such memory, is not "
    "among them); the verdict names the metric it judged by")


def _growths(key, rows, heap_where_flat=False) -> list:
    """The :class:`Growth` of each series of one run."""
    series = {}
    for r in rows:
        if r["metric"] != "panic":
            series.setdefault(r.get("phase", "") or "", {}).setdefault(r["x"], {})[
                r["metric"]] = r
    loops = [phase for phase, samples in series.items() if len(samples) > 1]
    if "" in loops:
        loops = [""]   # the loop's series; one-time phase rows beside it are not the loop
    loops.sort(key=phase_ranks(series).get)   # series: phases in recorded order
    if loops:
        growths = [_series_growth(key, phase, series[phase], series, heap_where_flat)
                   for phase in loops]
    else:
        growths = [_one_x_growth(key, rows, series)]
    _attach_panic(growths, [r for r in rows if r["metric"] == "panic"])
    return growths


def phase_ranks(phases) -> dict:
    """``phase -> rank`` of the distinct ``phases`` (given in the order a run first
    recorded them), the order the summary, the report and the figures show a run's
    phases in: run order, as stages of a run happen (train, then generate;
    forward, then backward), except that numbered instances of one name (thread-0,
    thread-1, ..., thread-10) are ranked by their numbers, at the place of the first
    one recorded: concurrent instances are recorded in whichever order they finish.

    >>> phase_ranks(["thread-1", "thread-0", "generate"])
    {'thread-0': 0, 'thread-1': 1, 'generate': 2}
    """
    stems = {}
    for phase in dict.fromkeys(phases):
        stems.setdefault(tuple(re.split(r"\d+", phase)), []).append(phase)
    ranked = [p for members in stems.values() for p in sorted(members, key=_natural_key)]
    return {p: i for i, p in enumerate(ranked)}


def _natural_key(name) -> tuple:
    """Sort key of ``name`` with its runs of digits compared as numbers (names of one
    stem only: text and numbers then alternate in the same places)."""
    return tuple(int(part) if i % 2 else part
                 for i, part in enumerate(re.split(r"(\d+)", name)))


def _attach_panic(growths, panics) -> None:
    """The first panic's x on the series of its phase, else on the run's first series."""
    if not panics:
        return
    first = panics[0]
    phase = first.get("phase", "") or ""
    target = next((g for g in growths if g.phase == phase), growths[0])
    target.panic_x = first["x"]
    if not target.x_unit:
        target.x_unit = first["x_unit"]
        target.unit = per_unit(first["x_unit"])[1]


def _series_growth(key, phase, samples, series, heap_where_flat=False) -> Growth:
    """Memory and time growth of one series (``samples``: x -> metric -> row)."""
    g = Growth(*key, phase=phase)
    xs = sorted(samples)
    points = [samples[x] for x in xs]
    g.x_unit = next(iter(points[0].values()))["x_unit"]
    g.x_last = xs[-1]
    scale, g.unit = per_unit(g.x_unit)
    _measure_memory(g, xs, points, scale)
    if heap_where_flat:
        _judge_by_flat_heap(g, xs, points, scale)
    if g.memory_total_bytes is None:
        g.note = _no_memory_note(series, phase)
    _measure_time(g, xs, points, scale)
    return g


def _measure_memory(g, xs, points, scale) -> None:
    """The judged memory metric's late-half rise (and the live heap's beside RSS)."""
    metric = next((m for m in RSS_METRICS + ("heap_bytes",) if _has(points, m)), None)
    if metric is None:
        return
    g.memory_metric = metric + (" + gpu_in_use" if _has(points, "gpu_in_use") else "")
    values = _memory_values(points, metric)
    g.memory_total_bytes, span = late_rise(xs, values)
    g.memory_bytes = g.memory_total_bytes / span * scale
    g.memory_peak_bytes = max(values)
    if metric in RSS_METRICS and _has(points, "heap_bytes"):
        g.heap_total_bytes, span = late_rise(xs, _memory_values(points, "heap_bytes"))
        g.heap_bytes = g.heap_total_bytes / span * scale


def _judge_by_flat_heap(g, xs, points, scale) -> None:
    """:data:`HEAP_WHERE_FLAT_RULE`: a series judged by RSS whose RSS grows while its live
    heap (:data:`HEAP_METRICS`, the first recorded at every sample) does not is judged by
    the heap; ``memory_metric`` says so, with the RSS rise it set aside."""
    if not g.memory_grows or g.memory_metric.split(" ")[0] not in RSS_METRICS:
        return
    heap = next((m for m in HEAP_METRICS if _has(points, m)), None)
    if heap is None:
        return
    rise, span = late_rise(xs, _memory_values(points, heap))
    if rise > FLAT_HEAP_BYTES:
        return
    rss = g.memory_metric
    g.memory_metric = (f"{heap} (judged by the live heap: {rss} rose "
                       f"{g.memory_total_bytes / 2**20:.2f} MiB with the heap flat)")
    g.memory_total_bytes = rise
    g.memory_bytes = rise / span * scale
    g.memory_peak_bytes = max(_memory_values(points, heap))
    g.heap_total_bytes = g.heap_bytes = None


def _has(points, metric) -> bool:
    return all(metric in p for p in points)


def _memory_values(points, metric):
    """``metric`` plus ``gpu_in_use`` (where recorded) at every sample, in bytes (every
    sample has ``metric``: :func:`_measure_memory` chose it so)."""
    gpu = _has(points, "gpu_in_use")
    return [p[metric]["value"] * BYTES_PER[p[metric]["unit"]]
            + (p["gpu_in_use"]["value"] * BYTES_PER[p["gpu_in_use"]["unit"]] if gpu else 0)
            for p in points]


def _measure_time(g, xs, points, scale) -> None:
    """ms per reported unit over the first and the last interval."""
    if _has(points, "sim_time_ms"):
        t = [p["sim_time_ms"]["value"] for p in points]
        g.ms_first = (t[1] - t[0]) / (xs[1] - xs[0]) * scale
        g.ms_last = (t[-1] - t[-2]) / (xs[-1] - xs[-2]) * scale
    elif _has(points, "ms_per_step") and scale == 1:
        # already ms per loop unit, each over the interval before its sample
        g.ms_first = points[0]["ms_per_step"]["value"]
        g.ms_last = points[-1]["ms_per_step"]["value"]


def _no_memory_note(series, phase) -> str:
    """Why a series has no memory figure: where the run records memory instead."""
    elsewhere = sorted({(p, x, singular_unit(metrics[next(iter(metrics))]["x_unit"]))
                        for p, samples in series.items() if p != phase
                        for x, metrics in samples.items()
                        if any(m in metrics for m in RSS_METRICS + ("heap_bytes",))})
    where = ", ".join(f"phase {p or '(none)'} at {unit} {x:g}" for p, x, unit in elsewhere)
    return "no memory sample along this series" + (f"; memory recorded once: {where}"
                                                   if elsewhere else "")


def singular_unit(x_unit) -> str:
    """``forwards`` -> ``forward``: an x unit as one value of it is named."""
    return x_unit[:-1] if x_unit.endswith("s") else x_unit


def _one_x_growth(key, rows, series) -> Growth:
    """A run whose samples are all at one x: a ``*_delta`` memory metric from the loop's
    start, if phased and past x 0; else no figure, with the reason."""
    g = Growth(*key)
    if not series:
        g.note = "no samples"
        return g
    xs = {x for samples in series.values() for x in samples}
    g.x_unit = next(r["x_unit"] for r in rows if r["metric"] != "panic")
    scale, g.unit = per_unit(g.x_unit)
    x = min(xs)
    if len(xs) == 1 and x > 0 and any(series):
        first = next(r for r in rows if r["metric"] != "panic")
        metrics = series[first.get("phase", "") or ""][x]
        for metric, r in metrics.items():
            if metric.endswith("_delta") and r["unit"] in BYTES_PER \
                    and METRICS.get(metric) and METRICS[metric].kind == "memory":
                g.memory_metric = metric
                g.memory_total_bytes = r["value"] * BYTES_PER[r["unit"]]
                g.memory_bytes = g.memory_total_bytes / x * scale
                return g
    loop = series.get("", {})
    if len(loop) == 1:
        g.note = (f"one sample, at {singular_unit(g.x_unit)} {next(iter(loop)):g}: "
                  f"no loop to grow along")
    else:
        g.note = "no series: every phase sampled at one x, with no *_delta memory metric"
    return g
