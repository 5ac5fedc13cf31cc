"""burn's ``free_unavailable_nodes`` walked block by block (glibc's arena) against the
NetworkX passes that decide what it frees: the walk follows burn's code
(``unavailable_propagation``, ``useful_propagation``) for the blocks it allocates, and the
statuses it reaches must be the outcome the simulator acts on -- a node the walk tags
useful is one the NetworkX passes found useful, and the other way round."""

import json
import sys

import pytest

import sim.burn.runtime.pass_blocks as pass_blocks

from sim import paths

ROOT = paths.ROOT
sys.path.insert(0, str(ROOT / "experiments" / "probes"))

from programs import simulate  # noqa: E402

RECORDINGS = [json.loads((ROOT / "experiments" / "measured" / "linux-x86_64" / name).read_text())
              for name in ("probe-programs.json", "probe-programs-modules.json",
                           "probe-programs-keepgrads.json")]


@pytest.fixture
def walks(monkeypatch):
    seen = []
    monkeypatch.setattr(pass_blocks, "WALK_OBSERVER", lambda status, useful: seen.append(
        (status, set(useful))))
    return seen


@pytest.mark.parametrize("recording", RECORDINGS, ids=["basic", "modules", "keep-grads"])
def test_the_walk_reaches_the_outcome_of_the_passes(walks, recording):
    for record in recording["programs"]:
        simulate(record["program"], l2_bytes=recording["l2_bytes"])
    assert len(walks) > 100
    for status, useful in walks:
        tagged = {node for node, value in status.items() if value == 2}
        assert tagged == useful & set(status)
