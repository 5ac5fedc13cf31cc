#!/bin/sh
# leak-fault on unpatched burn, CPU clock, twice, with op-cost tracked/mul_scalar between
cd /tmp/dr-lf
echo "lock $(date -u +%T) $(uptime)" >> lock-and-load.txt
for r in 1 2; do
  PROBE_CPU_TIME=1 /tmp/dr-burn-probes mechanism-cost --variant leak-fault --out lf-base-$r.csv 2> lf-base-$r.err
  PROBE_CPU_TIME=1 /tmp/dr-burn-probes op-cost --quick --variant tracked/mul_scalar --out op-base-$r.csv 2>/dev/null
done
echo "end $(date -u +%T) $(uptime)" >> lock-and-load.txt
