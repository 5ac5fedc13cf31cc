"""The glibc arena model against real glibc 2.36: processes of real burn (probe programs,
p10-ema with SGD and Adam, ema-only, train-validate) recorded every malloc-family call
of their main thread with the address glibc returned and the program break after it
(experiments/probes/malloc-log). Replayed call by call on
:class:`~sim.platform.ptmalloc.PtmallocArena`, every chunk must land where glibc put it and
the break (the heap's growth and every trim) must follow glibc's."""

import sys

import pytest

from sim import paths

ROOT = paths.ROOT
sys.path.insert(0, str(ROOT / "experiments" / "probes"))

from arena_replay import read_log, replay  # noqa: E402

LOGS = sorted((ROOT / "experiments" / "measured" / "linux-x86_64" / "malloc-logs").glob("*.bin.xz"))


def test_the_logs_cover_trims_reallocs_and_aligned_requests():
    kinds = set()
    for path in LOGS:
        kinds |= {record[0] for record in read_log(path)}
    assert len(LOGS) >= 7 and {1, 2, 3, 4, 5} <= kinds


@pytest.mark.parametrize("path", LOGS, ids=[p.name.split(".")[0] for p in LOGS])
def test_every_chunk_lands_where_glibc_put_it(path):
    out = replay(read_log(path))
    assert out.placed > 1000
    assert out.first is None, f"record {out.first}: placed elsewhere than glibc"
    assert out.same == out.placed
    assert out.first_break is None, f"record {out.first_break}: the break differs"
    assert out.breaks == out.calls


def _glibc_trims(records):
    """How often the real break fell (a trim), from the log."""
    breaks = [record[5] for record in records[1:]]
    return sum(1 for before, after in zip(breaks, breaks[1:]) if after < before)


def test_sgd_and_adam_trim_as_glibc_did():
    """SGD's top sits at the trim threshold: whether a step trims depends on the run (the
    order of frees follows burn's randomly seeded HashSets); replaying a run's calls, the
    model trims exactly where glibc did. Adam's temporaries trim about twice per step."""
    logs = {p.name.split(".")[0]: p for p in LOGS}
    for name, at_least in (("p10-ema-without", 1), ("p10-ema-adam-without", 150)):
        records = read_log(logs[name])
        trims = replay(records).trims
        assert trims == _glibc_trims(records) >= at_least
