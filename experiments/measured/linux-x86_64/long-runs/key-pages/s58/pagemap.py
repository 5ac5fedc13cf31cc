"""Dump PFNs of a process's [heap] pages: pagemap.py PID OUT.npy-like text (vpage pfn)."""
import sys, struct, array
pid = int(sys.argv[1])
for line in open(f"/proc/{pid}/maps"):
    if "[heap]" in line:
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
f = open(f"/proc/{pid}/pagemap", "rb")
f.seek(lo // 4096 * 8)
raw = f.read((hi - lo) // 4096 * 8)
ents = array.array("Q"); ents.frombytes(raw)
pfn = array.array("q", ((e & ((1 << 55) - 1)) if e >> 63 else -1 for e in ents))
with open(sys.argv[2], "wb") as o:
    o.write(struct.pack("qq", lo, len(pfn))); o.write(pfn.tobytes())
pres = [p for p in pfn if p >= 0]
contig = sum(1 for a, b in zip(pfn, pfn[1:]) if a >= 0 and b == a + 1)
desc = sum(1 for a, b in zip(pfn, pfn[1:]) if a >= 0 and b == a - 1)
print(f"heap {lo:#x}-{hi:#x} pages {len(pfn)} present {len(pres)} next-page-contiguous {contig} descending {desc} nonzero {sum(1 for p in pres if p)}")
