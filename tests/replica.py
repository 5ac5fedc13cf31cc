"""The rows of a probe's replica (a workload that mirrors a real-burn probe, such as
mechanism-cost's variants), keyed for tests that run it under two profiles and compare."""

from sim.engine.runner import run_cell

#: train-validate at quick loop counts (a few reports, validations and generation samples)
QUICK_TV = {"steps": "20", "validate_every": "5", "val_batches": "2", "samples": "40",
            "report_every": "5"}


def replica_rows(profile, experiment, variant, params=None) -> dict:
    """``experiment``/``variant`` under burn-0.22.1 and ``profile``, without the
    bookkeeping observables: ``{(phase, x, metric): value}``."""
    rows = run_cell(experiment, variant, "burn-0.22.1", profile, params or {},
                    observables=False)
    return {(r.get("phase", ""), r["x"], r["metric"]): r["value"] for r in rows}
