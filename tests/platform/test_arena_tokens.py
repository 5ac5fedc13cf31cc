"""Address-free programs on glibc's arena (sim/engine/fastforward/arenatokens.py and
PtmallocArena.run_program): a program compressed (runs of frees, repeated bodies, balanced
runs folded) and made by the compiled loop leaves the arena, chunk for chunk and live list
for live list, where its requests one by one leave it, and its counters are theirs."""

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from arenastate import arena_state
from sim.commands.bench import training_step
from sim.engine.fastforward import arenatokens
from sim.engine.profile import load_profile
from sim.engine.simulation import Simulation
from sim.platform.ptmalloc import PtmallocArena

SIZES = (8, 16, 24, 32, 48, 52, 88, 200, 1168, 2320, 5000)

#: a program's parts: a request, a unit of requests freed last-in-first-out made
#: several times over, a clone (blocks allocated, then freed oldest first), a growth
PART = st.one_of(
    st.tuples(st.just("alloc"), st.sampled_from(SIZES)),
    st.tuples(st.just("free"), st.sampled_from(SIZES), st.integers(0, 6)),
    st.tuples(st.just("unit"), st.lists(st.sampled_from(SIZES[:6]), min_size=1,
                                        max_size=4), st.integers(1, 12)),
    st.tuples(st.just("clone"), st.sampled_from((200, 288)), st.integers(1, 30)),
    st.tuples(st.just("realloc"), st.sampled_from(SIZES), st.sampled_from(SIZES),
              st.integers(0, 3)),
)


def _used_arena():
    """An arena with chunks of the programs' sizes live, in the tcache, fastbins and
    bins."""
    arena = PtmallocArena()
    blocks = [(n, arena.alloc(n)) for n in SIZES * 4]
    for n, block in blocks[::3]:
        arena.free(block, n)
    return arena


def _tokens(parts, arena):
    """The parts as tokens valid on ``arena`` (a free names a block of its size that is
    live), counting live blocks per size as the requests would leave them."""
    live = {n: len(b) for n, b in arena.live.items()}
    tokens = []
    for part in parts:
        kind = part[0]
        if kind == "alloc":
            tokens.append(("A", part[1], 0))
            live[part[1]] = live.get(part[1], 0) + 1
        elif kind == "free":
            n = live.get(part[1], 0)
            if n:
                tokens.append(("F", part[1], part[2] % n))
                live[part[1]] = n - 1
        elif kind == "unit":
            unit = [("A", n, 0) for n in part[1]]
            unit += [("F", n, 0) for n in reversed(part[1])]
            tokens.extend(unit * part[2])
        elif kind == "clone":
            n = part[2]
            tokens.extend([("A", part[1], 0)] * n)
            tokens.extend(("F", part[1], n - 1 - j) for j in range(n))
        else:
            old, new, rank = part[1], part[2], part[3]
            n = live.get(old, 0)
            if n:
                tokens.append(("R", new, old, rank % n))
                live[old] = n - 1
                live[new] = live.get(new, 0) + 1
    return tokens


def _one_by_one(arena, tokens):
    """The tokens as single requests; returns (allocations, live, blocks, peak)."""
    allocs = live = blocks = peak = 0
    for token in tokens:
        if token[0] == "A":
            arena.alloc(token[1], token[2])
            allocs += 1
            blocks += 1
            live += token[1]
        elif token[0] == "F":
            nbytes = token[1]
            arena.free(arena.live[nbytes][-1 - token[2]], nbytes)
            blocks -= 1
            live -= nbytes
        else:
            nbytes, old, rank = token[1:]
            arena.realloc(arena.live[old][-1 - rank], old, nbytes)
            live += nbytes - old
        peak = max(peak, live)
    return allocs, live, blocks, peak


def _key(arena):
    return arena_state(arena), {n: list(b) for n, b in arena.live.items() if b}


def _ignore(*args):
    pass


def _arena_copy(arena):
    """A copy of a simulation's arena alone (its fault and trim hooks not copied)."""
    hooks = arena.fault, arena.trim
    arena.fault = arena.trim = None
    try:
        spare = copy.deepcopy(arena)
    finally:
        arena.fault, arena.trim = hooks
    spare.fault = spare.trim = _ignore
    return spare


@settings(max_examples=80, deadline=None)
@given(parts=st.lists(PART, max_size=25), fold=st.booleans())
def test_a_program_places_what_its_requests_place(parts, fold):
    arena = _used_arena()
    other = copy.deepcopy(arena)
    tokens = _tokens(parts, arena)
    counters = _one_by_one(arena, tokens)
    program = arenatokens.flatten(arenatokens.compress(tokens, fold=fold))
    assert other.run_program(program.flat) == 0
    assert _key(other) == _key(arena)
    assert (program.allocs, program.live, program.blocks, program.peak) == counters


@settings(max_examples=40, deadline=None)
@given(parts=st.lists(PART, max_size=25))
def test_a_folded_program_without_its_tokens_is_exact_where_it_says_so(parts):
    """Without the folded runs' tokens (as a template writes them) the program either
    ends where the requests leave the arena, or counts the folded runs whose bins were
    short."""
    arena = _used_arena()
    other = copy.deepcopy(arena)
    tokens = _tokens(parts, arena)
    _one_by_one(arena, tokens)
    items = arenatokens.compress(tokens, fold=True, keep=False)
    short = other.run_program(arenatokens.flatten(items).flat)
    assert short > 0 or _key(other) == _key(arena)


def test_repeated_units_fold_to_one_item_and_a_template_grows_them():
    unit = [("A", 16, 0), ("A", 32, 0), ("F", 32, 0), ("F", 16, 0)]
    programs = [arenatokens.compress([("A", 32, 0)] * n + (unit + [("F", 32, 0)]) * (n + 1))
                for n in (5, 6, 7)]
    assert [len(p) for p in programs] == [2, 2, 2]
    template = arenatokens.fit(programs)
    assert template.at(3) == arenatokens.compress(
        [("A", 32, 0)] * 10 + (unit + [("F", 32, 0)]) * 11)
    assert arenatokens.fit(programs[:2] + [programs[0]]) is None
    # folded: the unit is one item whose numbers are its calls, peak and depths
    folded = arenatokens.compress(unit * 3, fold=True, keep=False)
    assert folded == [("N", 6, 48, ((32, 1), (48, 1)), None)]
    assert arenatokens.flatten(folded).allocs == 6


def test_the_summed_validation_losss_steps_are_exact_programs():
    """The bench's summed validation loss on linux-x86_64: each of steps 21-26 logged as
    tokens and made by run_program on a copy of the arena from before it (with its folded
    runs' tokens and without) ends as exact mode's arena and heap counters."""
    sim = Simulation(load_profile("linux-x86_64"), fast_forward=False)
    logged = arenatokens.TokenLog(sim.heap._arena)
    sim.heap._arena = logged
    body, _ = training_step(sim, "adam", validation_loss=True)
    for _ in range(20):
        body()
    heap = sim.heap
    for _ in range(6):
        before = _arena_copy(logged.arena)
        counters = (heap.allocs, heap.live_bytes, heap.live_blocks, heap.peak_bytes)
        logged.__dict__["log"] = []
        body()
        log = logged.__dict__["log"]
        logged.__dict__["log"] = None
        assert len(log) > 1900
        for keep in (True, False):
            items = [item for _, run in arenatokens.runs_of(log, keep) for item in run]
            program = arenatokens.flatten(items)
            assert len(items) < len(log)
            spare = _arena_copy(before)
            assert spare.run_program(program.flat) == 0
            assert _key(spare) == _key(logged.arena)
            allocs, live, blocks, peak = counters
            assert (allocs + program.allocs, live + program.live, blocks + program.blocks,
                    max(peak, live + program.peak)) == (
                heap.allocs, heap.live_bytes, heap.live_blocks, heap.peak_bytes)
