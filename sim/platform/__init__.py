"""What the platform does with burn's events: the allocator (a counting heap, the size
classes of macOS's xzone malloc and glibc's main arena chunk by chunk), RSS, Rust's
collections as they allocate (hashbrown tables, ``BTreeMap`` nodes, ``RawVec``), the
core's L2, cubecl's GPU memory pool and its kernels' launch metadata, gemm's first read
of the host's caches, the host's facts, and time per unit of work (burn's and PyTorch's
ATen ops).

Imports nothing from the layers above it (burn, policies, engine, analysis, output,
commands).
"""
