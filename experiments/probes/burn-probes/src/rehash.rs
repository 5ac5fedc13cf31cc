//! mechanism-cost `rehash` and `heap-refault`: two mechanisms of a running loop that the
//! other variants do not isolate.
//!
//! - `rehash`: what a hash table's doubling costs per item it moves. Burn-autodiff 0.22.1's
//!   graph tables are stood in for with the same key and value types and sizes (std
//!   `HashMap`/`HashSet` with `RandomState`, as `runtime/server.rs` and
//!   `runtime/memory_management.rs` declare them; the locator's `keys` set is hashbrown
//!   0.16's `HashSet` with its default hasher, `runtime/graph.rs`): `steps` (NodeId ->
//!   Box<dyn Step>, 24-B slots), `actions` (NodeId -> CheckpointerBuilder, two Vecs, 56 B),
//!   `nodes` (Arc<NodeId> -> Vec<Parent>, 32 B; the key's hash reads through the Arc),
//!   `leaves` (HashSet<NodeId>, 8 B) and `keys` (8 B). For each table and each size in
//!   `BUCKETS`, a rep fills one table to its capacity at that bucket count (one insert at
//!   a time, ascending ids as burn's, untimed) and a twin made `with_capacity` one more
//!   item (twice the buckets) with the same items, then times one insert of the next id
//!   into each: into the full table it allocates the doubled block, moves every item
//!   (hashes its key, finds its slot, copies it) and frees the old block; into the twin it
//!   is a plain insert. `ns_per_op` at phase TABLE, x = the full table's buckets: the
//!   median over `REHASH_REPS` reps of (grow - twin) / items moved; phase `all`: the mean
//!   of the five tables' medians at that size. glibc's mmap threshold (64 MiB) and trim
//!   threshold (1 GiB) are set (`mallopt`) so that the blocks stay in the heap and
//!   resident, and `REHASH_WARM` reps run first, untimed: the page faults of a fresh block
//!   are `page-fault`'s mechanism (charged apart by the model), not this one; the timed
//!   inserts' minor faults are counted into the note (0 in every row measured).
//! - `heap-refault`: a page the heap's top gave back to the kernel, faulted in again. With
//!   glibc's mmap threshold above the block, its top pad and its trim threshold at 0
//!   (`mallopt`; `malloc_trim(0)` before each trimmed rep), a rep allocates a block of `REFAULT_SIZES` at the heap's top (the break grows:
//!   `sbrk`), writes one byte per 4-KiB page (each a fresh zero-filled page), and frees it
//!   (the top is trimmed: `sbrk` gives the pages back); the twin (`kept`) runs the same
//!   cycle with the trim threshold past the block, so its pages stay resident. Per page:
//!   `trimmed-touch` (the writes of a trimmed rep: the faults alone), `trimmed-cycle`
//!   (malloc, writes and free), `kept-cycle`, and `trimmed-minus-kept` (median of the
//!   reps' cycle difference); then the cost a fault leaves behind in the caches:
//!   `REFAULT_WS` bytes of working set are read (warm) before each cycle and read again,
//!   timed, after it: `refault-reread-minus-kept` per page faulted (median of the reps'
//!   difference; a fresh page is zeroed by the kernel, 64 lines written, where a resident
//!   one is not); `brk-per-trim`: the trimmed cycle's malloc and free beyond the kept one's,
//!   ns per cycle (the break grown, then cut back and its pages unmapped).

use burn_autodiff::NodeId;
use burn_probes::clock::Instant;
use burn_probes::csv::{Sink, f};
use burn_probes::rss::minor_faults;
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hint::black_box;
use std::sync::Arc;

const EXPERIMENT: &str = "mechanism-cost";
/// buckets of the full table before its doubling: op-cost's graph grows its five tables
/// from 2,048 buckets within its first 2,000 iterations
pub const BUCKETS: &[usize] = &[256, 2_048, 16_384];
const REHASH_REPS: usize = 21;
const REHASH_WARM: usize = 3;
const TABLES: &[&str] = &["steps", "actions", "nodes", "leaves", "keys"];
/// blocks of 16 pages (train-validate's faulting steps: ~16 faults after a trim) and 64
const REFAULT_SIZES: &[usize] = &[64 << 10, 256 << 10];
const REFAULT_REPS: usize = 41;
const REFAULT_WS: usize = 512 << 10;
const PAGE: usize = 4096;
const NOTE: &str = "std HashMap/HashSet (RandomState) and hashbrown 0.16 HashSet with burn-\
                    autodiff 0.22.1's key and value types; fresh process; src/rehash.rs";

/// Items a table of `buckets` buckets holds before it grows (hashbrown's
/// `bucket_mask_to_capacity`).
fn capacity_of(buckets: usize) -> usize {
    if buckets < 8 { buckets - 1 } else { buckets / 8 * 7 }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// graph::Parent { id: NodeId, is_leaf: bool } (16 B)
#[allow(dead_code)]
struct Parent {
    id: NodeId,
    is_leaf: bool,
}

/// checkpoint::builder::CheckpointerBuilder: two Vecs (48 B)
#[allow(dead_code)]
#[derive(Default)]
struct CheckpointerBuilder {
    explicit_actions: Vec<[usize; 3]>,
    backup_actions: Vec<[usize; 3]>,
}

/// One of burn's graph tables: made empty or with a capacity, an insert of id `i`
/// (`key` prepares the key outside the timed insert: the `nodes` table's Arc), its
/// capacity.
trait Table: Sized {
    type Key;
    fn make(capacity: usize) -> Self;
    fn key(i: u64) -> Self::Key;
    fn put(&mut self, key: Self::Key);
    fn capacity(&self) -> usize;
}

fn id(i: u64) -> NodeId {
    NodeId { value: i }
}

impl Table for HashMap<NodeId, Box<dyn Debug + Send>> {
    type Key = NodeId;
    fn make(capacity: usize) -> Self { HashMap::with_capacity(capacity) }
    fn key(i: u64) -> NodeId { id(i) }
    fn put(&mut self, key: NodeId) { self.insert(key, Box::new(())); }
    fn capacity(&self) -> usize { HashMap::capacity(self) }
}

impl Table for HashMap<NodeId, CheckpointerBuilder> {
    type Key = NodeId;
    fn make(capacity: usize) -> Self { HashMap::with_capacity(capacity) }
    fn key(i: u64) -> NodeId { id(i) }
    fn put(&mut self, key: NodeId) { self.insert(key, CheckpointerBuilder::default()); }
    fn capacity(&self) -> usize { HashMap::capacity(self) }
}

impl Table for HashMap<Arc<NodeId>, Vec<Parent>> {
    type Key = Arc<NodeId>;
    fn make(capacity: usize) -> Self { HashMap::with_capacity(capacity) }
    fn key(i: u64) -> Arc<NodeId> { Arc::new(id(i)) }
    fn put(&mut self, key: Arc<NodeId>) { self.insert(key, Vec::new()); }
    fn capacity(&self) -> usize { HashMap::capacity(self) }
}

impl Table for HashSet<NodeId> {
    type Key = NodeId;
    fn make(capacity: usize) -> Self { HashSet::with_capacity(capacity) }
    fn key(i: u64) -> NodeId { id(i) }
    fn put(&mut self, key: NodeId) { self.insert(key); }
    fn capacity(&self) -> usize { HashSet::capacity(self) }
}

impl Table for hashbrown::HashSet<NodeId> {
    type Key = NodeId;
    fn make(capacity: usize) -> Self { hashbrown::HashSet::with_capacity(capacity) }
    fn key(i: u64) -> NodeId { id(i) }
    fn put(&mut self, key: NodeId) { self.insert(key); }
    fn capacity(&self) -> usize { hashbrown::HashSet::capacity(self) }
}

/// The per-item cost of one doubling at `buckets` buckets (median over the reps) and the
/// minor faults of the timed inserts.
fn doubling<T: Table>(buckets: usize) -> (f64, Vec<f64>, i64) {
    let cap = capacity_of(buckets);
    let mut per_item = Vec::new();
    let mut faults = 0;
    for rep in 0..REHASH_WARM + REHASH_REPS {
        let mut full = T::make(0);
        let mut twin = T::make(cap + 1);
        for i in 1..=cap as u64 {
            full.put(T::key(i));
            twin.put(T::key(i));
        }
        assert_eq!(full.capacity(), cap, "the table is not full at {buckets} buckets");
        let twin_cap = twin.capacity();
        let (k1, k2) = (T::key(cap as u64 + 1), T::key(cap as u64 + 1));
        let r0 = minor_faults();
        let t = Instant::now();
        full.put(k1);
        let grow = t.elapsed().as_secs_f64() * 1e9;
        let t = Instant::now();
        twin.put(k2);
        let plain = t.elapsed().as_secs_f64() * 1e9;
        let r1 = minor_faults();
        assert!(full.capacity() > cap && twin.capacity() == twin_cap);
        if rep >= REHASH_WARM {
            per_item.push((grow - plain) / cap as f64);
            faults += r1 - r0;
        }
        black_box((&full, &twin));
    }
    (median(per_item.clone()), per_item, faults)
}

pub fn rehash(sink: &mut Sink) {
    // the blocks stay in the heap and resident: a doubled table's fresh pages fault in
    // (page-fault's mechanism, charged apart) only in the untimed reps
    unsafe {
        mallopt(M_MMAP_THRESHOLD, 64 << 20);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
    }
    for &buckets in BUCKETS {
        let cap = capacity_of(buckets);
        let mut medians = Vec::new();
        for &table in TABLES {
            let (m, reps, faults) = match table {
                "steps" => doubling::<HashMap<NodeId, Box<dyn Debug + Send>>>(buckets),
                "actions" => doubling::<HashMap<NodeId, CheckpointerBuilder>>(buckets),
                "nodes" => doubling::<HashMap<Arc<NodeId>, Vec<Parent>>>(buckets),
                "leaves" => doubling::<HashSet<NodeId>>(buckets),
                _ => doubling::<hashbrown::HashSet<NodeId>>(buckets),
            };
            let mut sorted = reps.clone();
            sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let note = format!(
                "{NOTE}; {table}: ns per item moved by the insert that doubles a full table of \
                 {buckets} buckets ({cap} items), beyond the same insert into a twin with room; glibc \
                 mmap threshold 64 MiB and trim threshold 1 GiB (blocks resident); median of {REHASH_REPS} reps after {REHASH_WARM} untimed (range {}..{} ns); \
                 {faults} minor faults in the timed inserts",
                f(sorted[0], 2), f(sorted[sorted.len() - 1], 2));
            sink.row(EXPERIMENT, "rehash", table, buckets, "buckets", "ns_per_op", f(m, 3), "ns",
                     &note);
            medians.push(m);
        }
        let mean = medians.iter().sum::<f64>() / medians.len() as f64;
        let note = format!("{NOTE}; the mean of the five tables' rows at {buckets} buckets \
                            ({} ns): ns per item a doubling moves",
                           medians.iter().map(|m| f(*m, 2)).collect::<Vec<_>>().join(", "));
        sink.row(EXPERIMENT, "rehash", "all", buckets, "buckets", "ns_per_op", f(mean, 3), "ns",
                 &note);
    }
}

unsafe extern "C" {
    fn malloc(n: usize) -> *mut u8;
    fn free(p: *mut u8);
    fn mallopt(param: i32, value: i32) -> i32;
    fn malloc_trim(pad: usize) -> i32;
}
const M_TRIM_THRESHOLD: i32 = -1;
const M_TOP_PAD: i32 = -2;
const M_MMAP_THRESHOLD: i32 = -3;

/// Reads `ws` (one u64 per line) and returns the sum (kept alive).
fn read_ws(ws: &[u64]) -> u64 {
    let mut s = 0u64;
    for i in (0..ws.len()).step_by(8) {
        s = s.wrapping_add(unsafe { std::ptr::read_volatile(&ws[i]) });
    }
    s
}

/// One rep of malloc(`bytes`), a byte written per page, free: (touch ns, cycle ns, re-read
/// ns of the working set after it, faults)
fn refault_cycle(ws: &[u64], bytes: usize) -> (f64, f64, f64, i64) {
    let pages = bytes / PAGE;
    black_box(read_ws(ws));
    black_box(read_ws(ws));
    let r0 = minor_faults();
    let t = Instant::now();
    let (touch, p) = unsafe {
        let p = malloc(bytes);
        assert!(!p.is_null());
        let t = Instant::now();
        for i in 0..pages {
            std::ptr::write_volatile(p.add(i * PAGE), 1u8);
        }
        (t.elapsed().as_secs_f64() * 1e9, p)
    };
    unsafe { free(p) };
    let cycle = t.elapsed().as_secs_f64() * 1e9;
    let faults = minor_faults() - r0;
    let t = Instant::now();
    black_box(read_ws(ws));
    let reread = t.elapsed().as_secs_f64() * 1e9;
    (touch, cycle, reread, faults)
}

pub fn heap_refault(sink: &mut Sink) {
    let ws = vec![1u64; REFAULT_WS / 8];
    unsafe {
        mallopt(M_MMAP_THRESHOLD, 64 << 20);
        mallopt(M_TOP_PAD, 0);
    }
    for &bytes in REFAULT_SIZES {
        let pages = (bytes / PAGE) as f64;
        let mut rows: Vec<Vec<f64>> = (0..9).map(|_| Vec::with_capacity(REFAULT_REPS)).collect();
        let mut faults = [0i64; 2];
        for rep in 0..REFAULT_REPS + 2 {
            // alternated: the trimmed cycle, then its twin with the pages kept
            unsafe {
                mallopt(M_TRIM_THRESHOLD, 0);
                malloc_trim(0);
            }
            let a = refault_cycle(&ws, bytes);
            unsafe { mallopt(M_TRIM_THRESHOLD, 256 << 20) };
            black_box(refault_cycle(&ws, bytes));   // faults the block in once, then kept
            let b = refault_cycle(&ws, bytes);
            if rep >= 2 {
                let per_page = [a.0, a.1, a.2, b.0, b.1, b.2, a.1 - b.1, a.2 - b.2];
                for (k, v) in per_page.iter().enumerate() {
                    rows[k].push(*v / pages);
                }
                // malloc and free of the trimmed cycle beyond the kept one's: the break grown
                // and cut back (two brk calls, the pages unmapped), per cycle
                rows[8].push((a.1 - a.0) - (b.1 - b.0));
                faults[0] += a.3;
                faults[1] += b.3;
            }
        }
        let n = REFAULT_REPS as f64;
        let note = format!(
            "{NOTE}; glibc mmap threshold 64 MiB, top pad 0; a {} KiB block at the heap's top, one \
             byte written per 4-KiB page, freed; trimmed: trim threshold 0 and malloc_trim(0) \
             first (the top given back every rep), kept: the twin, trim threshold 256 MiB (pages \
             stay resident); ns per page (brk-per-trim: ns per cycle), median of {} alternated \
             reps; minor faults per page: trimmed {}, kept {}; re-read: {} KiB read before and \
             after the cycle",
            bytes >> 10, REFAULT_REPS, f(faults[0] as f64 / n / pages, 2),
            f(faults[1] as f64 / n / pages, 2), REFAULT_WS >> 10);
        let names = ["trimmed-touch", "trimmed-cycle", "trimmed-reread", "kept-touch",
                     "kept-cycle", "kept-reread", "trimmed-minus-kept",
                     "reread-trimmed-minus-kept", "brk-per-trim"];
        for (name, values) in names.iter().zip(rows) {
            sink.row(EXPERIMENT, "heap-refault", name, bytes / PAGE, "pages", "ns_per_op",
                     f(median(values), 3), "ns", &note);
        }
    }
}
