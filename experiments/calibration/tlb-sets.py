#!/usr/bin/env python3
"""The sweep-scan probe's `order` rows against a set-occupancy reading of the random-order
curve (issue 43, an analysis, not the model): the chain's key pages fall into the data TLB's
sets by virtual page number (set = page mod SETS, 3,072 entries / 8 ways = 384 on the AMD
EPYC), each set missing as the batch's `tlbr` curve misses at that set's pages over its ways
(the curve's pages spread evenly over the sets), the table's pages spread evenly:

    .venv/bin/python experiments/calibration/tlb-sets.py BATCH_DIR LAYOUT [SETS]

BATCH_DIR: one batch (tlb.csv, tlb.stderr, tlbr/, order/); LAYOUT: the order rows' layout
(sweep-order-layout.py). Prints pages, frac, the measured miss fraction, the set-occupancy
one and the evenly spread one (the model's). Nothing is fitted.
"""
import sys, csv, statistics, collections
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from sim.analysis.tlb import read_tlb_dir, read_tlbr_dir, _table_bytes
from sim.platform.l2_cache import TlbMissCurve
d = sys.argv[1]; layout = sys.argv[2]; sets = int(sys.argv[3]) if len(sys.argv) > 3 else 384
tlb = read_tlb_dir(d); c = read_tlbr_dir(d + '/tlbr', 3072, tlb['ns'])
curve = TlbMissCurve(c['reads'], c['reach'], c['miss'])
ways = 3072 // sets
xs = [int(l) for l in open(layout)]
lo = min(xs)
rows = collections.defaultdict(dict)
import glob
acc = collections.defaultdict(list)
for f in glob.glob(d + '/order/*.csv'):
    for r in csv.DictReader(open(f)):
        if r['pattern'] == 'pattern': continue
        acc[(int(r['pages']), float(r['frac']), r['pattern'])].append(float(r['ns']))
def chain(P):
    seen = set()
    for i, o in enumerate(xs):
        seen.add((o - lo) // 4096)
        if len(seen) >= P: return xs[:i+1]
    return xs
print("pages,frac,measured,setmodel,evenmodel")
for (P, frac, pat), v in sorted(acc.items()):
    if pat != 'order4k': continue
    m = (statistics.fmean(v) - statistics.fmean(acc[(P, frac, 'orderln')])) / tlb['ns']
    keys = chain(P); n = len(keys)
    cnt = collections.Counter((o - lo) // 4096 for o in keys)
    k = max(1, round(frac * n))
    f = k / n
    q = collections.defaultdict(float); reads = collections.defaultdict(float)
    for page, cp in cnt.items():
        s = page % sets
        q[s] += 1 - (1 - f) ** cp
        reads[s] += f * cp
    tab = (k / n) * _table_bytes(n) / 4096
    touched = sum(q.values())
    R = k / touched
    for s in range(sets): q[s] += tab / sets
    miss = sum(reads[s] * curve(q[s] / ways, R) for s in reads) / sum(reads.values())
    even = curve((touched + tab) / 3072, R)
    print(f"{P},{frac},{m:.3f},{miss:.3f},{even:.3f}")
