#!/usr/bin/env python3
"""Run one long probe on core 1 in slices of the timing lock (<= SLICE s each): the probe
runs only while this holds /work/notes/timing.lock and is SIGSTOPped between holds (its
CPU clock stops too). Polls the probe's stderr; at each new row records VmRSS."""
import fcntl, os, signal, subprocess, sys, time
SLICE = 840
out, variant = sys.argv[1], sys.argv[2]
probe = '/work/wt43/experiments/probes/target/release/burn-probes'
log = open(out + '.ctl', 'a')
def say(*a):
    print(time.strftime('%H:%M:%S', time.gmtime()), *a, file=log, flush=True)
lock = open('/work/notes/timing.lock', 'a')
err = open(out + '.stderr', 'w')
proc = None; seen = 0
def rss():
    try:
        for l in open(f'/proc/{proc.pid}/status'):
            if l.startswith(('VmRSS', 'VmHWM')): yield l.split()[1]
    except OSError: pass
while True:
    say('waiting for lock'); fcntl.flock(lock, fcntl.LOCK_EX); say('lock held')
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
        os.kill(target, signal.SIGCONT); say('cont')
    t0 = time.time()
    while time.time() - t0 < SLICE and proc.poll() is None:
        time.sleep(0.2)
        txt = open(out + '.stderr').read().splitlines()
        for l in txt[seen:]:
            if 'ms_per_step' in l:
                say('row', l.strip()[:110], 'rss/hwm KiB', *rss(), 'cpu', open(f'/proc/{target}/stat').read().split()[13:15] if os.path.exists(f'/proc/{target}/stat') else '')
        seen = len(txt)
    if proc.poll() is not None:
        say('done rc', proc.returncode); fcntl.flock(lock, fcntl.LOCK_UN); break
    os.kill(target, signal.SIGSTOP); say('stopped'); fcntl.flock(lock, fcntl.LOCK_UN)
    time.sleep(5)
