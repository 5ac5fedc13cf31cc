# Diagnostics of the train-validate block gap (branch blocks-investigation); see the commit message.
# Usage: tv_trace_parse.py ERR (PROBE_TRACE_GEN stderr); tv_kept_net.py ERR (PROBE_TRACE_KEPT stderr);
# PYTHONPATH=. python tv_trace_sim.py VARIANT; PYTHONPATH=. python tv_kept_sim.py VARIANT train|start
import sys, collections
c = collections.Counter()
for l in open(sys.argv[1]):
    p = l.split()
    if not l.startswith("KEPT ") or p[1] in ("train:", "start:"): continue
    if p[1] == "pre-existing-free": c[(int(p[2]), int(p[3]))] -= 1
    else: c[(int(p[2]), int(p[3]))] += 1
print("net", sum(c.values()), {f"{s}" + (f"/a{a}" if a != 8 else ""): n for (s, a), n in sorted(c.items()) if n})
