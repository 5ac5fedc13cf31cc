"""Random tensor programs recorded on real burn 0.22.1 (experiments/probes/programs.py):
after every statement the simulator must hold the live heap bytes and blocks that real
burn's counting allocator reported, and panic at the same statement; where real burn's
answer varied between runs (hash iteration order), the simulator's must be one of them."""

import json
import sys

import pytest

from sim import paths

ROOT = paths.ROOT
sys.path.insert(0, str(ROOT / "experiments" / "probes"))

from programs import agrees, first_difference, simulate  # noqa: E402

MEASURED = ROOT / "experiments" / "measured" / "linux-x86_64"
RECORD = json.loads((MEASURED / "probe-programs.json").read_text())
#: programs with Linear modules and their optimizers (programs.py --modules)
MODULES = json.loads((MEASURED / "probe-programs-modules.json").read_text())
#: programs that keep a backward's gradients and read them (programs.py --keep-grads)
KEEP_GRADS = json.loads((MEASURED / "probe-programs-keepgrads.json").read_text())
assert MODULES["l2_bytes"] == KEEP_GRADS["l2_bytes"] == RECORD["l2_bytes"]
PROGRAMS = RECORD["programs"] + MODULES["programs"] + KEEP_GRADS["programs"]
#: minimized programs that once disagreed, with what real burn answered
REGRESSIONS = (RECORD.get("regressions", []) + MODULES.get("regressions", [])
               + KEEP_GRADS.get("regressions", []))


def _word(line):
    words = line.split()
    return f"{words[0]}:{words[2]}" if words[0] in ("bin", "binm", "un", "unm", "red") else words[0]


def test_the_record_covers_the_language():
    words = {_word(line) for p in PROGRAMS for line in p["program"]}
    ops = {f"bin:{op}" for op in ("add", "sub", "mul", "div", "matmul")} | {
        f"un:{op}" for op in ("mul_scalar", "add_scalar", "div_scalar", "exp", "log", "sqrt",
                              "relu", "powi2", "detach", "without", "require_grad")}
    assert ops | {"leaf", "pleaf", "drop", "bw", "binm:matmul", "unm:exp", "red:sum",
                  "red:mean", "lin", "fwd", "val", "step", "dropm", "bwk", "grad",
                  "dropg"} <= words
    assert any(line == "lin 0 adam" for p in PROGRAMS for line in p["program"])
    # some programs panic (a backward through a consumed tape), some vary between runs
    assert any(real[-1] == "panic" for p in PROGRAMS for real in p["real"])
    assert any(len(p["real"]) > 1 for p in PROGRAMS)


@pytest.mark.parametrize("record", PROGRAMS + REGRESSIONS,
                         ids=[f"program{i}" for i in range(len(PROGRAMS))]
                         + [f"regression{i}" for i in range(len(REGRESSIONS))])
def test_simulator_matches_real_burn(record):
    simulated = simulate(record["program"], l2_bytes=RECORD["l2_bytes"])
    if not agrees(record["real"], simulated):
        real = record["real"][0]
        at = first_difference(real, simulated)
        statement = [s for s in record["program"] if not s.startswith("shape")][at]
        pytest.fail(f"statement {at} ({statement}): real {real[at:at + 1]}, "
                    f"simulated {simulated[at:at + 1]}")
