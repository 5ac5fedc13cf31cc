"""`sim bench --quick`: every case runs, and the report carries the issue's figures."""

import json

from click.testing import CliRunner

from sim.commands.cli import cli


def test_quick_bench_reports_cases_memory_and_the_ema_run(tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(cli, ["bench", "--quick", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    cases = {(c["case"], c["mode"]) for c in data["cases"]}
    assert ("untracked add loop", "fast-forward") in cases and ("EMA step with backward",
                                                                 "exact") in cases
    assert all(c["ops"] > 0 and c["wall_s"] >= 0 for c in data["cases"])
    assert all(0 < b < 1024 for b in data["python_bytes_per_live_node"].values())
    assert [f["case"] for f in data["event_floor"]] == ["untracked add loop",
                                                        "tracked add loop"]
    assert all(f["ops_per_s"] > 0 for f in data["event_floor"])
    # every loop kind fast-forward is asked to cover, run both ways to the same end state
    from sim.commands.bench import LOOP_KINDS
    assert [k["kind"] for k in data["loop_kinds"]] == list(LOOP_KINDS)
    assert all(k["same_end"] and k["ops"] > 0 for k in data["loop_kinds"])
    # and what fast-forward applied of each in closed form, by shape
    applied = {k["kind"]: k["applied"] for k in data["loop_kinds"]}
    assert applied["three untracked ops"]["graphs"] > 1900
    assert applied["inference forward"]["chain"] > 150
    assert "iterations applied in closed form" in result.output
    assert "validation loss summed" in result.output
    ema, deepening, leak, balanced = data["scale"]
    assert ema["steps"] == 1000 and ema["wall_s"] > 0 and ema["chain_steps"] > 900
    assert "p10-ema detach, 1,000 steps" in result.output
    # the target EMA under detach-constant: a tape one step deeper each time, replayed
    assert deepening["steps"] == 500 and deepening["drift_steps"] > 450
    assert "p10-ema target, 500 steps, detach-constant" in result.output
    # log under burn-0.20-pre.1: a graph leaked every step, built again for the skipped ones
    assert leak["steps"] == 500 and leak["leak_steps"] > 350
    assert "p10-ema log, 500 steps, burn-0.20-pre.1" in result.output
    # ema-balanced: a chain whose members keep each step's weight, its events replayed
    assert balanced["steps"] == 1000 and balanced["chain_steps"] > 700
    assert "ema-balanced detach, 1,000 steps" in result.output


def test_event_floor_counts_the_events_and_objects_of_an_op():
    """The floor's counts are the model's: what an add keeps is adleak-count's blocks per
    op (8.33 untracked, 5.17 tracked), and burn's objects are built one Python object each
    (an untracked add builds a graph: its locator entry, server, memory and four tables)."""
    from sim.commands.bench import (CASES, _constructors_per_op, _event_floor, _events_per_op,
                           _run_case)
    from sim.engine.profile import load_profile
    profile = load_profile("m2max-macos")
    counts = {}
    for name in ("untracked add loop", "tracked add loop"):
        ops, _, sim = _run_case(CASES[name][0], 3000, False, profile)
        allocs, frees = _events_per_op(sim, ops)
        counts[name] = (allocs, frees, _constructors_per_op(CASES[name][0], profile))
        assert _event_floor(allocs, frees, counts[name][2], 1000) > 0
    allocs, frees, objects = counts["untracked add loop"]
    assert abs((allocs - frees) - 8.333) < 0.01 and 19 < allocs < 20
    assert 14 <= objects < 15
    allocs, frees, objects = counts["tracked add loop"]
    assert abs((allocs - frees) - 5.167) < 0.01 and 17 < allocs < 18
    assert 7 <= objects < 8


def test_bench_table_states_the_floor_against_the_target():
    from sim.commands.bench import format_table
    result = {"cases": [{"case": "untracked add loop", "mode": "exact", "iterations": 10,
                         "wall_s": 1.0, "ops_per_s": 20_000}],
              "event_floor": [{"case": "untracked add loop", "allocs_per_op": 19.34,
                               "frees_per_op": 11.0, "objects_per_op": 14.32,
                               "ops_per_s": 160_000}],
              "python_bytes_per_live_node": {}, "peak_rss_bytes": 1e6}
    table = format_table(result)
    assert ("event floor (untracked add loop): its 19.34 heap allocations, 11.00 frees and "
            "14.32 objects per op alone") in table
    assert "160,000 ops/s, under the 300,000 ops/s" in table
    assert "the exact engine runs at 12.5% of the floor" in table
