"""RSS rows of a loop whose glibc arena trims its top between samples: the model counts the
trims (Simulation.top_trims) and a comparison grades such a row against the measured
run-to-run range (sim.analysis.compare.join), as it does a text-dominated one."""

from sim.analysis.compare import join
from sim.engine.profile import load_profile
from sim.engine.runner import run_cell
from sim.engine.simulation import Simulation


def _measured(note, probe="p10-ema --quick", metric="rss_delta", value="7.2"):
    return {"experiment": "p10-ema", "variant": "without", "phase": "", "x": "100",
            "x_unit": "step", "metric": metric, "value": value, "unit": "MiB", "note": note,
            "probe": probe}


def _predicted(value, **extra):
    return dict({"experiment": "p10-ema", "variant": "without", "phase": "", "x": 100,
                 "x_unit": "step", "metric": "rss_delta", "value": value, "unit": "MiB"},
                **extra)


def test_a_row_whose_arena_trimmed_is_graded_against_the_runs_range():
    spread = _measured("mean of 5 fresh runs (6.25, 7.78, 6.25, 7.59, 6.36 MiB)")
    (e,) = join([spread], [_predicted(6.2, top_trims=50)])
    assert e["ok"] and e["range"] == (6.25, 7.78)
    assert "trimmed 50 times" in e["note"] and "run-to-run range 6.25..7.78" in e["note"]
    # outside the range widened by 10 %: a miss
    (e,) = join([spread], [_predicted(5.5, top_trims=50)])
    assert not e["ok"]
    # a single run: graded as a point, the note says the spread is unmeasured
    (e,) = join([_measured("one run")], [_predicted(6.2, top_trims=50)])
    assert not e["ok"] and "spread is unmeasured" in e["note"]
    # no trims since the previous sample, or not a probe's row: a point, no note
    (e,) = join([spread], [_predicted(6.2)])
    assert not e["ok"] and e["note"] == ""
    (e,) = join([_measured("mean of 2 fresh runs (6.2, 7.8 MiB)", probe="")],
                [_predicted(6.2, top_trims=3)])
    assert e["note"] == ""


def test_a_growth_row_is_graded_in_its_own_unit():
    spread = _measured("mean of 3 fresh runs (4.4, 11.1, 21.0 KB)",
                       metric="rss_growth_per_step", value="12.2")
    predicted = _predicted(2.6, metric="rss_growth_per_step", unit="KB", top_trims=4)
    (e,) = join([dict(spread, unit="KB")], [predicted])
    assert not e["ok"] and e["range"] == (4.4, 21.0)


def test_rss_rows_count_the_arenas_trims_since_the_previous_sample():
    sim = Simulation(load_profile("linux-x86_64"))
    arena = sim.allocator.arena
    sim.sample(1, "step", observables=False, rss_bytes=sim.rss_bytes())
    arena.trims += 2                      # two trims of the top since that sample
    sim.sample(2, "step", observables=False, rss_bytes=sim.rss_bytes(), heap_bytes_delta=0)
    sim.sample(3, "step", observables=False, rss_growth_per_step=0.0)
    first, second, heap, third = sim.rows
    assert "top_trims" not in first and second["top_trims"] == 2
    assert "top_trims" not in heap and "top_trims" not in third


def test_a_macos_run_carries_no_trims():
    rows = run_cell("p10-ema", "without", profile="m2max-macos",
                    sets={"steps": "20", "report_at": "1,10"})
    assert not any("top_trims" in r for r in rows)


def test_p10_emas_linux_loop_trims_its_top_between_samples():
    rows = run_cell("p10-ema", "without", profile="linux-x86_64",
                    sets={"steps": "50", "report_at": "1,50"})
    trimmed = {(r["metric"], r["x"]) for r in rows if r.get("top_trims")}
    assert ("rss_delta", 50) in trimmed and ("rss_growth_per_step", 50) in trimmed
