"""burn-flex writes into uniquely owned operands (ops/binary.rs, scalar_op_typed,
unary.rs), views share storage (reshape), matmul outputs are staged through an
align-1 Vec (FlexTensor::empty + Bytes::from_bytes_vec), burn-optim's SGD updates a
uniquely owned parameter in place; the metal backend and the pytorch policy allocate."""

from sim.engine.simulation import Simulation
from sim.burn.nn import Linear
from sim.burn.optim import GradientsParams, Sgd
from sim.engine.profile import load_profile
from sim.burn.tensor import Tensor, drop

PROFILE = load_profile("m2max-macos")
# a burn-flex buffer: its data, Bytes' boxed controller and the ArcInner<Bytes> (sim.burn.backend)
BOX, ARC = PROFILE.backends["flex"]["bytes_box_bytes"], PROFILE.backends["flex"]["bytes_arc_bytes"]
BUFFER_BLOCKS = 3
# and every FlexTensor value (a handle) has its Layout's strides Vec
STRIDE = PROFILE.backends["flex"]["stride_bytes"]


def _sim(policy="burn-0.22.1"):
    return Simulation(PROFILE, policy=policy, fast_forward=False)


def test_unique_operand_is_written_in_place():
    sim = _sim()
    dev = sim.device("flex")
    a = Tensor.zeros((512, 512), dev)
    before = sim.heap.live_blocks, sim.allocator.resident_bytes()
    b = a * 0.5            # a's storage is unique: written in place, a consumed
    assert b.prim is a.prim and b.prim.holders == 1
    assert (sim.heap.live_blocks, sim.allocator.resident_bytes()) == before
    drop(a)
    assert b.prim.holders == 1 and b.prim is not None


def test_shared_operand_allocates():
    sim = _sim()
    dev = sim.device("flex")
    a = Tensor.zeros((512, 512), dev)
    blocks = sim.heap.live_blocks
    b = a.clone() * 0.5    # the clone shares a's storage: a new buffer
    # a new buffer and b's strides (the clone's are freed with it)
    assert b.prim is not a.prim and sim.heap.live_blocks == blocks + BUFFER_BLOCKS + 1
    c = a.clone() * a.clone()  # x * x: two Arcs on the same storage
    assert c.prim is not a.prim


def test_broadcast_writes_into_the_full_size_operand():
    sim = _sim()
    dev = sim.device("flex")
    big = Tensor.zeros((64, 512), dev)
    row = Tensor.zeros((1, 512), dev)
    out = row + big        # lhs is not output-sized: rhs (unique) is the destination
    assert out.prim is big.prim


def test_reshape_is_a_view():
    sim = _sim()
    dev = sim.device("flex")
    a = Tensor.zeros((512,), dev)
    blocks = sim.heap.live_blocks
    v = a.clone().reshape((1, 512))
    # no buffer: only v's strides (the new Layout; the clone's went with the move)
    assert v.prim is a.prim and a.prim.holders == 2 and sim.heap.live_blocks == blocks + 1


def test_checkpointed_operand_is_not_unique():
    sim = _sim()
    dev = sim.device("flex").autodiff()
    w = Tensor.zeros((4, 4), dev).require_grad()
    x = Tensor.zeros((4, 4), dev)
    y = x.matmul(w.clone())   # tracked matmul saves x (w is tracked)
    assert x.prim.holders == 2  # the handle and the boxed clone of the checkpoint
    z = x * 2.0                 # so x is not unique: a new buffer
    assert z.prim is not x.prim
    del y


def test_matmul_output_is_staged():
    sim = _sim()
    dev = sim.device("flex")
    a = Tensor.zeros((64, 512), dev)
    w = Tensor.zeros((512, 512), dev)
    drop(a.clone().matmul(w.clone()))  # the first matmul also allocates gemm's L2 slab
    peak = sim.heap.peak_bytes
    live = sim.heap.live_bytes
    out = a.clone().matmul(w.clone())
    n = 64 * 512 * 4
    strides = 2 * STRIDE   # out's Layout
    assert sim.heap.live_bytes == live + n + BOX + ARC + strides
    # the align-1 Vec and its Bytes' controller, for a moment (with the operands' clones)
    assert sim.heap.peak_bytes == max(peak, live + 2 * n + 2 * BOX + 2 * strides)
    del out


def _train(policy, steps=3):
    sim = _sim(policy)
    dev = sim.device("flex").autodiff()
    model = Linear(64, 64, dev)
    x = Tensor.random((8, 64), dev)
    opt = Sgd()
    bufs = []
    for _ in range(steps):
        loss = model.forward(x.clone()).powi_scalar(2).mean()
        grads = GradientsParams.from_grads(loss.backward(), model)
        del loss
        model = opt.step(1e-3, model, grads)
        bufs.append(model.weight.tensor.prim)
    return bufs


def test_sgd_updates_the_parameter_in_place():
    bufs = _train("burn-0.22.1")
    assert all(b is bufs[0] for b in bufs)  # the weight never moves (Linux probe sgd-step)
    torch = _train("pytorch")
    assert all(b is torch[0] for b in torch)  # param.add_


def test_cubecl_writes_in_place_and_pytorch_allocates_every_output():
    """burn-cubecl 0.22.1 (kernel/unary_float.rs, binary.rs): an elementwise op writes into
    an operand it holds alone (``can_mut``), as burn-flex does; eager PyTorch does not."""
    sim = _sim()
    dev = sim.device("metal")
    a = Tensor.zeros((256,), dev)
    assert (a * 0.5).prim is a.prim
    b = Tensor.zeros((256,), dev)
    kept = b.clone()
    assert (b * 0.5).prim is not kept.prim
    sim = _sim("pytorch")
    a = Tensor.zeros((256,), sim.device("flex"))
    assert (a * 0.5).prim is not a.prim


def test_weight_gradient_gemm_packs_its_rhs():
    """gemm-common's per-call MemBuffer: the rhs gradient lhs^T @ grad of a [64,512] x
    [512,512] matmul packs grad into kc * nc = 64 x 516 f32 (132,096 B, the Linux
    alloc-trace train-step), allocated after the staged output and freed at once."""
    from sim.platform.heap import HeapTap

    class Recording(HeapTap):
        """The heap's tap: every event, the heap's runs (pairs, alloc_run, nested...)
        included, comes one by one (a swapped class would miss the runs on a glibc arena)."""
        __slots__ = ()
        events = []

        def alloc(self, heap, nbytes, align=0):
            Recording.events.append(("alloc", nbytes))
            return heap.untapped(heap.alloc, nbytes, align)

        def free(self, heap, nbytes, block=None):
            Recording.events.append(("free", nbytes))
            return heap.untapped(heap.free, nbytes, block)

        def realloc(self, heap, old_nbytes, nbytes, block):
            if old_nbytes <= 0:
                return self.alloc(heap, nbytes)      # a Vec's first block: an alloc
            return heap.untapped(heap.realloc, old_nbytes, nbytes, block)

    sim = _sim()
    dev = sim.device("flex").autodiff()
    w = Tensor.random((512, 512), dev).require_grad()
    x = Tensor.random((64, 512), dev)
    loss = x.clone().matmul(w.clone()).powi_scalar(2).mean()
    sim.heap.tap = Recording()
    grads = loss.backward()
    sim.heap.tap = None
    ev = Recording.events
    big = [e for e in ev if e[1] >= 65536]
    i = big.index(("alloc", 132096))
    # the staged 1-MiB gradient (align-1 Vec, aligned block, free of the first), then the pack
    assert big[i - 3:i] == [("alloc", 1 << 20), ("alloc", 1 << 20), ("free", 1 << 20)]
    assert big[i + 1] == ("free", 132096)
    assert sum(1 for e in ev if e == ("alloc", 132096)) == 1  # x needs no gradient
    del grads


def test_the_forward_op_asks_the_backends_own_methods(monkeypatch):
    """`Backend.output` read the op's in-place and staged facts itself where the backward
    asks `writable_operand` and `staged` (review, session 58: a backend that changes one
    of them changed only the backward). The forward op now asks the same two methods:
    a backend that writes no operand in place and stages nothing allocates an unstaged
    output for `a * 0.5`, as the metal-like case does."""
    from sim.burn import backend as backend_module
    from sim.engine import simulation
    asked = []

    class NoInPlace(backend_module.Backend):
        def writable_operand(self, op_name, inputs, out_shape):
            asked.append(("writable_operand", op_name))
            return None

        def staged(self, op_name):
            asked.append(("staged", op_name))
            return False
    monkeypatch.setattr(simulation, "Backend", NoInPlace)
    sim = _sim()
    dev = sim.device("flex")
    a = Tensor.zeros((512, 512), dev)
    b = a.matmul(a)
    c = b * 0.5
    assert c.prim is not b.prim                   # not written in place: a new storage
    assert ("writable_operand", "mul_scalar") in asked
    assert ("writable_operand", "matmul") in asked and ("staged", "matmul") in asked


def test_a_dead_graph_run_is_extended_through_its_last_member(monkeypatch):
    """The locator's run of dead single-node graphs computed its last id inline
    (`first + stride * (count - 1)`) beside `NodeRun.last` (review, session 58); it asks
    the property, so the two cannot part."""
    from sim.burn.graph.runs import NodeRun
    from sim.commands.bench import CASES
    read = []
    original = NodeRun.last
    monkeypatch.setattr(NodeRun, "last", property(lambda run: read.append(run.count)
                                                  or original.fget(run)))
    sim = Simulation(PROFILE, fast_forward=False)
    CASES["untracked add loop"][0](sim, 50)
    assert len(read) >= 40          # one read per dead graph the run took in
