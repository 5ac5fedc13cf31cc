"""`sim bench --quick`: every case runs, and the report carries the issue's figures."""

import json

from click.testing import CliRunner

from sim.cli import cli


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
