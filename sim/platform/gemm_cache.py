"""gemm-common 0.19's first read of the host's caches on Linux: its heap events.

gemm-common sizes its blocking from ``CACHE_INFO`` (``cache.rs``), a process-wide
``OnceCell`` filled at the first gemm call that gets past the small kernels' early returns
(``gemm_basic_generic`` asks for ``kernel_params``, or for the L2 size directly when
m, n <= 64). On Linux ``cache_info`` walks sysfs with ``std::fs``:

* ``read_dir("/sys/devices/system/cpu")``, and for each entry whose name starts with
  ``cpu`` and whose ``cache`` subdirectory exists, ``read_dir`` of that;
* for each ``index*`` directory in it, ``read_dir`` of the directory and
  ``read_to_string`` of every file in it, in readdir order, until an instruction cache's
  ``type`` ends the directory (``continue 'index``).

Nothing of this outlives the call, but on glibc's arena its blocks -- a 32-KiB ``DIR`` per
directory, a 4-KiB ``String`` per file, the paths -- come and go low in a young heap, and
the holes they leave decide where the small blocks of every later step land (docs/known-gaps.md,
*glibc's arena on Linux*). :func:`read_cache_info` makes those events, in order, from the
profile's ``[sysfs]`` description of the host (empty where the profile does not walk it).

What each ``std`` call allocates (Rust 1.95 on glibc 2.36, checked against the malloc
logs of ``experiments/probes/malloc-log``):

``read_dir(path)``   libc's ``opendir``: one ``DIR`` (``sysfs.opendir_bytes``, libc's own
                     block); the ``ReadDir``'s root ``PathBuf`` (the path's length), and
                     its ``Arc<InnerReadDir>`` (48 B: two counts, the ``DIR`` pointer and
                     the ``PathBuf``). Dropped: ``closedir``, then the root, then the Arc.
an entry             its ``DirEntry``'s name ``CString`` (the name's length + 1); its
                     ``path()``: the root cloned (exact length), then grown by ``push``
                     (``RawVec`` doubling, at least the joined length); the ``DirEntry``
                     goes right after ``path()``.
``join("cache")``    the same clone-and-grow of a path; ``is_dir`` allocates nothing (a
                     short path is made a C string on the stack).
``read_to_string``   a ``String`` reserved exactly to the file's ``st_size``
                     (``sysfs.file_size_bytes``: sysfs reports 4096 for every attribute),
                     dropped before the path that named the file.
"""

from __future__ import annotations

__all__ = ["ROOT", "read_cache_info"]

#: the directory gemm-common lists (cache.rs)
ROOT = "/sys/devices/system/cpu"
#: ArcInner<InnerReadDir>: strong and weak counts, the DIR pointer, the root PathBuf
READ_DIR_ARC_BYTES = 16 + 8 + 24
#: a Vec<u8>'s smallest capacity once it grows (RawVec::MIN_NON_ZERO_CAP for 1-byte items)
MIN_CAPACITY = 8


def _grown(length, extra) -> int:
    """Capacity of a ``PathBuf`` of exactly ``length`` bytes after ``push`` adds a
    separator and ``extra`` bytes: ``RawVec``'s amortized growth (double, or what is
    needed, at least 8)."""
    return max(2 * length, length + 1 + extra, MIN_CAPACITY)


class _Walk:
    """One ``try_cache_info_linux`` call on ``heap`` over the host ``sysfs``."""

    def __init__(self, heap, sysfs):
        self.heap = heap
        self.sysfs = sysfs
        #: directories listed and files read (each a few system calls into sysfs)
        self.reads = 0

    def join(self, length, name) -> tuple:
        """``path.join(name)`` of a path of ``length`` bytes: ``(its capacity, block)``."""
        heap = self.heap
        block = heap.alloc(length)
        capacity = _grown(length, len(name))
        return capacity, heap.realloc(length, capacity, block)

    def open_dir(self, root_length) -> tuple:
        """``fs::read_dir`` of a path of ``root_length`` bytes: its blocks."""
        heap = self.heap
        self.reads += 1
        dir_block = heap.libc_alloc(self.sysfs.opendir_bytes)
        root = heap.alloc(root_length)
        arc = heap.alloc(READ_DIR_ARC_BYTES)
        return dir_block, root, arc

    def close_dir(self, root_length, blocks) -> None:
        """The ``ReadDir`` dropped: ``closedir``, the root path, the Arc."""
        dir_block, root, arc = blocks
        heap = self.heap
        heap.libc_free(self.sysfs.opendir_bytes, dir_block)
        heap.free(root_length, root)
        heap.free(READ_DIR_ARC_BYTES, arc)

    def entry_path(self, root_length, name) -> tuple:
        """An entry of a directory read from a root of ``root_length`` bytes, turned
        into its path (``entry?.path()``): ``(capacity, block)`` of the path."""
        heap = self.heap
        name_block = heap.alloc(len(name) + 1)
        path = self.join(root_length, name)
        heap.free(len(name) + 1, name_block)
        return path

    def read(self) -> None:
        heap, sysfs = self.heap, self.sysfs
        top = self.open_dir(len(ROOT))
        for name in sysfs.cpu_entries:
            capacity, path = self.entry_path(len(ROOT), name)
            if name.startswith("cpu"):
                length = len(ROOT) + 1 + len(name)
                cache_capacity, cache = self.join(length, "cache")
                # sysfs: only the cpuN directories have a cache directory
                if name[3:].isdigit():
                    self.read_cache_dir(length + 1 + len("cache"), cache_capacity, cache)
                else:
                    heap.free(cache_capacity, cache)
            heap.free(capacity, path)
        self.close_dir(len(ROOT), top)

    def read_cache_dir(self, length, capacity, cache) -> None:
        """``read_dir(cache)`` (the path moved into it and dropped after the call) and
        its ``index*`` directories."""
        heap = self.heap
        blocks = self.open_dir(length)
        heap.free(capacity, cache)
        for name in self.sysfs.cache_entries:
            index_capacity, index = self.entry_path(length, name)
            if name.startswith("index"):     # sysfs: the index* entries are directories
                self.read_index_dir(length + 1 + len(name), index_capacity, index, name)
            else:
                heap.free(index_capacity, index)
        self.close_dir(length, blocks)

    def read_index_dir(self, length, capacity, index, index_name) -> None:
        """``read_dir(index)`` and ``read_to_string`` of its files, up to an instruction
        cache's ``type``."""
        heap, sysfs = self.heap, self.sysfs
        blocks = self.open_dir(length)
        heap.free(capacity, index)
        instruction = index_name in sysfs.instruction_indexes
        for name in sysfs.index_files:
            file_capacity, path = self.entry_path(length, name)
            self.reads += 1
            contents = heap.alloc(sysfs.file_size_bytes)
            heap.free(sysfs.file_size_bytes, contents)
            heap.free(file_capacity, path)
            if instruction and name == "type":
                break                         # neither Data nor Unified: continue 'index
        self.close_dir(length, blocks)


def read_cache_info(heap, sysfs) -> int:
    """The heap events of gemm-common's ``cache_info`` on Linux over the host ``sysfs``
    (a profile's ``[sysfs]`` table) on ``heap``; nothing where the profile lists no
    entries. Every block is freed before it returns. Returns how many directories it
    listed and files it read (the time model charges each: ``Timing.sysfs_reads``)."""
    if not sysfs.cpu_entries:
        return 0
    walk = _Walk(heap, sysfs)
    walk.read()
    return walk.reads
