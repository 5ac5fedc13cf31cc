#!/bin/sh
# hold 2: leak-fault twice, op-cost tracked/mul_scalar and untracked/add (quick) 4 times each, interleaved
cd /tmp/dr-lf
echo "lock2 $(date -u +%T) $(uptime)" >> lock-and-load.txt
for r in 3 4; do
  PROBE_CPU_TIME=1 /tmp/dr-burn-probes mechanism-cost --variant leak-fault --out lf-base-$r.csv 2> lf-base-$r.err
  for k in a b; do
    PROBE_CPU_TIME=1 /tmp/dr-burn-probes op-cost --quick --variant tracked/mul_scalar --out op-base-$r$k.csv 2>/dev/null
    PROBE_CPU_TIME=1 /tmp/dr-burn-probes op-cost --quick --variant untracked/add --out opadd-base-$r$k.csv 2>/dev/null
  done
done
echo "end2 $(date -u +%T) $(uptime)" >> lock-and-load.txt
