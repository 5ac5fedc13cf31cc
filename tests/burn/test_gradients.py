"""The gradients container a backward returns (``sim.burn.runtime.server.Gradients``): the
blocks burn-autodiff 0.22.1's ``Gradients`` owns besides the gradients, and gradients
that share a storage (sizes of the Linux x86_64 profile, as its ``bwk`` traces show)."""

import gc

import pytest

from sim.platform.heap import Heap
from sim.engine import simulation
from sim.engine.simulation import Simulation
from sim.engine.profile import load_profile
from sim.burn.tensor import Tensor, drop

#: bytes of one [4, 4] f32 buffer on burn-flex: data, Bytes' boxed controller, ArcInner<Bytes>
BUFFER = (64, 24, 40)
#: a [4, 4] gradient's strides Vec<isize>
STRIDES = 16


@pytest.fixture
def events(monkeypatch):
    """Every heap event of a live simulation from the moment it is first read: ``("alloc" |
    "free", bytes)``. Earlier tests' simulations are collected first, and a closed heap's
    events (a simulation the garbage collector finalizes during the test) are not read.
    The simulations made meanwhile get a heap whose ``alloc`` and ``free`` record each
    event first (a subclass: the compiled heap's methods cannot be replaced on its class)."""
    gc.collect()
    seen = []

    class TracedHeap(Heap):
        def alloc(self, nbytes, align=0):
            if nbytes > 0 and not self.closed:
                seen.append(("alloc", nbytes))
            return Heap.alloc(self, nbytes, align)

        def free(self, nbytes, block=None):
            if nbytes > 0 and not self.closed:
                seen.append(("free", nbytes))
            return Heap.free(self, nbytes, block)

    monkeypatch.setattr(simulation, "Heap", TracedHeap)
    return seen


def _leaves(profile="linux-x86_64", count=1):
    sim = Simulation(load_profile(profile))
    device = sim.device("flex").autodiff()
    leaves = [Tensor.from_floats([[1.0] * 4] * 4, device).require_grad() for _ in range(count)]
    return sim, leaves


def _backward(tensor):
    """``tensor.clone().sum().backward()``, the loss dropped: the kept Gradients."""
    loss = tensor.clone().sum()
    grads = loss.backward()
    drop(loss)
    return grads


def _freed_by(sim, action):
    """(bytes, blocks) that ``action()`` frees, net."""
    heap = sim.heap
    before = heap.live_bytes, heap.live_blocks
    action()
    return before[0] - heap.live_bytes, before[1] - heap.live_blocks


def _dropping(sim, holder):
    """(bytes, blocks) freed when the Gradients in the list ``holder`` (its only
    reference) is dropped."""
    return _freed_by(sim, holder.clear)


def test_a_kept_gradient_keeps_the_container_blocks():
    """One leaf's gradient: n_required clone (4 buckets of 16 B: 84), registration box 96,
    closure box 16, the container's table (4 buckets of 24 B: 116), the entry's box 184,
    and the gradient itself (strides and its own buffer)."""
    sim, (x,) = _leaves()
    grads = _backward(x)
    container = grads._container
    assert container.required.nbytes == 84 and container.table.nbytes == 116
    assert list(container.grads) == [x.node.id]
    del container
    holder = [grads]
    del grads
    assert _dropping(sim, holder) == (84 + 96 + 16 + 116 + 184 + STRIDES + sum(BUFFER), 9)


def test_dropping_frees_entries_then_table_then_hook(events):
    """Each entry drops its tensor (the storage it held last, then its strides: the
    FlexTensor's fields in order) and its box; then the table, the n_required clone, the
    registration box and the closure box."""
    sim, (x,) = _leaves()
    grads = _backward(x)
    events.clear()
    del grads
    assert events == [*(("free", n) for n in BUFFER), ("free", STRIDES), ("free", 184),
                      ("free", 116), ("free", 84), ("free", 96), ("free", 16)]


def test_the_backward_builds_the_container_in_burns_order(events):
    """As the malloc-log trace of real burn shows: the walk's ids (8, then grown by a
    realloc), its parents stack (16) and visited set (52), freed; the tape (48: a Vec per
    depth inside, 16 each); n_required (built with the tape, dropped when the backward
    returns) with the tree's parent ids (32) and table (148); n_required's clone, the
    registration and closure boxes, then the root's ones (data, controller, Arc,
    strides), its entry box and the container's first table; the root primitive's strides
    go once it is registered."""
    sim, (x,) = _leaves()
    loss = x.clone().sum()
    events.clear()
    grads = loss.backward()
    allocs = [n for kind, n in events if kind == "alloc"]
    start = allocs.index(84)
    assert allocs[start - 6:start] == [8, 16, 52, 48, 16, 16]
    assert allocs[start:start + 12] == [84, 32, 148, 84, 96, 16, 4, 24, 40, 8, 184, 116]
    i = events.index(("alloc", 116))
    assert events[i + 1] == ("free", 8)   # the root's strides ([1]: one usize)
    # the tape's n_required went with the backward, the container keeps its clone
    assert events.count(("alloc", 84)) - events.count(("free", 84)) == 1
    del grads


def test_add_hands_one_storage_to_both_parents():
    """a + b: add's backward passes its incoming gradient on to both sides as clones, so
    the two kept gradients share one storage; each has its own box and strides."""
    sim, (a, b) = _leaves(count=2)
    grads = _backward(a.clone() + b.clone())
    ga, gb = grads.raw[a.node.id], grads.raw[b.node.id]
    assert ga.prim is gb.prim and ga.prim.holders == 2
    del ga, gb
    holder = [grads]
    del grads
    assert _dropping(sim, holder) == (2 * (184 + STRIDES) + sum(BUFFER) + 116 + 84 + 96 + 16,
                                      11)


def test_computed_gradients_get_their_own_storage():
    """a * b: each side's gradient is a new tensor (grad * the other operand)."""
    sim, (a, b) = _leaves(count=2)
    grads = _backward(a.clone() * b.clone())
    ga, gb = grads.raw[a.node.id], grads.raw[b.node.id]
    assert ga.prim is not gb.prim and ga.prim.holders == gb.prim.holders == 1


def test_a_twice_used_leaf_gets_the_sum_of_its_gradients():
    """x + x: both clones go to x; the second register removes the first and adds them
    (neither is uniquely held: a new storage), leaving one entry."""
    sim, (x,) = _leaves()
    grads = _backward(x.clone() + x.clone())
    assert list(grads.raw) == [x.node.id] and grads.raw[x.node.id].prim.holders == 1
    holder = [grads]
    del grads
    assert _dropping(sim, holder) == (84 + 96 + 16 + 116 + 184 + STRIDES + sum(BUFFER), 9)


def test_n_required_has_a_slot_per_distinct_parent():
    """Five distinct parent ids (the outputs of mul_scalar, add and mul; x and y) need 8
    buckets: 8 x 16 + 8 + 16 = 152 B on x86_64; the container's clone has as many."""
    sim, (x, y) = _leaves(count=2)
    z = (x.clone() * y.clone()) + x.clone()
    grads = _backward(z.clone().mul_scalar(2.0))
    assert grads._container.required.nbytes == 152


def test_remove_moves_the_gradient_out():
    """``grad_remove`` frees the entry's box only: the tensor, its strides included, goes
    to the caller (GradientsParams::from_grads)."""
    sim, (x,) = _leaves()
    grads = _backward(x)
    kept = grads.raw[x.node.id]
    freed = _freed_by(sim, lambda: grads.remove(x))
    assert freed == (184, 1)
    assert grads.remove(x) is None and kept.prim is not None


def test_grad_is_a_clone_of_the_kept_gradient():
    """``tensor.grad(&grads)`` clones the kept gradient: new strides, the same storage."""
    sim, (x,) = _leaves()
    grads = _backward(x)
    before = sim.heap.live_bytes, sim.heap.live_blocks
    g = x.grad(grads)
    assert (sim.heap.live_bytes - before[0], sim.heap.live_blocks - before[1]) == (STRIDES, 1)
    assert g.prim is grads.raw[x.node.id].prim


def test_aarch64_tables_use_8_byte_groups():
    """The same container on the macOS profile: hashbrown's NEON groups make its two
    4-bucket tables 76 B (n_required) and 108 B (the container's)."""
    sim, (x,) = _leaves("m2max-macos")
    grads = _backward(x)
    container = grads._container
    assert container.required.nbytes == 76 and container.table.nbytes == 108


def test_batched_tape_depths_leave_the_allocator_as_single_vecs_do(monkeypatch):
    """A tape over a long chain (``p10-ema`` target: the EMA's depth grows every step)
    has thousands of depths without a step; a size-class allocator takes their blocks in
    runs. Its state after the run equals one block per ``Vec``, each dropped in turn."""
    from sim.burn.runtime import server
    from sim.engine.runner import run_cell
    original = server.CapacityOneVecs

    def state(batched):
        made = []

        class Depths(original):
            __slots__ = ()

            def __init__(self, heap, count):
                super().__init__(heap, count, batched=batched)
                made.append(count)

        monkeypatch.setattr(server, "CapacityOneVecs", Depths)
        rows = run_cell("p10-ema", "target", policy="detach-constant", fast_forward=False,
                        sets={"steps": 60, "batch": 4, "features": 8,
                              "report_at": ",".join(map(str, range(1, 61)))})
        return made, [(r["metric"], r["value"]) for r in rows]

    made, batched = state(True)
    assert max(made) > 20                  # deep tapes were built
    assert state(False) == (made, batched)
