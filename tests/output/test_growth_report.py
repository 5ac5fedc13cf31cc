"""The growth summary and the report, on small synthetic runs: what counts as growth
(a bounded sawtooth does not), a phased run gets a row per phase, a missed panic is
counted as a miss, the figures' legend is said once."""

import math

from sim.output import report
from sim.analysis.growth import GROWS_BYTES, growth_of_runs, late_rise, memory_level

REF = "burn-0.22.1"


def _row(x, metric, value, unit, *, phase="", x_unit="k_iterations", policy=REF,
         experiment="w", variant="v", note=""):
    return dict(experiment=experiment, variant=variant, phase=phase, x=float(x),
                x_unit=x_unit, metric=metric, value=float(value), unit=unit, note=note,
                policy=policy, profile="p", params="")


def _series(xs, metric, values, unit="B", **kw):
    return [_row(x, metric, v, unit, **kw) for x, v in zip(xs, values)]


def _growth(rows):
    return growth_of_runs(rows, lambda r: r["experiment"])


XS = [0, 100, 200, 300, 400]
#: the sweep-every-1024 run of the issue: the heap's samples alias a sawtooth, RSS is flat
SAWTOOTH_HEAP = [1408, 727608, 347352, 1073528, 693464]
FLAT_RSS = [2211840, 3719168, 3719168, 3719168, 3719168]
LEAK_HEAP = [1408, 107924544, 215846944, 323771936, 431695072]
LEAK_RSS = [2211840, 116195328, 229883904, 343572480, 457261056]


def _sawtooth_and_leak():
    sawtooth = (_series(XS, "heap_bytes", SAWTOOTH_HEAP, policy="sweep-often")
                + _series(XS, "rss_bytes", FLAT_RSS, policy="sweep-often"))
    leak = _series(XS, "heap_bytes", LEAK_HEAP) + _series(XS, "rss_bytes", LEAK_RSS)
    return leak + sawtooth


def test_late_rise_of_a_sawtooth_is_zero_and_of_a_leak_its_slope():
    assert late_rise([0, 1, 2, 3], [0, 100, 0, 100]) == (0, 2)
    rise, span = late_rise(XS, LEAK_HEAP)
    assert span == 200 and rise == LEAK_HEAP[-1] - LEAK_HEAP[2]
    # a one-time rise at the start (pages made resident once) is not growth
    assert late_rise(XS, FLAT_RSS) == (0, 200)


def test_bounded_sawtooth_is_not_growth_a_leak_is():
    ref, sawtooth = _growth(_sawtooth_and_leak())
    assert ref.memory_metric == "rss_bytes" and ref.memory_grows is True
    assert ref.memory_bytes == (LEAK_RSS[-1] - LEAK_RSS[2]) / 200 * 100   # B per 100k it.
    assert sawtooth.memory_metric == "rss_bytes"
    assert sawtooth.memory_grows is False and sawtooth.memory_bytes == 0
    # its live heap's sampled maxima do rise: kept beside the verdict, to be reported
    assert sawtooth.heap_grows is True and sawtooth.heap_total_bytes > GROWS_BYTES


def test_the_table_lists_the_sawtooth_as_removing_the_growth():
    md, html = report.render({}, [], _growth(_sawtooth_and_leak()), [], None)
    answer, details = [[c.strip() for c in line.strip("|").split("|")]
                       for line in md.splitlines() if line.startswith("| w / v |")]
    # the answer: fixed by sweep-often, at the price of the height its RSS plateaus at
    assert answer[2] == f"`sweep-often` (peak {FLAT_RSS[-1] / 2**20:.3g} MiB)"
    assert details[2] == "rss_bytes"                # the metric the row is judged by
    assert details[6] == "memory removed (peak 3.55 MiB)"
    assert "`sweep-often`: w / v: RSS flat, live heap" in md
    assert "late half" in md and "64 KiB" in md     # the rule is stated


def test_a_heap_only_series_is_judged_by_the_heap_with_gpu():
    rows = (_series([50, 100], "heap_bytes", [1000, 1000 + 2 * GROWS_BYTES], x_unit="forwards")
            + _series([50, 100], "gpu_in_use", [1, 1], unit="MiB", x_unit="forwards"))
    (g,) = _growth(rows)
    assert g.memory_metric == "heap_bytes + gpu_in_use" and g.heap_grows is None
    assert g.memory_grows is True and g.memory_bytes == 2 * GROWS_BYTES / 50
    assert g.unit == "per forward"


def test_rss_growing_with_a_flat_heap_is_growth_and_named():
    """The pytorch policy's allocator drift is in RSS only: judged by RSS, it grows."""
    xs = [1, 50, 100, 200, 500, 1000, 2000]
    rows = (_series(xs, "heap_bytes", [6431822] * 7, x_unit="step", policy="pytorch")
            + _series(xs, "rss_bytes", [13320192 + 2800 * x for x in xs], x_unit="step",
                      policy="pytorch")
            + _series(xs, "sim_time_ms", [0.28 * x for x in xs], unit="ms", x_unit="step",
                      policy="pytorch"))
    (g,) = _growth(rows)
    assert g.memory_metric == "rss_bytes"
    assert g.memory_grows is True and g.heap_grows is False
    assert math.isclose(g.memory_bytes, 2800) and g.time_grows is False
    burn = _growth([dict(r, policy=REF) for r in rows if r["metric"] != "rss_bytes"])
    md, _ = report.render({}, [], burn + [g], [], None)
    assert "`pytorch`: w / v: RSS 2.73 KiB per step, live heap flat" in md


def _phased(policy=REF, generate_growth=6000):
    rows = []
    for x in (50, 100, 150, 200):
        rows += [_row(x, "heap_bytes", 4485248, "B", phase="train", x_unit="step",
                      policy=policy),
                 _row(x, "sim_time_ms", 0.13 * x, "ms", phase="train", x_unit="step",
                      policy=policy)]
    for x in (50, 100, 150, 200, 250, 300, 350, 400):
        rows += [_row(x, "heap_bytes", 4810296 + generate_growth * x, "B", phase="generate",
                      x_unit="samples", policy=policy),
                 _row(x, "sim_time_ms", 27 + 0.016 * x, "ms", phase="generate",
                      x_unit="samples", policy=policy)]
    return rows


def test_a_phased_run_gets_a_row_per_phase():
    """train-validate's samples share x across phases (train in steps, then generate in
    samples): each phase is a series of its own, none is dropped."""
    train, generate = _growth(_phased())
    assert (train.phase, train.unit, train.memory_grows) == ("train", "per step", False)
    assert (generate.phase, generate.unit, generate.memory_grows) == (
        "generate", "per sample", True)
    assert math.isclose(generate.memory_bytes, 6000)
    assert train.run != generate.run and generate.label == "w / v (generate)"
    md, _ = report.render({}, [], _growth(_phased() + _phased("fix", 0)), [], None)
    assert "| w / v (train) | per step | heap_bytes | flat |" in md
    assert ("| w / v (generate) | per sample | heap_bytes | 5.86 KiB | flat, 16 µs | none | "
            "memory removed (peak 4.59 MiB); same time |") in md
    # the answer lists only the phase that grows, and the fix's plateau
    # burn's own highest sample beside its growth: what the fix's peak is set against
    # (pit-infer B read "skip-untracked (peak 106 MiB)" with nothing to set it against;
    # walkthrough, session 58)
    peak = max(r["value"] for r in _phased() if r["metric"] == "heap_bytes")
    assert ("| w / v (generate) | memory +5.86 KiB per sample (to "
            f"{report._bytes(peak)}); time 16 µs per sample | "
            "`fix` (peak 4.59 MiB; same time) | **none** |  |") in md


def test_parallel_phases_without_memory_get_time_rows_and_a_reason():
    """two-thread-infer: one ms_per_step series per thread, the heap once at the end."""
    rows = []
    for x in (50, 100, 150, 200):
        for thread in ("thread-1", "thread-0"):
            rows.append(_row(x, "ms_per_step", 0.0203, "ms", phase=thread, x_unit="forwards"))
    rows.append(_row(200, "heap_bytes", 11013944, "B", phase="end", x_unit="forwards"))
    growths = _growth(rows)
    assert [g.phase for g in growths] == ["thread-0", "thread-1"]
    for g in growths:
        assert g.has_figures and g.time_grows is False and g.memory_grows is None
        assert g.note.endswith("memory recorded once: phase end at forward 200")


def test_a_one_sample_run_is_listed_with_its_reason():
    rows = [_row(0, "heap_bytes", 975573, "B", x_unit="forwards", variant="build")]
    (g,) = _growth(rows)
    assert not g.has_figures and g.note == "one sample, at forward 0: no loop to grow along"
    md, _ = report.render({}, [], [g], [], None)
    assert "- w / build: one sample, at forward 0: no loop to grow along." in md


def _panic_error():
    """p10-ema target: the panic measured at step 2, predicted at step 3."""
    nan = float("nan")
    return dict(experiment="w", variant="target", phase="", x=2.0, x_unit="step",
                metric="panic", unit="event", measured=1.0, predicted=nan, abs_error=nan,
                rel_error=nan, tolerance=0.0, ok=False, status="predicted", policy=REF,
                profile="p", source="seeds.csv",
                note="predicted panic at step 3: graph tape has already been consumed")


def _memory_error(ok=True):
    return dict(experiment="w", variant="detach", phase="", x=50.0, x_unit="step",
                metric="heap_bytes", unit="B", measured=100.0, predicted=101.0,
                abs_error=1.0, rel_error=0.01, tolerance=0.05, ok=ok, status="fitted",
                policy=REF, profile="p", source="seeds.csv", note="")


def test_a_panic_predicted_at_another_step_is_a_miss():
    rows = [_row(1, "heap_bytes", 6435526, "B", x_unit="step", variant="target"),
            _row(3, "panic", 1, "event", x_unit="step", variant="target")]
    growth = _growth(rows)
    assert growth[0].panic_x == 3
    md, _ = report.render({}, [_panic_error(), _memory_error()], growth, [], None)
    assert "**1 of 2 points within tolerance**; 1 out of tolerance (including 1 missed " \
           "event(s)), 0 unpredicted." in md
    # points = fitted + predicted + unpredicted; the miss is a predicted point, not ok
    assert "| w | event | burn-0.22.1 | 1 | 0 | 0/0 | 0/1 | 0 | 1 missed event(s) |" in md
    point = next(line for line in md.splitlines()
                 if line.startswith("| w | target |  | 2 | panic (event) |"))
    assert "| panic at step 3 | missed | **no** | predicted |" in point
    assert "### Not predicted" not in md
    assert "a panic predicted at another step, or none predicted, is a *miss*" in md


def test_a_missed_panic_where_none_is_predicted():
    rows = [_row(x, "heap_bytes", 100, "B", x_unit="step", variant="target")
            for x in (1, 2, 3)]
    md, _ = report.render({}, [_panic_error()], _growth(rows), [], None)
    assert "| no panic | missed |" in md


def test_the_figure_legend_is_said_once_and_measured_points_counted():
    figures = [("w", "w.png"), ("other", "other.png")]
    md, html = report.render({}, [_memory_error(), _memory_error(False)], [], figures, None)
    assert md.count("black-edged markers") == 1 and html.count("black-edged markers") == 1
    assert md.count("Black-edged") == 0
    w = md.index("### w\n")
    other = md.index("### other\n")
    assert "2 measured point(s) drawn against the predictions." in md[w:other]
    assert "No measured points: predictions only." in md[other:]


def test_memory_level_follows_the_verdict():
    """The summary's grade of a cell comes from the same verdict as the table: a bounded
    sawtooth is flat (0), a growing series never is, however small beside the reference."""
    ref, sawtooth = _growth(_sawtooth_and_leak())
    assert memory_level(sawtooth, ref) == 0 and memory_level(ref, ref) == 3
    slow = (_series(XS, "heap_bytes", LEAK_HEAP, policy="slow")
            + _series(XS, "rss_bytes", [2211840 + 1000 * x for x in XS], policy="slow"))
    (g,) = _growth(slow)
    assert g.memory_grows and memory_level(g, ref) == 1
    assert memory_level(g, None) == 4 and memory_level(None, ref) is None


ONCE = """\
PARAMS = {"iterations": 10}

def run(sim, variant, iterations):
    yield sim.sample(iterations, "iterations", rss=1.0)
"""


def test_a_sweep_sampled_once_per_run_says_why_it_has_no_summary_and_titles_by_what_it_shows(
        tmp_path, capsys):
    """A user loop sampled once per run: no summary.png (nothing grows along a loop) and the
    report said nothing of it, and titled its figure "predicted vs measured" with no
    measurement (session 57's list): the report says why, and the figure's title says
    what it draws."""
    from clirun import run_cli
    path = tmp_path / "once.py"
    path.write_text(ONCE)
    out = tmp_path / "out"
    code, _, lines = run_cli(["sweep", "-w", str(path), "-p", "burn-0.22.1", "-p",
                              "drop-release", "--out", str(out)], capsys)
    assert code == 0, lines
    assert not (out / "summary.png").exists() and (out / "once.png").is_file()
    report = (out / "report.md").read_text()
    assert "No summary figure: no run has a loop to grow along" in report
    assert "![once: predicted, no measurements](once.png)" in report
    assert "predicted vs measured" not in report
