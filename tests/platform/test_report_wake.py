"""A probe's report between two timed windows (its rows formatted and echoed to stderr, the
timer restarted after them) costs the window after it: ``time.report_wake_ns``, charged once
in each window that follows a report by the workloads that mirror the probes' reporters,
measured by mechanism-cost's ``report-wake`` variant (a window after a report less one after
nothing). A profile without the key reads it as 0."""

import tomllib

import pytest

from sim.commands.calibrate import _with
from sim.engine.profile import load_profile
from sim.paths import ROOT

from replica import QUICK_TV, replica_rows as _rows


def test_the_replica_charges_the_wake_in_the_window_after_a_report():
    base = _with(load_profile("amd-epyc-zen4"), {"time.clock_read_ns": 541.0})
    off = _rows(base, "mechanism-cost", "report-wake")
    on = _rows(_with(base, {"time.report_wake_ns": 900.0}), "mechanism-cost", "report-wake")
    assert off[("report-minus-bare", 5, "ns_per_op")] == 0.0
    assert off[("statm-minus-bare", 5, "ns_per_op")] == 0.0
    assert on[("report-minus-bare", 5, "ns_per_op")] == 900.0
    assert on[("statm-minus-bare", 5, "ns_per_op")] == 0.0
    # every window holds its samples and one clock read; only the report's moves
    assert on[("bare", 5, "ns_per_op")] == off[("bare", 5, "ns_per_op")] \
        == off[("report", 5, "ns_per_op")]
    assert on[("report", 5, "ns_per_op")] == pytest.approx(off[("report", 5, "ns_per_op")] + 900)


def test_every_train_validate_window_after_a_report_holds_one_wake():
    """Quick train-validate: 4 training reports and 8 generation reports of 5 steps or
    samples; every window but the first training one follows a report (the first
    generation window runs from the last training report, as tv.rs times it), so its
    ms/step rises by a fifth of the wake; nothing else (heap, blocks, RSS) moves."""
    base = load_profile("amd-epyc-zen4")
    off = _rows(_with(base, {"time.report_wake_ns": 0.0}), "train-validate", "plain", QUICK_TV)
    on = _rows(_with(base, {"time.report_wake_ns": 1000.0}), "train-validate", "plain",
               QUICK_TV)
    assert on.keys() == off.keys()
    timed = sorted(k for k in on if k[2] == "ms_per_step")
    assert len(timed) == 12
    for key in timed:
        first = key[:2] == ("train", 5)
        assert on[key] - off[key] == pytest.approx(0.0 if first else 1000.0 / 5 / 1e6,
                                                   abs=2e-9), key
    assert all(on[k] == off[k] for k in on if k[2] != "ms_per_step")


def test_committed_profiles_do_not_charge_it():
    for name in ("linux-x86_64", "amd-epyc-zen4", "amd-epyc-zen4-long", "m2max-macos"):
        assert load_profile(name).get("time.report_wake_ns") == 0.0, name


def test_a_profile_without_the_key_reads_zero(tmp_path):
    text = (ROOT / "models" / "linux-x86_64.toml").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.startswith("report_wake_ns")]
    assert len(lines) == len(text.splitlines()) - 1
    path = tmp_path / "older.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert "report_wake_ns" not in tomllib.loads(path.read_text())["time"]
    assert load_profile(str(path)).get("time.report_wake_ns") == 0.0
