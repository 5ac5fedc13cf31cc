"""Host blocks of burn's modules and optimizers around the tensors (probe train-validate's
traces): a Param's Arc<LazyInitState>, a lazy Param's init closure freed by its first
val(), burn-optim's param_context map, the state Arc and module path per parameter."""

from sim.engine.simulation import Simulation
from sim.burn.nn import Linear, Mlp, Param
from sim.burn.optim import Adam, GradientsParams, Sgd
from sim.engine.profile import load_profile
from sim.burn.tensor import Tensor

PROFILE = load_profile("linux-x86_64")
LAYOUT = PROFILE.layout


def _device():
    sim = Simulation(PROFILE, fast_forward=False)
    dev = sim.device("flex").autodiff()
    Tensor.random((4, 4), dev).require_grad()   # first-use costs out of the way
    sim.thread_rng()                            # ... and the thread's RNG (a ParamId's)
    return sim, dev


def test_a_lazy_param_owns_its_state_and_init_closure():
    sim, dev = _device()
    blocks, nbytes = sim.heap.live_blocks, sim.heap.live_bytes
    param = Param((4, 4), dev)
    assert sim.heap.live_blocks - blocks == 3
    assert sim.heap.live_bytes - nbytes == (LAYOUT.param_state_bytes + LAYOUT.param_init_bytes
                                            + LAYOUT.param_init_extra_bytes)
    del param
    assert (sim.heap.live_blocks, sim.heap.live_bytes) == (blocks, nbytes)


def test_the_first_val_frees_the_init_closure():
    sim, dev = _device()
    param = Param((4, 4), dev)
    before = sim.heap.live_blocks
    handle = param.val()
    lazy = sim.heap.live_blocks - before
    other, dev2 = _device()
    before = other.heap.live_blocks
    tensor = Tensor.random((4, 4), dev2).require_grad()
    clone = tensor.clone()
    eager = other.heap.live_blocks - before
    assert lazy == eager - 2
    del handle, clone


def test_valid_copies_get_a_state_of_their_own():
    sim, dev = _device()
    model = Linear(4, 4, dev)
    model.weight.val()
    model.bias.val()
    blocks = sim.heap.live_blocks
    copy = model.valid()
    # two new LazyInitStates, and each copy's plain handle (strides) on the same buffer
    assert sim.heap.live_blocks - blocks == 2 + 2
    del copy
    assert sim.heap.live_blocks == blocks


def _step(model, dev, optim):
    x = Tensor.random((2, 8), dev)
    loss = model.forward(x).powi_scalar(2).mean()
    grads = GradientsParams.from_grads(loss.backward(), model)
    del loss
    return optim.step(1e-3, model, grads)


def test_module_paths_and_the_context_map():
    sim, dev = _device()
    model = Mlp(8, 8, 8, dev)
    assert [p.path for p in model.params()] == ["hidden.weight", "hidden.bias",
                                                "output.weight", "output.bias"]
    sgd = Sgd()
    _step(model, dev, sgd)
    # four contexts: 8 buckets of 80 B + 8 control bytes + one 16-B group (the trace's 664 B)
    assert sgd._table.nbytes == 664
    one = Sgd()
    small = Linear(8, 8, dev)
    _step(small, dev, one)
    assert one._table.nbytes == 4 * 80 + 4 + 16


def test_optimizer_steps_after_the_first_keep_the_heap_flat():
    for optim in (Sgd(), Adam()):
        sim, dev = _device()
        model = Mlp(8, 8, 8, dev)
        marks = []
        for _ in range(4):
            model = _step(model, dev, optim)
            marks.append((sim.heap.live_bytes, sim.heap.live_blocks))
        assert marks[1] == marks[2] == marks[3], optim


def test_the_first_sync_read_of_a_thread_keeps_block_on_s_parker():
    """futures-lite's block_on cache (probe train-validate, traced: the first into_scalar
    allocates one 40-B Arc, kept for the thread): once per thread, not per read."""
    sim, dev = _device()
    kept = []
    for _ in range(3):
        x = Tensor.random((4, 4), dev)
        blocks, nbytes = sim.heap.live_blocks, sim.heap.live_bytes
        x.sum().into_scalar()
        kept.append((sim.heap.live_blocks - blocks, sim.heap.live_bytes - nbytes))
        del x
    # each read drops what it made (the sum, the handle of x it consumed is not x itself)
    assert kept[1] == kept[2]
    assert kept[0] == (kept[1][0] + 1, kept[1][1] + LAYOUT.block_on_cache_bytes)
    assert LAYOUT.block_on_cache_bytes == 40
