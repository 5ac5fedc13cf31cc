"""The sweep's growth table reads a run's loop series, beside one-time phase rows."""

from sim.analysis.growth import growth_of_runs
from sim.engine.runner import run_cell


def _rows(workload, variant, **sets):
    rows = run_cell(workload, variant, sets=sets)
    for r in rows:
        r.setdefault("policy", "burn-0.22.1")
    return rows


def test_p10_ema_growth_comes_from_its_steps_not_its_phase_rows():
    """p10-ema also records resident text per phase at steps 0 and 1; the growth per
    step is still the loop's (the detach chain grows, `without` is flat)."""
    rows = _rows("p10-ema", "detach", steps=60, report_at="1,30,60")
    assert any(r["phase"] for r in rows)
    (g,) = growth_of_runs(rows, lambda r: "p10-ema")
    assert g.memory_bytes is not None and g.memory_bytes > 1000   # B per step: the chain
    assert g.ms_last is not None
    (flat,) = growth_of_runs(_rows("p10-ema", "without", steps=60, report_at="1,30,60"),
                             lambda r: "p10-ema")
    assert flat.memory_bytes is not None and abs(flat.memory_bytes) < 100
