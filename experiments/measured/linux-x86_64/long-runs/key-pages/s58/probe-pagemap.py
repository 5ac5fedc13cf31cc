"""Run the sweep-scan order row on LAYOUT at nice 15 and read the probe's pagemap for its key
pages mid-run: physical contiguity of the key pages (as for real burn's heap). Pinned to core 1
at nice 15 (untimed). With POP=1 in the environment the row runs with SWEEP_ORDER_POPULATE (every
page of the region written first, in address order).

    [POP=1] python3 probe-pagemap.py LAYOUT PAGES"""
import subprocess, sys, time, os, array, struct
layout, pages = sys.argv[1], sys.argv[2]
offs = [int(x) for x in open(layout).read().split()]
env = dict(os.environ, SWEEP_ORDER_HASHMAP="1", SWEEP_ORDER_LOCATOR_PASSES="1", **({"SWEEP_ORDER_POPULATE": "1"} if os.environ.get("POP") else {}))
p = subprocess.Popen(["taskset", "-c", "1", "nice", "-n", "15", "/tmp/s58long/sweep-scan", "order", layout, "0.9375", pages],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
best = None
for _ in range(600):
    time.sleep(0.05)
    try:
        maps = open(f"/proc/{p.pid}/maps").read().splitlines()
    except FileNotFoundError:
        break
    big = []
    for l in maps:
        a, b = (int(x, 16) for x in l.split()[0].split("-"))
        if b - a > 1 << 30 and l.split()[1].startswith("rw"):
            big.append((a, b))
    if big:
        a, b = big[0]
        f = open(f"/proc/{p.pid}/pagemap", "rb")
        base = (a + (1 << 21) - 1) // (1 << 21) * (1 << 21)
        lo = min(offs)
        # which pages are present: read pagemap over the key pages
        keyp = sorted({(o - lo) // 4096 for o in offs})
        pfn = {}
        for vp in keyp:
            f.seek((base // 4096 + vp) * 8)
            e = struct.unpack("Q", f.read(8))[0]
            if e >> 63:
                pfn[vp] = e & ((1 << 55) - 1)
        if best is None or len(pfn) > len(best):
            best = pfn
        if len(pfn) >= 0.9 * len(keyp):
            break
p.wait()
pfn = best or {}
ps = sorted(pfn)
adj = [(a, b) for a, b in zip(ps, ps[1:]) if b == a + 1]
nxt = sum(1 for a, b in adj if pfn[b] == pfn[a] + 1)
prv = sum(1 for a, b in adj if pfn[b] == pfn[a] - 1)
groups = {v >> 2 for v in ps}
cg = sum(1 for g in groups if all(g * 4 + i in pfn and pfn[g * 4 + i] == pfn[g * 4] + i for i in range(4)) and pfn[g * 4] % 4 == 0)
print(f"probe key pages present {len(pfn)}, adjacent pairs {len(adj)}, physically next {nxt}, previous {prv}, aligned contiguous 16K groups {cg} of {len(groups)}")
