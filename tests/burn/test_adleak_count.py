"""adleak-count: the structural heap model reproduces the counting allocator exactly."""

from sim.engine.runner import run_cell

SEED = {
    ("flex", "after-loop"): (0, 0),
    ("flex", "after-unrelated-backward"): (1888, 5),
    ("flex.autodiff", "after-loop"): (10791872, 83332),
    ("flex.autodiff", "after-unrelated-backward"): (-952, -8),
    ("a-tracked", "after-loop"): (5801260, 51666),
    ("a-tracked", "after-unrelated-backward"): (5801260, 51666),
    ("a-tracked", "after-backward-through-a"): (-1180, -12),
}


def test_every_seed_count_is_exact():
    got = {}
    for variant in ("flex", "flex.autodiff", "a-tracked"):
        for row in run_cell("adleak-count", variant, observables=False):
            got.setdefault((variant, row["phase"]), {})[row["metric"]] = row["value"]
    for key, (nbytes, nblocks) in SEED.items():
        assert got[key]["heap_bytes_delta"] == nbytes, key
        assert got[key]["heap_blocks_delta"] == nblocks, key


def test_x86_hash_groups_add_32_bytes_per_untracked_op(tmp_path):
    """hashbrown's 16-byte SSE2 groups: 4 first-insert tables x 8 B more per new graph."""
    from sim.engine.profile import load_profile
    profile = load_profile("m2max-macos")
    profile.data["layout"]["group_width"] = 16
    profile.__init__(profile.name, profile.path, profile.data)
    rows = run_cell("adleak-count", "flex.autodiff", profile=profile, observables=False)
    after = {r["metric"]: r["value"] for r in rows if r["phase"] == "after-loop"}
    assert after["heap_bytes_delta"] == 10791872 + 32 * 10000
    assert after["heap_blocks_delta"] == 83332
