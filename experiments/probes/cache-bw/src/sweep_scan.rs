//! The orphan sweep's reads against the cache hierarchy, on structures shaped as burn-autodiff
//! 0.22.1's (no burn dependency: the shapes are written out).
//!
//! `cleanup_orphaned_entries` (runtime/graph.rs) clones the locator's
//! `BTreeMap<NodeId, Arc<Graph>>`, then for every entry try-locks the entry's graph and
//! calls `maybe_useful` (runtime/memory_management.rs): `nodes.keys().any(|node|
//! Arc::strong_count(node) > 1)` over the graph's `nodes: HashMap<Arc<NodeId>,
//! Vec<NodeId>>`. Patterns (one CSV row per size):
//!
//! * `scan`: `maybe_useful` over a `nodes` table of `n` keys none of which has a second
//!   handle (every key read): ns per key read. Each key's `Arc` (24 B, a 32-B glibc
//!   chunk) is followed by its one-parent `Vec` (8 B, a 32-B chunk), so every key sits on a
//!   64-B line of its own, as in burn where a node's other blocks separate its keys; the
//!   table is walked in hash order, so the lines are read in random order, each read
//!   independent of the previous one (the loads overlap).
//! * `chase`: a dependent pointer chase through `n` 64-B lines in one random cycle: ns per
//!   hop, the load-to-use latency of the level the lines sit in.
//! * `copy`: the sweep's clone of a locator of `n` entries (`BTreeMap<u64, Arc<Mutex>>`, all
//!   pointing at one graph, as the EMA chain's entries do) and its drop: ns per entry.
//! * `visit`: the sweep's loop over a cloned locator of `n` entries: try_lock the entry's
//!   graph and call `maybe_useful` on a one-key table that has a live handle: ns per entry.
//! * `call`: the whole sweep over a locator of `n` entries (lock the global state, clone
//!   its map, release the lock, visit every entry, drop the clone): ns per call. At n = 1,
//!   less `copy` and `visit` per entry, the sweep's fixed cost per call.
//! * `pages4k`, `pages2m` (command line `tlb N,...`): `maybe_useful`'s reads with every key
//!   on a 4-KiB page of its own, as the keys of a long chain spread over a heap that grew
//!   between them: a table of `n` 32-B slots (hashbrown's bucket of `(Arc<NodeId>,
//!   Vec<NodeId>)`) in random order, each slot's pointer to a strong count on its own page
//!   (at a random line of that page, so that the keys spread over the caches' sets as a
//!   heap's do). The same lines, the same table, the same order in both: `pages4k` maps
//!   the region with 4-KiB pages (`MADV_NOHUGEPAGE`, as glibc's heap is), `pages2m` with
//!   2-MiB pages (`MADV_HUGEPAGE`: 512 keys share a TLB entry). Their difference is what the
//!   data TLB adds per read once the keys' pages outgrow its reach, where the guest's
//!   huge pages are backed by huge pages. `lines4k`: the same table over `n` keys packed
//!   one to a 64-B line (64 to a page, in the same random order): the same lines read
//!   from `n / 64` pages, the control without TLB misses. ns per key read.
//! * `spread4k` (command line `tlbr R FILL P,...`): keys `R` to a 4-KiB page on `P` pages
//!   that fill a share `FILL` of the range they span, at random, read in one random order
//!   every pass (each page `R` times a pass): a long chain's keys in glibc's heap; with its
//!   `lines4k` control (the same keys packed 64 to a page). ns per key read.
//!
//! * `order4k` (command line `order LAYOUT FRACS P,...`): the orphan sweep's own reads of one
//!   long chain, in its order and at its spacing. LAYOUT holds the address of every key of
//!   the EMA graph in the order the nodes were made, less the first's, one a line (the
//!   simulated glibc arena's, `experiments/calibration/sweep-order-layout.py`); the graph at
//!   `P` pages is the shortest run of its first keys that lies on `P` pages (the chain at
//!   that step). The keys go at those offsets of a `MADV_NOHUGEPAGE` region; a hashbrown
//!   `nodes` table of the same bucket count (32-B slots below 16-B groups of control bytes,
//!   each key in a random bucket: RandomState's order) points at them; the locator is a
//!   `BTreeMap<NodeId, Arc<Graph>>` of one entry per node, all pointing at the graph. One
//!   key is live (a second handle), at a share `f` of the hash order for each `f` of FRACS:
//!   a sweep clones the locator and, for each entry, try-locks the graph and walks the
//!   table's groups (each group's control bytes to a bitmask of full buckets, its set bits in
//!   order, as hashbrown's RawIter; `SWEEP_ORDER_BYTES` set: a branch per control byte) and
//!   slots up to the live key, reading each key's count (`maybe_useful`).
//!   `SWEEP_ORDER_HASHMAP` set: burn's own table and scan instead, std's `HashMap<Arc<NodeId>,
//!   Vec<NodeId>>` (hashbrown) whose keys' `ArcInner`s sit at the layout's addresses, scanned
//!   by `nodes.keys().any(|node| Arc::strong_count(node) > 1)` (`order_hashmap`); with it,
//!   `SWEEP_ORDER_LOCATOR_PASSES` (a locator of one entry per pass of a trial, a real
//!   sweep's share of the clone: `time_sweep`), `SWEEP_ORDER_POPULATE` (one region for the
//!   run, every page written: `populated`) and `SWEEP_ORDER_SHIFT=K` (the keys K pages past
//!   the region's 2-MiB-aligned start).
//!   ns per key read over the passes of a trial (a sweep's first entries; the same prefix
//!   every pass, as within one real sweep); the row also gives the keys read (`prefix`),
//!   the pages those keys lie on (`touched`) and the table's pages the walk reads
//!   (`table_pages`). `orderln`: the same (the same keys, table, order, passes) with the
//!   keys packed 64 to a page in their creation order (the control without TLB misses).
//!
//! Each value is the minimum over 11 trials of the mean over repeated passes (~2^20 items a
//! trial), timed with the thread's CPU clock: on a machine shared with other jobs the wall
//! clock counts the time spent waiting for a CPU, and a trial whose caches another process
//! cooled is slower, never faster. Sizes: `n` from 64 to 4M keys
//! (command line: comma-separated key counts). Output CSV: `pattern,n,ns`.
use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::sync::{Arc, Mutex};

type NodeId = u64;

/// xorshift64*: a fixed-seed permutation source (no dependency)
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

unsafe extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

/// CPU ns the calling thread has run (`CLOCK_THREAD_CPUTIME_ID`, Linux).
fn cpu_ns() -> f64 {
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { clock_gettime(3, &mut ts) };
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

struct Clock(f64);

impl Clock {
    fn now() -> Self {
        Clock(cpu_ns())
    }
    fn per(&self, items: usize) -> f64 {
        (cpu_ns() - self.0) / items as f64
    }
}

fn min_trial<F: FnMut() -> f64>(mut trial: F) -> f64 {
    (0..11).map(|_| trial()).fold(f64::INFINITY, f64::min)
}

/// Passes so that a trial reads ~2^20 items, at least 1.
fn passes(n: usize) -> usize {
    ((1usize << 20) / n).max(1)
}

fn scan(n: usize) -> f64 {
    let mut nodes: HashMap<Arc<NodeId>, Vec<NodeId>> = HashMap::new();
    for id in 0..n as NodeId {
        let key = Arc::new(id);
        let parents = vec![id.wrapping_sub(1)];
        nodes.insert(key, parents);
    }
    let reps = passes(n);
    let useful = |nodes: &HashMap<Arc<NodeId>, Vec<NodeId>>| {
        nodes.keys().any(|node| Arc::strong_count(node) > 1)
    };
    for _ in 0..2 {
        black_box(useful(black_box(&nodes)));
    }
    min_trial(|| {
        let t = Clock::now();
        for _ in 0..reps {
            black_box(useful(black_box(&nodes)));
        }
        t.per(reps * n)
    })
}

#[repr(align(64))]
struct Line {
    next: usize,
    _pad: [u8; 56],
}

fn chase(n: usize) -> f64 {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in (1..n).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let mut lines: Vec<Line> = (0..n).map(|_| Line { next: 0, _pad: [0; 56] }).collect();
    for i in 0..n {
        lines[order[i]].next = order[(i + 1) % n];
    }
    let hops = passes(n) * n;
    let mut at = order[0];
    for _ in 0..n {
        at = lines[at].next;
    }
    min_trial(|| {
        let t = Clock::now();
        for _ in 0..hops {
            at = black_box(&lines[at]).next;
        }
        t.per(hops)
    })
}

struct Graph {
    state: Mutex<HashMap<Arc<NodeId>, Vec<NodeId>>>,
}

fn locator(n: usize) -> (BTreeMap<NodeId, Arc<Graph>>, Arc<NodeId>) {
    let live = Arc::new(0);
    let mut nodes = HashMap::new();
    nodes.insert(live.clone(), Vec::new());
    let graph = Arc::new(Graph { state: Mutex::new(nodes) });
    let map = (0..n as NodeId).map(|id| (id, graph.clone())).collect();
    (map, live)
}

fn copy(n: usize) -> f64 {
    let (map, _live) = locator(n);
    let reps = passes(n);
    min_trial(|| {
        let t = Clock::now();
        for _ in 0..reps {
            drop(black_box(black_box(&map).clone()));
        }
        t.per(reps * n)
    })
}

fn visit(n: usize) -> f64 {
    let (map, _live) = locator(n);
    let reps = passes(n);
    min_trial(|| {
        let t = Clock::now();
        for _ in 0..reps {
            for graph in black_box(&map).values() {
                let Ok(guard) = graph.state.try_lock() else { continue };
                black_box(guard.keys().any(|node| Arc::strong_count(node) > 1));
            }
        }
        t.per(reps * n)
    })
}

fn call(n: usize) -> f64 {
    let (map, _live) = locator(n);
    let state = Mutex::new(map);
    let reps = passes(n);
    min_trial(|| {
        let t = Clock::now();
        for _ in 0..reps {
            let graphs = black_box(&state).lock().unwrap().clone();
            let mut should_remove: Vec<NodeId> = Vec::new();
            for graph in graphs.values() {
                let Ok(guard) = graph.state.try_lock() else { continue };
                if !guard.keys().any(|node| Arc::strong_count(node) > 1) {
                    should_remove.push(0);
                }
            }
            black_box(&should_remove);
        }
        t.per(reps)
    })
}

unsafe extern "C" {
    fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut u8;
    fn munmap(addr: *mut u8, len: usize) -> i32;
    fn madvise(addr: *mut u8, len: usize, advice: i32) -> i32;
}

const PAGE: usize = 4096;
const HUGE: usize = 2 << 20;

/// `maybe_useful`'s scan over `slots` (each the address of a key's count) in one random
/// order (shuffled with `rng`), every pass the same: ns per key read, the least of the
/// trials after two warm-up passes.
fn time_useful(slots: &mut [[usize; 4]], rng: &mut Rng) -> f64 {
    let n = slots.len();
    for i in (1..n).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        slots.swap(i, j);
    }
    let useful = |slots: &[[usize; 4]]| {
        slots.iter().any(|slot| unsafe { (slot[0] as *const usize).read() } > 1)
    };
    let reps = passes(n);
    for _ in 0..2 {
        black_box(useful(black_box(slots)));
    }
    min_trial(|| {
        let t = Clock::now();
        for _ in 0..reps {
            black_box(useful(black_box(slots)));
        }
        t.per(reps * n)
    })
}

/// `maybe_useful`'s reads over `n` keys `per_page` to a 4-KiB page (one to a line), the
/// region mapped with 4-KiB (`huge` false) or 2-MiB pages: ns per key read.
fn pages(n: usize, per_page: usize, huge: bool) -> f64 {
    let len = (n.div_ceil(per_page) * PAGE).div_ceil(HUGE) * HUGE + HUGE;
    // PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS
    let raw = unsafe { mmap(std::ptr::null_mut(), len, 3, 0x22, -1, 0) };
    assert!(raw as isize != -1, "mmap failed");
    let base = ((raw as usize).div_ceil(HUGE) * HUGE) as *mut u8;
    // MADV_HUGEPAGE = 14, MADV_NOHUGEPAGE = 15, before the first touch
    unsafe { madvise(base, len - HUGE, if huge { 14 } else { 15 }) };
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut slots: Vec<[usize; 4]> = (0..n)
        .map(|i| {
            let (page, line) = if per_page == 1 {
                (i, (rng.next() % 64) as usize)
            } else {
                (i / per_page, i % per_page * (64 / per_page))
            };
            let count = unsafe { base.add(page * PAGE + line * 64) } as *mut usize;
            unsafe { count.write(1) };
            [count as usize, 0, 0, 0]
        })
        .collect();
    let ns = time_useful(&mut slots, &mut rng);
    if huge {
        eprintln!("pages2m n={n}: AnonHugePages {} KiB of {} KiB mapped", anon_huge_kib(), len / 1024);
    }
    unsafe { munmap(raw, len) };
    ns
}

/// `maybe_useful`'s reads over keys `per_page` to a 4-KiB page on `npages` pages that fill a
/// share `fill` of the range they span, at random (1: consecutive pages), the region
/// `MADV_NOHUGEPAGE`: the layout of a long chain's keys in glibc's heap (~10 keys to a page
/// with other blocks between them, the pages among other pages). The keys are read in one
/// random order every pass, so each page is read `per_page` times a pass at random places:
/// ns per key read. `lines` true: the same keys packed 64 to a page (the control).
fn spread(npages: usize, per_page: usize, fill: f64, lines: bool) -> f64 {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ npages as u64);
    let span = if fill >= 1.0 { npages } else { (npages as f64 / fill).ceil() as usize };
    // which pages of the span hold keys: a random subset of npages (sorted)
    let mut chosen: Vec<usize> = (0..span).collect();
    for i in (1..span).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        chosen.swap(i, j);
    }
    chosen.truncate(npages);
    chosen.sort_unstable();
    let n = npages * per_page;
    let used = if lines { n.div_ceil(64) } else { span };
    let len = (used * PAGE).div_ceil(HUGE) * HUGE + HUGE;
    let raw = unsafe { mmap(std::ptr::null_mut(), len, 3, 0x22, -1, 0) };
    assert!(raw as isize != -1, "mmap failed");
    let base = ((raw as usize).div_ceil(HUGE) * HUGE) as *mut u8;
    unsafe { madvise(base, len - HUGE, 15) };
    // each page's keys on distinct lines, from a random line of the page on (a heap's
    // blocks fall at any offset: with the same lines on every page the keys would share a
    // few cache sets)
    let step = (64 / per_page).max(1);
    let rot: Vec<usize> = (0..npages).map(|_| (rng.next() % 64) as usize).collect();
    let mut slots: Vec<[usize; 4]> = (0..n)
        .map(|i| {
            let (page, line) = if lines {
                (i / 64, i % 64)
            } else {
                (chosen[i / per_page], (rot[i / per_page] + (i % per_page) * step) % 64)
            };
            let count = unsafe { base.add(page * PAGE + line * 64) } as *mut usize;
            unsafe { count.write(1) };
            [count as usize, 0, 0, 0]
        })
        .collect();
    let ns = time_useful(&mut slots, &mut rng);
    if !lines && std::env::var("SWEEP_PAGEMAP").is_ok() {
        let key_pages: Vec<usize> = chosen.iter().map(|&p| base as usize + p * PAGE).collect();
        eprintln!("pagemap spread4k pages {npages} per_page {per_page} fill {fill}: {}", contiguity(&key_pages));
    }
    unsafe { munmap(raw, len) };
    ns
}

/// Where the kernel put `pages` (virtual addresses of 4-KiB pages, ascending) in physical
/// memory (`/proc/self/pagemap`, needs CAP_SYS_ADMIN for the frame numbers): the share of
/// them in a 16-KiB and in a 32-KiB aligned group of pages that are all present, in the set
/// and physically contiguous as they are virtually (what a TLB that coalesces 4 or 8 4-KiB
/// entries could merge), and the share whose next virtual page is the next frame. The
/// guest's frames on a KVM guest: the host's placement is not visible.
fn contiguity(pages: &[usize]) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open("/proc/self/pagemap") else { return "no pagemap".into() };
    let mut frame = |va: usize| -> Option<u64> {
        let mut b = [0u8; 8];
        f.seek(SeekFrom::Start((va / PAGE * 8) as u64)).ok()?;
        f.read_exact(&mut b).ok()?;
        let e = u64::from_le_bytes(b);
        (e >> 63 == 1 && e & ((1 << 55) - 1) != 0).then_some(e & ((1 << 55) - 1))
    };
    let set: std::collections::HashSet<usize> = pages.iter().copied().collect();
    let frames: std::collections::HashMap<usize, Option<u64>> = pages.iter().map(|&va| (va, frame(va))).collect();
    let group = |va: usize, k: usize| -> bool {
        let first = va / (k * PAGE) * (k * PAGE);
        let Some(Some(f0)) = frames.get(&first) else { return false };
        (0..k).all(|i| {
            let v = first + i * PAGE;
            set.contains(&v) && frames.get(&v) == Some(&Some(f0 + i as u64))
        })
    };
    let n = pages.len().max(1) as f64;
    let known = frames.values().filter(|f| f.is_some()).count();
    if known == 0 {
        return "no frame numbers (not root?)".into();
    }
    let g4 = pages.iter().filter(|&&va| group(va, 4)).count() as f64 / n;
    let g8 = pages.iter().filter(|&&va| group(va, 8)).count() as f64 / n;
    let next = pages.iter().filter(|&&va| match (frames.get(&va), frames.get(&(va + PAGE))) {
        (Some(Some(a)), Some(Some(b))) => *b == a + 1,
        _ => false,
    }).count() as f64 / n;
    format!("frames {known}/{} contiguous-16k {g4:.3} contiguous-32k {g8:.3} next-frame {next:.3}", pages.len())
}

/// The sweep's reads of one chain (`order4k` / `orderln` rows): the keys at `offsets` (B from
/// the first, the chain's creation order; `packed`: 64 to a page in that order instead), a
/// `nodes` table of hashbrown's shape over them, one live key at a share `frac` of the hash
/// order, and the locator's entries: (ns per key read, keys read a pass, pages they lie on,
/// table pages read a pass).
fn order(offsets: &[i64], frac: f64, packed: bool, seed: u64) -> (f64, usize, usize, usize) {
    let n = offsets.len();
    let lo = *offsets.iter().min().unwrap();
    let at: Vec<usize> = if packed {
        (0..n).map(|i| i * 64).collect()
    } else {
        offsets.iter().map(|&o| (o - lo) as usize).collect()
    };
    if std::env::var("SWEEP_ORDER_HASHMAP").is_ok() {
        return order_hashmap(&at, ((frac * n as f64).ceil() as usize).clamp(1, n) - 1);
    }
    let span = at.iter().max().unwrap() + 64;
    let len = span.div_ceil(HUGE) * HUGE + HUGE;
    let raw = unsafe { mmap(std::ptr::null_mut(), len, 3, 0x22, -1, 0) };
    assert!(raw as isize != -1, "mmap failed");
    let base = ((raw as usize).div_ceil(HUGE) * HUGE) as *mut u8;
    unsafe { madvise(base, len - HUGE, 15) };
    for &a in &at {
        unsafe { (base.add(a) as *mut usize).write(1) };
    }
    // hashbrown: power-of-two buckets at most 7/8 full, 32-B slots stored downwards from the
    // control bytes (bucket i's slot ends where the control bytes start, less 32 i)
    let mut buckets = 4usize;
    while n > buckets * 7 / 8 {
        buckets *= 2;
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
    let mut place: Vec<usize> = (0..buckets).collect();
    for i in (1..buckets).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        place.swap(i, j);
    }
    let mut table = vec![0u8; buckets * 32 + buckets + 16];
    let ctrl_at = buckets * 32;
    let mut by_bucket = vec![usize::MAX; buckets];
    for (key, &b) in place[..n].iter().enumerate() {
        by_bucket[b] = key;
        table[ctrl_at + b] = 1;
        let slot = ctrl_at - (b + 1) * 32;
        table[slot..slot + 8].copy_from_slice(&(base as usize + at[key]).to_ne_bytes());
    }
    // the live key: the one at share `frac` of the hash (bucket) order
    let order_keys: Vec<usize> = by_bucket.iter().copied().filter(|&k| k != usize::MAX).collect();
    let live_pos = ((frac * n as f64).ceil() as usize).clamp(1, n) - 1;
    let live = order_keys[live_pos];
    unsafe { (base.add(at[live]) as *mut usize).write(2) };
    let prefix = live_pos + 1;
    let touched = {
        let mut pages: Vec<usize> = order_keys[..prefix].iter().map(|&k| at[k] / PAGE).collect();
        pages.sort_unstable();
        pages.dedup();
        pages.len()
    };
    let last_bucket = place[live];
    let table_pages = {
        let hi = table.as_ptr() as usize + ctrl_at;
        let lo_slot = hi - (last_bucket + 1) * 32;
        let ctrl_end = hi + last_bucket + 16;
        (hi.div_ceil(PAGE) - lo_slot / PAGE) + (ctrl_end.div_ceil(PAGE) - hi / PAGE)
    };
    let table = &table[..];
    // maybe_useful: the table's groups in order, each full slot's key dereferenced, up to
    // the first key with a second handle
    // hashbrown's RawIter: a group's 16 control bytes to a bitmask of its full buckets (one
    // SSE2 movemask), then the set bits in order (no branch per empty bucket); with
    // SWEEP_ORDER_BYTES set, a branch on every control byte instead (session 56's first
    // batches)
    let bytes = std::env::var("SWEEP_ORDER_BYTES").is_ok();
    let read = |i: usize| -> bool {
        let slot = ctrl_at - (i + 1) * 32;
        let ptr = usize::from_ne_bytes(table[slot..slot + 8].try_into().unwrap());
        (unsafe { (ptr as *const usize).read_volatile() }) > 1
    };
    let useful = || -> bool {
        let ctrl = &table[ctrl_at..];
        let mut group = 0;
        while group < buckets {
            if bytes {
                for i in group..group + 16 {
                    if ctrl[i] != 0 && read(i) {
                        return true;
                    }
                }
            } else {
                let mut mask = 0u32;
                for (j, &c) in ctrl[group..group + 16].iter().enumerate() {
                    mask |= ((c != 0) as u32) << j;
                }
                while mask != 0 {
                    if read(group + mask.trailing_zeros() as usize) {
                        return true;
                    }
                    mask &= mask - 1;
                }
            }
            group += 16;
        }
        false
    };
    let ns = time_sweep(n, prefix, useful);
    unsafe { munmap(raw, len) };
    (ns, prefix, touched, table_pages)
}

/// The sweep over a locator of `n` entries, all pointing at one graph, each pass calling
/// `useful` (a `maybe_useful` that reads `prefix` keys): ns per key read, the least of 7
/// trials of ~2^20 key reads (at least 8 passes, at most `n`). Each trial clones the whole
/// locator, as the sweep does once per call: `n` entries for the trial's passes, so the
/// clone (~14 ns an entry, the `copy` rows) adds ~14 n / 2^20 ns to each key read, where a
/// real sweep, one pass per entry, adds ~14 / prefix. With `SWEEP_ORDER_LOCATOR_PASSES` set
/// the locator holds one entry per pass of a trial instead (a real sweep's share).
fn time_sweep<F: Fn() -> bool>(n: usize, prefix: usize, useful: F) -> f64 {
    struct Graph {
        state: Mutex<()>,
    }
    // passes a trial: ~2^20 key reads, at least 8, at most the locator's entries
    let per_trial = ((1usize << 20) / prefix).clamp(8, n.max(8));
    let entries = if std::env::var("SWEEP_ORDER_LOCATOR_PASSES").is_ok() { per_trial.min(n) } else { n };
    let graph = Arc::new(Graph { state: Mutex::new(()) });
    let locator: BTreeMap<NodeId, Arc<Graph>> =
        (0..entries as NodeId).map(|id| (id, graph.clone())).collect();
    let sweep = |passes: usize| {
        let graphs = black_box(&locator).clone();
        let mut kept = 0usize;
        for graph in graphs.values().take(passes) {
            let Ok(guard) = graph.state.try_lock() else { continue };
            if black_box(useful()) {
                kept += 1;
            }
            drop(guard);
        }
        black_box(kept);
    };
    sweep(2.min(n));
    (0..7)
        .map(|_| {
            let t = Clock::now();
            sweep(per_trial);
            t.per(per_trial.min(n) * prefix)
        })
        .fold(f64::INFINITY, f64::min)
}

/// `order` with `SWEEP_ORDER_HASHMAP` set: burn's own table and scan instead of the
/// hand-built one. The keys are `Arc<NodeId>`s whose `ArcInner` (strong, weak, id: 24 B)
/// sits at `at` (B from a fresh `MADV_NOHUGEPAGE` region, as in `order`), in std's
/// `HashMap<Arc<NodeId>, Vec<NodeId>>` (hashbrown, RandomState: a random bucket order; the
/// buckets a table grown by inserts has), scanned by `nodes.keys().any(|node|
/// Arc::strong_count(node) > 1)` as `maybe_useful` does; the key at place `live_pos` of the
/// map's order holds a second count. The same locator and trials (`time_sweep`). The keys
/// are not the allocator's: they are forgotten, never dropped.
fn order_hashmap(at: &[usize], live_pos: usize) -> (f64, usize, usize, usize) {
    let n = at.len();
    let span = at.iter().max().unwrap() + 64;
    let populate = std::env::var("SWEEP_ORDER_POPULATE").is_ok();
    let (raw, len, base) = if populate {
        populated(span)
    } else {
        // a huge page more than the span needs, for SWEEP_ORDER_SHIFT
        let len = span.div_ceil(HUGE) * HUGE + 2 * HUGE;
        let raw = unsafe { mmap(std::ptr::null_mut(), len, 3, 0x22, -1, 0) };
        assert!(raw as isize != -1, "mmap failed");
        let base = ((raw as usize).div_ceil(HUGE) * HUGE) as *mut u8;
        unsafe { madvise(base, len - HUGE, 15) };
        // SWEEP_ORDER_SHIFT=K: the keys K pages past the region's 2-MiB-aligned start (real
        // burn's heap starts anywhere)
        let shift = std::env::var("SWEEP_ORDER_SHIFT").ok().map_or(0, |v| v.parse::<usize>().expect("SWEEP_ORDER_SHIFT: pages"));
        assert!(shift * PAGE < HUGE, "SWEEP_ORDER_SHIFT: under 512 pages");
        (raw, len, unsafe { base.add(shift * PAGE) })
    };
    let mut nodes: HashMap<Arc<NodeId>, Vec<NodeId>> = HashMap::new();
    for (id, &a) in at.iter().enumerate() {
        assert!(a % 8 == 0, "a key's ArcInner must be 8-B aligned");
        let inner = unsafe { base.add(a) } as *mut usize;
        unsafe {
            inner.write(1);
            inner.add(1).write(1);
            inner.add(2).write(id);
        }
        nodes.insert(unsafe { Arc::from_raw(inner.add(2) as *const NodeId) }, Vec::new());
    }
    let keys: Vec<*const NodeId> = nodes.keys().map(Arc::as_ptr).collect();
    unsafe { Arc::increment_strong_count(keys[live_pos]) };
    let prefix = live_pos + 1;
    let touched = {
        let mut pages: Vec<usize> = keys[..prefix].iter().map(|&k| (k as usize - base as usize) / PAGE).collect();
        pages.sort_unstable();
        pages.dedup();
        pages.len()
    };
    // the slots lie below the control bytes in bucket order; the top slot's end is (about)
    // where the control bytes start
    let slots: Vec<usize> = nodes.keys().map(|k| k as *const Arc<NodeId> as usize).collect();
    let hi = slots[0] + 32;
    let bucket = (hi - slots[live_pos]) / 32 - 1;
    let table_pages = (hi.div_ceil(PAGE) - slots[live_pos] / PAGE) + ((hi + bucket + 16).div_ceil(PAGE) - hi / PAGE);
    let ns = time_sweep(n, prefix, || nodes.keys().any(|node| Arc::strong_count(node) > 1));
    for (key, _) in nodes.drain() {
        std::mem::forget(key);
    }
    if !populate {
        unsafe { munmap(raw, len) };
    }
    (ns, prefix, touched, table_pages)
}

/// With `SWEEP_ORDER_POPULATE` set, `order_hashmap`'s keys go into one region for the whole
/// run, every page of it written once when it is mapped (as real burn's heap has every page
/// between its keys in use: ema-balanced's 1-MiB snapshots), reused by every row (a row
/// rewrites its keys' counts); the first row must be the longest chain. (raw, len, base).
fn populated(span: usize) -> (*mut u8, usize, *mut u8) {
    static REGION: std::sync::OnceLock<(usize, usize, usize)> = std::sync::OnceLock::new();
    let &(raw, len, base) = REGION.get_or_init(|| {
        let len = span.div_ceil(HUGE) * HUGE + HUGE;
        let raw = unsafe { mmap(std::ptr::null_mut(), len, 3, 0x22, -1, 0) };
        assert!(raw as isize != -1, "mmap failed");
        let base = ((raw as usize).div_ceil(HUGE) * HUGE) as *mut u8;
        unsafe { madvise(base, len - HUGE, 15) };
        let t = Clock::now();
        for page in (0..len - HUGE).step_by(PAGE) {
            unsafe { base.add(page).write_volatile(0) };
        }
        eprintln!("order: populated {} pages in {:.1} s of CPU", (len - HUGE) / PAGE, (cpu_ns() - t.0) / 1e9);
        (raw as usize, len, base as usize)
    });
    assert!(span <= len - HUGE, "SWEEP_ORDER_POPULATE: give the longest chain first");
    (raw as *mut u8, len, base as *mut u8)
}

/// The keys of LAYOUT's chain up to the first that brings its pages to `pages`.
fn chain(layout: &[i64], pages: usize) -> &[i64] {
    let lo = layout.iter().min().copied().unwrap_or(0);
    let mut seen = std::collections::HashSet::new();
    for (i, &o) in layout.iter().enumerate() {
        seen.insert((o - lo) / PAGE as i64);
        if seen.len() >= pages {
            return &layout[..=i];
        }
    }
    layout
}

/// KiB of the process's anonymous memory the kernel backs with huge pages now.
fn anon_huge_kib() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("AnonHugePages:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// The L2 data TLB for 4-KiB pages as cpuid reports it (AMD leaf 0x80000006 EBX: entries
/// in bits 16-27, associativity code in 28-31, 6 = 8 ways), or None off x86_64.
fn dtlb() -> Option<(u32, u32)> {
    #[cfg(target_arch = "x86_64")]
    {
        let ebx = unsafe { std::arch::x86_64::__cpuid(0x8000_0006) }.ebx;
        return Some(((ebx >> 16) & 0xfff, ebx >> 28));
    }
    #[allow(unreachable_code)]
    None
}

/// The CPU as /proc/cpuinfo names it: `model name (family F model M)` (the host line of
/// `tlb`'s stderr, which `sim calibrate --tlb` records with the values).
fn host() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.trim() == name).map(|(_, v)| v.trim().to_string()))
            .unwrap_or_else(|| "?".to_string())
    };
    format!("{} (family {} model {})", field("model name"), field("cpu family"), field("model"))
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("order") {
        // order LAYOUT F1,F2,... P1,P2,...: the sweep's reads of the chain at P pages, its
        // live key at share F of the hash order
        let args: Vec<String> = std::env::args().collect();
        let layout: Vec<i64> = std::fs::read_to_string(&args[2])
            .expect("layout file")
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.trim().parse().expect("layout: one integer a line"))
            .collect();
        let fracs: Vec<f64> = args[3].split(',').map(|v| v.parse().unwrap()).collect();
        let sizes: Vec<usize> = args[4].split(',').map(|v| v.parse().unwrap()).collect();
        eprintln!("host: {}", host());
        if let Some((entries, code)) = dtlb() {
            eprintln!("cpuid 0x80000006: L2 DTLB 4K {entries} entries, associativity code {code}");
        }
        let how = if std::env::var("SWEEP_ORDER_HASHMAP").is_ok() {
            "std's HashMap<Arc<NodeId>, Vec<NodeId>> (hashbrown), keys().any(strong_count > 1)"
        } else if std::env::var("SWEEP_ORDER_BYTES").is_ok() {
            "a branch per control byte"
        } else {
            "group bitmasks (hashbrown)"
        };
        eprintln!("order: table iterated by {how}");
        if std::env::var("SWEEP_ORDER_LOCATOR_PASSES").is_ok() {
            eprintln!("order: locator of one entry per pass of a trial (SWEEP_ORDER_LOCATOR_PASSES)");
        }
        println!("pattern,pages,keys,frac,prefix,touched,table_pages,ns");
        for &p in &sizes {
            let keys = chain(&layout, p);
            for &f in &fracs {
                for packed in [false, true] {
                    let (ns, prefix, touched, table) = order(keys, f, packed, p as u64);
                    let name = if packed { "orderln" } else { "order4k" };
                    println!("{name},{p},{},{f},{prefix},{touched},{table},{ns:.3}", keys.len());
                }
            }
        }
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("tlbr") {
        // tlbr R FILL P1,P2,...: keys R to a page on P pages filling FILL of their span
        let args: Vec<String> = std::env::args().collect();
        let per_page: usize = args[2].parse().unwrap();
        let fill: f64 = args[3].parse().unwrap();
        let sizes: Vec<usize> = args[4].split(',').map(|v| v.parse().unwrap()).collect();
        eprintln!("host: {}", host());
        if let Some((entries, code)) = dtlb() {
            eprintln!("cpuid 0x80000006: L2 DTLB 4K {entries} entries, associativity code {code}");
        }
        println!("pattern,pages,per_page,fill,keys,ns");
        for &p in &sizes {
            println!("spread4k,{p},{per_page},{fill},{},{:.3}", p * per_page, spread(p, per_page, fill, false));
            println!("lines4k,{p},{per_page},{fill},{},{:.3}", p * per_page, spread(p, per_page, fill, true));
        }
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("tlb") {
        eprintln!("host: {}", host());
        if let Some((entries, code)) = dtlb() {
            eprintln!("cpuid 0x80000006: L2 DTLB 4K {entries} entries, associativity code {code}");
        }
        let sizes: Vec<usize> = std::env::args()
            .nth(2)
            .map(|s| s.split(',').map(|v| v.parse().unwrap()).collect())
            .unwrap_or_else(|| (8..=17).flat_map(|p| [1usize << p, 3usize << (p - 1)]).collect());
        println!("pattern,n,ns");
        for &n in &sizes {
            println!("pages4k,{n},{:.3}", pages(n, 1, false));
            println!("pages2m,{n},{:.3}", pages(n, 1, true));
            println!("lines4k,{n},{:.3}", pages(n, 64, false));
        }
        return;
    }
    let sizes: Vec<usize> = std::env::args()
        .nth(1)
        .map(|s| s.split(',').map(|v| v.parse().unwrap()).collect())
        .unwrap_or_else(|| {
            let mut v = vec![1usize];
            v.extend((6..=22).flat_map(|p| [1usize << p, 3usize << (p - 1)]));
            v
        });
    println!("pattern,n,ns");
    for &n in &sizes {
        println!("scan,{n},{:.3}", scan(n));
        println!("chase,{n},{:.3}", chase(n));
        if n <= 16 {
            println!("call,{n},{:.3}", call(n));
            println!("copy,{n},{:.3}", copy(n));
            println!("visit,{n},{:.3}", visit(n));
            continue;
        }
        if n <= 1 << 17 {
            println!("copy,{n},{:.3}", copy(n));
            println!("visit,{n},{:.3}", visit(n));
        }
    }
}
