"""The simulator's heap events against real burn's, in order and address by address.

Three probe programs (the first basic one, the first that panics, the first with modules of
the recorded conformance programs) ran on real burn 0.22.1 under malloc-log with each
statement marked (experiments/probes/malloc-log/record.sh). ``arena_programs.compare``
replays each process up to its first statement on the glibc arena model, runs the
simulator's program on that arena and compares every statement's heap events: kind, size
and order (an op's output before its node, its step boxed before it registers, the box of
its output after, a moved operand's parts where burn drops them, the backward's walk and
tape, gemm's per-call buffers...), and where the chunks land. The counts are this recording's; a change that puts
the simulator's events out of burn's order lowers them."""

import json
import sys

import pytest

from sim import paths

ROOT = paths.ROOT
sys.path.insert(0, str(ROOT / "experiments" / "probes"))

import arena_programs as A  # noqa: E402
from arena_replay import read_log  # noqa: E402

DATA = ROOT / "experiments" / "measured" / "linux-x86_64"


def _program(recording, panics):
    record = json.loads((DATA / recording).read_text())
    program = next(p for p in record["programs"]
                   if any(r[-1] == "panic" for r in p["real"]) == panics)
    return program["program"], record["l2_bytes"]


# (log, recording, panics, statements in real burn's order at least, first statement
#  whose addresses differ at least)
CASES = [
    ("script-basic", "probe-programs.json", False, 35, 2),
    ("script-panic", "probe-programs.json", True, 22, 1),
    ("script-modules", "probe-programs-modules.json", False, 39, 3),
]


@pytest.mark.parametrize("log, recording, panics, ordered, exact", CASES,
                         ids=[c[0] for c in CASES])
def test_heap_events_come_in_real_burns_order(log, recording, panics, ordered, exact):
    lines, l2_bytes = _program(recording, panics)
    records = read_log(DATA / "malloc-logs" / f"{log}.bin.xz")
    difference, same_order, statements = A.compare(lines, records, l2_bytes)
    assert statements >= 20
    assert same_order >= ordered, f"{same_order} of {statements} statements in burn's order"
    first = statements if difference is None else difference[0]
    assert first >= exact, f"statement {first} places a chunk elsewhere than glibc"
