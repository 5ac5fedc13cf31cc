"""What the platform does with burn's events: the allocator (a counting heap, the size
classes of macOS's xzone malloc and glibc's main arena chunk by chunk), RSS, Rust's
collections as they allocate (hashbrown tables, ``BTreeMap`` nodes, ``RawVec``), the
core's caches, cubecl's GPU memory pool and its kernels' launch metadata, gemm's first
read of the host's caches, the host's facts, and time per unit of burn's work (PyTorch's
ATen costs, which read the mirror's op facts, are the pytorch policy's:
``sim.policies.aten``).

Imports nothing from the layers above it (burn, policies, engine, analysis, output,
commands).
"""
