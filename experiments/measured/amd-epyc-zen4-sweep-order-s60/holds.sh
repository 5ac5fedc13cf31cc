#!/bin/sh
# The sweep-order probe (burn's HashMap and keys().any() scan, a locator of one entry per pass,
# the simulated arena's exact layouts of both runs to step 8,000) in short holds of the
# timing lock, holds FIRST to LAST (stopped by hand before LAST); both layouts in each hold,
# their order alternating from hold to hold; GAP seconds after one hold's end, then the next
# waits for the lock. Usage: holds.sh PROBE OUT FIRST LAST GAP
PROBE=$1; OUT=$2; i=$3; LAST=$4; GAP=$5
R=$(git rev-parse --show-toplevel)
L=$R/experiments/measured/linux-x86_64/sweep-levels/s57/layouts
EB="--order $L/ema-balanced-detach-31997.txt --order-pages 1024,1536,2048,2304,2560,2816,3072,3328,3584,3840,4096,4274"
P10="--order $L/p10-ema-detach-31997.txt --order-pages 1024,1536,2048,2304,2560,2816,3072,3300"
export SWEEP_ORDER_LOCATOR_PASSES=1
while [ $i -le $LAST ]; do
  if [ $((i % 2)) -eq 1 ]; then first=eb; else first=p10; fi
  flock /work/notes/timing.lock sh -c "
    echo hold h$i start \$(date -u +%T) UTC load \$(cut -d' ' -f1-3 /proc/loadavg) first $first >> $OUT/holds.txt
    for w in $first \$( [ $first = eb ] && echo p10 || echo eb ); do
      if [ \$w = eb ]; then python3 $R/experiments/calibration/tlb-batch.py $PROBE $OUT/ema-balanced h$i --reads 1,2,3,4,6,8 $EB --hashmap
      else python3 $R/experiments/calibration/tlb-batch.py $PROBE $OUT/p10-ema h$i --reads 1,2,3,4,6,8 $P10 --hashmap; fi
    done
    echo hold h$i end \$(date -u +%T) UTC load \$(cut -d' ' -f1-3 /proc/loadavg) >> $OUT/holds.txt"
  i=$((i + 1))
  [ $i -le $LAST ] && sleep $GAP
done
echo done $(date -u +%T) >> $OUT/holds.txt
