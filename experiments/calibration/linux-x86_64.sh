#!/usr/bin/env bash
# How models/linux-x86_64.toml was calibrated: the parameters fitted and the probe points
# used (experiments/measured/linux-x86_64/, burn 0.22.1 on Flex, this machine). Every
# other probe point is held out and predicted. Run from the repo root.
#
# The structural byte model ([layout], group_width = 16, primitive/handle/stride sizes
# from the sizeof and alloc-trace probes) is NOT fitted: heap bytes and blocks come out
# of it. Fitted here: the process's RSS constants, the resident text of each code path
# (on the probes' text_rss_delta rows of adleak-rss and of p10-ema detach / ema-only: the
# text of the other p10-ema modes is held out) and the CPU's times. backend.flex.gbps is
# the L2-resident elementwise rate (adleak's 256-KiB tensors), gbps_miss the rate of
# operands the L2 model (sim/platform/l2_cache.py, process.l2_bytes = 2 MiB [source]) finds evicted.
# The orphan sweep: scan_node_ns (maybe_useful's read of a key in the L1d) on p10-ema detach
# at steps 200 and 500 (no point past step 500: the long run, steps 1000-4000, is predicted
# from the cache hierarchy: the misses of each level, sim.platform.l2_cache.hierarchy_read_ns, cost
# the [measured] time.sweep_*_read_ns of the sweep-scan probe, not fitted here), and
# root_check_node_ns (free_unused_roots' read of a graph with no live handle: the
# deterministic chain-dead probe at 3000 ops, sweep-scan.csv).
# gflops: the step-50 means of the four training modes (p10-ema.csv is a mean of 5 fresh
# runs; a mode's runs differ by up to 50 % at step 50, e.g. without 1.31-1.98 ms, so no
# single mode anchors the gemm rate).
# page_fault_ns: per 4-KiB page made resident (heap growth, mapped blocks, text, gemm's slab),
# on p10-ema without step 1 (a fresh process's first step); the other step-1 points are held out.
# The time of a small op is split on the op-cost probe (op-cost.csv: [1,128] tensors, the
# last of the four blocks of the elementwise ops, reshape and sum in each mode): the backend's
# fixed cost per op (op_overhead_ns) and per tensor operand (operand_ns: add against the
# unary ops) on plain Flex; burn-autodiff's per operand node (operand_node_ns), its
# registration of a step (register_ns, tracked ops: the step joins x's graph) and of a
# new graph (new_graph_ns: untracked ops, and the adleak untracked loop); gemm_call_ns
# (the gemm crate's fixed cost per call) on the plain matmul; reduce_add_ns (a full sum's
# serial chain of f32 adds, per element) by plain sum against the unary ops; clone_ns (a
# tensor handle cloned, and later dropped) and buffer_ns (a result buffer malloc'd, and
# later freed) by the plain ops, which clone every operand and drop a fresh output,
# against op-cost's plain chains y = op(y) of mul_scalar (moved, written in place) and add
# (one clone of the constant); the chains of relu, reshape and matmul are held out, and so
# are backward-cost's autodiff chains but for two forward rows: autodiff_clone_ns (an
# autodiff handle's node and ref-count Arcs) by the tracked mul_scalar chain against
# op-cost's tracked mul_scalar on a clone, checkpoint_ns (a tensor saved for the backward)
# by the tracked relu chain, which saves its input, against mul_scalar's. The
# untracked and tracked matmuls and the other three blocks of every op are held out. A backward's cost per
# step (backward-cost.csv: chains of 2000 ops on [1,128], third round): backward_step_ns
# (the gradients container, the step's dispatch) on mul_scalar, checkpoint_retrieve_ns
# (a saved tensor read back) on relu; add, matmul and the other rounds are held out.
#
# Allocator: the profile's own, "glibc-arena" (fitted under it since session 9: about an
# hour here with JOBS=2, stage 1 9 min and stage 2 52 min, as fast-forward replays each
# leak-loop iteration's heap events on the arena). ALLOCATOR=NAME fits under another
# allocator class instead (e.g. glibc, the high-water model the values of sessions 7-8
# were fitted with) and puts glibc-arena back into the written profile at the end.
set -euo pipefail
d=experiments/measured/linux-x86_64
sim=${SIM:-.venv/bin/sim}
out=${OUT:-models/linux-x86_64.toml}
base=models/linux-x86_64.toml
if [ -n "${ALLOCATOR:-}" ]; then
  base=$(mktemp --suffix .toml)
  trap 'rm -f "$base"' EXIT
  sed "s/^allocator = .*/allocator = \"$ALLOCATOR\"/" models/linux-x86_64.toml > "$base"
fi
measured=(--measured "$d/adleak-rss.csv" --measured "$d/p10-ema.csv" --measured "$d/params.csv"
          --measured "$d/text-rss.csv" --measured "$d/sweep-scan.csv" --measured "$d/op-cost.csv"
          --measured "$d/backward-cost.csv")
# Stage 1: memory. The process baseline and the code paths' resident text, on RSS and text
# points only (no time parameter changes a byte).
"$sim" calibrate --fresh --profile "$base" --jobs "${JOBS:-1}" "${measured[@]}" \
  --out "$out" --force \
  --fit process.baseline_rss_bytes      --points 'adleak-rss/flex//0/rss_bytes' \
  --fit code.device_bytes --fit code.module_bytes --fit code.creation_bytes \
  --fit code.elementwise_bytes --fit code.matmul_bytes --fit code.reduce_bytes \
  --fit code.autodiff_bytes --fit code.backward_bytes --fit code.optimizer_bytes \
    --points 'adleak-rss/*//0/text_rss_delta' --points 'adleak-rss/*//100/text_rss_delta' \
    --points 'p10-ema/detach/*/*/text_rss_delta' --points 'p10-ema/ema-only/*/*/text_rss_delta'
# Stage 2: time, with the bytes of stage 1 fixed (they set how many pages fault); the
# profile's [calibration] table then lists both stages' parameters and points.
"$sim" calibrate --profile "$out" --jobs "${JOBS:-1}" "${measured[@]}" --out "$out" \
  --fit backend.flex.op_overhead_ns \
    --points 'op-cost/plain/add//20000/ms_per_step' --points 'op-cost/plain/mul_scalar//20000/ms_per_step' --points 'op-cost/plain/relu//20000/ms_per_step' --points 'op-cost/plain/reshape//20000/ms_per_step' --points 'op-cost/plain/sum//20000/ms_per_step' \
  --fit backend.flex.gemm_call_ns --points 'op-cost/plain/matmul//20000/ms_per_step' \
  --fit backend.flex.operand_ns --fit time.operand_node_ns \
  --fit backend.flex.reduce_add_ns \
  --fit backend.flex.clone_ns --fit backend.flex.buffer_ns \
    --points 'op-cost/chain/mul_scalar//20000/ms_per_step' --points 'op-cost/chain/add//20000/ms_per_step' \
  --fit time.register_ns \
    --points 'op-cost/tracked/add//20000/ms_per_step' --points 'op-cost/tracked/mul_scalar//20000/ms_per_step' --points 'op-cost/tracked/relu//20000/ms_per_step' --points 'op-cost/tracked/reshape//20000/ms_per_step' --points 'op-cost/tracked/sum//20000/ms_per_step' \
  --fit time.new_graph_ns \
    --points 'op-cost/untracked/add//20000/ms_per_step' --points 'op-cost/untracked/mul_scalar//20000/ms_per_step' --points 'op-cost/untracked/relu//20000/ms_per_step' --points 'op-cost/untracked/reshape//20000/ms_per_step' --points 'op-cost/untracked/sum//20000/ms_per_step' \
    --points 'adleak-count-params/untracked/size=16/after-loop/10000/ns_per_op' \
  --fit time.autodiff_clone_ns          --points 'backward-cost/mul_scalar/forward/3/ms_per_step' \
  --fit time.checkpoint_ns              --points 'backward-cost/relu/forward/3/ms_per_step' \
  --fit time.backward_step_ns           --points 'backward-cost/mul_scalar/backward/3/ms_per_step' \
  --fit time.checkpoint_retrieve_ns     --points 'backward-cost/relu/backward/3/ms_per_step' \
  --fit backend.flex.gbps               --points 'adleak-count-params/untracked/size=65536/after-loop/10000/ns_per_op' \
  --fit backend.flex.gbps_miss          --points 'p10-ema/ema-only//100/ms_per_step' \
  --fit backend.flex.gflops             --points 'p10-ema/without//50/ms_per_step' \
    --points 'p10-ema/detach//50/ms_per_step' --points 'p10-ema/target-without//50/ms_per_step' \
    --points 'p10-ema/log-no-ema//50/ms_per_step' \
  --fit time.page_fault_ns              --points 'p10-ema/without//1/ms_per_step' \
  --fit time.process_warmup_ns          --points 'adleak-count-params/untracked/size=16/after-unrelated-backward/1000/backward_ms' \
  --fit time.scan_node_ns               --points 'p10-ema/detach//200/ms_per_step' \
    --points 'p10-ema/detach//500/ms_per_step' \
  --fit time.root_check_node_ns         --points 'adleak-count-params/chain-dead/size=16/after-unrelated-backward/3000/backward_ms' \
  --fit time.sweep_free_ns              --points 'adleak-count-params/untracked/size=16/after-unrelated-backward/10000/backward_ms' \
  --fit time.free_unavailable_node_ns   --points 'adleak-count-params/tracked/size=16/after-backward-through-a/1000/backward_ms' \
  --fit time.pop_scan_group_ns          --points 'adleak-count-params/tracked/size=16/after-backward-through-a/100000/backward_ms' \
  --fit time.register_parent_ns         --points 'adleak-count-params/merge-persistent/size=16/after-loop/10000/ns_per_op'
if [ -n "${ALLOCATOR:-}" ]; then
  sed -i 's/^allocator = .*/allocator = "glibc-arena"/' "$out"
fi
