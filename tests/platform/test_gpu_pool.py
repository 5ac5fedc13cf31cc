"""The GPU pool model against cubecl 0.11.3's memory management (sim/platform/gpu_pool.py).

Each test states a behaviour of the released cubecl-server / cubecl-wgpu code (the
file it comes from in its docstring) on the two adapters the profiles describe:
lavapipe (128 MiB pages, 32 B alignment) and Metal (256 B alignment).
"""

import pytest

from sim.platform.gpu_pool import (
    ExclusiveMemoryPool, MemoryDeviceProperties, MemoryManagement, MemoryPage, MemoryPool,
    PageSizing, bucket_sizes, padding,
)

MiB = 1024 * 1024
LAVAPIPE = dict(alignment=32, max_page_size=128 * MiB)


def test_properties_from_adapter_limits():
    """cubecl-wgpu runtime.rs: page = min(storage binding, buffer), alignment = max of
    the two offset alignments."""
    props = MemoryDeviceProperties.from_limits(128 * MiB, 256 * MiB, 32, 32)
    assert (props.max_page_size, props.alignment) == (128 * MiB, 32)
    metal = MemoryDeviceProperties.from_limits(2 ** 31, 2 ** 31, 256, 32)
    assert metal.alignment == 256


def test_small_allocations_take_an_8_mib_page_and_use_counts_requested_bytes():
    """memory_manage.rs test_memory_usage: 100 B in use, the small pool's 8 MiB page
    reserved; a freed slot is reused (same usage after free and reserve)."""
    pool = MemoryManagement(MemoryDeviceProperties(128 * MiB, 32))
    a = pool.reserve(100)
    assert pool.usage()[1:4] == (100, 28, 8 * MiB)
    a.live = False
    b = pool.reserve(96)      # the page's two free slices merge first: b starts at 0
    assert pool.usage()[1] == 96 and pool.usage()[3] == 8 * MiB
    assert b.offset == 0


def test_arena_page_grows_to_size_plus_slack():
    """adaptive.rs tests: a 1 MiB allocation on the 2 MiB floor; 10 MiB grows pages to
    11 MiB and outdates the first; an emptied outdated page goes at the next tick."""
    pool = MemoryManagement(MemoryDeviceProperties(1024 * MiB, 32))
    first = pool.reserve(MiB)
    assert pool.pools.report()[1:] == [(2 * MiB, 1)]
    large = pool.reserve(10 * MiB)
    assert pool.pools.report()[1:] == [(11 * MiB, 1), (2 * MiB, 1)]
    smaller = pool.reserve(6 * MiB)
    assert pool.pools.report()[1] == (11 * MiB, 2)    # never shrinks; 11 - 10 < 6
    first.live = False
    pool.reserve(MiB)      # the tick: the outdated page is empty and goes
    assert pool.pools.report()[1:] == [(11 * MiB, 2)]
    assert large.live and smaller.live


def test_page_size_stops_at_the_devices_largest_page():
    """adaptive.rs: with a 16 MiB largest page, a 16 MiB allocation gets a 16 MiB page
    (no slack past the limit) and one byte more is refused."""
    pool = MemoryManagement(MemoryDeviceProperties(16 * MiB, 32))
    pool.reserve(16 * MiB)
    assert pool.pools.report()[1] == (16 * MiB, 1)
    with pytest.raises(ValueError):
        pool.reserve(16 * MiB + 1)


def test_small_pool_takes_nothing_past_64_kib():
    pool = MemoryManagement(MemoryDeviceProperties(128 * MiB, 32))
    pool.reserve(64 * 1024)
    pool.reserve(64 * 1024 + 32)
    assert pool.pools.report() == [(8 * MiB, 1), (2 * MiB, 1)]


def test_first_fit_and_coalescing_within_a_page():
    """memory_page.rs: first free slice that holds the padded size; two adjacent free
    slices merge only when the page is searched; a lone free slice keeps the size of
    its last allocation, its padding unusable."""
    page = MemoryPage(1024, 32)
    a, b, c = page.try_reserve(100), page.try_reserve(64), page.try_reserve(64)
    assert [s.offset for s in (a, b, c)] == [0, 128, 192]
    a.live = False
    assert page.try_reserve(128) is not a           # a's slice holds 100 bytes, not 128
    a2 = page.try_reserve(96)
    assert a2 is a and a2.offset == 0
    # a reuse drops the old padding: the page accounts 1024 - 28 + 0 bytes
    assert page.usage()[3] == 1024 - 28 + 0
    # the 4 bytes a2 left free merge with b and c once both are free; the 28 bytes of
    # a's dropped padding stay lost (the merged slice covers 96..228 of 96..256)
    b.live = c.live = False
    page.coalesce()
    assert [(s.offset, s.size, s.live) for s in page.slices][1] == (96, 132, False)


def test_persistent_pool_reuses_same_size_and_cleanup_frees():
    """persistent_pool.rs: one buffer per allocation, reused for the same padded size;
    an explicit cleanup frees the free ones."""
    pool = MemoryPool(**LAVAPIPE)
    pool.persistent_window += 1
    w = pool.alloc(512 * 512 * 4)
    bias = pool.alloc(512 * 4)
    pool.persistent_window -= 1
    assert pool.bytes_reserved == MiB + 2048 and pool.report() == [(8 * MiB, 0), (2 * MiB, 0)]
    pool.free(w)
    pool.persistent_window += 1
    assert pool.alloc(512 * 512 * 4) is w
    pool.persistent_window -= 1
    pool.free(w)
    pool.memory_cleanup()
    assert pool.bytes_reserved == 2048 and bias.live


def test_staging_buffer_of_a_scalar_read():
    """dynamic/exclusive.rs + exclusive_pool.rs: a 4-byte read gets a buffer of the
    smallest bucket at its running mean, 16384 * 0.99 + 4 * 0.01 rounded up to the
    alignment: 16,224 B on lavapipe; reused by the next read."""
    pool = MemoryPool(**LAVAPIPE)
    pool.read(4)
    assert pool.bytes_reserved == 16_224 and pool.bytes_in_use == 0
    pool.read(4)
    assert pool.bytes_reserved == 16_224
    metal = MemoryPool(alignment=256, max_page_size=256 * MiB)
    metal.read(4)
    assert metal.bytes_reserved == 16_384


def test_exclusive_pool_releases_after_five_checks():
    """exclusive_pool.rs: a free buffer goes after reaching five free counts (it starts
    at four); checks come every period / 5 reservations, or at an explicit cleanup."""
    pool = ExclusiveMemoryPool(32 * 1024, 32, 5000)
    s = pool.alloc(4)
    s.live = False
    pool.cleanup(999, False)
    assert len(pool.pages) == 1          # not a check yet
    pool.cleanup(1000, False)
    assert pool.pages == []
    t = pool.alloc(4)
    t.live = False
    pool.cleanup(1001, True)
    assert pool.pages == []


def test_bucket_sizes_span_32_kib_to_the_largest_page():
    sizes = bucket_sizes(128 * MiB, 32)
    assert sizes[0] == 32 * 1024 and sizes[-1] == 128 * MiB and len(sizes) == 24
    assert all(s % 32 == 0 for s in sizes) and sizes == sorted(sizes)


def test_page_sizing_floor_and_rounding():
    sizing = PageSizing(2 * MiB, MemoryDeviceProperties(128 * MiB, 32))
    assert sizing.fit(2 * MiB, 2 * MiB) is None
    assert sizing.fit(2 * MiB + 32, 2 * MiB) == 4 * MiB
    assert sizing.fit(8 * MiB, 2 * MiB) == 9 * MiB
    assert padding(100, 32) == 28 and padding(96, 32) == 0


def test_pit_infer_forward_on_lavapipe_layout():
    """Linear(512,512) -> relu -> Linear(512,512) on [256,512] without autodiff:
    parameters in the persistent pool, activations of 512 KiB in one 2 MiB arena page
    reused forward after forward, the 32-byte sum in the small pool."""
    pool = MemoryPool(**LAVAPIPE)
    pool.persistent_window += 1
    params = [pool.alloc(n) for n in (MiB, 2048, MiB, 2048)]
    pool.persistent_window -= 1
    x = pool.alloc(512 * 1024)
    for _ in range(3):
        h = pool.alloc(512 * 1024)
        r = pool.alloc(512 * 1024)
        pool.free(h)
        y = pool.alloc(512 * 1024)
        pool.free(r)
        s = pool.alloc(4)
        pool.free(y)
        pool.read(4)
        pool.free(s)
    assert pool.bytes_in_use == 2 * MiB + 4096 + 512 * 1024
    assert pool.report() == [(8 * MiB, 1), (2 * MiB, 1)]
    assert pool.bytes_reserved == 2 * MiB + 4096 + 8 * MiB + 2 * MiB + 16_224
    assert all(p.live for p in params) and x.live


# -- launch-metadata uniforms and memory_cleanup's relocation -------------------------

def test_kernel_info_sizes_are_those_cubecls_log_shows():
    """Sizes of the info words (sim.platform.kernels) for the probes' launches, as cubecl's
    memory log printed each uniform on lavapipe."""
    from sim.platform import kernels as k
    sizes = {
        "prng": k.prng_uniform((256, 512), (1, 2, 3, 4)),
        "matmul": k.matmul((256, 512), (512, 512)),
        "bias add in place": k.elementwise([(256, 512), (512,)], (256, 512), alias=0),
        "add into a new buffer": k.elementwise([(16,), (16,)], (16,)),
        "relu mask": k.elementwise([(256, 512)], (256, 512), scalars=(0.0,)),
        "mask fill": k.mask_fill((256, 512), 0.0, False),
        "mask fill in place": k.mask_fill((256, 512), 0.0, True),
        "full": k.full((1,), 0.0),
        "shared sum": k.shared_sum((256, 512)),
        "reduce dim": k.reduce_dim((64, 512), 0),
    }
    assert {name: 8 * len(info.words()) for name, info in sizes.items()} == {
        "prng": 48, "matmul": 72, "bias add in place": 56, "add into a new buffer": 32,
        "relu mask": 24, "mask fill": 40, "mask fill in place": 32, "full": 24,
        "shared sum": 40, "reduce dim": 80}


def test_equal_launch_info_shares_one_uniform_until_memory_cleanup():
    from sim.platform import kernels as k
    pool = MemoryPool(alignment=32, max_page_size=128 * MiB)
    words = k.full((1,), 0.0).words()
    pool.launch(words)
    pool.launch(words)
    assert pool.usage()[:3] == (1, 24, 8)
    assert pool.bytes_reserved == 16224        # the bucket's running mean, 32 B aligned
    pool.launch(k.full((1,), 1.0).words())     # another value: another uniform
    assert pool.usage()[0] == 2
    pool.memory_cleanup()
    assert pool.usage() == (0, 0, 0, 0)


def test_info_cache_evicts_the_least_recently_used_entry():
    from sim.platform.gpu_pool import MetadataInfoCache, Slice
    cache = MetadataInfoCache(max_entries=2)
    slices = [Slice(0, 8) for _ in range(3)]
    for s in slices:
        s.live = True
    cache.get((1,)); cache.insert((1,), slices[0])
    cache.get((2,)); cache.insert((2,), slices[1])
    assert cache.get((1,)) is slices[0]        # (2,) is now the least recently used
    cache.get((3,)); cache.insert((3,), slices[2])
    assert set(cache.entries) == {(1,), (3,)} and not slices[1].live


def test_memory_cleanup_relocates_live_slices_off_outdated_pages():
    """A live 512 KiB slice left on the outdated 2 MiB pool moves into the free room of
    the current 9 MiB page; the outdated page goes; the handle follows the allocation."""
    pool = MemoryPool(alignment=32, max_page_size=128 * MiB)
    kept = pool.alloc(512 * 1024)
    big = pool.alloc(8 * MiB)                  # grows the arena to 9 MiB pages
    assert [pages for _, pages in pool.report()[1:]] == [1, 1]
    pool.memory_cleanup()
    assert pool.report()[1:] == [(9 * MiB, 1)]
    assert pool.bytes_in_use == 8 * MiB + 512 * 1024 and kept.live and kept.offset == 8 * MiB
    pool.free(big)
    pool.free(kept)
    pool.memory_cleanup()
    assert pool.bytes_reserved == 0


def test_relocation_moves_nothing_from_a_page_that_does_not_fit_whole():
    pool = MemoryPool(alignment=32, max_page_size=128 * MiB)
    a, b = pool.alloc(1024 * 1024), pool.alloc(1024 * 1024)    # one 2 MiB page, full
    pool.alloc(8 * MiB)                                         # 9 MiB page: 1 MiB free
    pool.memory_cleanup()
    assert [pages for _, pages in pool.report()[1:]] == [1, 1]  # neither slice moved
    assert a.live and b.live and a.offset == 0
