#!/bin/sh
# eight short batches a minute apart: grain-0 (randomly faulted) key pages, R = 8, 2,048-4,800 pages
for b in 1 2 3 4 5 6 7 8; do
  flock /work/notes/timing.lock taskset -c 1 nice -n -15 sh -c "echo batch $b \$(date -u +%T) load \$(cut -d' ' -f1 /proc/loadavg); for P in 1024 2048 3072 3840 4800; do ./tlb-contig \$P 8 100 3 0; done"
  sleep 45
done
