"""When glibc trims a p10-ema process's heap (experiments/probes/trims.py): with gemm's
first call reading sysfs, the simulator's program break is the recorded SGD run's at the
start of each of its first 54 steps and of all but a few of the next 48, trims included
(which frees take which chunk decides the rest); and the recorded 600-step runs' summary
shows how differently fresh runs trim."""

import csv
import sys

from sim import paths

ROOT = paths.ROOT
sys.path.insert(0, str(ROOT / "experiments" / "probes"))

import trims  # noqa: E402

LOGS = ROOT / "experiments" / "measured" / "linux-x86_64" / "malloc-logs"


def test_the_simulated_break_is_the_logged_runs_at_every_step():
    real = trims.real_steps(LOGS / "p10-ema-without.bin.xz")[:102]
    simulated = trims.simulated_steps("without", 102)
    assert len(real) == len(simulated) == 102
    # the break at the start of each step: the same through step 54, then at all but a
    # few steps (one 128-KiB pad higher where the model did not trim)
    differ = [i + 1 for i, (r, s) in enumerate(zip(real, simulated)) if r[0] != s[0]]
    assert not differ or differ[0] >= 55
    assert len(differ) <= 10
    # trimmed in nearly every step from the fourth on, in both
    assert trims.per_hundred(real)[0] >= 95 and trims.per_hundred(simulated)[0] >= 85


def test_fresh_runs_trim_differently():
    rows = list(csv.DictReader(open(ROOT / "experiments" / "measured" / "linux-x86_64"
                                    / "diagnostics" / "p10-ema-sgd-trims.csv")))
    total = {}
    for row in rows:
        total[row["run"]] = int(row["trims"])
    assert len(total) == 3 and min(total.values()) < 250 < max(total.values())


def test_per_hundred_counts_each_block_of_steps():
    steps = [(0, i // 3) for i in range(1, 301)]
    assert trims.per_hundred(steps) == [33, 33, 34]
