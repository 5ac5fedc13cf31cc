"""macOS LARGE blocks (xzone malloc): slice placement in segments, residency after free."""

from sim.platform.rss import Allocator, SegmentZone

MiB = 1024 * 1024


def test_documented_thresholds():
    a = Allocator.from_classes("macos")
    names = [z.name for z in a.zones]
    assert names == ["tiny", "small", "large", "huge"]
    large = a.zones[2]
    assert isinstance(large, SegmentZone)
    assert large.slice_bytes == 16384 and large.segment_slices * large.slice_bytes == 4 * MiB
    assert large.max_bytes == 2 * MiB
    # 32 KiB is still a small block, one byte more is a LARGE chunk of 3 slices
    assert a._place(32768)[0] == 1
    assert a._place(32769) == (2, 3 * 16384)
    # a one-slice LARGE chunk is rounded up to two slices
    assert large.slices_for(40000) == 3 and large.slices_for(16384) == 2
    assert a._place(2 * MiB + 1)[0] == 3


def test_freed_large_blocks_stay_resident_and_are_reused():
    a = Allocator.from_classes("macos")
    b1 = a.alloc(MiB)
    b2 = a.alloc(MiB)
    a.free(MiB, 1, b1)
    assert a.resident_bytes() == 2 * MiB          # freed pages are not returned
    b3 = a.alloc(MiB)                            # first fit: the freed hole
    assert b3 == b1 and a.resident_bytes() == 2 * MiB
    a.free(MiB, 1, b2)
    a.free(MiB, 1, b3)
    assert a.resident_bytes() == 2 * MiB


def test_placement_settles_after_the_first_iterations():
    """p10-ema's buffers do not fit the holes step 1 leaves: step 2 writes new slices
    once, then the placement cycles through the same slices (flat RSS)."""
    from sim.engine.runner import run_cell
    rows = run_cell("p10-ema", "without", sets={"steps": "50", "report_at": "1,2,3,10,50"})
    rss = {r["x"]: r["value"] for r in rows if r["metric"] == "rss_delta"}
    assert rss[1] < rss[2]
    assert rss[2] == rss[3] == rss[10] == rss[50]
    exact = run_cell("p10-ema", "without", sets={"steps": "50", "report_at": "1,2,3,10,50"},
                     fast_forward=False)
    assert rss == {r["x"]: r["value"] for r in exact if r["metric"] == "rss_delta"}


def test_anonymous_frees_take_the_newest_block_of_that_size():
    a = Allocator.from_classes("macos")
    first = a.alloc(100_000)
    a.alloc(100_000)
    a.free(100_000)
    assert list(a._blocks[100_000]) == [first]
    assert a.live[2] == 7 * 16384


def test_glibc_is_unchanged():
    a = Allocator.from_classes("glibc")
    assert a.alloc(MiB) is None
    a.free(MiB)
    assert a.resident_bytes() == 0


def test_per_cluster_segment_groups():
    """xzone keeps one LARGE segment group per CPU cluster: a block is carved from the
    group of the cluster the thread runs on and freed into the group that owns it."""
    from sim.platform.rss import ClusterSegmentZone
    a = Allocator.from_classes("macos")
    large = a.zones[2]
    assert isinstance(large, ClusterSegmentZone) and len(large.groups) == 3
    # the step of a loop on cluster 0, then the same step on cluster 1
    for cluster in (0, 1, 0, 1):
        a.set_cluster(cluster)
        blocks = [a.alloc(MiB), a.alloc(MiB)]
        for b in blocks:
            a.free(MiB, 1, b)
    # each cluster's group wrote its own 2 MiB, and neither grows further
    assert [g.resident_bytes() for g in large.groups] == [2 * MiB, 2 * MiB, 0]
    assert a.resident_bytes() == 4 * MiB
    # a block allocated on cluster 1 and freed while the thread is on cluster 2 returns
    # to cluster 1's group: cluster 2 still has written nothing
    a.set_cluster(1)
    b = a.alloc(MiB)
    a.set_cluster(2)
    a.free(MiB, 1, b)
    assert large.groups[2].resident_bytes() == 0


def test_a_named_free_of_a_block_a_free_by_size_took_frees_the_newest_left():
    """A free by size takes the newest LARGE block of its size; a later free naming that
    block (a table's, since frees name their block) then frees the one the first free
    really meant, the newest left, as glibc's arena model does."""
    a = Allocator.from_classes("macos")
    b1 = a.alloc(MiB)
    b2 = a.alloc(MiB)
    a.free(MiB)                  # by size: takes b2, the newest
    a.free(MiB, 1, b2)           # names b2, already taken: frees b1
    assert a.live[2] == 0 and not a._blocks[MiB]
    assert a.alloc(MiB) in (b1, b2)
