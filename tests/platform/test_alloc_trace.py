"""The alloc-trace replica (experiments/alloc_trace.py) against the Linux probe's summary
rows: what one op keeps, the allocation and free calls it makes, and the pre-existing
bytes it frees, op by op. Under glibc's arena every block has a handle, so a free that
names a block made before the op's window is pre-existing, as the probe sees it."""

import csv
import sys

import pytest

from sim import paths

ROOT = paths.ROOT
sys.path.insert(0, str(ROOT / "experiments"))

import alloc_trace  # noqa: E402
from common import tiny_backward  # noqa: E402
from sim.platform.heap import Heap  # noqa: E402
from sim.engine.simulation import Simulation  # noqa: E402
from sim.engine.profile import load_profile  # noqa: E402
from sim.engine.runner import run_cell  # noqa: E402

MEASURED = ROOT / "experiments" / "measured" / "linux-x86_64" / "alloc-trace.csv"


def measured(variant):
    with open(MEASURED, newline="") as fh:
        return {(int(r["x"]), r["metric"]): float(r["value"]) for r in csv.DictReader(fh)
                if r["variant"] == variant and r["phase"] == "summary"}


@pytest.mark.parametrize("variant", ["first-tensor-creation", "untracked-add", "tracked-add", "require-grad",
                                     "detach-leaf", "tracked-matmul", "tracked-powi_scalar",
                                     "unrelated-backward-first", "unrelated-backward-second",
                                     "unrelated-backward-after-100-untracked",
                                     "unrelated-backward-after-10000-untracked"])
def test_every_summary_row_is_the_probes(variant):
    """Kept bytes and blocks, alloc and free calls, pre-existing bytes: all exact."""
    real = measured(variant)
    rows = run_cell("alloc-trace", variant, profile="linux-x86_64")
    predicted = {(int(r["x"]), r["metric"]): r["value"] for r in rows}
    assert set(predicted) == set(real)
    assert predicted == real


def test_a_backward_sweeps_the_orphans_of_untracked_ops():
    """After N untracked adds, an unrelated backward's cleanup frees what each add left
    (with the tables that held them: 11.1 MB in 95,096 frees for 10,000 adds, all
    pre-existing); the next backward frees nothing made before it."""
    rows = run_cell("alloc-trace", "unrelated-backward-after-10000-untracked",
                    profile="linux-x86_64")
    got = {(int(r["x"]), r["metric"]): r["value"] for r in rows}
    assert got[(1, "freed_preexisting_bytes")] == 11_111_136
    assert got[(1, "free_calls")] == 95_096
    assert got[(2, "freed_preexisting_bytes")] == 0


def test_require_grad_replaces_the_node_and_the_box():
    """burn frees the fresh tensor's node (104 B) and handle box (184 B): pre-existing."""
    rows = run_cell("alloc-trace", "require-grad", profile="linux-x86_64")
    pre = {r["value"] for r in rows if r["metric"] == "freed_preexisting_bytes"}
    assert pre == {104 + 184}


def test_the_training_steps_make_the_probes_calls():
    """sgd-step and train-step: every allocation and free call, as the probe counts them
    (the kept blocks differ where the model frees a registered node by size)."""
    for variant in ("sgd-step", "train-step"):
        real = measured(variant)
        rows = run_cell("alloc-trace", variant, profile="linux-x86_64")
        for r in rows:
            if r["metric"] in ("alloc_calls", "free_calls"):
                assert r["value"] == real[(int(r["x"]), r["metric"])], (variant, r)


def test_a_named_free_of_an_older_block_is_pre_existing():
    sim = Simulation(load_profile("linux-x86_64"))
    old = sim.heap.alloc(104)

    def op():
        sim.heap.alloc(104)           # the replacement, kept
        sim.heap.free(104, old)       # the old one, named

    _, window = alloc_trace.traced(sim, op)
    assert (window.kept_bytes, window.kept_blocks, window.freed_preexisting_bytes) == (104, 1, 104)
    assert (window.alloc_calls, window.free_calls) == (1, 1)


def test_a_free_by_size_takes_the_windows_newest_block():
    """Without handles (macOS small blocks) a free matches the window's latest block."""
    sim = Simulation(load_profile("m2max-macos"))
    assert type(sim.heap) is Heap

    def op():
        sim.heap.alloc(48)
        sim.heap.free(48)
        sim.heap.free(32)             # nothing of 32 B in the window: pre-existing

    sim.heap.alloc(32)
    _, window = alloc_trace.traced(sim, op)
    assert (window.kept_blocks, window.freed_preexisting_bytes) == (0, 32)


def test_the_probes_tiny_backward_owns_its_device():
    """The probe's tiny_backward makes Device::flex().autodiff() (a 16-B box) and leaves
    the heap as it found it; the seeds' borrows the caller's device."""
    sim = Simulation(load_profile("linux-x86_64"))
    ad = sim.device("flex").autodiff()
    tiny_backward(ad, probe=True)
    _, probe = alloc_trace.traced(sim, lambda: tiny_backward(ad, probe=True))
    _, seeds = alloc_trace.traced(sim, lambda: tiny_backward(ad))
    assert probe.kept_blocks == seeds.kept_blocks == 0
    assert probe.alloc_calls == seeds.alloc_calls + 1
