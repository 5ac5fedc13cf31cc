"""gemm-common's first CACHE_INFO read on Linux (sim.platform.gemm_cache): the sysfs walk's heap
events against a real process's malloc log, and where they are not made."""

import sys
from types import SimpleNamespace

from sim import paths
from sim.platform.heap import Heap
from sim.platform.rss import Allocator
from sim.platform.gemm_cache import read_cache_info
from sim.engine.profile import load_profile

sys.path.insert(0, str(paths.ROOT / "experiments" / "probes"))

import step_order  # noqa: E402

DIR = "a32816"


def _walk(events) -> list:
    """The events from the first ``opendir`` to the top directory's ``closedir`` and the
    drops after it (its root path and Arc)."""
    start = events.index(DIR)
    end = max(i for i, e in enumerate(events[:start + 5000]) if e == "f32816")
    return events[start:end + 3]


def test_the_walk_makes_the_real_processes_events_in_order():
    real = step_order.real_events(step_order.LOGS / "p10-ema-without.bin.xz")
    simulated = step_order.simulated_events("p10-ema", "without", "sgd", 1)
    walk = _walk(real)
    assert len(walk) > 700                       # 2 CPUs x 4 caches x ~11 files
    assert walk[-3:] == ["f32816", "f23", "f48"]
    assert _walk(simulated) == walk
    # once per process: the later gemms of step 1 read nothing
    assert simulated.count(DIR) == walk.count(DIR) == 11


def test_the_walk_leaves_the_counted_heap_as_it_found_it():
    heap = Heap(Allocator.from_classes("glibc-arena"))
    read_cache_info(heap, load_profile("linux-x86_64").sysfs)
    assert heap.live_bytes == 0 and heap.live_blocks == 0
    # libc's DIRs are not Rust allocations: the counting allocator's peak never holds one
    assert heap.peak_bytes < 32816


def test_no_walk_where_the_profile_lists_no_entries():
    heap = Heap(Allocator.from_classes("glibc-arena"))
    read_cache_info(heap, load_profile("m2max-macos").sysfs)
    assert heap.allocs == 0


class _Recorder:
    """A heap that lists its events: ``a64``, ``f64``, ``r28>56``, ``libc100``..."""

    def __init__(self):
        self.events = []

    def alloc(self, nbytes, align=0):
        self.events.append(f"a{nbytes}")

    def free(self, nbytes, block=None):
        self.events.append(f"f{nbytes}")

    def realloc(self, old, nbytes, block=None):
        self.events.append(f"r{old}>{nbytes}")

    def libc_alloc(self, nbytes, zeroed=False):
        self.events.append(f"libc{nbytes}")

    def libc_free(self, nbytes, block=None):
        self.events.append(f"libcf{nbytes}")


def test_an_instruction_cache_stops_its_directory_at_type():
    sysfs = SimpleNamespace(cpu_entries=["cpu0"], cache_entries=["index0", "index1"],
                            index_files=["size", "type", "level"],
                            instruction_indexes=["index1"], opendir_bytes=100,
                            file_size_bytes=64)
    heap = _Recorder()
    read_cache_info(heap, sysfs)
    # index0 reads its three files, index1 two (size, then type ends it)
    assert heap.events.count("a64") == 5
    # the top directory: its DIR, root path (23 B) and Arc; cpu0's path grown by push
    assert heap.events[:6] == ["libc100", "a23", "a48", "a5", "a23", "r23>46"]
    assert heap.events[-3:] == ["libcf100", "f23", "f48"]
