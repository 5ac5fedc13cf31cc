"""Walk a live process's glibc main-arena heap (the brk heap) chunk by chunk and write its
live ArcInner<NodeId>-shaped 24-B blocks: 32-B chunks in use (the next chunk's PREV_INUSE
set) holding strong 1-64, weak 1 and a u64 (burn-autodiff's node keys, `Arc<NodeId>`; a
tcache or fastbin chunk's first word is a mangled pointer, so a freed key is not taken).
One line each: "address strong weak id". Run as root while the process is stopped (SIGSTOP;
a moving heap is not walked consistently):

    kill -STOP PID; python3 heapscan.py PID BASE OUT; kill -CONT PID

BASE: the heap's first chunk (the break before the process's first malloc: a malloc-log's
first record, or the [heap] mapping's start). Prints the chunks walked and where the walk
ended (the heap's end when consistent). The keys' layout for the sweep-scan probe:
`experiments/calibration/key-layout.py scanned OUT LAYOUT` (issue 43, session 58)."""
import sys, os, struct
pid, base, out = int(sys.argv[1]), int(sys.argv[2], 0), sys.argv[3]
for line in open(f"/proc/{pid}/maps"):
    if "[heap]" in line:
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
W = 1 << 22
win = [0, b""]
def read(addr, n):
    start, buf = win
    if not (start <= addr and addr + n <= start + len(buf)):
        start = max(lo, addr - addr % W)
        buf = os.pread(fd, min(2 * W, hi - start), start)
        win[0], win[1] = start, buf
    off = addr - start
    return buf[off:off + n]
c = base
found = []
chunks = 0; sizes = {}
while c + 16 <= hi:
    size = struct.unpack("<Q", read(c + 8, 8))[0] & ~7
    if size < 32 or c + size > hi:
        break
    chunks += 1
    if size == 32:
        nxt = struct.unpack("<Q", read(c + size + 8, 8))[0] if c + size + 16 <= hi else 1
        if nxt & 1:
            s, w, i = struct.unpack("<QQQ", read(c + 16, 24))
            if 1 <= s <= 64 and w == 1:
                found.append((c + 16, s, w, i))
    c += size
with open(out, "w") as o:
    for a, s, w, i in found:
        o.write(f"{a} {s} {w} {i}\n")
print(f"heap {lo:#x}-{hi:#x} walked {chunks} chunks to {c:#x} (top at end: {hi - c} B), {len(found)} ArcInner-shaped 24-B blocks", file=sys.stderr)
