"""PtmallocArena.replay: a compiled iteration of requests made n times in one call must
leave the arena exactly as the same requests made one by one through alloc, free and
realloc (chunks, bins, tcache, fastbins, top, break, live lists, page faults), and
PtmallocArena.rebind must let the handles of an earlier iteration free the chunks the
replay gave their allocations."""

import copy
import random
import sys
from pathlib import Path

import pytest

from sim.platform.ptmalloc import ZEROED, PtmallocArena

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from arenastate import Heard, arena_state  # noqa: E402

#: iterations of the longer replays below (the compiled loop has no threshold; these
#: replays were sized for the generated loop it replaced)
LONG = 16

SIZES = (8, 16, 24, 40, 72, 100, 200, 300, 500, 1000, 1030, 1100, 3000, 9000, 70000, 200000)


def random_template(rng, depth, frees_by_size=True):
    """One iteration's requests: allocations of the palette's sizes (some aligned or
    zeroed), each freed by name in the same iteration or ``1..depth`` iterations later,
    some grown by a realloc first, a few freed by size instead."""
    items = []
    for j in range(rng.randint(3, 40)):
        life = rng.choice([0, 0, 0] + list(range(1, depth + 1)) +
                          (["size"] if frees_by_size else []))
        align = rng.choice([0] * 6 + [64, ZEROED])
        start = rng.random()
        end = start + rng.random() * (1 - start)
        grow = life == 0 and rng.random() < 0.2
        items.append(dict(size=rng.choice(SIZES), align=align, life=life, start=start,
                          end=end, grow=(start + end) / 2 if grow else None,
                          grown=rng.choice(SIZES), at=rng.random()))
    keyed = []
    for j, item in enumerate(items):
        keyed.append((item["start"], "alloc", j))
        if item["grow"] is not None:
            keyed.append((item["grow"], "realloc", j))
        if item["life"] in (0, "size"):
            keyed.append((item["end"], "free", j))
        else:
            keyed.append((item["at"], "free-earlier", j))
    keyed.sort()
    index, count = {}, 0
    for _, kind, j in keyed:          # indices: allocations and reallocs in order
        if kind in ("alloc", "realloc"):
            index[j] = count
            count += 1
    events, current = [], {}
    count = 0
    for _, kind, j in keyed:
        item = items[j]
        if kind == "alloc":
            events.append(("alloc", item["size"], item["align"]))
            current[j] = (count, item["size"])
            count += 1
        elif kind == "realloc":
            old_index, old = current[j]
            events.append(("realloc", item["grown"], (old, 0, old_index)))
            current[j] = (count, item["grown"])
            count += 1
        elif kind == "free":
            at, size = current[j]
            events.append(("free", size, None if item["life"] == "size" else (0, at)))
        else:
            size = item["grown"] if item["grow"] is not None else item["size"]
            events.append(("free", size, (item["life"], index[j])))
    return tuple(events)


def replayed_both(arena, other, program, template, n, carry) -> bool:
    """Whether ``n`` iterations of ``program`` replayed on ``arena`` give the blocks the
    same ``template``'s calls one by one give on ``other`` (its copy)."""
    replayed = arena.replay(program, n, carry)
    expected = [list(blocks) for blocks in carry]
    for _ in range(n):
        expected.append(one_by_one(other, template, expected))
        del expected[0]
    return replayed == expected

def one_by_one(arena, template, carry):
    """One iteration of ``template`` through alloc, free and realloc; its blocks."""
    blocks = []
    for kind, nbytes, arg in template:
        if kind == "alloc":
            blocks.append(arena.alloc(nbytes, arg))
        elif kind == "free":
            arena.free(None if arg is None else
                       (blocks if not arg[0] else carry[-arg[0]])[arg[1]], nbytes)
        else:
            old, back, index = arg
            blocks.append(arena.realloc((blocks if not back else carry[-back])[index], old,
                                        nbytes))
    return blocks


def faulting_arena():
    arena = PtmallocArena()
    faults = []
    arena.fault = lambda nbytes, mapped: faults.append((nbytes, mapped))
    return arena, faults


def warmed(rng, template, depth):
    """An arena with some unrelated blocks and ``depth`` iterations of ``template`` made;
    the blocks of those iterations."""
    arena, faults = faulting_arena()
    for _ in range(rng.randint(0, 30)):
        arena.alloc(rng.choice(SIZES))
    carry = [[] for _ in range(depth)]
    # iterations before any template: the frees that reach back need blocks of the same
    # allocations, so warm up with the template whose frees of earlier iterations skip
    # the missing ones
    for k in range(depth + 2):
        usable = tuple(e for e in template
                       if not (e[0] == "free" and e[2] is not None and e[2][0] > k))
        carry.append(one_by_one(arena, usable, carry))
        del carry[0]
    return arena, faults, carry


def replay_against_one_by_one(arena, faults, program, template, carry, n):
    """Replay ``n`` iterations of ``program`` on ``arena`` and make the same ``template``'s
    calls one by one on a copy: the blocks, live lists, bins, resident bytes, trims,
    mmapped blocks, mmap threshold and page faults must be the same."""
    other = copy.deepcopy(arena)
    other_faults = []
    other.fault = lambda nbytes, mapped: other_faults.append((nbytes, mapped))
    start = len(faults)
    assert replayed_both(arena, other, program, template, n, carry)
    assert live_lists(arena) == live_lists(other)
    assert arena_state(arena) == arena_state(other)
    # the unsorted bin in order, each chunk with its size (the one free_at holds)
    assert list(arena.unsorted.items()) == list(other.unsorted.items())
    assert all(arena.free_at[a] == size for a, size in arena.unsorted.items())
    assert (arena.resident_bytes(), arena.trims, arena.mapped, arena.mmap_threshold) == \
        (other.resident_bytes(), other.trims, other.mapped, other.mmap_threshold)
    assert faults[start:] == other_faults


def live_lists(arena):
    return tuple((size, tuple(blocks)) for size, blocks in sorted(arena.live.items()) if blocks)


@pytest.mark.parametrize("seed", range(40))
def test_replay_equals_the_calls_one_by_one(seed):
    rng = random.Random(seed)
    template = random_template(rng, rng.choice([0, 1, 2]))
    program = PtmallocArena.compile(template)
    arena, faults, carry = warmed(rng, template, program.depth)
    replay_against_one_by_one(arena, faults, program, template, carry, rng.randint(1, 60))


@pytest.mark.parametrize("seed", range(40))
def test_long_replays_equal_the_calls_one_by_one(seed):
    """Longer replays (the program's requests in the arena's compiled loop): the same
    placement as the calls one by one, from arenas that already hold mmapped blocks the
    loop frees (a free raised the mmap threshold since), and whatever the tcache and
    fastbins hold."""
    rng = random.Random(5000 + seed)
    template = random_template(rng, rng.choice([1, 2, 3]))
    program = PtmallocArena.compile(template)
    arena, faults, carry = warmed(rng, template, program.depth)
    n = program.depth + LONG + rng.randint(0, 80)
    replay_against_one_by_one(arena, faults, program, template, carry, n)


@pytest.mark.parametrize("seed", range(12))
def test_a_replay_leaves_its_carry_alone_and_splits_as_one(seed):
    """The replay loop fills each iteration's blocks into the list the carry dropped an
    iteration before: the carry handed in stays as it was, and a replay made in two
    calls (the second from the carry the first returned) ends as one call of as many
    iterations, blocks and arena alike."""
    rng = random.Random(9000 + seed)
    template = random_template(rng, rng.choice([0, 1, 2, 3]))
    program = PtmallocArena.compile(template)
    arena, _, carry = warmed(rng, template, program.depth)
    given = copy.deepcopy(carry)
    other = copy.deepcopy(arena)
    n = program.depth + rng.randint(1, 12)
    whole = arena.replay(program, n, carry)
    assert carry == given
    first = rng.randint(1, n - 1) if n > 1 else 1
    split = other.replay(program, first, given)
    split = other.replay(program, n - first, split)
    assert whole == split
    assert [len(blocks) for blocks in whole] == [program.blocks] * program.depth
    assert arena_state(arena) == arena_state(other)
    assert live_lists(arena) == live_lists(other)


def test_the_replay_loop_frees_blocks_mapped_before_the_threshold_rose():
    """A 200,000-B block is mmapped at glibc's first threshold; its free raises the
    threshold above it, so later ones come from the heap: the replay's loop still frees
    the mapped blocks the iterations before it left."""
    template = (("alloc", 200000, 0), ("alloc", 100, 0), ("free", 100, (0, 1)),
                ("free", 200000, (2, 0)))
    program = PtmallocArena.compile(template)
    arena, faults = faulting_arena()
    carry = [[arena.alloc(200000)], [arena.alloc(200000)]]
    assert all(type(blocks[0]) is tuple for blocks in carry)
    other = copy.deepcopy(arena)
    replayed = arena.replay(program, 40, carry)
    expected = [list(blocks) for blocks in carry]
    for _ in range(40):
        expected.append(one_by_one(other, template, expected))
        del expected[0]
    assert replayed == expected and arena_state(arena) == arena_state(other)
    assert arena.mapped == other.mapped == 0 and arena.mmap_threshold > 200000


@pytest.mark.parametrize("seed", range(20))
def test_rebound_handles_free_the_replayed_chunks(seed):
    """The handles of the last iteration made one by one (what live objects hold), rebound
    after a replay, free the chunks the replay's last iteration allocated; new blocks whose
    address an old handle still names get handles of their own. The next iterations, made
    one by one with those handles, leave the arena as n + k iterations one by one do."""
    rng = random.Random(1000 + seed)
    template = random_template(rng, rng.choice([1, 2]), frees_by_size=False)
    depth = PtmallocArena.compile(template).depth
    arena, _, carry = warmed(rng, template, depth)
    other = copy.deepcopy(arena)
    other_carry = [list(blocks) for blocks in carry]
    n = rng.randint(1, 40)
    replayed = arena.replay(PtmallocArena.compile(template), n, carry)
    # the handles of the iterations' blocks still live at the end of the last one
    freed = {}                        # allocation index -> iterations until its free
    for kind, _, arg in template:
        ref = arg if kind == "free" else arg[1:] if kind == "realloc" else None
        if ref is not None:
            freed[ref[1]] = ref[0]
    live = [(d, j) for d in range(1, depth + 1) for j in range(len(carry[-d]))
            if freed[j] > d - 1]
    arena.rebind([(carry[-d][j], replayed[-d][j]) for d, j in live])
    held = [list(blocks) for blocks in carry]
    for _ in range(n):
        other_carry.append(one_by_one(other, template, other_carry))
        del other_carry[0]
    for _ in range(rng.randint(1, 5)):
        held.append(one_by_one(arena, template, held))
        del held[0]
        other_carry.append(one_by_one(other, template, other_carry))
        del other_carry[0]
    assert live_lists(arena) == live_lists(other)
    assert arena_state(arena) == arena_state(other)
    # what each handle still live means: the same chunk as the other arena's block
    for d in range(1, depth + 1):
        live = [j for j in range(len(held[-d])) if freed[j] > d - 1]
        assert [arena.chunk_of(held[-d][j]) for j in live] == \
            [other_carry[-d][j] for j in live]


def test_compile_refuses_a_free_of_no_allocation():
    with pytest.raises(ValueError):
        PtmallocArena.compile((("alloc", 24, 0), ("free", 24, (0, 3))))


def test_compile_refuses_a_request_past_64_bit_sizes_with_one_clear_error():
    """A request of 2^63 B or more cannot be a C ``long long`` of the replay's program: one
    error naming it (not array's raw OverflowError), in the adopted arena and in
    ``ptmalloc.py`` run as Python; 2^62 B compiles."""
    import importlib.util
    from sim.errors import UserError
    from sim.platform import ptmalloc
    spec = importlib.util.spec_from_file_location("sim.platform._ptmalloc_pure",
                                                  ptmalloc.__file__)
    pure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pure)
    for module in (ptmalloc, pure):
        with pytest.raises(UserError, match=r"^replay: a request of 9,223,372,036,854,775,808 B "
                                            r"is past what the arena's replay holds"):
            module.PtmallocArena.compile((("alloc", 1 << 63, 0), ("free", 1 << 63, (0, 0))))
        program = module.PtmallocArena.compile((("alloc", 1 << 62, 0), ("free", 1 << 62, (0, 0))))
        assert program.blocks == 1


def with_neutral_pairs(rng, template, pairs):
    """``template`` with ``pairs`` allocations of tcache sizes inserted, each freed by name
    right after it (the replay's loop runs such a pair only when its tcache bin is
    empty); the indices of the blocks after each one move up."""
    events = list(template)
    for _ in range(pairs):
        at = rng.randint(0, len(events))
        index = sum(1 for kind, _, _ in events[:at] if kind in ("alloc", "realloc"))

        def moved(ref):
            back, j = ref
            return (back, j + 1) if j >= index else ref
        events = [(kind, nbytes, moved(arg) if kind == "free" and arg is not None else
                   (arg[0],) + moved(arg[1:]) if kind == "realloc" else arg)
                  for kind, nbytes, arg in events[:at]] + \
            [("alloc", size := rng.choice(SIZES[:10]), 0), ("free", size, (0, index))] + \
            [(kind, nbytes, moved(arg) if kind == "free" and arg is not None else
              (arg[0],) + moved(arg[1:]) if kind == "realloc" else arg)
             for kind, nbytes, arg in events[at:]]
    return tuple(events)


@pytest.mark.parametrize("seed", range(20))
def test_neutral_pairs_in_the_replay_loop_equal_the_calls_one_by_one(seed):
    """An allocation freed right away leaves the arena as it found it when its tcache bin
    serves it; the replay's loop skips such a pair then, and runs it when the bin is
    empty: the same placement as the calls one by one."""
    rng = random.Random(9000 + seed)
    template = with_neutral_pairs(rng, random_template(rng, rng.choice([0, 1, 2])),
                                  rng.randint(1, 12))
    program = PtmallocArena.compile(template)
    arena, faults, carry = warmed(rng, template, program.depth)
    n = program.depth + LONG + rng.randint(0, 80)
    replay_against_one_by_one(arena, faults, program, template, carry, n)


def test_the_replay_loop_frees_a_chunk_larger_than_asked_into_a_full_bin():
    """A freed block of a chunk size other than its request asked for goes where the
    arena's own free puts it: here a
    40-B request (a 48-B chunk) gets a whole 64-B chunk from the bins (16 B would be
    left, less than a chunk), whose tcache bin is full, so the free puts it in a
    fastbin. The same placement as the calls one by one."""
    arena, faults = faulting_arena()
    full = [arena.alloc(56) for _ in range(8)]
    spare = arena.alloc(56)
    arena.alloc(24)                       # keeps the spare chunk from the top
    for block in full[:7]:
        arena.free(block)                 # the 64-B tcache bin: full
    arena.free(spare)                     # a fastbin chunk
    arena.free(arena.alloc(2000))         # a large request consolidates it into a bin
    assert arena.bins[64 >> 4]
    probe = copy.deepcopy(arena)
    assert probe.inuse[probe.alloc(40)] == 64
    template = (("alloc", 40, 0), ("alloc", 200, 0), ("free", 40, (0, 0)),
                ("free", 200, (0, 1)))
    program = PtmallocArena.compile(template)
    replay_against_one_by_one(arena, faults, program, template, [], LONG + 5)


@pytest.mark.parametrize("seed", range(12))
def test_a_replay_with_a_recorder_tells_it_what_the_calls_one_by_one_do(seed):
    """A recorder set on the arena (fast-forward's window recorder) hears from a replay
    every bin length and break event the same calls one by one tell it: the compiled
    loop pops tcache chunks inline and skips neutral pairs without a word, so with a
    recorder set the replay makes its requests through the public calls."""
    rng = random.Random(11000 + seed)
    template = with_neutral_pairs(rng, random_template(rng, rng.choice([0, 1, 2])),
                                  rng.randint(1, 6))
    program = PtmallocArena.compile(template)
    arena, faults, carry = warmed(rng, template, program.depth)
    other = copy.deepcopy(arena)
    arena.recorder, other.recorder = Heard(), Heard()
    n = rng.randint(1, 20)
    assert replayed_both(arena, other, program, template, n, carry)
    assert arena_state(arena) == arena_state(other)
    assert arena.recorder.calls == other.recorder.calls
