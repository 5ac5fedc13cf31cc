#!/bin/bash
# holds of the timing lock for the census run PID: at each hold's start and end the run is
# stopped (SIGSTOP) and a sweep-scan TLB batch taken on core 1; between, the run pinned to
# core 1 at nice -15 with its autogroup at -15; between holds nice 15 on any core, autogroup 0
PID=$1; HOLD=${2:-720}; LOG=/tmp/h43/holds.log; N=${3:-2}
SS=/work/main/experiments/probes/target/release/sweep-scan
TB=/work/wt43/experiments/calibration/tlb-batch.py
while kill -0 $PID 2>/dev/null; do
  flock /work/notes/timing.lock bash -c "
    setp() { for t in /proc/$PID/task/*; do t=\${t##*/}; renice -n \$1 -p \$t >/dev/null; taskset -p -c \$2 \$t >/dev/null; done; }
    st() { grep '^CENSUS ' /tmp/h43/bal.err | tail -n1 | cut -d' ' -f1-6; }
    echo \"\$(date -u +%T) hold $N start load \$(cut -d' ' -f1-3 /proc/loadavg) \$(st)\" >> $LOG
    kill -STOP $PID; python3 $TB $SS /tmp/h43/tlb h${N}s --reads 4,6,7,8,10 >> /tmp/h43/tlbbatch.log 2>&1
    echo -15 > /proc/$PID/autogroup; setp -15 1; kill -CONT $PID
    end=\$((SECONDS+$HOLD)); while [ \$SECONDS -lt \$end ] && kill -0 $PID 2>/dev/null; do sleep 2; done
    echo \"\$(date -u +%T) hold $N run end \$(st)\" >> $LOG
    if kill -0 $PID 2>/dev/null; then kill -STOP $PID; fi
    python3 $TB $SS /tmp/h43/tlb h${N}e --reads 4,6,7,8,10 >> /tmp/h43/tlbbatch.log 2>&1
    if kill -0 $PID 2>/dev/null; then setp 15 0-1; echo 0 > /proc/$PID/autogroup; kill -CONT $PID; fi
    echo \"\$(date -u +%T) hold $N end load \$(cut -d' ' -f1-3 /proc/loadavg)\" >> $LOG
  "
  N=$((N+1)); sleep 60
done
echo "$(date -u +%T) process $PID done" >> $LOG
