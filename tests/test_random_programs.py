"""Fast-forward against exact mode on random programs of loops, on both allocators.

A program is a few loops, each of one random body (a dropped add, mul, exp, sum,
chain, a body whose scalar-multiplied input is untracked, one that keeps up to 50
results alive, a backward through ``a``, a Linear's forward, or a training step with
SGD or Adam), on a CPU or a GPU device, with or without balanced checkpointing, each
loop followed by nothing, an unrelated backward, a backward through ``a``, dropping the
kept results, or a new ``a`` (the old one's graph dead) and a sweep; under every
policy. After every loop the heap (bytes, blocks, peak), simulated time, page faults,
registered steps, RSS, the GPU pool and the live graphs and nodes must equal exact
mode's; at the end, the allocator's whole placement (on glibc's arena: every chunk,
the bins in their order, the tcache and fastbins).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.autodiff.traversal import TapeConsumed
from sim.engine import Simulation
from sim.policies import POLICIES
from sim.profile import load_profile
from sim.nn import Linear
from sim.optim import OPTIMIZERS, GradientsParams
from sim.tensor import BurnPanic, Tensor, drop

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from common import tiny_backward  # noqa: E402

BODIES = {
    "add": lambda a, b, kept: drop(a.clone() + b.clone()),
    "mul": lambda a, b, kept: drop(a.clone() * b),
    "exp": lambda a, b, kept: drop(a.clone().exp()),
    "moved": lambda a, b, kept: drop(a.clone() + b.clone().mul_scalar(2.0)),
    "sum": lambda a, b, kept: a.clone().sum().into_scalar(),
    "chain": lambda a, b, kept: drop(a.clone() * 0.5 + b.clone()),
    "keep": lambda a, b, kept: (kept.append(a.clone() + b.clone()) if len(kept) < 50
                                else drop(a.clone() + b.clone())),
    "train": lambda a, b, kept: (_backward((a.clone() * b).sum()) if a.is_tracked()
                                 else (a.clone() * b).sum().into_scalar()),
    "linear": lambda a, b, kept: drop(kept[-1].forward(kept[-2].clone())),
    "sgd": lambda a, b, kept: _sgd_step(kept),
    "adam": lambda a, b, kept: _sgd_step(kept),
}


def _sgd_step(kept):
    """A training step of the module kept last, its input and optimizer before it."""
    x, optim, model = kept[-3:]
    loss = model.forward(x.clone()).powi_scalar(2).mean()
    grads = GradientsParams.from_grads(loss.backward(), model)
    kept[-1] = optim.step(1e-3, model, grads)


def _backward(loss):
    try:
        loss.backward()
    except (BurnPanic, TapeConsumed):
        pass
AFTER = ("nothing", "unrelated-backward", "backward-through-a", "drop-kept", "new-a")

PHASE = st.tuples(st.sampled_from(sorted(BODIES)), st.sampled_from([3, 50, 300, 1500]),
                  st.sampled_from(AFTER))


def _program(profile, fast_forward, elements, tracked, phases, policy="burn-0.22.1",
             kind="flex", checkpointing="disabled"):
    sim = Simulation(profile, policy=policy, fast_forward=fast_forward)
    dev = sim.device(kind).autodiff(checkpointing)
    a = Tensor.from_floats([1.0] * elements, dev)
    b = Tensor.from_floats([2.0] * elements, dev)
    if tracked:
        a = a.require_grad()
    kept = []
    seen = []
    for body, n, after in phases:
        step = BODIES[body]
        if body in ("linear", "sgd", "adam"):   # input, (optimizer,) module: kept last
            kept.clear()
            kept.append(Tensor.random((4, 8), dev))
            if body != "linear":
                kept.append(OPTIMIZERS[body]())
            kept.append(Linear(8, 8, dev))
        sim.repeat(n, lambda: step(a, b, kept))
        try:
            if after == "unrelated-backward":
                tiny_backward(dev)
            elif after == "backward-through-a" and a.is_tracked():
                (a.clone() * 2.0).sum().backward()
            elif after == "drop-kept":
                kept.clear()
            elif after == "new-a":     # a's graph loses its last handle; a sweep frees it
                a = Tensor.from_floats([1.0] * elements, dev)
                if tracked:
                    a = a.require_grad()
                kept.clear()
                tiny_backward(dev)
        except (BurnPanic, TapeConsumed):
            pass
        heap = sim.heap
        seen.append((heap.live_bytes, heap.live_blocks, heap.peak_bytes, sim.work_ps,
                     # to the byte: PyTorch's fitted drift per step is a float, added step
                     # by step in exact mode and times the steps when fast-forwarded
                     sim.fault_ps, sim.registered, round(sim.rss_bytes()), sim.live_graphs(),
                     sim.live_nodes(),
                     dev.memory_pool_usage() if kind == "metal" else None))
    arena = sim.allocator.arena
    if arena is None:
        seen.append(sim.allocator.state())
    else:
        arena.materialize()
        seen.append((dict(arena.inuse), dict(arena.free_at),
                     {size: list(at) for size, at in arena.by_size.items()},
                     {size: list(at) for size, at in arena.tcache.items()},
                     {size: list(at) for size, at in arena.fast.items()},
                     arena.brk, arena.top, arena.resident_end, arena.mapped))
    sim.heap.close()
    return seen


@pytest.mark.parametrize("profile", ["m2max-macos", "linux-x86_64"])
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(elements=st.sampled_from([1, 16, 64, 700, 5000]), tracked=st.booleans(),
       phases=st.lists(PHASE, min_size=1, max_size=4),
       policy=st.sampled_from(sorted(POLICIES)), kind=st.sampled_from(["flex", "metal"]),
       checkpointing=st.sampled_from(["disabled", "balanced"]))
def test_fast_forward_equals_exact_mode_on_random_programs(profile, elements, tracked,
                                                           phases, policy, kind, checkpointing):
    prof = load_profile(profile)
    args = (elements, tracked, phases, policy, kind, checkpointing)
    assert _program(prof, True, *args) == _program(prof, False, *args)
