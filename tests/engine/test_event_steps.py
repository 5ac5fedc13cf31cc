"""The probes' report and validation steps (experiments/common.event_steps) are made as
the loop reaches them: a run asked for 10**30 steps starts at once and its time budget
stops it, where a set of every step was built in one call no alarm interrupts (`sim run
train-validate --set steps=1e30 --timeout 5` ran past its budget, memory growing)."""

import itertools
import random

import pytest

from common import event_steps   # experiments/ is on the path (conftest)
from sim.engine.runner import run_cell
from sim.engine.simulation import Limits
from sim.errors import LimitExceeded


def test_the_steps_are_every_period_s_multiples_and_the_last_once_ascending():
    rng = random.Random(59)
    for _ in range(300):
        last = rng.randrange(0, 200)
        periods = [rng.randrange(1, 40) for _ in range(rng.randrange(1, 4))]
        expected = sorted(set().union(*(range(p, last + 1, p) for p in periods)) | {last})
        assert list(event_steps(last, *periods)) == expected


def test_a_huge_run_s_steps_are_made_lazily():
    assert list(itertools.islice(event_steps(10 ** 30, 7, 5), 5)) == [5, 7, 10, 14, 15]


def test_a_run_of_10_30_steps_is_stopped_by_its_time_budget():
    with pytest.raises(LimitExceeded, match="time budget"):
        run_cell("train-validate", "autodiff", profile="m2max-macos",
                 sets={"steps": 10 ** 30}, limits=Limits(max_wall_s=1.0))
