#!/bin/bash
B=/work/wt-dr/experiments/probes/target-patched/bin
cd /tmp/rs/ub3
echo "lock $(date -u +%T) $(uptime)" >> lock-and-load.txt
for r in 1 2 3 4 5 6 7; do
  for spec in 100:none 3000:none 30000:none 100:spin:3 100:spin:30 100:sleep:30; do
    n=${spec%%:*}; g=${spec#*:}
    if [ "$g" = none ]; then
      PROBE_CPU_TIME=1 $B/burn-probes-0.22.1+drop-release mechanism-cost --variant unrelated-backward --steps $n --out dr-$n-none-$r.csv
    else
      PROBE_GAP=$g PROBE_CPU_TIME=1 $B/burn-probes-0.22.1+drop-release mechanism-cost --variant unrelated-backward --steps $n --out dr-$n-${g/:/}-$r.csv
    fi
  done
done
echo "end $(date -u +%T) $(uptime)" >> lock-and-load.txt
