import sys, time, os
pid, errf, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
seen = 0
with open(out, 'a') as o:
    while os.path.exists(f'/proc/{pid}'):
        txt = open(errf).read().splitlines()
        for l in txt[seen:]:
            if 'ms_per_step' in l:
                st = {k: v for k, v in (x.split(':', 1) for x in open(f'/proc/{pid}/status') if ':' in x)}
                print(time.strftime('%H:%M:%S', time.gmtime()), l.split('|')[2].strip(), 'VmRSS', st['VmRSS'].strip(), 'VmHWM', st['VmHWM'].strip(), 'RssAnon', st['RssAnon'].strip(), file=o, flush=True)
        seen = len(txt)
        time.sleep(0.1)
