"""Differential conformance: random tensor programs run on real burn and on the simulator.

Each program is a straight line of statements over 16 tensor slots on ``flex.autodiff``
(the language is documented in experiments/probes/burn-probes/src/script.rs): [n, n]
leaves that do or do not require grad and plain ones, binary and unary ops on cloned or
moved operands, detach, without_autodiff, require_grad, sum/mean reshaped to [1, 1]
(broadcast in later ops), drops and backwards (some through consumed tapes, which
panic). Real burn 0.22.1 runs it under the probes' counting allocator (``burn-probes
script``) and prints the live heap after every statement; the simulator runs the same
statements through its tensor API. Both must agree, statement by statement, on live
bytes and blocks, and on the statement that panics, if one does.

A few programs' heap depends on hash iteration order (``free_unavailable_nodes`` walks
the leaves of a ``HashSet``, and a useful node met twice is inserted twice into the new
leaves' table, which grows when full), which std's ``RandomState`` draws afresh in every
process: each program runs ``--runs`` times on real burn, a program the simulator
disagrees with up to ``--max-runs`` times, and the simulator's answer must be one of
real burn's. ``--modules`` adds Linear modules with an SGD or Adam optimizer each
(``lin``, ``fwd``, ``val``, ``step``, ``dropm``); ``--keep-grads`` adds statements that
keep a backward's gradients and read them (``bwk``, ``grad``, ``dropg``: the gradients
container's own blocks, ``sim.burn.runtime.server.Gradients``).

Run from the repo root (needs the probes built: ``sim measure --probe sizeof --quick``
or ``cargo build --release`` in experiments/probes)::

    .venv/bin/python experiments/probes/programs.py --count 300 --seed 31 --length 40
    .venv/bin/python experiments/probes/programs.py --count 150 --seed 11 --length 40 \\
        --runs 8 --record experiments/measured/linux-x86_64/probe-programs.json
    .venv/bin/python experiments/probes/programs.py --count 120 --seed 53 --length 40 \\
        --modules --runs 8 --record experiments/measured/linux-x86_64/probe-programs-modules.json
    .venv/bin/python experiments/probes/programs.py --count 100 --seed 61 --length 40 \\
        --keep-grads --runs 8 --record experiments/measured/linux-x86_64/probe-programs-keepgrads.json
    .venv/bin/python experiments/probes/programs.py --program FILE --trace 3

``--record`` keeps the programs and real burn's answers (and the machine's L2 size, the
size of gemm's slab); ``tests/burn/test_probe_programs.py`` replays them on the simulator
without Rust, with the ``regressions`` the record also holds: minimized programs that
once disagreed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sim.engine.simulation import Simulation  # noqa: E402
from sim.engine.profile import load_profile  # noqa: E402
from sim.burn.graph.traversal import TapeConsumed  # noqa: E402
from sim.burn.nn import Linear  # noqa: E402
from sim.burn.optim import Adam, GradientsParams, Sgd  # noqa: E402
from sim.burn.tensor import BurnPanic, Tensor, drop  # noqa: E402

SLOTS = 16
BINARY = ("add", "sub", "mul", "div", "matmul")
UNARY = ("mul_scalar", "add_scalar", "div_scalar", "exp", "log", "sqrt", "relu", "powi2",
         "detach", "without", "require_grad")


# -- generation ------------------------------------------------------------------------------

def generate(rng, length=24, slots=6, keep_grads=False, modules_on=False) -> list:
    """A random valid program (list of statement lines). The generator tracks which slots
    hold a tensor, whether it is plain, untracked or tracked, and whether it is [n, n] or
    a reduction's [1, 1], so that every statement names full slots, a matmul's shapes
    agree, a backward starts from a tracked tensor and require_grad is asked of untracked
    autodiff tensors only; whether a backward finds its graph already consumed, and which
    tensors have a gradient, are left to burn. ``keep_grads``: also keep a backward's
    gradients (``bwk``) and read them (``grad``, ``dropg``); off by default (the recorded
    programs without it predate it).
    ``modules_on``: also Linear(n, n) modules with an SGD or Adam optimizer each (``lin``,
    ``fwd``, ``val``, ``step``, ``dropm``)."""
    n = rng.choice((2, 4, 16))
    lines = [f"shape {n}"]
    state = {}   # slot -> ("plain" | "untracked" | "tracked", "n" | "1")
    kept = False   # gradients kept by a bwk
    modules = set()   # module slots holding a Linear

    def full(kinds=("plain", "untracked", "tracked")):
        return [s for s, (k, _) in state.items() if k in kinds]

    while len(lines) < length + 1:
        i = rng.randrange(slots)
        have = full()
        roll = rng.random()
        if not have or roll < 0.15:
            if rng.random() < 0.15:
                lines.append(f"pleaf {i}")
                state[i] = ("plain", "n")
                continue
            grad = rng.random() < 0.4
            lines.append(f"leaf {i} {int(grad)}")
            state[i] = ("tracked" if grad else "untracked", "n")
        elif roll < 0.47:
            op = rng.choice(BINARY)
            j = rng.choice(have)
            k = rng.choice([s for s in have if state[s][1] == state[j][1]] if op == "matmul"
                           else have)
            moved = rng.random() < 0.3 and j != k
            lines.append(f"{'binm' if moved else 'bin'} {i} {op} {j} {k}")
            kinds = (state[j][0], state[k][0])
            kind = ("tracked" if "tracked" in kinds else
                    "untracked" if "untracked" in kinds else "plain")
            shape = "n" if "n" in (state[j][1], state[k][1]) else "1"
            if moved:
                del state[j]
            state[i] = (kind, shape)
        elif roll < 0.70:
            j = rng.choice(have)
            op = rng.choice(UNARY)
            if op == "require_grad" and state[j][0] != "untracked":
                op = "detach"
            moved = rng.random() < 0.3
            lines.append(f"{'unm' if moved else 'un'} {i} {op} {j}")
            kind, shape = state[j]
            if moved:
                del state[j]
            state[i] = ("plain" if op == "without" else
                        "tracked" if op == "require_grad" else kind, shape)
        elif roll < 0.76:
            j = rng.choice(have)
            lines.append(f"red {i} {rng.choice(('sum', 'mean'))} {j}")
            state[i] = (state[j][0], "1")
        elif modules_on and roll < 0.82:
            # Linear modules and their optimizers (lin, fwd, val, step, dropm)
            m = rng.randrange(2)
            pick = rng.random()
            if m not in modules or pick < 0.15:
                lines.append(f"lin {m} {rng.choice(('sgd', 'sgd', 'adam'))}")
                modules.add(m)
            elif pick < 0.55:
                square = [s for s in have if state[s][1] == "n"]
                if not square:
                    continue
                lines.append(f"fwd {i} {m} {rng.choice(square)}")
                state[i] = ("tracked", "n")
            elif pick < 0.65:
                lines.append(f"val {i} {m}")
                state[i] = ("tracked", "n")
            elif pick < 0.95:
                tracked = full(("tracked",))
                if not tracked:
                    continue
                lines.append(f"step {m} {rng.choice(tracked)}")
            else:
                lines.append(f"dropm {m}")
                modules.discard(m)
        elif roll < 0.86:
            tracked = full(("tracked",))
            if not tracked:
                continue
            keep = keep_grads and rng.random() < 0.4
            lines.append(f"{'bwk' if keep else 'bw'} {rng.choice(tracked)}")
            kept = kept or keep
        elif roll < 0.90:
            if not kept:
                continue
            if rng.random() < 0.2:
                lines.append("dropg")
                kept = False
                continue
            j = rng.choice(have)
            lines.append(f"grad {i} {j}")
            state[i] = ("plain", state[j][1])
        else:
            j = rng.choice(have)
            lines.append(f"drop {j}")
            del state[j]
    return lines


# -- the simulator's side --------------------------------------------------------------------

def _unary(op, t):
    if op == "mul_scalar":
        return t.mul_scalar(0.5)
    if op == "add_scalar":
        return t.add_scalar(1.0)
    if op == "div_scalar":
        return t.div_scalar(2.0)
    if op == "powi2":
        return t.powi_scalar(2)
    if op == "without":
        return t.without_autodiff()
    return getattr(t, op)()


def machine_l2_bytes() -> int:
    """This machine's per-core L2 cache in bytes (Linux sysfs), the size gemm gives the
    thread-local slab it packs through (gemm-common's CACHE_INFO[1])."""
    text = Path("/sys/devices/system/cpu/cpu0/cache/index2/size").read_text().strip()
    units = {"K": 1024, "M": 1024 ** 2}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def simulate(lines, profile="linux-x86_64", trace=None, l2_bytes=None, observe=None,
             arena=None) -> list:
    """The program's live heap after each statement on the simulator: ``[bytes, blocks]``
    since the first statement, or ``"panic"`` (the last entry) where burn would panic.
    ``trace``: a statement index whose heap events are printed (``SIM alloc|free BYTES``,
    the counterpart of the probe's ``PROBE_SCRIPT_TRACE``); ``l2_bytes``: the L2 cache of
    the machine the program ran on (gemm's slab; default: the profile's); ``observe``:
    called as ``observe(index, sim, slots)`` after every statement (debugging);
    ``arena``: a :class:`~sim.platform.ptmalloc.PtmallocArena` the program's heap events
    go to (the state a real process's allocations left: arena_programs.py)."""
    profile = load_profile(profile)
    if l2_bytes is not None:
        profile.backends["flex"]["matmul_workspace_bytes"] = l2_bytes
    sim = Simulation(profile)
    if arena is not None:
        arena.fault = sim.allocator.arena.fault
        sim.allocator.arena = sim.heap._arena = arena
    device = sim.device("flex").autodiff()
    slots = [None] * SLOTS
    kept = None   # gradients a bwk keeps
    modules = [None] * SLOTS   # (Linear, its optimizer)
    n = 4
    out = []
    heap = sim.heap
    base = None

    def take(j, moved):
        t = slots[j]
        if moved:
            slots[j] = None
            return t
        return t.clone()

    def assign(i, value):
        old, slots[i] = slots[i], value
        if old is not None:
            drop(old)

    for line in lines:
        words = line.split()
        if words[0] == "shape":
            n = int(words[1])
            continue
        if base is None:
            base = (heap.live_bytes, heap.live_blocks)
        if trace == len(out):
            _trace_heap(heap)
        try:
            kind = words[0]
            if kind == "leaf":
                t = Tensor.from_floats([[1.0] * n] * n, device)
                assign(int(words[1]), t.require_grad() if words[2] == "1" else t)
            elif kind == "pleaf":
                assign(int(words[1]), Tensor.from_floats([[1.0] * n] * n, device.inner()))
            elif kind in ("bin", "binm"):
                op, j, k = words[2], int(words[3]), int(words[4])
                a = take(j, kind == "binm").move()
                b = take(k, False).move()
                value = getattr(a, op)(b)
                drop(a)
                drop(b)
                del a, b
                assign(int(words[1]), value)
            elif kind in ("un", "unm"):
                a = take(int(words[3]), kind == "unm")
                if words[2] != "require_grad":
                    a.move()   # the op takes it by value
                value = _unary(words[2], a)
                if value is not a:
                    drop(a)
                del a
                assign(int(words[1]), value)
            elif kind == "drop":
                assign(int(words[1]), None)
            elif kind in ("bw", "bwk"):
                loss = slots[int(words[1])].clone().move().sum()
                grads = loss.backward()
                drop(loss)
                del loss
                if kind == "bwk":
                    kept, grads = grads, kept
                del grads
            elif kind == "red":
                a = slots[int(words[3])].clone().move()
                value = (a.mean() if words[2] == "mean" else a.sum()).move().reshape((1, 1))
                drop(a)
                del a
                assign(int(words[1]), value)
            elif kind == "grad":
                t = slots[int(words[2])]
                value = t.grad(kept) if kept is not None else None
                if value is None:
                    value = Tensor.from_floats([[1.0] * t.shape[1]] * t.shape[0], device.inner())
                del t
                assign(int(words[1]), value)
            elif kind == "dropg":
                kept = None
            elif kind == "lin":
                modules[int(words[1])] = (Linear(n, n, device),
                                          Adam(sim) if words[2] == "adam" else Sgd(sim))
            elif kind == "fwd":
                model = modules[int(words[2])][0]
                x = slots[int(words[3])].clone()
                value = model.forward(x)
                drop(x)
                del x, model
                assign(int(words[1]), value)
            elif kind == "val":
                assign(int(words[1]), modules[int(words[2])][0].weight.val())
            elif kind == "step":
                m = int(words[1])
                loss = slots[int(words[2])].clone().move().sum()
                model, optimizer = modules[m]
                modules[m] = None
                grads = GradientsParams.from_grads(loss.backward(), model)
                drop(loss)
                del loss
                model = optimizer.step(1e-3, model, grads)
                del grads
                modules[m] = (model, optimizer)
                del model, optimizer
            elif kind == "dropm":
                modules[int(words[1])] = None
            else:
                raise ValueError(f"unknown statement {line!r}")
        except (BurnPanic, TapeConsumed):
            out.append("panic")
            break
        finally:
            if trace == len(out):
                _untrace_heap(heap)
        out.append([heap.live_bytes - base[0], heap.live_blocks - base[1]])
        if observe is not None:
            observe(len(out) - 1, sim, slots)
    return out


def _trace_heap(heap):
    """Print every heap event from now on (debugging aid; :func:`_untrace_heap` ends it)."""
    cls = type(heap)
    alloc, free = cls.alloc, cls.free

    def traced_alloc(self, nbytes, align=0):
        if nbytes > 0:
            print(f"SIM alloc {nbytes}")
        return alloc(self, nbytes, align)

    def traced_free(self, nbytes, block=None):
        if nbytes > 0:
            print(f"SIM free {nbytes}")
        return free(self, nbytes, block)
    cls._untraced = (alloc, free)
    cls.alloc, cls.free = traced_alloc, traced_free


def _untrace_heap(heap):
    cls = type(heap)
    cls.alloc, cls.free = cls._untraced
    del cls._untraced


# -- real burn's side ------------------------------------------------------------------------

def probe_binary() -> Path:
    from sim.commands.measure import binary_path
    path = binary_path()
    if not path.is_file():
        raise SystemExit(f"{path} not found: build the probes first (cargo build --release "
                         f"in experiments/probes)")
    return path


def run_real(lines, binary) -> list:
    """The program's live heap after each statement on real burn (``burn-probes script``)."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        path = f.name
    try:
        proc = subprocess.run([str(binary), "script", "--program", path], capture_output=True,
                              text=True, timeout=120)
    finally:
        os.unlink(path)
    for row in proc.stderr.splitlines():
        if row.startswith("TRACE "):   # PROBE_SCRIPT_TRACE: kind, size, align, address, old size, old address
            kind, size, _, address, old_size, old_address = row.split()[1:7]
            print(f"REAL {kind.lower()} {size} {address}"
                  + (f" from {old_size} {old_address}" if kind == "Realloc" else ""))
    out = []
    for row in proc.stdout.split("\n"):
        if not row.strip():
            continue
        _, *rest = row.split()
        out.append("panic" if rest == ["panic"] else [int(rest[0]), int(rest[1])])
    if proc.returncode != 0 and not (out and out[-1] == "panic"):
        raise RuntimeError(f"burn-probes script failed ({proc.returncode}): "
                           f"{proc.stderr.strip().splitlines()[-1:]}")
    return out


def first_difference(real, simulated):
    """Index of the first statement where the two disagree, or None."""
    for i in range(max(len(real), len(simulated))):
        a = real[i] if i < len(real) else None
        b = simulated[i] if i < len(simulated) else None
        if a != b:
            return i
    return None


def agrees(outcomes, simulated):
    """Whether the simulated run equals one of real burn's ``outcomes`` (the distinct
    answers of several runs: a few programs' heap depends on hash iteration order, which
    std's RandomState draws afresh in every process)."""
    return any(first_difference(real, simulated) is None for real in outcomes)


def run_real_outcomes(lines, binary, runs) -> list:
    """The distinct answers of ``runs`` runs of the program on real burn, first seen first."""
    outcomes = []
    for _ in range(runs):
        real = run_real(lines, binary)
        if real not in outcomes:
            outcomes.append(real)
    return outcomes


def _show(index, lines, outcomes, simulated):
    best = max(outcomes, key=lambda real: first_difference(real, simulated) or len(real))
    at = first_difference(best, simulated)
    print(f"program {index}: first difference at statement {at}"
          + (f" ({len(outcomes)} distinct real outcomes)" if len(outcomes) > 1 else ""))
    print(f"  {lines[0]}")
    stmts = [w for w in lines if not w.startswith("shape")]
    for k, stmt in enumerate(stmts[:at + 1]):
        r = best[k] if k < len(best) else None
        s = simulated[k] if k < len(simulated) else None
        print(f"  {k:3d} {stmt:24s} real {r}  sim {s}{'  <--' if k == at else ''}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--length", type=int, default=24)
    ap.add_argument("--keep-grads", action="store_true",
                    help="also generate bwk/grad/dropg (gradients kept after the backward)")
    ap.add_argument("--modules", action="store_true",
                    help="also generate Linear modules and optimizer steps (lin/fwd/val/step)")
    ap.add_argument("--runs", type=int, default=3,
                    help="runs of each program on real burn (its distinct answers are kept)")
    ap.add_argument("--max-runs", type=int, default=40,
                    help="runs of a program the simulator disagrees with, before it counts as a miss")
    ap.add_argument("--record", help="write the programs and real burn's answers here (JSON)")
    ap.add_argument("--show", type=int, default=5, help="print this many failing programs")
    ap.add_argument("--program", help="run this program file only (with --trace I: print the "
                    "heap events of statement I on both sides)")
    ap.add_argument("--trace", type=int)
    args = ap.parse_args(argv)
    binary = probe_binary()
    l2_bytes = machine_l2_bytes()
    if args.program:
        lines = [w for w in Path(args.program).read_text().splitlines() if w.strip()]
        env = dict(os.environ)
        if args.trace is not None:
            os.environ["PROBE_SCRIPT_TRACE"] = str(args.trace)
        try:
            real = run_real(lines, binary)
        finally:
            os.environ.clear()
            os.environ.update(env)
        simulated = simulate(lines, trace=args.trace, l2_bytes=l2_bytes)
        for k, stmt in enumerate(w for w in lines if not w.startswith("shape")):
            r = real[k] if k < len(real) else None
            s = simulated[k] if k < len(simulated) else None
            print(f"{k:3d} {stmt:24s} real {r}  sim {s}{'' if r == s else '  <--'}")
        return 0 if first_difference(real, simulated) is None else 1
    rng = random.Random(args.seed)
    records, failures, varying = [], 0, 0
    for index in range(args.count):
        lines = generate(rng, args.length, keep_grads=args.keep_grads,
                         modules_on=args.modules)
        outcomes = run_real_outcomes(lines, binary, args.runs)
        simulated = simulate(lines, l2_bytes=l2_bytes)
        if not agrees(outcomes, simulated):
            # maybe an order-dependent program whose few runs all drew the other order:
            # more runs, to see whether the simulator's answer is one of real burn's too
            for real in run_real_outcomes(lines, binary, args.max_runs - args.runs):
                if real not in outcomes:
                    outcomes.append(real)
        varying += len(outcomes) > 1
        records.append({"program": lines, "real": outcomes})
        if not agrees(outcomes, simulated):
            failures += 1
            if failures <= args.show:
                _show(index, lines, outcomes, simulated)
    print(f"{args.count - failures}/{args.count} programs agree statement by statement "
          f"({varying} gave more than one answer in {args.runs} runs on real burn)")
    if args.record:
        old = Path(args.record)
        regressions = (json.loads(old.read_text()).get("regressions", []) if old.is_file()
                       else [])
        Path(args.record).write_text(json.dumps({
            "seed": args.seed, "length": args.length, "runs": args.runs, "l2_bytes": l2_bytes,
            "keep_grads": args.keep_grads,
            "machine": platform.processor() or platform.machine(),
            "programs": records, "regressions": regressions}, indent=0) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
