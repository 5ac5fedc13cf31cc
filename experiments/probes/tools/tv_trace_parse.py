# Diagnostics of the train-validate block gap (branch blocks-investigation); see the commit message.
# Usage: tv_trace_parse.py ERR (PROBE_TRACE_GEN stderr); tv_kept_net.py ERR (PROBE_TRACE_KEPT stderr);
# PYTHONPATH=. python tv_trace_sim.py VARIANT; PYTHONPATH=. python tv_kept_sim.py VARIANT train|start
import sys, collections
lines = [l.split() for l in open(sys.argv[1]) if l.startswith("TRACE")]
events = []  # (seg, kind, size, align, ptr, old_size, old_ptr)
seg = None; segs = []
for l in lines:
    if l[1] == "mark":
        seg = " ".join(l[2:]); segs.append(seg); continue
    kind, size, align, ptr, osz, optr = l[1], int(l[2]), int(l[3]), l[4], int(l[5]), l[6]
    events.append((seg, kind, size, align, ptr, osz, optr))
# segment boundaries: the "sample-forward" sample ends at "sample-ops"
def sample_of(s):
    return 0 if s in ("sample-forward","after hidden","after relu","after output","after sum","after into_scalar") else 1
# live at end of each sample: process events per sample window
for sample in (0, 1):
    live = {}
    pre = []
    segev = collections.defaultdict(list)
    for i, (s, k, sz, al, p, osz, op) in enumerate(events):
        if sample_of(s) != sample: continue
        if k == "Alloc":
            live[p] = (s, sz, al)
            segev[s].append(f"+{sz}" + (f"/a{al}" if al != 8 else ""))
        elif k == "Free":
            segev[s].append(f"-{sz}" + (f"/a{al}" if al != 8 else ""))
            if p in live: del live[p]
            else: pre.append((s, sz))
        else:
            segev[s].append(f"R{osz}->{sz}")
            if op in live: del live[op]
            else: pre.append((s, osz))
            live[p] = (s, sz, al)
    print(f"===== sample {'forward (Mlp::forward)' if sample==0 else 'op by op'}")
    order = [x for x in segs if sample_of(x)==sample]
    # events are recorded BEFORE the mark of the next segment name: the mark names the op that just ended
    # our marks are placed after the op, so events between mark[j-1] and mark[j] belong to op mark[j]
    tot_n = tot_b = 0
    keptby = collections.defaultdict(list)
    for p, (s, sz, al) in live.items():
        keptby[s].append((sz, al))
    for j, s in enumerate(order):
        # label for events recorded after mark s = the next mark's name
        label = order[j+1] if j+1 < len(order) else "(after last mark)"
        kb = sorted(keptby.get(s, []))
        n = len(kb); b = sum(x for x, _ in kb); tot_n += n; tot_b += b
        print(f"{label:18s} kept {n:2d} blk {b:5d} B: {[f'{x}' + (f'/a{a}' if a!=8 else '') for x,a in kb]}")
        print(f"{'':18s} events {' '.join(segev.get(s, []))}")
    print(f"TOTAL kept {tot_n} blocks {tot_b} B; pre-existing frees {pre}")
