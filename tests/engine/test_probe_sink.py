"""The Linux probe keeps its report rows in memory (experiments/common.ProbeSink): on
glibc's arena the small blocks each report leaves behind pin the heap, and the measured
RSS of p10-ema-adam's target-without mode creeps (9.0 -> 12.5 MiB over 2000 steps) where
a program that prints its lines stays flat. Replaying the probe's real malloc log on the
arena model creeps the same way (experiments/measured/linux-x86_64/ACCURACY.md)."""

from sim.engine.runner import run_cell


def _rss(sink):
    rows = run_cell("p10-ema-adam", "target-without", profile="linux-x86_64",
                    sets={"steps": 300, "report_at": "1,50,100,200,300", "sink": sink})
    return {r["x"]: r["value"] for r in rows if r["metric"] == "rss_delta"}


def test_the_probes_kept_rows_make_rss_creep_where_printing_does_not():
    probe, printed = _rss("probe"), _rss("print")
    assert probe[1] == printed[1]                  # the first report: nothing kept yet
    assert probe[300] - probe[50] > 0.5            # MiB: the rows pin the heap
    assert printed[300] - printed[50] < 0.2        # no creep (a trim may lower it)
    assert max(printed[s] for s in (100, 200, 300)) - min(printed[s] for s in (100, 200, 300)) < 0.2


class _Sim:
    """Just what ProbeSink needs: a heap that lists its events."""

    class heap:                      # noqa: N801 (a stand-in namespace)
        events = []

        @classmethod
        def alloc(cls, nbytes, align=0):
            cls.events.append(f"a{nbytes}")

        @classmethod
        def realloc(cls, old, nbytes, block=None):
            # Heap.realloc: a first block (nothing to grow) is an alloc
            cls.events.append(f"r{old}>{nbytes}" if old else f"a{nbytes}")

        @classmethod
        def free(cls, nbytes, block=None):
            cls.events.append(f"f{nbytes}")

        @classmethod
        def excluded(cls):
            return cls


def test_the_probe_names_the_parts_of_the_steps_it_shows():
    """ema.rs formats ``"{step} {part}"`` after each part of steps 1-3 and 50: an empty
    String grown to 8 bytes by the step's digits, then to 16 if the name needs it."""
    from common import ProbeSink   # experiments/ is on the path (conftest)
    sink = ProbeSink(_Sim, "p10-ema", "without")
    events = _Sim.heap.events
    events.clear()
    sink.phase(1, "forward")       # "1 forward": 9 bytes
    assert events == ["a8", "r8>16", "f16"]
    events.clear()
    sink.phase(3, "sgd")           # "3 sgd": 5 bytes
    assert events == ["a8", "f8"]
    events.clear()
    sink.phase(4, "forward")       # not shown
    sink.phase(49, "ema")
    assert events == []
    sink.phase(50, "backward")     # "50 backward": 11 bytes
    assert events == ["a8", "r8>16", "f16"]
