"""``drop(t)``: what took a handle is kept for the error of a later use, except for a
temporary only the call holds (``drop(a + b)``), which no one can use again; either way
the handle's parts are released at once, in the same order."""

import pytest

from sim.burn.tensor import Tensor, drop
from sim.engine.profile import load_profile
from sim.engine.simulation import Simulation
from sim.errors import UserError

PROFILE = load_profile("m2max-macos")


def _events(sim):
    heap = sim.heap
    return heap.live_bytes, heap.live_blocks, heap.allocs, sim.work_ps


def test_a_dropped_temporary_releases_what_a_named_handle_releases():
    runs = []
    for named in (False, True):
        sim = Simulation(PROFILE, fast_forward=False)
        dev = sim.device("flex").autodiff()
        a = Tensor.from_floats([1.0] * 16, dev)
        b = Tensor.from_floats([2.0] * 16, dev)
        for _ in range(5):
            if named:
                c = a.clone() + b.clone()
                drop(c)
                del c
            else:
                drop(a.clone() + b.clone())
        runs.append(_events(sim))
    assert runs[0] == runs[1]


def test_a_named_handle_dropped_keeps_what_took_it():
    sim = Simulation(PROFILE, fast_forward=False)
    x = Tensor.random([4, 8], sim.device("flex").autodiff())
    drop(x)
    how, api, path, line = x.taken
    assert how == "dropped" and path == __file__ and line > 0
    with pytest.raises(UserError, match="was dropped \\(drop\\(\\)\\) at "):
        x.relu()


def test_a_temporary_is_told_by_its_count_only_where_the_interpreter_tells_it(monkeypatch):
    import sim.burn.tensor as tensor_module
    assert tensor_module._TEMPORARY_REFS in (2, None)   # 2 on CPython 3.11-3.13
    # an interpreter that counts a named handle as a temporary (3.14's borrowed
    # references): the named handle's drop still keeps what took it
    monkeypatch.setattr(tensor_module, "_TEMPORARY_REFS", None)
    sim = Simulation(PROFILE, fast_forward=False)
    x = Tensor.random([4, 8], sim.device("flex").autodiff())
    drop(x)
    assert x.taken[0] == "dropped" and x.taken[2] == __file__
