"""Metrics of the schema and their units: the one place that converts units.

Every metric a workload or the engine records is declared here with its unit,
as the measured CSVs spell it. ``MB`` is 10^6 bytes (the seed programs print RSS
in decimal megabytes), ``MiB``/``KiB`` are binary, ``KB`` is 10^3 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Metric", "METRICS", "BYTES_PER", "bytes_to"]

#: bytes per unit
BYTES_PER = {"B": 1, "KB": 1e3, "MB": 1e6, "KiB": 1024, "MiB": 1024 ** 2}


def bytes_to(nbytes: float, unit: str) -> float:
    """Convert bytes to ``unit`` (one of :data:`BYTES_PER`)."""
    return nbytes / BYTES_PER[unit]


@dataclass(frozen=True)
class Metric:
    """A metric name, its unit, what it means, whether it is a memory, time or event
    figure, and whether it may be negative (``signed``: a change since a reference point;
    a size, a count or a time is not)."""

    name: str
    unit: str
    kind: str
    doc: str
    signed: bool = False


METRICS = {m.name: m for m in (
    Metric("gpu_in_use", "MiB", "memory", "GPU memory-pool bytes in use (after sync)"),
    Metric("gpu_reserved", "MiB", "memory", "GPU memory-pool bytes reserved (pages)"),
    # the GPU probes' pool figures (experiments/probes/gpu-probes): burn's
    # memory_pool_usage and memory_pool_report after a sync, in bytes and pages
    Metric("gpu_in_use_bytes", "B", "memory", "GPU pool bytes in use, all memories (requested bytes)"),
    Metric("gpu_reserved_bytes", "B", "memory", "GPU pool bytes reserved, all memories"),
    Metric("gpu_padding_bytes", "B", "memory", "GPU pool padding inside live allocations"),
    Metric("gpu_allocs", "allocs", "state", "live GPU pool allocations, all memories"),
    Metric("gpu_pages_small", "pages", "state", "pages of the small pool (8 MiB, up to 64 KiB slices)"),
    Metric("gpu_page_bytes_small", "B", "state", "page size of the small pool"),
    Metric("gpu_pages_arena", "pages", "state", "pages of the arena's current pool"),
    Metric("gpu_page_bytes_arena", "B", "state", "page size of the arena's current pool"),
    Metric("gpu_pages_outdated", "pages", "state", "pages the arena's outdated pools still hold"),
    Metric("gpu_outdated_reserved_bytes", "B", "memory", "bytes of the outdated pools' pages"),
    Metric("gpu_other_reserved_bytes", "B", "memory", "reserved bytes besides the sliced "
           "pools' pages: persistent pool, zero-byte pool, staging and uniform memories"),
        Metric("host_heap_delta", "KiB", "memory", "live host-heap bytes since a reference point", signed=True),
    Metric("rss", "MB", "memory", "process resident set size"),
    Metric("rss_delta", "MiB", "memory", "RSS growth since a reference point", signed=True),
    Metric("rss_growth_per_step", "KB", "memory", "mean RSS growth per step", signed=True),
    Metric("heap_bytes_delta", "B", "memory", "live heap bytes (counting allocator) since a reference point", signed=True),
    Metric("heap_blocks_delta", "blocks", "memory", "live heap blocks since a reference point", signed=True),
    Metric("ms_per_step", "ms", "time", "mean time per step since the previous row"),
    Metric("cleanup_ms_per_step", "ms", "time", "mean orphan-sweep time per step since the previous row"),
    Metric("panic", "event", "event", "the program panicked at this step"),
    Metric("live_graphs", "graphs", "state", "graphs in the locator"),
    Metric("live_nodes", "nodes", "state", "nodes held by graphs' memory management"),
    Metric("locator_entries", "entries", "state", "entries of the locator's graphs map"),
    Metric("registered_steps", "steps", "state", "steps registered since the start"),
    Metric("heap_bytes", "B", "memory", "live host-heap bytes"),
    Metric("heap_blocks", "blocks", "memory", "live host-heap blocks"),
    Metric("sim_time_ms", "ms", "time", "simulated time since the start"),
    Metric("cleanup_ms", "ms", "time", "simulated time spent in orphan sweeps since the start"),
    # extra metrics of the Rust probes (experiments/probes, issue 6)
    Metric("rss_bytes", "B", "memory", "process resident set size in bytes (probes: /proc/self/statm)"),
    Metric("text_rss_delta", "KiB", "memory", "resident text of the program binary since the "
           "program's start (probes: /proc/self/smaps Rss of its executable mappings)", signed=True),
    Metric("heap_growth_per_step", "B", "memory", "mean live-heap growth per step since step 1", signed=True),
    Metric("ns_per_op", "ns", "time", "mean wall time per loop iteration"),
    Metric("backward_ms", "ms", "time", "duration of one backward() including its orphan sweep"),
    Metric("alloc_calls_delta", "calls", "state", "allocation calls during a phase (counting allocator)"),
    Metric("kept_bytes", "B", "memory", "bytes one op allocated and still holds when it returns"),
    Metric("kept_blocks", "blocks", "state", "blocks one op allocated and still holds when it returns"),
    Metric("alloc_calls", "calls", "state", "allocation calls made by one op"),
    Metric("free_calls", "calls", "state", "free calls made by one op"),
    Metric("freed_preexisting_bytes", "B", "memory", "bytes one op freed that were allocated before it"),
    Metric("size_of", "B", "state", "size_of of a bookkeeping type (probe sizeof)"),
    Metric("align_of", "B", "state", "align_of of a bookkeeping type (probe sizeof)"),
)}

#: the bookkeeping observables every ``sim.sample`` records at its x unless called with
#: ``observables=False`` (``Simulation.observables``): kept in predicted.csv, never drawn
#: as a workload's own panel; a workload that names one of them in ``sim.sample`` is an
#: error, as the row would be there twice
OBSERVABLES = ("live_graphs", "live_nodes", "locator_entries", "registered_steps",
               "heap_bytes", "heap_blocks", "sim_time_ms", "cleanup_ms")
