"""Every timed window of a probe holds one read of the probe's clock (burn-probes'
``clock::Instant``: the end of the read that starts it and the start of the read that ends
it): ``time.clock_read_ns``, charged once per window by the workloads that mirror the
probes' timers, measured by mechanism-cost's ``clock-read`` variant (an empty window). A
profile without the key (written before the variant existed) reads it as 0."""

import tomllib

import pytest

from sim.commands.calibrate import _with
from sim.engine.profile import load_profile
from sim.paths import ROOT

from replica import replica_rows as _rows


def test_the_replica_times_one_read():
    profile = _with(load_profile("linux-x86_64"), {"time.clock_read_ns": 541.0})
    rows = _rows(profile, "mechanism-cost", "clock-read")
    assert rows == {("window", 1, "ns_per_op"): 541.0}
    assert _rows(load_profile("linux-x86_64"), "mechanism-cost", "clock-read") == \
        {("window", 1, "ns_per_op"): 0.0}


def test_a_report_window_holds_one_read():
    """train-validate's generation reports time 5 samples a window (quick): each sample's
    ms/step rises by a fifth of a read; a training report's 5 steps likewise; nothing else
    (heap, blocks, RSS) moves."""
    base = load_profile("amd-epyc-zen4")
    off = _rows(_with(base, {"time.clock_read_ns": 0.0}), "train-validate", "plain",
                {"steps": "20", "validate_every": "5", "val_batches": "2", "samples": "40",
                 "report_every": "5"})
    on = _rows(_with(base, {"time.clock_read_ns": 500.0}), "train-validate", "plain",
               {"steps": "20", "validate_every": "5", "val_batches": "2", "samples": "40",
                "report_every": "5"})
    assert on.keys() == off.keys()
    timed = [k for k in on if k[2] == "ms_per_step"]
    assert len(timed) == 12
    for key in timed:
        assert on[key] - off[key] == pytest.approx(500.0 / 5 / 1e6, abs=2e-9), key
    assert all(on[k] == off[k] for k in on if k[2] != "ms_per_step")


def test_an_op_cost_block_holds_one_read():
    base = load_profile("amd-epyc-zen4")
    params = {"iterations": "1000", "blocks": "2", "warmup": "10"}
    off = _rows(_with(base, {"time.clock_read_ns": 0.0}), "op-cost", "plain/add", params)
    on = _rows(_with(base, {"time.clock_read_ns": 500.0}), "op-cost", "plain/add", params)
    for key in off:
        assert on[key] - off[key] == pytest.approx(500.0 / 500 / 1e6, abs=1e-12), key


def test_a_profile_without_the_key_reads_zero(tmp_path):
    text = (ROOT / "models" / "linux-x86_64.toml").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.startswith("clock_read_ns")]
    assert len(lines) == len(text.splitlines()) - 1
    path = tmp_path / "older.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert "clock_read_ns" not in tomllib.loads(path.read_text())["time"]
    assert load_profile(str(path)).get("time.clock_read_ns") == 0.0
