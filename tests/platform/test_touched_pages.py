"""First-execution residency: code paths' text and gemm's L2 slab (sim.platform.rss.TouchedPages)."""

import re

import pytest

from sim.burn.backend import gemm_slab_written
from sim.platform.rss import CODE_PATHS, TouchedPages
from sim.engine.simulation import Simulation
from sim.burn.nn import Linear
from sim.burn.optim import GradientsParams, Sgd
from sim.engine.profile import MODELS_DIR, ProfileError, load_profile
from sim.burn.tensor import Tensor


def test_code_path_counted_once_per_process():
    t = TouchedPages({p: 4096 * (i + 1) for i, p in enumerate(CODE_PATHS)})
    for _ in range(3):
        t.touch_code("matmul")
    assert t.text_bytes() == 4096 * (CODE_PATHS.index("matmul") + 1)
    t.touch_code("device")
    assert t.text_bytes() == 4096 * (CODE_PATHS.index("matmul") + 1) + 4096


def test_resident_never_falls():
    t = TouchedPages({"matmul": 65536})
    seen = 0
    for n in (8192, 4096, 16384, 0, 12288):
        t.touch_buffer("slab", n)
        assert t.resident_bytes() >= seen
        seen = t.resident_bytes()
    assert t.resident_bytes() == 16384


def _train_step(sim, model, x, opt):
    loss = model.forward(x.clone()).powi_scalar(2).mean()
    grads = GradientsParams.from_grads(loss.backward(), model)
    return opt.step(1e-3, model, grads)


def test_simulation_text_once_and_monotone():
    profile = load_profile("linux-x86_64")
    sim = Simulation(profile)
    dev = sim.device("flex").autodiff()
    model = Linear(512, 512, dev)
    x = Tensor.random((64, 512), dev)
    opt = Sgd()
    history = []
    for _ in range(3):
        model = _train_step(sim, model, x, opt)
        history.append(sim.touched.resident_bytes())
    assert history[0] == history[1] == history[2]
    expected = sum(profile.code[p] for p in CODE_PATHS)
    assert sim.touched.text_bytes() == expected   # powi_scalar is elementwise: every path ran


def test_slab_residency_is_derived_written_size():
    profile = load_profile("linux-x86_64")
    flex = profile.backends["flex"]
    mr, nr, kc, mc = (flex[k] for k in ("gemm_mr", "gemm_nr", "gemm_kc_max", "gemm_mc_max"))
    l2 = flex["matmul_workspace_bytes"]
    # p10-ema: out[64,512] = x[64,512] @ W[512,512]; gemm sees (512, 64, 512): 8 panels of 16 x 512
    forward = gemm_slab_written(512, 64, 512, mr, nr, kc, mc, l2)
    assert forward == 8 * 16 * 512 * 4
    # backward: grad_x gemm (512, 64, 512) strided lhs, grad_W gemm (512, 512, 64)
    assert gemm_slab_written(512, 512, 64, mr, nr, kc, mc, l2) == 8 * 16 * 64 * 4
    sim = Simulation(profile)
    dev = sim.device("flex").autodiff()
    model = Linear(512, 512, dev)
    x = Tensor.random((64, 512), dev)
    _train_step(sim, model, x, Sgd())
    page = sim.allocator.page_bytes
    slab = sim.touched.resident_bytes() - sim.touched.text_bytes()
    assert slab == -(-(128 + forward) // page) * page == 260 * 1024


def test_each_thread_has_its_own_slab():
    """gemm's L2 slab is thread-local: a second thread's first matmul allocates its own
    slab and makes its written prefix resident, even on shapes another thread ran."""
    profile = load_profile("linux-x86_64")
    l2 = profile.backends["flex"]["matmul_workspace_bytes"]
    sim = Simulation(profile)
    dev = sim.device("flex")
    w = Tensor.random((512, 512), dev)
    x = Tensor.random((64, 512), dev)
    after = {}

    def thread(name):
        x.matmul(w)
        after[name] = (sim.heap.live_bytes, sim.touched.resident_bytes())
        yield sim.tick()
        x.matmul(w)   # the same shapes again on this thread: nothing new
        assert (sim.heap.live_bytes, sim.touched.resident_bytes()) == after[name]

    sim.spawn(thread("a"), "a")
    sim.env.run()
    sim.spawn(thread("b"), "b")
    sim.env.run()
    slab = 260 * 1024   # p10-ema's forward prefix (test above)
    assert after["b"][0] - after["a"][0] == l2
    assert after["b"][1] - after["a"][1] == slab


def test_macos_slab_not_modelled_and_text_is_elementwise_only():
    sim = Simulation(load_profile("m2max-macos"))
    dev = sim.device("flex").autodiff()
    a = Tensor.from_floats([1.0] * 16, dev)
    assert sim.touched.resident_bytes() == 0
    c = a.clone() + a.clone()
    assert sim.touched.resident_bytes() == sim.profile.code["elementwise"]
    del c


@pytest.mark.parametrize("key", [f"{p}_bytes" for p in CODE_PATHS] + ["gemm_mr"])
def test_profile_validation_names_missing_code_key(tmp_path, key):
    text = (MODELS_DIR / "linux-x86_64.toml").read_text()
    broken, n = re.subn(rf"^{key} = .*\n", "", text, flags=re.M)
    assert n == 1
    path = tmp_path / "p.toml"
    path.write_text(broken)
    section = "backend.flex" if key.startswith("gemm") else "code"
    with pytest.raises(ProfileError, match=rf"missing key {section}\.{key}"):
        load_profile(path)


def test_single_row_matmul_faults_in_the_gemv_text_once():
    """A matmul whose gemm has one row or column (a single-row forward) runs gemm's
    matrix-vector kernels besides its dispatch: their text (code.gemv_bytes) comes in once;
    a blocked gemm does not bring it in."""
    profile = load_profile("amd-epyc-zen4")
    code = profile.code
    assert code["gemv"] > 0
    sim = Simulation(profile)
    dev = sim.device("flex")
    w = Tensor.random((128, 128), dev)
    x = Tensor.random((64, 128), dev)
    x.matmul(w)
    before = sim.touched.text_bytes()
    assert "gemv" not in sim.touched.paths
    z = Tensor.random((1, 128), dev)
    z.matmul(w)
    z.matmul(w)
    assert sim.touched.text_bytes() - before == code["gemv"]
    # the first matmul of a process being single-row: the dispatch's text and the kernels'
    sim = Simulation(profile)
    dev = sim.device("flex")
    start = sim.touched.text_bytes()
    Tensor.random((1, 128), dev).matmul(Tensor.random((128, 128), dev))
    assert sim.touched.text_bytes() - start == code["creation"] + code["matmul"] + code["gemv"]
