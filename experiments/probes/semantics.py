"""Semantic check of the fix patches: random tensor programs on patched and unpatched burn.

A fix must not change what a program computes. This runs the random straight-line
programs of ``programs.py`` (with kept gradients and Linear modules) on real burn
0.22.1 and on burn with each patch (``sim measure --patch NAME`` builds
``experiments/probes/target-patched/bin/burn-probes-0.22.1+NAME``), with
``PROBE_SCRIPT_VALUES=1``: after every statement each filled slot's require-grad flag and
values (f32 bits), and every gradient a backward gave. Both sides must print the same
lines and panic at the same statement. A program that differs is listed with its first
difference (``value``, ``grad``, ``require_grad``, ``panic``). Programs whose two runs on
unpatched burn already differ (a Linear module's random initial weights) are left out and
counted.

    .venv/bin/python experiments/probes/semantics.py --count 200 --seed 7 \\
        --out experiments/measured/linux-x86_64/patched/semantics.json

The result file records the programs' seed and count, the host, and per fix the number of
programs that agree and the differences; the programs themselves are regenerated from
the seed.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from programs import generate  # noqa: E402

PATCHED_BIN = ROOT / "experiments" / "probes" / "target-patched" / "bin"
FIXES = ("skip-untracked", "drop-release", "detach-constant", "dedup-sweep", "periodic-sweep",
         "burn-0.20-pre.1")


def run(binary, lines) -> dict:
    """``{"panic": index or None, "values": [V lines]}`` of one program."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        path = f.name
    try:
        env = dict(os.environ, PROBE_SCRIPT_VALUES="1")
        proc = subprocess.run([str(binary), "script", "--program", path], capture_output=True,
                              text=True, timeout=120, env=env)
    finally:
        os.unlink(path)
    panic = None
    values = []
    for row in proc.stdout.splitlines():
        parts = row.split()
        if not parts:
            continue
        if parts[0] == "V":
            values.append(row)
        elif parts[1:] == ["panic"]:
            panic = int(parts[0])
    if proc.returncode != 0 and panic is None:
        tail = proc.stderr.strip().splitlines()[-1:]
        panic = f"crash {proc.returncode}: {tail}"
    return {"panic": panic, "values": values}


def difference(base, fixed, lines):
    """The first difference between two runs, or None."""
    if base["panic"] != fixed["panic"]:
        return {"kind": "panic", "unpatched": base["panic"], "patched": fixed["panic"]}
    for a, b in zip(base["values"], fixed["values"]):
        if a != b:
            pa, pb = a.split(), b.split()
            index = int(pa[1])
            stmt = lines[1 + index] if 1 + index < len(lines) else "?"
            kind = pa[2]
            if kind == "val" and pa[:4] == pb[:4] and pa[4] != pb[4] and pa[5] == pb[5]:
                kind = "require_grad"
            elif kind == "val" and pa[:5] == pb[:5]:
                kind = "value"
            elif pa[2:4] != pb[2:4]:
                kind = "grad" if "grad" in (pa[2], pb[2]) else "slot"
            return {"kind": kind, "statement": index, "line": stmt,
                    "unpatched": " ".join(pa[2:5]), "patched": " ".join(pb[2:5])}
    if len(base["values"]) != len(fixed["values"]):
        longer = base if len(base["values"]) > len(fixed["values"]) else fixed
        extra = longer["values"][min(len(base["values"]), len(fixed["values"]))].split()
        index = int(extra[1])
        return {"kind": "grad" if extra[2] == "grad" else "slot", "statement": index,
                "line": lines[1 + index] if 1 + index < len(lines) else "?",
                "only_in": "unpatched" if longer is base else "patched",
                "what": " ".join(extra[2:4])}
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--length", type=int, default=30)
    ap.add_argument("--fix", action="append", help="only these fixes (repeatable)")
    ap.add_argument("--out", help="write the result here (JSON)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the other fixes' results of an --out file of the same programs")
    args = ap.parse_args(argv)
    from sim.commands.measure import binary_path
    base_bin = binary_path()
    fixes = args.fix or list(FIXES)
    bins = {f: PATCHED_BIN / f"burn-probes-0.22.1+{f}" for f in fixes}
    for path in [base_bin, *bins.values()]:
        if not path.is_file():
            raise SystemExit(f"{path} not found: build it (sim measure / sim measure --patch)")
    rng = random.Random(args.seed)
    programs = []
    for i in range(args.count):
        programs.append(generate(rng, length=args.length, keep_grads=i % 2 == 0,
                                 modules_on=i % 3 == 0))
    result = {"seed": args.seed, "count": args.count, "length": args.length,
              "generator": "programs.generate(rng, length, keep_grads=i % 2 == 0, "
                           "modules_on=i % 3 == 0)",
              "host": {"platform": f"{platform.system().lower()}-{platform.machine()}",
                       "cpu": _cpu()}, "fixes": {}}
    base = [run(base_bin, p) for p in programs]
    # a program whose two unpatched runs differ (a Linear's random initial weights) says
    # nothing about a fix: left out, and counted
    unstable = {i for i, (p, b) in enumerate(zip(programs, base))
                if difference(b, run(base_bin, p), p) is not None}
    result["nondeterministic"] = sorted(unstable)
    print(f"{len(unstable)} of {args.count} programs differ between two unpatched runs "
          f"(random initial weights): left out")
    checked = args.count - len(unstable)
    for fix, binary in bins.items():
        diffs = []
        for i, (p, b) in enumerate(zip(programs, base)):
            if i in unstable:
                continue
            d = difference(b, run(binary, p), p)
            if d is not None:
                d["program"] = i
                diffs.append(d)
        kinds = {}
        for d in diffs:
            kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
        result["fixes"][fix] = {"checked": checked, "agree": checked - len(diffs),
                                "differ": len(diffs), "kinds": kinds, "differences": diffs}
        print(f"{fix}: {checked - len(diffs)} of {checked} programs identical"
              + (f"; differ: {kinds}" if kinds else ""))
    if args.out:
        out = Path(args.out)
        if args.merge and out.is_file():
            old = json.loads(out.read_text())
            same = all(old.get(k) == result[k] for k in ("seed", "count", "length"))
            if same:
                result["fixes"] = {**old["fixes"], **result["fixes"]}
        out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def _cpu():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
