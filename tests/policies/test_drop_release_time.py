"""drop-release's children table costs time: one hash lookup per entry update, charged
once whether the loop is simulated iteration by iteration or fast-forwarded."""

import pytest

from sim.engine.runner import run_cell
from sim.platform.timing import Timing

SETS = {"steps": "60", "report_at": "1,50,60"}


@pytest.mark.parametrize("variant", ["ema-only", "detach"])
def test_fast_forward_charges_the_kept_chains_lookups_as_exact_mode_does(variant):
    ff = run_cell("p10-ema", variant, "drop-release", sets=SETS)
    exact = run_cell("p10-ema", variant, "drop-release", sets=SETS, fast_forward=False)
    assert ff == exact


def test_the_lookups_add_at_most_their_count_times_lookup_ns(monkeypatch):
    charged = []
    real = Timing.lookups

    def counting(self, n):
        charged.append((n, self.lookup_ns()))
        real(self, n)

    monkeypatch.setattr(Timing, "lookups", counting)
    sims = []
    with_lookups = run_cell("p10-ema", "ema-only", "drop-release", sets=SETS, keep=sims)
    assert charged and all(n > 0 and ns > 0 for n, ns in charged)
    ns = sum(n * each for n, each in charged)
    monkeypatch.setattr(Timing, "lookups", lambda self, n: None)
    without = run_cell("p10-ema", "ema-only", "drop-release", sets=SETS)
    at = {r["x"]: r["value"] for r in with_lookups if r["metric"] == "sim_time_ms"}
    base = {r["x"]: r["value"] for r in without if r["metric"] == "sim_time_ms"}
    assert max(at) == 60
    # the run's clock reads from its first step: the lookups before it are not in it
    assert 0.5 * ns / 1e6 < at[60] - base[60] <= ns / 1e6
