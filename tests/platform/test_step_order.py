"""A p10-ema training step's heap events against real burn's malloc log
(experiments/probes/step_order.py): the share of a step's events (kind and size, in order)
the simulator makes as real burn 0.22.1 does, with SGD and with Adam. The thresholds are
this recording's; a change that puts a step's events out of burn's order lowers them.
(1.0: every event of the step, in order; log-no-ema's step has two frees swapped.)"""

import sys

import pytest

from sim import paths

sys.path.insert(0, str(paths.ROOT / "experiments" / "probes"))

import step_order  # noqa: E402


@pytest.mark.parametrize("log, share", [("p10-ema-without", 1.0),
                                        ("p10-ema-adam-without", 1.0),
                                        ("p10-ema-adam-target-without", 1.0),
                                        ("p10-ema-adam-log-no-ema", 0.998)])
def test_a_training_step_makes_burns_heap_events_in_order(log, share):
    ratio, real, simulated, _ = step_order.compare(log)
    assert len(real) > 400 and len(simulated) > 400
    assert ratio >= share, f"{ratio:.1%} of a step in burn's order"


def test_steps_start_at_the_pack_buffer():
    events = ["a8", "m132096", "c8", "f8", "f132096", "a16", "m132096", "f16"]
    assert step_order.steps_of(events) == [["m132096", "c8", "f8", "f132096", "a16"]]
