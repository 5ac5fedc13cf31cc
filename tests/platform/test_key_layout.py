"""experiments/calibration/key-layout.py: real burn's node keys from a malloc-log of the
params probe (ema-balanced detach, 200 steps, glibc 2.36) and from a heap scan, and the
layout measures it compares (issue 43)."""

import importlib.util

from sim import paths

ROOT = paths.ROOT
LOG = ROOT / "experiments" / "measured" / "linux-x86_64" / "malloc-logs" / "ema-balanced-detach-200.bin.xz"


def _module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


layout = _module("key_layout", ROOT / "experiments" / "calibration" / "key-layout.py")
replay = _module("arena_replay_for_keys", ROOT / "experiments" / "probes" / "arena_replay.py")


def test_a_balanced_run_keeps_a_snapshot_and_five_24_byte_blocks_a_step_four_of_them_keys():
    records = replay.read_log(LOG)
    live = layout.live_blocks(records)
    snapshots = sum(1 for size, _ in live.values() if size == layout.SNAPSHOT_BYTES)
    small = sum(1 for size, _ in live.values() if size == layout.KEY_BYTES)
    keys = layout.real_keys(records, balanced=True)
    assert (snapshots, small) == (201, 1004)
    assert len(keys) == small - snapshots == 803
    assert len(layout.real_keys(records, balanced=False)) == 1004
    m = layout.measures([k - keys[0] for k in keys])
    assert (m["pages"], m["span pages"], m["runs"], m["2-MiB regions"]) == (122, 828, 8, 3)


def test_scanned_keys_are_the_graph_held_arcs_in_id_order():
    lines = ["4096 1 1 7", "100 1 1 3", "8192 12 1 0", "64 2 1 5", "128 1 3 4"]
    # strong 12: a parameter's key held elsewhere; weak 3: not a key
    assert layout.scanned_keys(lines) == [100, 64, 4096]


def test_measures_count_pages_runs_and_regions():
    offsets = [0, 8, 4096, 3 * 4096, 2 * 1024 * 1024]
    m = layout.measures(offsets)
    assert (m["keys"], m["pages"], m["span pages"], m["runs"]) == (5, 4, 513, 3)
    assert (m["16-KiB groups"], m["PTE lines"], m["2-MiB regions"]) == (2, 2, 2)
