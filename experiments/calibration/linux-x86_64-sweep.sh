#!/usr/bin/env bash
# The fast refit of models/linux-x86_64.toml's `time.scan_node_ns` alone (issue 43): the
# read of a key in the L1d by the orphan sweep's maybe_useful, on p10-ema detach at steps
# 200 and 500 of the Xeon's p10-ema.csv, and no point past step 500 (the long run is
# predicted from the cache hierarchy, sim.platform.l2_cache.hierarchy_read_ns, with the
# sweep-scan probe's per-level costs). Every other parameter stays as
# experiments/calibration/linux-x86_64.sh fitted it (that script, ~1 h, fits them all and
# scan_node_ns on the same two points). The fit simulates p10-ema's 500 steps (--set
# steps=500), the table and the check of the profile's other fitted points the cells as
# measured. Run from the repo root.
set -euo pipefail
d=experiments/measured/linux-x86_64
sim=${SIM:-.venv/bin/sim}
out=${OUT:-models/linux-x86_64.toml}
"$sim" calibrate --profile models/linux-x86_64.toml --measured "$d/p10-ema.csv" \
  --jobs "${JOBS:-1}" --set steps=500 --out "$out" --force \
  --fit time.scan_node_ns --points 'p10-ema/detach//200/ms_per_step' \
    --points 'p10-ema/detach//500/ms_per_step'
