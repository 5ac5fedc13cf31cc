"""Fast-forward of loops that leave the bookkeeping as they found it, on glibc's arena
(linux-x86_64): a training step with SGD or Adam and a round of nine dead tracked ops and
a backward. The arena's placement never repeats, so the steps are proven equal by their
heap events in order (:mod:`sim.engine.fastforward.tape`) and replayed through the arena;
the rows, the arena chunk by chunk, its live lists and the simulated time must be exact
mode's, at several sizes and under every policy."""

import pytest

from sim.engine.runner import run_cell
from sim.engine.workloads import load_workload
from sim.policies import policy_names

from arenastate import arena_state

TRAINING = """
from sim.burn.nn import Mlp
from sim.burn.optim import GradientsParams, OPTIMIZERS
from sim.burn.tensor import Tensor
VARIANTS = ("sgd", "adam")
PARAMS = {"steps": 40, "width": 16}
def run(sim, variant, steps, width):
    dev = sim.device("flex").autodiff()
    state = {"model": Mlp(width, width, width, dev)}
    x = Tensor.random((4, width), dev)
    optim = OPTIMIZERS[variant](sim)
    def step():
        model = state["model"]
        loss = model.forward(x.clone()).powi_scalar(2).mean()
        grads = GradientsParams.from_grads(loss.backward(), model)
        state["model"] = optim.step(1e-3, model, grads)
    sim.repeat(steps, step)
    yield sim.sample(steps, "step", rss=sim.rss_bytes() / 1e6)
    sim.repeat(steps // 2, step)
    yield sim.sample(steps + steps // 2, "step", rss=sim.rss_bytes() / 1e6)
"""

BACKWARD_EVERY_KTH = """
from sim.burn.tensor import Tensor, drop
PARAMS = {"rounds": 40, "k": 10}
def run(sim, variant, rounds, k):
    ad = sim.device("flex").autodiff()
    a = Tensor.from_floats([1.0] * 16, ad).require_grad()
    b = Tensor.from_floats([2.0] * 16, ad)
    def round_():
        sim.repeat(k - 1, lambda: drop(a.clone() * b.clone()))
        (a.clone() * b.clone()).sum().backward()
    sim.repeat(rounds, round_)
    yield sim.sample(rounds, "rounds", rss=sim.rss_bytes() / 1e6)
"""


@pytest.fixture(scope="module")
def workloads(tmp_path_factory):
    out = {}
    for name, source in (("training", TRAINING), ("every_kth", BACKWARD_EVERY_KTH)):
        path = tmp_path_factory.mktemp("loops") / f"{name}.py"
        path.write_text(source)
        out[name] = load_workload(str(path))
    return out


def _both(workload, variant, sets, policy="burn-0.22.1"):
    """Rows and end state of a run with fast-forward and one with ``--exact``."""
    out = []
    for fast_forward in (True, False):
        keep = []
        rows = run_cell(workload, variant, policy=policy, profile="linux-x86_64", sets=sets,
                        keep=keep, fast_forward=fast_forward)
        sim = keep[0]
        arena = sim.allocator.arena
        live = tuple((size, tuple(blocks)) for size, blocks in sorted(arena.live.items())
                     if blocks)
        out.append((rows, arena_state(arena), live, sim.work_ps, sim.heap.peak_bytes,
                    sim.heap.allocs, sim.fault_bytes, sim.arena_replayed))
    return out


@pytest.mark.parametrize("variant", ["sgd", "adam"])
@pytest.mark.parametrize("steps,width", [(12, 16), (45, 16), (130, 8), (60, 32)])
def test_training_steps_replay_the_arena_as_exact_mode_places_it(workloads, variant, steps,
                                                                width):
    fast, exact = _both(workloads["training"], variant, {"steps": steps, "width": width})
    assert fast[:-1] == exact[:-1]
    assert exact[-1] == 0
    if steps >= 45:
        # the probes and the last step of each loop run exactly; the rest is replayed
        assert fast[-1] >= steps + steps // 2 - 20


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_gives_exact_modes_arena(workloads, policy):
    for variant in ("sgd", "adam"):
        fast, exact = _both(workloads["training"], variant, {"steps": 30}, policy)
        assert fast[:-1] == exact[:-1], (policy, variant)
    fast, exact = _both(workloads["every_kth"], "default", {"rounds": 30}, policy)
    assert fast[:-1] == exact[:-1], policy


@pytest.mark.parametrize("rounds,k", [(25, 10), (70, 10), (40, 4)])
def test_backward_every_kth_replays_as_exact_mode(workloads, rounds, k):
    fast, exact = _both(workloads["every_kth"], "default", {"rounds": rounds, "k": k})
    assert fast[:-1] == exact[:-1]
    assert fast[-1] >= rounds - 12
