"""Replay a real process's malloc calls on the simulator's glibc arena and compare addresses.

``malloc-log/malloc_log.c`` (an LD_PRELOAD library) records every malloc-family call of
a process's main thread with the address glibc 2.36 returned. This script feeds the same
calls, in the same order, to :class:`sim.platform.ptmalloc.PtmallocArena` and reports
where the model places a chunk elsewhere than glibc did: a check of the arena model on
its own, with the program's real request stream (every request of the process, burn's
and the Rust runtime's and libc's own)::

    gcc -O2 -shared -fPIC -o /tmp/malloc_log.so experiments/probes/malloc-log/malloc_log.c
    MALLOC_LOG=/tmp/log.bin LD_PRELOAD=/tmp/malloc_log.so \\
        experiments/probes/target/release/burn-probes script --program P.txt
    .venv/bin/python experiments/probes/arena_replay.py /tmp/log.bin

``malloc-log/record.sh`` records the logs ``tests/platform/test_arena_replay.py`` replays
(``experiments/measured/linux-x86_64/malloc-logs``).

The first chunk of the heap is glibc's ``tcache_perthread_struct`` (640 B), allocated by
the thread's first malloc; the replay enters it first. Addresses are chunk offsets from
the heap's start (the break before the first call).
"""

from __future__ import annotations

import argparse
import lzma
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sim.platform.ptmalloc import PtmallocArena  # noqa: E402

MALLOC, FREE, CALLOC, REALLOC, MEMALIGN, BRK, OVERFLOW, MARK = 1, 2, 3, 4, 5, 6, 7, 8
NAMES = {MALLOC: "malloc", FREE: "free", CALLOC: "calloc", REALLOC: "realloc",
         MEMALIGN: "memalign"}
#: sizeof(tcache_perthread_struct) on 64-bit glibc 2.36: 64 u16 counts + 64 pointers
TCACHE_STRUCT = 64 * 2 + 64 * 8


#: offsets from the heap's start beyond this are not in the brk heap (mmapped chunks)
HEAP_SPAN = 1 << 40


def heap_offset(ptr, base):
    """The chunk offset from the heap's start ``base`` of the block at user pointer
    ``ptr``, or None for a chunk outside the brk heap (mmapped)."""
    offset = ptr - 16 - base
    return offset if 0 <= offset < HEAP_SPAN else None


def read_log(path):
    """The records of a malloc-log file (``.xz``-compressed or not): ``(kind, size,
    align, ptr, arg, brk)`` tuples."""
    data = Path(path).read_bytes()
    if str(path).endswith(".xz"):
        data = lzma.decompress(data)
    return list(struct.iter_unpack("<6Q", data))


class Outcome:
    """What a replay found: ``placed`` allocations compared, ``same`` of them where
    glibc put them (or mmapped where glibc mmapped), ``first`` the index of the first
    record placed elsewhere (None: none); ``breaks`` records after which the model's
    program break equals glibc's, of ``calls``, and ``first_break`` the first that
    differs; ``trims`` the model's."""

    def __init__(self):
        self.placed = self.same = self.breaks = self.calls = self.trims = 0
        self.first = self.first_break = None


def replay(records, arena=None, on_event=None) -> Outcome:
    """Feed ``records`` to ``arena`` (a fresh one by default) and compare each allocation's
    address and the break after each call with glibc's. ``on_event(i, record,
    model_block, real_offset)`` sees each allocation and free. The outcome also keeps
    the ``arena``, the heap's ``base`` address and ``blocks``: each live real pointer's
    model block and request size."""
    arena = arena or PtmallocArena()
    out = Outcome()
    out.arena = arena
    base = None
    blocks = out.blocks = {}      # real pointer -> (model block, request size)
    for i, (kind, size, align, ptr, arg, brk) in enumerate(records):
        if kind == MARK:
            continue
        if kind == BRK:
            base = out.base = ptr
            arena.alloc(TCACHE_STRUCT)
            continue
        if kind == OVERFLOW:
            raise SystemExit("the log overflowed its buffer: raise CAP in malloc_log.c")
        if kind == FREE or (kind == REALLOC and arg and not ptr):
            old = blocks.pop(arg, None)
            if old is not None:
                arena.free(old[0], old[1])
                if on_event is not None:
                    on_event(i, (kind, old[1], 0, 0, arg), old[0], heap_offset(arg, base))
            _compare_break(out, i, arena, brk - base)
            continue
        if not ptr:
            continue
        if kind == REALLOC and arg in blocks:
            old, old_size = blocks.pop(arg)
            block = arena.realloc(old, old_size, size)
        elif kind == CALLOC:
            block = arena.calloc(size)
        else:
            block = arena.alloc(size, align if kind == MEMALIGN else 0)
        blocks[ptr] = (block, size)
        real = heap_offset(ptr, base)
        ok = (type(block) is tuple) if real is None else block == real
        out.placed += 1
        out.same += ok
        if not ok and out.first is None:
            out.first = i
        _compare_break(out, i, arena, brk - base)
        if on_event is not None:
            on_event(i, (kind, size, align, ptr, arg), block, real)
    out.trims = arena.trims
    return out


def _compare_break(out, i, arena, real_break) -> None:
    out.calls += 1
    if arena.brk == real_break:
        out.breaks += 1
    elif out.first_break is None:
        out.first_break = i


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", help="a malloc-log file (MALLOC_LOG=...)")
    ap.add_argument("--context", type=int, default=12,
                    help="records to print before the first difference")
    args = ap.parse_args(argv)
    records = read_log(args.log)
    counts = {}
    for kind, *_ in records:
        counts[NAMES.get(kind, kind)] = counts.get(NAMES.get(kind, kind), 0) + 1
    print("calls:", ", ".join(f"{k} {v}" for k, v in counts.items()))
    shown = []
    out = replay(records, on_event=lambda *e: shown.append(e))
    first = out.first
    print(f"{out.same}/{out.placed} allocations at glibc's address; the break equal to "
          f"glibc's after {out.breaks}/{out.calls} calls (first difference: "
          f"{out.first_break}); the model trimmed {out.trims} times")
    if first is not None:
        print(f"first difference at record {first}:")
        for i, rec, block, real in shown:
            if first - args.context <= i <= first:
                kind, size, align, ptr, arg = rec
                mark = "" if block == real or kind == FREE else "  <--"
                print(f"  {i:7d} {NAMES[kind]:8s} {size:8d} align {align:3d} "
                      f"real {real} model {block}{mark}")
    return 0 if first is None else 1


if __name__ == "__main__":
    sys.exit(main())
