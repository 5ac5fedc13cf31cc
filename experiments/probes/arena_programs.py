"""Real burn and the simulator on glibc's arena, address by address, statement by statement.

A probe program (programs.py's language) runs on real burn under malloc-log (its
statements marked in the log, ``PROBE_SCRIPT_MARKS``). The log up to the first statement
-- the Rust runtime's, the probe's and libc's own allocations -- is replayed on the
simulator's arena model (arena_replay.py checks that replay on its own); then the
simulator runs the program on that arena, and each statement's allocations (request
size, alignment, address) and frees (which block) must be real burn's, in real burn's
order. Where programs.py compares the live heap after each statement, this compares
the order of the heap events, which block each free frees and where each chunk lands:
what RSS on Linux depends on::

    .venv/bin/python experiments/probes/arena_programs.py --count 50 --seed 71
    .venv/bin/python experiments/probes/arena_programs.py --program FILE
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import arena_replay as R  # noqa: E402
import programs as P  # noqa: E402
from sim.platform.ptmalloc import ZEROED  # noqa: E402

LIBRARY = HERE / "malloc-log" / "malloc_log.c"


def build_library(workdir) -> Path:
    """Compile malloc-log's LD_PRELOAD library into ``workdir``."""
    lib = Path(workdir) / "malloc_log.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(LIBRARY)], check=True)
    return lib


def run_real_log(lines, binary, lib, workdir) -> list:
    """Run the program on real burn under malloc-log; the log's records."""
    prog = Path(workdir) / "program.txt"
    prog.write_text("\n".join(lines) + "\n")
    log = Path(workdir) / "log.bin"
    env = dict(os.environ, MALLOC_LOG=str(log), LD_PRELOAD=str(lib), PROBE_SCRIPT_MARKS="1")
    subprocess.run([str(binary), "script", "--program", str(prog)], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return R.read_log(log)


def real_statements(records):
    """Replay the log up to the first mark; returns ``(outcome, statements)``: the
    replay (its arena is the state the program starts from) and, per statement, its
    heap events ``("alloc", size, align, offset)`` (``align`` ZEROED: a calloc) / ``("free", size, offset)`` /
    ``("realloc", ...)`` with chunk offsets from the heap's start (None: mmapped)."""
    marks = [i for i, r in enumerate(records) if r[0] == R.MARK]
    out = R.replay(records[:marks[0]])
    base = out.base
    sizes = {ptr: size for ptr, (_, size) in out.blocks.items()}
    statements = []
    for lo, hi in zip(marks, marks[1:]):
        events = []
        for kind, size, align, ptr, arg, _ in records[lo + 1:hi]:
            if kind == R.FREE:
                if arg in sizes:
                    events.append(("free", sizes.pop(arg), R.heap_offset(arg, base)))
            elif kind == R.REALLOC:
                events.append(("realloc", sizes.pop(arg, None), size, R.heap_offset(arg, base),
                               R.heap_offset(ptr, base)))
                sizes[ptr] = size
            elif kind in (R.MALLOC, R.CALLOC, R.MEMALIGN) and ptr:
                sizes[ptr] = size
                events.append(("alloc", size, align if kind == R.MEMALIGN else
                               ZEROED if kind == R.CALLOC else 0, R.heap_offset(ptr, base)))
        statements.append(events)
    return out, statements


def simulated_statements(lines, arena, l2_bytes) -> list:
    """The simulator's heap events per statement on ``arena`` (same form as
    :func:`real_statements`; mmapped chunks get the offset None on both sides)."""
    events = []
    cls = type(arena)
    plain_alloc, plain_free, plain_realloc = cls.alloc, cls.free, cls.realloc

    def alloc(self, nbytes, align=0):
        block = plain_alloc(self, nbytes, align)
        events.append(("alloc", nbytes, align, block if type(block) is int else None))
        return block

    def alloc_many(self, nbytes, count):
        for _ in range(count):
            alloc(self, nbytes)

    def free(self, block=None, nbytes=None):
        if block is None:
            block = self.live[nbytes][-1]
        events.append(("free", nbytes, block if type(block) is int else None))
        plain_free(self, block, nbytes)

    def free_many(self, nbytes, count):
        for _ in range(count):
            free(self, None, nbytes)

    def realloc(self, block, old_nbytes, nbytes):
        new = plain_realloc(self, block, old_nbytes, nbytes)
        events.append(("realloc", old_nbytes, nbytes, block if type(block) is int else None,
                       new if type(new) is int else None))
        return new

    statements = []

    def observe(index, sim, slots):
        statements.append(list(events))
        events.clear()

    patched = {"alloc": alloc, "alloc_many": alloc_many, "free": free, "free_many": free_many,
               "realloc": realloc}
    # the class's own methods (PtmallocArena inherits them from the arena's core, _Arena)
    saved = {name: cls.__dict__.get(name) for name in patched}
    try:
        for name, fn in patched.items():
            setattr(cls, name, fn)
        P.simulate(lines, l2_bytes=l2_bytes, observe=observe, arena=arena)
    finally:
        for name, fn in saved.items():
            if fn is None:
                delattr(cls, name)
            else:
                setattr(cls, name, fn)
    if events:
        statements.append(list(events))   # the statement that panicked
    return statements


def _shape(events):
    """The events without addresses: kind, size (and alignment) in order."""
    return [ev[:3] if ev[0] == "alloc" else ev[:2] for ev in events]


def compare(lines, records, l2_bytes):
    """``(difference, ordered, statements)``: ``difference`` is None when every
    statement's events agree with real burn's, address by address, else ``(statement,
    real, simulated)`` for the first that does not; ``ordered`` counts the statements
    whose events agree in kind, size and order (addresses aside), of ``statements``."""
    out, real = real_statements(records)
    sim = simulated_statements(lines, out.arena, l2_bytes)
    difference = None
    ordered = 0
    for k, (r, s) in enumerate(zip(real, sim)):
        ordered += _shape(r) == _shape(s)
        if r != s and difference is None:
            difference = k, r, s
    return difference, ordered, min(len(real), len(sim))


def _show(lines, difference):
    k, real, sim = difference
    body = [line for line in lines if not line.startswith("shape")]
    print(f"  statement {k} ({body[k] if k < len(body) else '?'}):")
    for i in range(max(len(real), len(sim))):
        r = real[i] if i < len(real) else None
        s = sim[i] if i < len(sim) else None
        print(f"    {str(r):44s} {str(s):44s}{'' if r == s else '  <--'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--seed", type=int, default=71)
    ap.add_argument("--length", type=int, default=40)
    ap.add_argument("--modules", action="store_true")
    ap.add_argument("--keep-grads", action="store_true")
    ap.add_argument("--program", help="compare this program file only")
    ap.add_argument("--show", type=int, default=1, help="print this many differing programs")
    args = ap.parse_args(argv)
    binary = P.probe_binary()
    l2_bytes = P.machine_l2_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        lib = build_library(tmp)
        if args.program:
            progs = [[l.strip() for l in Path(args.program).read_text().splitlines()
                      if l.strip() and not l.startswith("#")]]
        else:
            rng = random.Random(args.seed)
            progs = [P.generate(rng, args.length, keep_grads=args.keep_grads,
                                modules_on=args.modules) for _ in range(args.count)]
        same = shown = ordered = statements = reached = 0
        for lines in progs:
            difference, o, n = compare(lines, run_real_log(lines, binary, lib, tmp), l2_bytes)
            ordered += o
            statements += n
            reached += n if difference is None else difference[0]
            if difference is None:
                same += 1
            elif shown < args.show:
                shown += 1
                _show(lines, difference)
    print(f"{same}/{len(progs)} programs: every heap event at real burn's address; "
          f"{reached}/{statements} statements before the first difference; "
          f"{ordered}/{statements} statements with real burn's events in kind, size and "
          f"order (addresses aside)")
    return 0 if same == len(progs) else 1


if __name__ == "__main__":
    sys.exit(main())
