"""The time of one small op, split as the op-cost probe splits it (experiments/op_cost.py).

The backend's kernel costs ``op_overhead_ns`` plus ``operand_ns`` per tensor operand
plus its traffic (and flops), a matmul ``gemm_call_ns`` more per gemm call; an autodiff
device adds burn-autodiff's bookkeeping: ``operand_node_ns`` per operand node,
``register_ns`` per registered step (``register_parent_ns`` per tracked parent) and
``new_graph_ns`` per new graph; memory that becomes resident costs ``page_fault_ns`` per
page (the untracked records leak). A backward step costs the gradients of its tracked
parents only, ``backward_step_ns`` and ``checkpoint_retrieve_ns`` per saved tensor read
back (the backward-cost probe, experiments/backward_cost.py). A full sum or mean is a
serial chain of f32 adds: ``reduce_add_ns`` per element. A handle cloned costs
``clone_ns`` (``autodiff_clone_ns`` more on autodiff), a result buffer malloc'd rather
than written in place ``buffer_ns`` and a tensor saved for the backward
``checkpoint_ns``: a chain ``y = op(y)`` of moved tensors pays none of the first two
(op-cost's chain mode).
"""

import pytest

from sim.commands.calibrate import _with
from sim.engine.simulation import Simulation
from sim.engine.profile import load_profile
from sim.engine.runner import run_cell
from sim.burn.tensor import Tensor, drop


def _profile(operand_ns=0.0, clone_ns=0.0, buffer_ns=0.0, **time):
    """linux-x86_64 with round numbers: 1000 ns per op, 5000 ns per gemm call, no faults
    (and no cost per handle clone or fresh buffer unless given)."""
    time = {"operand_node_ns": 0.0, "autodiff_clone_ns": 0.0, "checkpoint_ns": 0.0, **time}
    return _with(load_profile("linux-x86_64"), {
        "backend.flex.op_overhead_ns": 1000.0, "backend.flex.gemm_call_ns": 5000.0,
        "backend.flex.operand_ns": operand_ns, "backend.flex.clone_ns": clone_ns,
        "backend.flex.buffer_ns": buffer_ns, "time.page_fault_ns": 0.0,
        **{f"time.{k}": v for k, v in time.items()}})


def _leaf(profile, mode):
    """A simulation and the probe's x = [1, 128] on plain flex (``plain``) or autodiff,
    requiring grad if ``tracked``."""
    sim = Simulation(profile, fast_forward=False)
    flex = sim.device("flex")
    x = Tensor.random((1, 128), flex if mode == "plain" else flex.autodiff())
    return sim, x.require_grad() if mode == "tracked" else x


def _per_op(profile, mode, op, n=200):
    """Simulated ns per iteration of the probe's loop, and the timing counters' split."""
    sim, x = _leaf(profile, mode)
    w = Tensor.random((128, 128), x.device)
    apply = {"relu": lambda: x.clone().relu(), "matmul": lambda: x.clone().matmul(w.clone())}[op]
    for _ in range(10):
        drop(apply())
    t = sim.timing
    now, compute, book = sim.now_ns, t.compute_ns, t.bookkeeping_ns
    for _ in range(n):
        drop(apply())
    return ((sim.now_ns - now) / n, (t.compute_ns - compute) / n, (t.bookkeeping_ns - book) / n)


def test_a_gemm_call_costs_gemm_call_ns_on_top_of_the_op():
    base = _profile()
    relu = _per_op(base, "plain", "relu")[1]
    matmul = _per_op(base, "plain", "matmul")[1]
    flops = 2 * 128 * 128 / base.backends["flex"]["gflops"]
    moved = 4 * (128 + 128 + 128 * 128) / base.backends["flex"]["gbps"]
    assert matmul == pytest.approx(1000.0 + 5000.0 + flops + moved, rel=1e-9)
    rates = base.backends["flex"]   # an elementwise op: one "flop" per element, no gemm call
    assert relu == pytest.approx(1000.0 + 128 / rates["gflops"] + 4 * 256 / rates["gbps"],
                                 rel=1e-9)


def test_a_matmul_backward_makes_two_gemm_calls():
    def backward_ns(gemm_call_ns):
        profile = _with(_profile(), {"backend.flex.gemm_call_ns": gemm_call_ns})
        sim = Simulation(profile, fast_forward=False)
        device = sim.device("flex").autodiff()
        a = Tensor.random((4, 8), device).require_grad()
        b = Tensor.random((8, 4), device).require_grad()
        loss = a.matmul(b).sum()
        before = sim.timing.compute_ns
        loss.backward()
        return sim.timing.compute_ns - before
    assert backward_ns(5000.0) - backward_ns(0.0) == pytest.approx(2 * 5000.0)


def test_every_tensor_operand_costs_operand_ns_in_the_backend():
    base, with_operands = _profile(), _profile(operand_ns=100.0)
    for op, operands in (("relu", 1), ("matmul", 2)):
        extra = _per_op(with_operands, "plain", op)[1] - _per_op(base, "plain", op)[1]
        assert extra == pytest.approx(operands * 100.0)


@pytest.mark.parametrize("mode, steps, graphs", [("untracked", 1, 1), ("tracked", 1, 0)])
def test_autodiff_adds_a_registration_and_for_untracked_ops_a_graph(mode, steps, graphs):
    profile = _profile(register_ns=700.0, new_graph_ns=300.0, operand_node_ns=50.0)
    plain_total, plain_compute, _ = _per_op(profile, "plain", "relu")
    total, compute, book = _per_op(profile, mode, "relu")
    assert compute == pytest.approx(plain_compute)
    # the parent term is the profile's (degenerate, fitted) register_parent_ns
    parent = profile.time["register_parent_ns"] if mode == "tracked" else 0.0
    # relu: one operand node prepared
    assert book == pytest.approx(50.0 + steps * 700.0 + graphs * 300.0 + parent, abs=1e-6)
    assert total == pytest.approx(plain_total + book, abs=0.01)  # charges are whole ps


def test_the_op_cost_workload_reports_four_blocks_per_variant():
    profile = load_profile("linux-x86_64")
    rows = run_cell("experiments/op_cost.py", "untracked/relu", "burn-0.22.1", profile,
                    sets={"iterations": 400, "warmup": 10})
    times = [r for r in rows if r["metric"] == "ms_per_step"]
    assert [r["x"] for r in times] == [100, 200, 300, 400]
    assert all(0 < float(r["value"]) < 0.01 for r in times)


def test_the_chain_mode_moves_its_operand_and_writes_in_place():
    """op-cost's ``chain/<op>`` variants run ``y = op(y)`` on plain Flex: after the first op
    (a clone of x's shared buffer) no handle is cloned and no buffer is malloc'd for
    mul_scalar, so its ops cost clone_ns + buffer_ns less than ``plain/mul_scalar``'s; add
    clones its constant (clone_ns), matmul its weight and allocates its output."""
    def per_op(variant, **rates):
        profile = _profile(**rates)
        rows = run_cell("experiments/op_cost.py", variant, "burn-0.22.1", profile,
                        sets={"iterations": 400, "warmup": 10})
        return [float(r["value"]) * 1e6 for r in rows if r["metric"] == "ms_per_step"][-1]
    costs = {"clone_ns": 300.0, "buffer_ns": 200.0}
    extra = {v: per_op(v, **costs) - per_op(v) for v in (
        "plain/mul_scalar", "chain/mul_scalar", "chain/add", "chain/matmul", "chain/reshape")}
    assert extra["plain/mul_scalar"] == pytest.approx(500.0, abs=1e-6)
    assert extra["chain/mul_scalar"] == pytest.approx(0.0, abs=1e-6)
    assert extra["chain/add"] == pytest.approx(300.0, abs=1e-6)
    assert extra["chain/matmul"] == pytest.approx(300.0 + 2 * 200.0, abs=1e-6)
    assert extra["chain/reshape"] == pytest.approx(0.0, abs=1e-6)   # a view of moved y


def _backward_ns(profile, op, tracked_w=False, n=50):
    """Simulated (compute, bookkeeping) ns of the backward of a chain of ``n`` ``op``s."""
    sim = Simulation(profile, fast_forward=False)
    device = sim.device("flex").autodiff()
    x = Tensor.random((1, 128), device).require_grad()
    w = Tensor.random((128, 128), device)
    if tracked_w:
        w = w.require_grad()
    y = x.clone()
    for _ in range(n):
        y = {"relu": lambda: y.relu(), "mul_scalar": lambda: y.mul_scalar(1.0001),
             "matmul": lambda: y.matmul(w.clone())}[op]()
    loss = y.sum()
    t = sim.timing
    compute, book = t.compute_ns, t.bookkeeping_ns
    loss.backward()
    return t.compute_ns - compute, t.bookkeeping_ns - book


def test_a_backward_step_costs_its_bookkeeping_and_its_checkpoint_reads():
    base = _profile(backward_step_ns=0.0, checkpoint_retrieve_ns=0.0)
    stepped = _with(base, {"time.backward_step_ns": 400.0})
    retrieving = _with(base, {"time.checkpoint_retrieve_ns": 900.0})
    # mul_scalar saves nothing; relu saves its input: one read back per step
    for op, reads in (("mul_scalar", 0), ("relu", 1)):
        book0 = _backward_ns(base, op)[1]
        assert _backward_ns(stepped, op)[1] - book0 == pytest.approx(51 * 400.0)  # + sum's
        assert _backward_ns(retrieving, op)[1] - book0 == pytest.approx(50 * reads * 900.0)


def test_a_matmul_by_a_constant_computes_one_gradient_in_the_backward():
    profile = _profile()
    one = _backward_ns(profile, "matmul")[0]
    both = _backward_ns(profile, "matmul", tracked_w=True)[0]
    # the weight's gradient: one more gemm call per step, and as many flops and bytes again
    rates = profile.backends["flex"]
    gradient = (5000.0 + 2 * 128 * 128 / rates["gflops"]
                + 4 * (128 + 128 + 128 * 128) / rates["gbps"])
    assert both - one == pytest.approx(50 * gradient, rel=1e-6)


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_a_full_reduction_costs_its_chain_of_adds(op):
    """burn-flex without simd: one dependent f32 add per element (reduce_add_ns each)."""
    def compute(reduce_add_ns, n):
        profile = _with(_profile(), {"backend.flex.reduce_add_ns": reduce_add_ns})
        sim = Simulation(profile, fast_forward=False)
        x = Tensor.random((n,), sim.device("flex"))
        before = sim.timing.compute_ns
        getattr(x, op)()
        return sim.timing.compute_ns - before
    for n in (128, 262_144):
        assert compute(1.5, n) - compute(0.0, n) == pytest.approx(1.5 * n)


def test_a_reshape_is_a_view_it_moves_no_bytes():
    profile = _profile(operand_ns=100.0)
    for n in (128, 1 << 20):
        sim = Simulation(profile, fast_forward=False)
        x = Tensor.random((n,), sim.device("flex"))
        before = sim.timing.compute_ns
        x.reshape((1, n))
        assert sim.timing.compute_ns - before == pytest.approx(1000.0 + 100.0)


def _chain_and_clone(profile, op, mode="tracked", n=100):
    """(ns per op of a chain ``y = op(y)``, ns per op of ``drop(op(x.clone()))``)."""
    sim, x = _leaf(profile, mode)
    run = {"mul_scalar": lambda t: t.mul_scalar(1.0001), "relu": lambda t: t.relu()}[op]
    y = run(x.clone())   # the first op cannot write into x's shared buffer
    now = sim.now_ns
    for _ in range(n):
        y = run(y)
    chain = (sim.now_ns - now) / n
    now = sim.now_ns
    for _ in range(n):
        drop(run(x.clone()))
    return chain, (sim.now_ns - now) / n


@pytest.mark.parametrize("mode", ["plain", "tracked"])
def test_a_chain_of_moved_tensors_pays_no_clone_and_no_fresh_buffer(mode):
    """``y = y.mul_scalar(c)`` moves y and writes in place into its uniquely owned buffer;
    ``drop(x.clone().mul_scalar(c))`` clones a handle and mallocs a result buffer."""
    def split(**rates):
        return _chain_and_clone(_profile(**rates), "mul_scalar", mode)
    base_chain, base_clone = split()
    chain, clone = split(clone_ns=300.0, buffer_ns=200.0)
    assert chain == pytest.approx(base_chain, abs=1e-6)
    assert clone - base_clone == pytest.approx(300.0 + 200.0, abs=1e-6)


def test_a_saved_input_forces_a_fresh_buffer_in_a_chain():
    """relu saves its input for the backward (the checkpointer holds a clone of the
    primitive), so a tracked relu chain cannot write in place: ``buffer_ns`` per op, which
    mul_scalar's chain (nothing saved) does not pay; no handle is cloned in either."""
    def chain(op, **rates):
        return _chain_and_clone(_profile(**rates), op)[0]
    assert chain("relu", buffer_ns=200.0) - chain("relu") == pytest.approx(200.0, abs=1e-6)
    assert chain("mul_scalar", buffer_ns=200.0) == pytest.approx(chain("mul_scalar"), abs=1e-6)
    assert chain("relu", clone_ns=300.0) == pytest.approx(chain("relu"), abs=1e-6)


def test_a_staged_matmul_output_is_two_fresh_buffers():
    """burn-flex's matmul output is allocated twice for a moment (FlexTensor::empty's zeroed
    Vec copied into an aligned block): two buffers' worth of malloc and free."""
    base = _per_op(_profile(), "plain", "matmul")[1]
    # x.clone() and w.clone(): two handles; one staged output: two buffers
    with_costs = _per_op(_profile(clone_ns=300.0, buffer_ns=200.0), "plain", "matmul")[1]
    assert with_costs - base == pytest.approx(2 * 300.0 + 2 * 200.0, abs=1e-6)


@pytest.mark.parametrize("mode,extra", [("plain", 300.0), ("untracked", 300.0 + 150.0),
                                        ("tracked", 300.0 + 150.0)])
def test_an_autodiff_handle_clone_also_clones_its_node_and_ref_count(mode, extra):
    """``clone_ns`` on every device; ``autodiff_clone_ns`` more where the handle carries a
    node and a ref count (their Arcs are cloned, and dropped with the handle)."""
    def clone_ns(**rates):
        sim, x = _leaf(_profile(**rates), mode)
        now = sim.now_ns
        for _ in range(10):
            drop(x.clone())
        return (sim.now_ns - now) / 10
    assert clone_ns(clone_ns=300.0, autodiff_clone_ns=150.0) - clone_ns() == pytest.approx(
        extra, abs=1e-6)


def test_a_tensor_saved_for_the_backward_costs_checkpoint_ns():
    """A tracked relu saves its input (CheckpointerBuilder::checkpoint), mul_scalar saves
    nothing, and an untracked relu registers no backward, so saves nothing either."""
    def per_op(op, mode, **time):
        return _chain_and_clone(_profile(**time), op, mode)[0]
    assert per_op("relu", "tracked", checkpoint_ns=250.0) - per_op("relu", "tracked") == (
        pytest.approx(250.0, abs=1e-6))
    assert per_op("mul_scalar", "tracked", checkpoint_ns=250.0) == pytest.approx(
        per_op("mul_scalar", "tracked"), abs=1e-6)
    assert per_op("relu", "untracked", checkpoint_ns=250.0) == pytest.approx(
        per_op("relu", "untracked"), abs=1e-6)


def test_a_gemm_hides_the_shorter_of_its_terms_by_gemm_overlap():
    from sim.platform.timing import _kernel_ns
    rates = {"gflops": 2.0, "gbps": 1.0, "op_overhead_ns": 10.0, "gemm_call_ns": 5.0,
             "gemm_overlap": 0.0}
    # 100 flops at 2 per ns, 300 B at 1 per ns: the sum, as the fitted profiles have it
    assert _kernel_ns(rates, 100.0, 300, gemm_calls=1) == 50 + 300 + 10 + 5
    # the roofline: the longer alone
    assert _kernel_ns({**rates, "gemm_overlap": 1.0}, 100.0, 300, gemm_calls=1) == 300 + 10 + 5
    # not a gemm: always the sum
    assert _kernel_ns({**rates, "gemm_overlap": 1.0}, 100.0, 300) == 50 + 300 + 10
