"""On glibc's arena every heap free of a training step names the block burn frees: a free
by size takes the newest live block of the size, which is not always the object burn
drops (a gradient's box, the ``nodes`` map's copy of a node's parents, ``Arc<Graph>``,
the transient map ``analyse`` collects graphs in). The locator's BTreeMap nodes still
free by size (fast-forward allocates the nodes of the appends it applies without handles)."""

import pytest

from sim.burn.nn import Mlp
from sim.burn.optim import OPTIMIZERS, GradientsParams
from sim.burn.tensor import Tensor
from sim.engine.profile import load_profile
from sim.engine.simulation import Simulation
from sim.platform.ptmalloc import PtmallocArena


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_training_step_frees_only_tree_nodes_by_size(optimizer, monkeypatch):
    sim = Simulation(load_profile("linux-x86_64"), fast_forward=False)
    dev = sim.device("flex").autodiff()
    model = Mlp(16, 16, 16, dev)
    x = Tensor.random((8, 16), dev)
    optim = OPTIMIZERS[optimizer](sim)
    by_size, named = [], [0]
    free = PtmallocArena.free

    def counting(arena, block=None, nbytes=None):
        if block is None:
            by_size.append(nbytes)
        else:
            named[0] += 1
        return free(arena, block, nbytes)
    for step in range(4):
        if step == 1:       # the first step's frees include the setup's
            monkeypatch.setattr(PtmallocArena, "free", counting)
        loss = model.forward(x.clone()).powi_scalar(2).mean()
        grads = GradientsParams.from_grads(loss.backward(), model)
        model = optim.step(1e-3, model, grads)
    layout = sim.layout
    tree_nodes = {layout.graphs_leaf_bytes, layout.graphs_internal_bytes,
                  layout.keys_leaf_bytes, layout.keys_internal_bytes}
    assert set(by_size) <= tree_nodes and len(by_size) <= 2 * 3 and named[0] > 300
