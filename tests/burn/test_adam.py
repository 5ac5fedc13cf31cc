"""burn-optim's Adam (adam.rs, default config) on burn-flex: the moments it keeps, the
buffers each step allocates, its ops' placement, and the ops it needs (div, sqrt)."""

import pytest

from clirun import assert_one_error, run_cli
from sim.engine.simulation import Simulation
from sim.burn.nn import Linear
from sim.burn.optim import Adam, GradientsParams, Sgd
from sim.engine.profile import load_profile
from sim.engine.runner import run_cell
from sim.burn.tensor import Tensor

PROFILE = load_profile("linux-x86_64")
F = 64
PARAM_BYTES = (F * F + F) * 4   # weight and bias, f32
# a burn-flex buffer is its data, Bytes' boxed controller and the ArcInner<Bytes> (sim.burn.backend)
FLEX = PROFILE.backends["flex"]
BUFFER_EXTRA = FLEX["bytes_box_bytes"] + FLEX["bytes_arc_bytes"]
BUFFER_BLOCKS = 3
# two moments of weight and bias, each a FlexTensor with its strides Vec (2 + 1 dimensions)
MOMENTS_BYTES = 2 * PARAM_BYTES + 2 * 2 * BUFFER_EXTRA + 2 * (2 + 1) * FLEX["stride_bytes"]


def _train(optim, steps, sim=None):
    sim = sim or Simulation(PROFILE, fast_forward=False)
    dev = sim.device("flex").autodiff()
    model = Linear(F, F, dev)
    x = Tensor.random((8, F), dev)
    marks = []
    # new buffers (Backend.alloc calls): the heap's alloc count also has every handle's strides
    backend = sim.backend("flex")
    calls = [0]
    alloc = backend.alloc

    def counting(*args, **kwargs):
        calls[0] += 1
        return alloc(*args, **kwargs)
    backend.alloc = counting
    for _ in range(steps):
        loss = model.forward(x.clone()).powi_scalar(2).mean()
        grads = GradientsParams.from_grads(loss.backward(), model)
        del loss
        before = calls[0]
        model = optim.step(1e-3, model, grads)
        del grads
        marks.append((sim.heap.live_bytes, calls[0] - before))
    return sim, model, marks


# and the optimizer state's Arc block per parameter: AdamState's against SgdState's
STATE_EXTRA = 2 * (PROFILE.layout.adam_state_bytes - PROFILE.layout.sgd_state_bytes)


def test_adam_keeps_two_moments_per_parameter():
    _, _, sgd = _train(Sgd(), 3)
    _, _, adam = _train(Adam(), 3)
    for (s, _), (a, _) in zip(sgd, adam):
        assert a - s == MOMENTS_BYTES + STATE_EXTRA


def test_adam_step_allocates_four_buffers_per_parameter():
    # m1's and the update's clones, grad.square() (mul of x by itself) and the sqrt of
    # m2's clone are new buffers; every other op writes into a uniquely owned operand.
    # Each parameter's step also re-registers it (a RootStep in a new graph), as SGD's.
    _, _, sgd = _train(Sgd(), 3)
    _, _, adam = _train(Adam(), 3)
    for (_, s), (_, a) in zip(sgd, adam):
        assert a - s == 2 * 4


def test_adam_updates_the_parameter_and_moments_in_place():
    opt = Adam()
    _, model, _ = _train(opt, 2)
    weight = model.weight.tensor.prim
    moments = [t.prim for t in opt.states[model.weight.param_id][1:]]
    sim = model.weight.tensor.device.sim
    dev = model.weight.tensor.device
    x = Tensor.random((8, F), dev)
    loss = model.forward(x).powi_scalar(2).mean()
    grads = GradientsParams.from_grads(loss.backward(), model)
    del loss
    opt.step(1e-3, model, grads)
    assert model.weight.tensor.prim is weight
    assert [t.prim for t in opt.states[model.weight.param_id][1:]] == moments
    assert opt.states[model.weight.param_id][0] == 3
    assert sim.heap.live_bytes > 0


def test_adam_costs_more_time_than_sgd_by_its_ops():
    sim_s, _, _ = _train(Sgd(), 3)
    sim_a, _, _ = _train(Adam(), 3)
    assert sim_a.now_ns > sim_s.now_ns


def test_p10_ema_adam_is_its_own_experiment_and_fast_forwards():
    sets = {"steps": 30, "report_at": "1,10,30", "optimizer": "adam", "features": 64,
            "batch": 8}
    fast = run_cell("p10-ema", "detach", sets=sets)
    exact = run_cell("p10-ema", "detach", sets=sets, fast_forward=False)
    assert fast == exact
    assert {row["experiment"] for row in fast} == {"p10-ema-adam"}
    sgd = run_cell("p10-ema", "without", sets=dict(sets, optimizer="sgd"))
    adam = run_cell("p10-ema", "without", sets=sets)

    def heap(rows):
        return [r["value"] for r in rows if r["metric"] == "heap_bytes_delta"]
    assert [a - s for a, s in zip(heap(adam), heap(sgd))] == [MOMENTS_BYTES + STATE_EXTRA] * 3


def test_bad_optimizer_is_one_error(capsys, tmp_path):
    out = tmp_path / "p.csv"
    code, _, lines = run_cli(["run", "p10-ema", "-v", "without", "--set", "steps=2",
                              "--set", "optimizer=rmsprop", "--out", str(out)], capsys)
    assert_one_error(code, lines, "optimizer=rmsprop", "expected one of sgd, adam")
    assert not out.exists()


def test_pytorch_adam_updates_in_place_and_keeps_two_moments():
    # torch.optim.Adam (_single_tensor_adam): zeros_like moments, lerp_/mul_/addcmul_ in
    # place, sqrt and its quotient as temporaries, param.addcdiv_ in place
    sim = Simulation(PROFILE, policy="pytorch", fast_forward=False)
    sim.timing.trace = []
    opt = Adam()
    sim, model, marks = _train(opt, 3, sim)
    sgd_sim, _, sgd_marks = _train(Sgd(), 3, Simulation(PROFILE, policy="pytorch",
                                                         fast_forward=False))
    # (burn's ModuleOptimizer state blocks stay in the model under this policy too)
    expected = [2 * PARAM_BYTES + STATE_EXTRA] * 3
    assert [a - s for (a, _), (s, _) in zip(marks, sgd_marks)] == expected
    names = [name for _, kind, name in sim.timing.trace if kind == "optimizer"]
    per_param = ["add_", "lerp_", "mul_", "addcmul_", "sqrt", "div", "add_", "addcdiv_"]
    assert names == (["fill", "fill"] + per_param) * 2 + per_param * 4
    weights = []
    for _ in range(2):
        weights.append(model.weight.tensor.prim)
        loss = model.forward(Tensor.random((8, F), model.weight.tensor.device)).powi_scalar(2)
        grads = GradientsParams.from_grads(loss.mean().backward(), model)
        opt.step(1e-3, model, grads)
    assert weights[0] is weights[1] is model.weight.tensor.prim


def test_optimizer_is_a_grid_axis(tmp_path):
    from sim.commands.sweep import parse_grid
    from sim.engine.workloads import load_workload
    grid = parse_grid(["optimizer=sgd,adam", "steps=5"], [load_workload("p10-ema")])
    assert grid["p10-ema"] == [{"steps": 5, "optimizer": "sgd"},
                               {"steps": 5, "optimizer": "adam"}]
    rows = run_cell("p10-ema", "without", "pytorch",
                    sets={"steps": 3, "report_at": "1,3", "optimizer": "adam"})
    assert {r["experiment"] for r in rows} == {"p10-ema-pytorch-adam"}


def _plain():
    sim = Simulation(PROFILE, fast_forward=False)
    return sim, sim.device("flex")


def test_div_and_sqrt_write_in_place_when_unique():
    sim, dev = _plain()
    a = Tensor.zeros((256,), dev)
    b = Tensor.zeros((256,), dev)
    blocks = sim.heap.live_blocks
    q = a / b
    assert q.prim is a.prim and sim.heap.live_blocks == blocks
    r = q.sqrt()
    assert r.prim is q.prim
    s = r.clone().sqrt()            # shared: a new buffer
    # a new buffer and the output's strides (the clone's are freed with it)
    assert s.prim is not r.prim and sim.heap.live_blocks == blocks + BUFFER_BLOCKS + 1


@pytest.mark.parametrize("tracked,saved", [
    ((True, False), 1),    # lhs tracked: the divisor only
    ((False, True), 2),    # rhs tracked: dividend and divisor
    ((True, True), 2),
])
def test_tracked_div_checkpoints_as_burn(tracked, saved):
    sim = Simulation(PROFILE, fast_forward=False)
    dev = sim.device("flex").autodiff()
    a, b = Tensor.zeros((16,), dev), Tensor.zeros((16,), dev)
    for t, flag in zip((a, b), tracked):
        if flag:
            t.require_grad()
    out = a.clone() / b.clone()
    step = out.device.sim.client.locator.graphs[out.node.id].server.steps[out.node.id]
    assert len(step.actions.explicit) == saved
