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


def test_a_probes_point_says_how_it_was_graded_in_fields_of_its_own(tmp_path):
    """mechanism and graded_against (sim.analysis.compare.GRADING_COLUMNS), which sim fixes
    groups by, not the note's wording; errors.csv has the columns where a row has them."""
    import csv
    from sim.output.results import write_data
    spread = _measured("mean of 5 fresh runs (6.25, 7.78, 6.25, 7.59, 6.36 MiB)")
    (trim,) = join([spread], [_predicted(6.2, top_trims=50)])
    assert (trim["mechanism"], trim["graded_against"]) == ("top trims", "range")
    (once,) = join([_measured("one run")], [_predicted(6.2, top_trims=50)])
    assert (once["mechanism"], once["graded_against"]) == ("top trims", "point")
    (text,) = join([spread], [_predicted(6.2, text_share=0.9)])
    assert (text["mechanism"], text["graded_against"]) == ("text", "range")
    (heap,) = join([spread], [_predicted(6.2)])
    assert (heap["mechanism"], heap["graded_against"]) == ("", "point")
    (seed,) = join([_measured("mean of 2 fresh runs (6.2, 7.8 MiB)", probe="")],
                   [_predicted(6.2, top_trims=3)])
    assert "mechanism" not in seed and "graded_against" not in seed
    write_data(tmp_path, [], [seed])
    assert "mechanism" not in (tmp_path / "errors.csv").read_text().splitlines()[0]
    write_data(tmp_path, [], [seed, trim, heap])
    rows = list(csv.DictReader((tmp_path / "errors.csv").open()))
    assert [(r["mechanism"], r["graded_against"]) for r in rows] == [
        ("", ""), ("top trims", "range"), ("", "point")]


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


def test_a_level_row_is_graded_by_the_models_two_levels():
    # the model's point 7.37 MiB trimmed; had its latest trim not happened the heap would
    # hold 1,179,648 B more (1.125 MiB): the band 7.37..8.495 meets the runs' 8.61..8.94
    # widened by 10 % (p10-ema detach, session 54), where the point alone misses
    spread = _measured("mean of 5 fresh runs (8.609, 8.94, 8.8, 8.8, 8.8 MiB)", value="8.79")
    (e,) = join([spread], [_predicted(7.37, top_trims=20, untrimmed_bytes=1_179_648)])
    assert e["ok"] and e["band"] == (7.37, 7.37 + 1.125)
    assert "untrimmed level 8.495" in e["note"]
    (e,) = join([spread], [_predicted(7.37, top_trims=20)])
    assert not e["ok"] and "band" not in e
    # in bytes, the same band
    (e,) = join([dict(spread, metric="rss_bytes", unit="B", value="12241306",
                      note="mean of 2 fresh runs (12263424, 12619776 B)")],
                [_predicted(10_604_544, metric="rss_bytes", unit="B", top_trims=20,
                            untrimmed_bytes=1_179_648)])
    assert e["ok"] and e["band"] == (10_604_544, 11_784_192)
    # a band wholly below the widened range still misses
    (e,) = join([spread], [_predicted(6.0, top_trims=20, untrimmed_bytes=1 << 20)])
    assert not e["ok"]


def test_a_growth_row_has_no_band():
    # a rate: both its ends may sit at either level, so it keeps its point grade
    spread = _measured("mean of 3 fresh runs (60.0, 64.4, 68.8 KB)",
                       metric="rss_growth_per_step", value="64.4")
    (e,) = join([dict(spread, unit="KB")],
                [_predicted(27.0, metric="rss_growth_per_step", unit="KB", top_trims=20,
                            untrimmed_bytes=1_179_648)])
    assert not e["ok"] and "band" not in e


def test_the_untrimmed_level_is_the_resident_end_before_the_latest_trim():
    sim = Simulation(load_profile("linux-x86_64"))
    assert sim.untrimmed_bytes() == 0     # no trim yet
    heap = sim.heap
    small = heap.alloc(64)
    # under the mmap threshold (128 KiB): carved from the top, one after the other
    big = [heap.alloc(100 << 10) for _ in range(6)]
    arena = sim.allocator.arena
    for block in reversed(big[1:]):       # the top grows past the trim threshold: trimmed
        heap.free(100 << 10, block)
    trims, resident = arena.trims, arena.resident_end
    assert trims >= 1
    heap.free(100 << 10, big[0])          # the latest trim: from `resident` down
    assert arena.trims == trims + 1 and arena.trim_from == resident
    page = arena.page
    gave_back = -(-resident // page) * page - -(-arena.resident_end // page) * page
    assert gave_back >= 100 << 10 and sim.untrimmed_bytes() == gave_back
    # carved again past the resident end: faulted in, nothing above it any more
    again = [heap.alloc(100 << 10) for _ in range(4)]
    assert arena.trims == trims + 1 and sim.untrimmed_bytes() == 0
    del again, small


def test_p10_emas_detach_rows_carry_their_untrimmed_level():
    rows = run_cell("p10-ema", "detach", profile="linux-x86_64",
                    sets={"steps": "50", "report_at": "1,50"})
    (row,) = [r for r in rows if r["metric"] == "rss_delta" and r["x"] == 50]
    assert row["top_trims"] > 0 and row["untrimmed_bytes"] > 0
