#!/usr/bin/env bash
# How models/m2max-macos.toml was calibrated: the parameters fitted and the seed points
# used. Every other seed point is predicted. Run from the repo root.
set -euo pipefail
seeds=experiments/measured/seeds-m2max.csv
sim=${SIM:-.venv/bin/sim}
"$sim" calibrate --fresh --measured "$seeds" --profile models/m2max-macos.toml --jobs "${JOBS:-1}" \
  --out "${OUT:-models/m2max-macos.toml}" --force \
  --fit process.baseline_rss_bytes      --points 'adleak-rss/flex//0/rss' \
  --fit code.elementwise_bytes           --points 'adleak-rss/flex//100/rss' \
  --fit process.first_backward_bytes    --points 'adleak-count/flex/after-unrelated-backward/10000/heap_bytes_delta' \
  --fit process.first_backward_blocks   --points 'adleak-count/flex/after-unrelated-backward/10000/heap_blocks_delta' \
  --fit backend.metal.device_init_bytes --points 'pit-infer/build//0/host_heap_delta' \
  --fit backend.metal.first_op_bytes    --points 'pit-infer/A-model-and-input-autodiff//50/host_heap_delta' \
  --fit backend.metal.primitive_bytes   --points 'pit-infer/A-model-and-input-autodiff//100/host_heap_delta' \
  --fit backend.metal.kernel_bytes      --points 'pit-infer/C-valid-model-input-plain//50/host_heap_delta' \
  --fit backend.flex.gflops             --points 'p10-ema/target-without//50/ms_per_step' \
  --fit backend.flex.gbps               --points 'p10-ema/ema-only//2000/ms_per_step' \
  --fit time.scan_node_ns               --points 'p10-ema/detach//500/ms_per_step' \
  --points 'p10-ema/detach//200/ms_per_step' \
  --fit time.process_warmup_ns          --points 'p10-ema/without//1/ms_per_step' \
  --points 'p10-ema/without//50/ms_per_step'
# stage 2, the PyTorch reference rows (its own runtime costs), on top of stage 1.
# Time: the ATen op model (sim/policies/aten.py) fixes everything but the elementwise
# bandwidth, fitted on the steady state (mean of steps 1001-2000), and the one-time
# cost of the first step; detach//50 and both target points are predicted.
"$sim" calibrate --measured "$seeds" --profile "${OUT:-models/m2max-macos.toml}" --jobs "${JOBS:-1}" \
  --out "${OUT:-models/m2max-macos.toml}" --force \
  --fit pytorch.gbps                    --points 'p10-ema-pytorch/detach//2000/ms_per_step' \
  --fit pytorch.first_step_ns           --points 'p10-ema-pytorch/detach//1/ms_per_step' \
  --fit pytorch.baseline_delta_bytes    --points 'p10-ema-pytorch/detach//1/rss_delta' \
  --fit pytorch.rss_growth_per_step_bytes --points 'p10-ema-pytorch/detach//2000/rss_delta'
