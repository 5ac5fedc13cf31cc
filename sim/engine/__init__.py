"""The engine: the simulation passed to everything that needs time (``simulation``),
profiles (``profile``), workloads (``workloads``), one cell's run (``runner``),
fast-forward of repeated loops (``fastforward/``), and the process around them (worker
processes, Ctrl-C)."""
