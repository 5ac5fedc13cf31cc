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

fn main() {
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
