"""Growth of memory and time along a run's loop, and panics, read off predicted rows.

The question a sweep answers per workload is which policies remove the
growth that burn 0.22.1 shows. For every simulated run (a cell's rows) this
module measures, along the loop axis ``x``:

* memory growth: live host heap (the ``heap_bytes`` observable) plus GPU
  pool bytes in use (``gpu_in_use``, when the workload records it), from the
  first sample to the last, in bytes per loop unit (per 100k iterations for
  ``iterations`` / ``k_iterations`` axes, per step, per forward, ...). A run
  whose samples are all at one x (phases of one loop, as ``adleak-count``)
  uses its first ``*_delta`` memory metric over x instead (a delta from the
  loop's start);
* time: the simulated ms per loop unit over the first interval between
  samples and over the last (``sim_time_ms``), e.g. ms/step at the last step;
* panics: the x of the first ``panic`` event.

A run's memory *grows* when it gains more than :data:`GROWS_BYTES` over the
run; its time *grows* when the last interval is slower than the first by more
than the time tolerance (15 %).
"""

from __future__ import annotations

from dataclasses import dataclass

from .compare import TOLERANCE
from .units import BYTES_PER, METRICS

__all__ = ["Growth", "growth_of_runs", "GROWS_BYTES", "per_unit"]

#: total growth over a run below which its memory counts as flat (B)
GROWS_BYTES = 64 * 1024

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


@dataclass
class Growth:
    """Growth figures of one run: ``workload``, ``variant``, ``policy``, ``params``."""

    workload: str
    variant: str
    policy: str
    params: str
    unit: str = ""                   # "per step", "per 100k iterations"
    memory_bytes: float | None = None  # memory growth per unit (B)
    memory_total_bytes: float | None = None  # over the whole run (B)
    ms_first: float | None = None    # simulated ms per unit, first interval
    ms_last: float | None = None     # simulated ms per unit, last interval
    panic_x: float | None = None
    x_unit: str = ""

    @property
    def has_figures(self) -> bool:
        """Whether the run has a loop to grow along (more than one sample) or a panic."""
        return (self.memory_bytes is not None or self.ms_last is not None
                or self.panic_x is not None)

    @property
    def memory_grows(self):
        if self.memory_total_bytes is None:
            return None
        return self.memory_total_bytes > GROWS_BYTES

    @property
    def time_grows(self):
        if self.ms_first is None or self.ms_last is None or self.ms_first <= 0:
            return None
        return self.ms_last > self.ms_first * (1 + TOLERANCE["time"])


def growth_of_runs(rows, workload_of) -> list:
    """One :class:`Growth` per run in ``rows`` (predicted rows, numeric x and value).

    A run is an (experiment, variant, policy, params) group; ``workload_of``
    maps a row to its workload's name. Runs come back in the
    order their first row appears.
    """
    runs = {}
    for row in rows:
        key = (workload_of(row), row["variant"], row["policy"],
               row.get("params", ""))
        runs.setdefault(key, []).append(row)
    return [_growth(key, run_rows) for key, run_rows in runs.items()]


def _growth(key, rows) -> Growth:
    g = Growth(*key)
    panics = [r for r in rows if r["metric"] == "panic"]
    if panics:
        g.panic_x = panics[0]["x"]
    samples = {}
    for r in rows:
        if r["metric"] == "panic":
            continue
        samples.setdefault((r["x"], r.get("phase", "")), {})[r["metric"]] = r
    if not samples:
        return g
    loop = {k: v for k, v in samples.items() if not k[1]}
    if len({x for x, _ in loop}) > 1:
        # a loop's series (no phase), with one-time phase rows beside it (p10-ema's
        # per-phase text residency at steps 0 and 1): the growth is the loop's
        samples = loop
    g.x_unit = next(iter(rows))["x_unit"]
    scale, g.unit = per_unit(g.x_unit)
    xs = sorted({x for x, _ in samples})
    if len(xs) == len(samples) and len(xs) > 1:
        points = [samples[(x, phase)] for x, phase in sorted(samples)]
        memory = [_memory_bytes(p) for p in points]
        if None not in memory:
            g.memory_total_bytes = memory[-1] - memory[0]
            g.memory_bytes = g.memory_total_bytes / (xs[-1] - xs[0]) * scale
        times = [p.get("sim_time_ms") for p in points]
        if None not in times:
            g.ms_first = (times[1]["value"] - times[0]["value"]) / (xs[1] - xs[0]) * scale
            g.ms_last = (times[-1]["value"] - times[-2]["value"]) / (xs[-1] - xs[-2]) * scale
    elif len(xs) == 1 and xs[0] > 0 and any(phase for _, phase in samples):
        first = samples[min(samples, key=lambda k: _order(rows, k))]
        for metric, r in first.items():
            if metric.endswith("_delta") and r["unit"] in BYTES_PER \
                    and METRICS.get(metric) and METRICS[metric].kind == "memory":
                g.memory_total_bytes = r["value"] * BYTES_PER[r["unit"]]
                g.memory_bytes = g.memory_total_bytes / xs[0] * scale
                break
    return g


def _order(rows, key):
    for i, r in enumerate(rows):
        if (r["x"], r.get("phase", "")) == key:
            return i
    return len(rows)


def _memory_bytes(sample):
    heap = sample.get("heap_bytes")
    if heap is None:
        return None
    total = heap["value"]
    gpu = sample.get("gpu_in_use")
    if gpu is not None:
        total += gpu["value"] * BYTES_PER[gpu["unit"]]
    return total
