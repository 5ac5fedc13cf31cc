"""The Linux probe keeps its report rows in memory (experiments/common.ProbeSink): on
glibc's arena the small blocks each report leaves behind pin the heap, and the measured
RSS of p10-ema-adam's target-without mode creeps (9.0 -> 12.5 MiB over 2000 steps) where
a program that prints its lines stays flat. Replaying the probe's real malloc log on the
arena model creeps the same way (experiments/measured/linux-x86_64/ACCURACY.md)."""

from sim.runner import run_cell


def _rss(sink):
    rows = run_cell("p10-ema-adam", "target-without", profile="linux-x86_64",
                    sets={"steps": 300, "report_at": "1,50,100,200,300", "sink": sink})
    return {r["x"]: r["value"] for r in rows if r["metric"] == "rss_delta"}


def test_the_probes_kept_rows_make_rss_creep_where_printing_does_not():
    probe, printed = _rss("probe"), _rss("print")
    assert probe[1] == printed[1]                  # the first report: nothing kept yet
    assert probe[300] - probe[50] > 0.5            # MiB: the rows pin the heap
    assert abs(printed[300] - printed[50]) < 0.2   # flat
