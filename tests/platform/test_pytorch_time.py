"""The ``pytorch`` policy's time model: the ATen ops eager PyTorch runs (sim/policies/aten.py).

These check the model's behaviour (which ops, which nodes, what they cost relative to
each other), not wall-clock time.
"""

import math

import pytest

from sim.policies import aten
from sim.policies.aten import AtenTiming, backward_ops, forward_ops, fused_backward_ops, \
    fused_forward_ops, optimizer_ops
from sim.platform.timing import Timing
from sim.engine.simulation import Simulation
from sim.engine.runner import run_cell
from sim.engine.workloads import load_workload

#: one p10-ema training cycle as PyTorch runs it (opt.step and the EMA update of one
#: step, then the next step's forward and backward), CPU, default SGD
OPTIMIZER_AND_EMA = [
    ("optimizer", "add_"), ("optimizer", "add_"),              # _single_tensor_sgd
    ("forward", "mul"), ("forward", "alias"), ("forward", "mul"), ("forward", "add"),
]
LINEAR_FORWARD = [("forward", "t"), ("forward", "addmm"), ("forward", "addmm.bias_copy")]
LOSS_FORWARD = [("forward", "pow"), ("forward", "sum"), ("forward", "div_")]
BACKWARD = [
    ("backward", "ones_like"),
    ("backward", "expand"), ("backward", "div"),                            # MeanBackward0
    ("backward", "pow"), ("backward", "mul"), ("backward", "mul"),          # PowBackward0
    ("backward", "sum"), ("backward", "view"),                              # bias sum_to
    ("backward", "t"), ("backward", "mm"), ("backward", "t"),               # AddmmBackward0
    ("backward", "t"),                                                      # TBackward0
]
TARGET_EXTRA = [("forward", "mm"), ("forward", "sub")]


def _cycle(variant, steps=4):
    workload = load_workload("p10-ema")
    params = workload.resolve(variant, {"steps": str(steps), "report_at": "1"})
    sim = Simulation(_profile(), policy="pytorch", experiment=workload.name, variant=variant)
    sim.timing.trace = []
    sim.run(lambda s, **p: workload.run(s, variant, **p), params)
    # everything charged between the ends of the 2nd and 3rd backward: one full cycle
    return [(kind, name) for b, kind, name in sim.timing.trace if b == 2]


def _profile():
    from sim.engine.profile import load_profile
    return load_profile("m2max-macos")


def test_pytorch_policy_installs_the_aten_timing(make_sim):
    assert isinstance(make_sim("pytorch").timing, AtenTiming)
    for policy in ("burn-0.22.1", "detach-constant", "drop-release"):
        assert type(make_sim(policy).timing) is Timing


def test_detach_cycle_runs_the_aten_ops_of_the_pytorch_program():
    assert _cycle("detach") == OPTIMIZER_AND_EMA + LINEAR_FORWARD + LOSS_FORWARD + BACKWARD


def test_target_cycle_adds_the_matmul_and_the_subtraction_only():
    # x @ ema needs no grad (no node); SubBackward0 passes grad to out and computes
    # nothing for the constant side
    expected = OPTIMIZER_AND_EMA + LINEAR_FORWARD + TARGET_EXTRA + LOSS_FORWARD + BACKWARD
    assert _cycle("target") == expected


def _ms(variant, policy="pytorch"):
    rows = run_cell("p10-ema", variant, policy=policy, observables=False,
                    sets={"steps": "60", "report_at": "1,50"})
    return {int(r["x"]): r["value"] for r in rows if r["metric"] == "ms_per_step"}


def test_target_minus_detach_is_the_cost_of_the_extra_ops(profile):
    r = profile.pytorch
    extra_ops = forward_ops("matmul", (64, 512), ((64, 512), (512, 512))) + \
        forward_ops("sub", (64, 512), ((64, 512), (64, 512)))
    timing = AtenTiming(None, profile.time, r)
    compute, overhead = timing.cost(extra_ops, py_calls=2, nodes_recorded=1, nodes_run=1)
    detach, target = _ms("detach"), _ms("target")
    assert target[60] - detach[60] == pytest.approx((compute + overhead) / 1e6, rel=1e-4)
    # the matmul is charged at the sgemm rate, the subtraction at the elementwise rate
    assert compute == pytest.approx(2 * 64 * 512 * 512 / r["gflops"]
                                    + 4 * 3 * 64 * 512 / r["gbps"])


def test_pytorch_ms_per_step_is_flat_after_the_first_step():
    for variant in ("detach", "target"):
        ms = _ms(variant)
        assert ms[50] == pytest.approx(ms[60], rel=1e-9)
        assert ms[1] > 10 * ms[50]   # the first step carries the one-time warm-up


def test_linear_is_addmm_with_a_transposed_weight():
    x, w, out = (64, 512), (512, 256), (64, 256)
    ops = fused_forward_ops("linear", 0, "matmul", out, (x, w), bias=True)
    assert [o.name for o in ops] == ["t", "addmm"]
    assert ops[1].kind == aten.GEMM and ops[1].flops == 2 * 64 * 512 * 256
    assert fused_forward_ops("linear", 0, "matmul", out, (x, w))[1].name == "mm"
    assert fused_forward_ops("linear", 1, "reshape", (1, 256), ((256,),)) == []


@pytest.mark.parametrize("needs, gemms, nodes", [
    ((False, True), 1, 2),   # input without grad: weight grad only; AddmmBackward0 + TBackward0
    ((True, True), 2, 2),    # hidden layer: input grad too
    ((True, False), 1, 1),   # frozen weight: no TBackward0
])
def test_linear_backward_follows_which_inputs_need_grad(needs, gemms, nodes):
    ops, n = fused_backward_ops("linear", 0, "matmul", (64, 256), ((64, 512), (512, 256)), needs)
    assert sum(o.kind == aten.GEMM for o in ops) == gemms
    assert n == nodes


def test_bias_gradient_is_one_reduction_and_no_extra_node():
    ops, nodes = fused_backward_ops("linear", 2, "add", (64, 256), ((64, 256), (1, 256)),
                                    (True, True))
    assert [o.name for o in ops] == ["sum", "view"] and nodes == 0
    assert ops[0].nbytes == 4 * (64 * 256 + 256)


def test_backward_formulas_of_derivatives_yaml():
    n = (64, 512)
    names = lambda ops: [o.name for o in ops[0]]  # noqa: E731
    assert names(backward_ops("mean", (1,), (n,), (True,))) == ["expand", "div"]
    assert names(fused_backward_ops("pow", 0, "mul", n, (n, n), (True, True))) == \
        ["pow", "mul", "mul"]
    assert names(backward_ops("sub", n, (n, n), (True, False))) == []
    assert names(backward_ops("sub", n, (n, n), (True, True))) == ["neg"]
    assert names(backward_ops("add", n, (n, n), (True, True))) == []
    assert names(backward_ops("mul_scalar", n, (n,), (True,))) == ["mul"]
    assert names(backward_ops("matmul", n, ((64, 128), (128, 512)), (False, True))) == \
        ["t", "mm"]


def test_mean_on_cpu_is_a_sum_and_a_division():
    ops = forward_ops("mean", (1,), ((64, 512),))
    assert [o.name for o in ops] == ["sum", "div_"]


def test_sgd_default_on_cpu_is_one_inplace_add_per_parameter():
    (op,) = optimizer_ops(512 * 512)
    assert op.name == "add_" and op.nbytes == 3 * 4 * 512 * 512


def test_burn_timing_seams_change_nothing(make_sim):
    a, b = make_sim(), make_sim()
    a.timing.optimizer_update(1000, None)
    b.timing.elementwise(1000, None, n_ops=2)
    assert a.work_ps == b.work_ps and a.timing.compute_ns == b.timing.compute_ns
    with a.timing.fused("linear", bias=True):
        a.timing.module_call()
        a.timing.optimizer_step(2)
        a.timing.python_view()
        a.timing.end_backward()
    assert a.work_ps == b.work_ps


def test_profile_documents_every_pytorch_time_parameter():
    text = open(_profile().path).read()
    section = text.split("[pytorch]")[1].split("[calibration]")[0]
    lines = section.splitlines()
    for key in ("gflops", "gbps", "op_overhead_ns", "py_call_ns", "view_op_ns",
                "autograd_record_ns", "autograd_exec_ns", "module_call_ns",
                "backward_call_ns", "optimizer_step_ns", "optimizer_param_ns"):
        i = next(i for i, line in enumerate(lines) if line.startswith(f"{key} ="))
        assert any(tag in lines[i - 1] for tag in ("[source]", "[guess]", "[fitted]", "[layout]")), key
        assert math.isfinite(_profile().pytorch[key])
