#!/usr/bin/env bash
# Record real glibc placements for tests/platform/test_arena_replay.py: builds malloc_log.so, runs
# probe programs and probes under it, keeps each process's malloc-family calls (xz) in
# experiments/measured/linux-x86_64/malloc-logs/. Needs the probes built
# (cargo build --release in experiments/probes) and gcc. About 30 s.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
probes="$root/experiments/probes/target/release/burn-probes"
out="$root/experiments/measured/linux-x86_64/malloc-logs"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -Wall -shared -fPIC -o "$tmp/malloc_log.so" "$here/malloc_log.c"
mkdir -p "$out"
record() {  # NAME PROBE-ARGS...: keeps the log of the process that made the most calls
    local name=$1; shift
    rm -f "$tmp"/log.*
    MALLOC_LOG="$tmp/log." LD_PRELOAD="$tmp/malloc_log.so" "$probes" "$@" >/dev/null 2>&1 || true
    local biggest
    biggest=$(ls -S "$tmp"/log.* | head -1)
    xz -9 -c "$biggest" > "$out/$name.bin.xz"
    echo "$name: $(( $(stat -c %s "$biggest") / 48 )) calls"
}
programs="$root/experiments/measured/linux-x86_64"
python3 - "$programs" "$tmp" <<'PY'
import json, sys
src, tmp = sys.argv[1], sys.argv[2]
basic = json.load(open(f"{src}/probe-programs.json"))["programs"]
modules = json.load(open(f"{src}/probe-programs-modules.json"))["programs"]
def first(progs, panics):
    return next(p for p in progs if any(r[-1] == "panic" for r in p["real"]) == panics)
for name, prog in (("basic", first(basic, False)), ("panic", first(basic, True)),
                   ("modules", first(modules, False))):
    open(f"{tmp}/{name}.txt", "w").write("\n".join(prog["program"]) + "\n")
PY
# the probe programs mark each statement in the log (tests/platform/test_arena_programs.py)
export PROBE_SCRIPT_MARKS=1
record script-basic script --program "$tmp/basic.txt"
record script-panic script --program "$tmp/panic.txt"
record script-modules script --program "$tmp/modules.txt"
unset PROBE_SCRIPT_MARKS
record p10-ema-without p10-ema --variant without --steps 200 --out "$tmp/p.csv"
record p10-ema-adam-without p10-ema-adam --variant without --steps 100 --out "$tmp/p.csv"
record p10-ema-adam-target-without p10-ema-adam --variant target-without --steps 100 --out "$tmp/p.csv"
record p10-ema-adam-log-no-ema p10-ema-adam --variant log-no-ema --steps 100 --out "$tmp/p.csv"
record p10-ema-ema-only p10-ema --variant ema-only --steps 200 --out "$tmp/p.csv"
record train-validate train-validate --quick --out "$tmp/p.csv"
# Balanced checkpointing: each step's 1-MiB snapshot from the heap once the mmap threshold has
# risen; experiments/calibration/key-layout.py reads its keys (issue 43)
record ema-balanced-detach-200 params --variant ema-balanced/200 --out "$tmp/p.csv"
# three fresh runs of SGD `without` over 600 steps: when each trims (burn's hash-seeded
# frees differ run to run); only the summary is kept (experiments/probes/trims.py)
runs=()
for i in 1 2 3; do
    rm -f "$tmp"/log.*
    MALLOC_LOG="$tmp/log." LD_PRELOAD="$tmp/malloc_log.so" "$probes" p10-ema --variant without \
        --steps 600 --out "$tmp/p.csv" >/dev/null 2>&1 || true
    mv "$(ls -S "$tmp"/log.* | head -1)" "$tmp/p10-ema-sgd600-run$i.bin"
    runs+=("$tmp/p10-ema-sgd600-run$i.bin")
done
python3 "$root/experiments/probes/trims.py" "${runs[@]}" --csv "$programs/diagnostics/p10-ema-sgd-trims.csv"
