"""experiments/calibration/tlb-window.py --terms: the sweep's mean ms per step over a window
split by Timing.sweep_ns's terms (issue 43, session 59)."""

import importlib.util
import re

from sim import paths

ROOT = paths.ROOT


def _module():
    path = ROOT / "experiments" / "calibration" / "tlb-window.py"
    spec = importlib.util.spec_from_file_location("tlb_window", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _terms(capsys, spacing):
    assert _module().main(["--profile", "amd-epyc-zen4-long", "--spacing", str(spacing),
                           "--window", "6000,8000", "--stride", "250", "--terms"]) == 0
    out = capsys.readouterr().out.splitlines()
    sweep = float(re.search(r"sweep ([\d.]+) ms per step", out[0]).group(1))
    terms = {}
    for line in out[1:]:
        m = re.match(r"\s+(.+?)\s+(-?[\d.]+) ms per step\s+(-?[\d.]+) ns per key read", line)
        if m:
            terms[m.group(1)] = float(m.group(2))
    return sweep, terms


def test_the_terms_add_up_to_the_sweep_and_only_the_tlb_term_follows_the_key_spacing(capsys):
    wide_sweep, wide = _terms(capsys, 548)
    close_sweep, close = _terms(capsys, 420)
    assert list(wide) == ["fixed", "entries cloned", "entries visited",
                          "key reads (scan_node_ns)", "cache levels' misses", "data TLB misses"]
    assert abs(sum(wide.values()) - wide_sweep) < 0.1
    assert abs(sum(close.values()) - close_sweep) < 0.1
    for name in wide:
        if name != "data TLB misses":
            assert wide[name] == close[name]
    # keys 548 B apart lie on ~30 % more pages (and read the curves measured on that layout,
    # session 60): past the TLB's reach at step 8,000 they miss more
    assert wide["data TLB misses"] > 1.3 * close["data TLB misses"] > 0
    # the locator's per-entry work is a rounding error against the key reads
    assert wide["entries cloned"] + wide["entries visited"] < 0.001 * wide_sweep
