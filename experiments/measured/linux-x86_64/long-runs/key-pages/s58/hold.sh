#!/bin/bash
# one hold of the timing lock (run inside flock): the census run PID stopped, its heap scanned
# (real burn's keys now), the faithful order rows over that layout and the simulated one in
# turn; then the run pinned to core 1 at nice -15 (autogroup -15) for RUN seconds, its CPU
# time read at every census line; then stopped, scanned and the rows again; released.
PID=$1; RUN=$2; D=/tmp/s58long/hold; mkdir -p $D
B=94639416791040; SS=/tmp/s58long/sweep-scan; OP=/work/wt-long/experiments/calibration/order-pair.py
KL=/work/wt-long/experiments/calibration/key-layout.py; HS=/work/wt-long/experiments/probes/tools/heapscan.py
log() { echo "$(date -u +%T) $* load $(cut -d' ' -f1-3 /proc/loadavg)" >> $D/hold.log; }
st() { grep '^CENSUS ' /tmp/s58long/bal6000.err | tail -n1 | cut -d' ' -f1-6; }
setp() { for t in /proc/$PID/task/*; do t=${t##*/}; renice -n $1 -p $t >/dev/null; taskset -p -c $2 $t >/dev/null; done; }
pages() { python3 $KL compare $1 | tail -1 | cut -d'|' -f4 | tr -d ' '; }
rows() {  # LABEL: scan, layout, pair rows
  python3 $HS $PID $B $D/scan-$1.txt 2>> $D/hold.log
  python3 $KL scanned $D/scan-$1.txt $D/real-$1.txt 2>> $D/hold.log
  local mx=$(pages $D/real-$1.txt)
  local pl="1024,1536,2048,2304,2560,2816,3072,3328"
  pl=$(python3 -c "print(','.join([p for p in '$pl'.split(',') if int(p) < $mx] + ['$mx']))")
  log "rows $1: $(st) real layout pages $mx, rows at $pl"
  python3 $OP $SS $D/pair-$1 --layout real=$D/real-$1.txt --layout sim=/tmp/s58long/sim-eb.txt --rounds 2 --pages $pl >> $D/hold.log 2>&1
}
log "hold start $(st)"
kill -STOP $PID
rows s
echo -15 > /proc/$PID/autogroup; setp -15 1
last=""; kill -CONT $PID; log "run start $(st)"
end=$((SECONDS+RUN))
while [ $SECONDS -lt $end ] && kill -0 $PID 2>/dev/null; do
  cur=$(st)
  if [ "$cur" != "$last" ]; then
    echo "$(date -u +%T.%N) $(cut -d' ' -f14,15 /proc/$PID/stat) $cur" >> $D/cpu.txt; last=$cur
  fi
  sleep 0.2
done
kill -STOP $PID; log "run end $(st) $(cut -d' ' -f14,15 /proc/$PID/stat)"
rows e
setp 15 0-1; echo 0 > /proc/$PID/autogroup; kill -CONT $PID
log "hold end"
