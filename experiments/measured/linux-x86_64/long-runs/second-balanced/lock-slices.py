#!/usr/bin/env python3
"""Run one long probe on core 1 in slices of the timing lock (<= SLICE s each): the probe
runs only while this holds /work/notes/timing.lock and is SIGSTOPped between holds (its
CPU clock stops too). Polls the probe's stderr; at each new row records VmRSS/VmHWM, the
probe's utime/stime, minor faults and /proc/PID/schedstat (ns on the CPU, ns waiting on
the run queue, time slices): the wait is the time other tasks on core 1 took from it.
Session 51's second-p10/lock-slices.py with the probe's path as an argument and the
schedstat and fault columns added. HOLD_CMD (optional, session 54): a shell command run at
the start of every hold while the probe is stopped (or not yet started), "{hold}" in it
replaced by the hold's number (1, 2, ...): e.g. the sweep-scan probe's TLB rows
(`experiments/calibration/tlb-batch.py`), taken in the same holds as the long run's rows.
usage: lock-slices.py OUT VARIANT PROBE [HOLD_CMD]"""
import fcntl, os, signal, subprocess, sys, time
SLICE = 840
out, variant, probe = sys.argv[1], sys.argv[2], sys.argv[3]
hold_cmd = sys.argv[4] if len(sys.argv) > 4 else None
holds = 0
log = open(out + '.ctl', 'a')
def say(*a):
    print(time.strftime('%H:%M:%S', time.gmtime()), *a, file=log, flush=True)
lock = open('/work/notes/timing.lock', 'a')
err = open(out + '.stderr', 'w')
proc = None; seen = 0; target = None
def rss():
    try:
        for l in open(f'/proc/{target}/status'):
            if l.startswith(('VmRSS', 'VmHWM')): yield l.split()[1]
    except OSError: pass
def stat():
    try:
        s = open(f'/proc/{target}/stat').read().rsplit(')', 1)[1].split()
        sch = open(f'/proc/{target}/schedstat').read().split()
        return f'utime/stime {s[11]} {s[12]} minflt {s[7]} schedstat {" ".join(sch)}'
    except OSError: return ''
def uptime(): return open('/proc/loadavg').read().split()[0]
while True:
    say('waiting for lock'); fcntl.flock(lock, fcntl.LOCK_EX); say('lock held load', uptime())
    holds += 1
    if hold_cmd:
        rc = subprocess.call(hold_cmd.replace('{hold}', str(holds)), shell=True)
        say('hold command', holds, 'rc', rc, 'load', uptime())
    if proc is None:
        env = dict(os.environ, PROBE_CPU_TIME='1')
        proc = subprocess.Popen(['/usr/bin/time', '-v', 'taskset', '-c', '1', 'nice', '-n', '-15', probe,
                                 'params', '--variant', variant, '--out', out + '.csv'], env=env, stderr=err)
        time.sleep(0.3)
        # raise the autogroup of the probe's session (the probe is the last child)
        for p in [proc.pid] + [int(x) for x in subprocess.run(['pgrep', '-P', str(proc.pid)], capture_output=True, text=True).stdout.split()]:
            try: open(f'/proc/{p}/autogroup', 'w').write('-15')
            except OSError as e: say('autogroup', p, e)
        kids = subprocess.run(['pgrep', '-P', str(proc.pid)], capture_output=True, text=True).stdout.split()
        target = int(kids[0]) if kids else proc.pid
        say('started', proc.pid, 'probe', target)
    else:
        os.kill(target, signal.SIGCONT); say('cont', stat())
    t0 = time.time()
    while time.time() - t0 < SLICE and proc.poll() is None:
        time.sleep(0.2)
        txt = open(out + '.stderr').read().splitlines()
        for l in txt[seen:]:
            if 'ms_per_step' in l:
                say('row', l.strip()[:110], 'rss/hwm KiB', *rss(), stat(), 'load', uptime())
        seen = len(txt)
    if proc.poll() is not None:
        say('done rc', proc.returncode); fcntl.flock(lock, fcntl.LOCK_UN); break
    os.kill(target, signal.SIGSTOP); say('stopped', stat(), 'load', uptime()); fcntl.flock(lock, fcntl.LOCK_UN)
    time.sleep(5)
