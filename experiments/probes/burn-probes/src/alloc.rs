//! A counting global allocator with an optional per-thread trace mode.
//!
//! Counters (process-wide, all threads): live bytes, live blocks, peak live bytes,
//! total number of allocation calls (alloc + alloc_zeroed; realloc counted apart).
//!
//! Trace mode: between [`trace_start`] and [`trace_stop`], every alloc, free and
//! realloc made *on the calling thread* is recorded (size, alignment, address) into a
//! fixed, preallocated buffer, so recording itself never allocates.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU16, AtomicU64, AtomicUsize, Ordering::Relaxed};

pub struct CountingAlloc;

static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);
static LIVE_BLOCKS: AtomicI64 = AtomicI64::new(0);
static PEAK_BYTES: AtomicI64 = AtomicI64::new(0);
static TOTAL_ALLOCS: AtomicU64 = AtomicU64::new(0);
static TOTAL_REALLOCS: AtomicU64 = AtomicU64::new(0);
/// Bytes / blocks / alloc calls made inside [`exclude`] (the probes' own bookkeeping,
/// e.g. the CSV rows a probe keeps while it measures): snapshots subtract them.
static EXCLUDED_BYTES: AtomicI64 = AtomicI64::new(0);
static EXCLUDED_BLOCKS: AtomicI64 = AtomicI64::new(0);
static EXCLUDED_ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static TRACING: Cell<bool> = const { Cell::new(false) };
}
static ANY_TRACING: AtomicBool = AtomicBool::new(false);

/// Capacity of the trace buffer (events). Static and zero-initialised: untouched
/// pages cost no RSS.
const TRACE_CAP: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EventKind {
    Alloc = 1,
    Free = 2,
    /// realloc: `size` is the new size, `old_size` the old one; `ptr` new, `old_ptr` old.
    Realloc = 3,
}

#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub kind: EventKind,
    pub size: usize,
    pub align: usize,
    pub ptr: usize,
    pub old_size: usize,
    pub old_ptr: usize,
}

struct TraceBuf {
    events: core::cell::UnsafeCell<[RawEvent; TRACE_CAP]>,
}
#[derive(Clone, Copy)]
struct RawEvent {
    kind: u8,
    align: u8, // log2
    size: usize,
    ptr: usize,
    old_size: usize,
    old_ptr: usize,
}
unsafe impl Sync for TraceBuf {}
static TRACE: TraceBuf = TraceBuf {
    events: core::cell::UnsafeCell::new(
        [RawEvent { kind: 0, align: 0, size: 0, ptr: 0, old_size: 0, old_ptr: 0 }; TRACE_CAP],
    ),
};
static TRACE_LEN: AtomicUsize = AtomicUsize::new(0);
static TRACE_OVERFLOW: AtomicBool = AtomicBool::new(false);

#[inline]
fn record(kind: EventKind, layout: Layout, ptr: *mut u8, old_size: usize, old_ptr: *mut u8) {
    if !ANY_TRACING.load(Relaxed) {
        return;
    }
    // try_with: TLS may be gone during thread teardown.
    let on = TRACING.try_with(|t| t.get()).unwrap_or(false);
    if !on {
        return;
    }
    let i = TRACE_LEN.fetch_add(1, Relaxed);
    if i >= TRACE_CAP {
        TRACE_OVERFLOW.store(true, Relaxed);
        return;
    }
    // Only the tracing thread writes (a single thread traces at a time).
    unsafe {
        (*TRACE.events.get())[i] = RawEvent {
            kind: kind as u8,
            align: layout.align().trailing_zeros() as u8,
            size: layout.size(),
            ptr: ptr as usize,
            old_size,
            old_ptr: old_ptr as usize,
        };
    }
}

// Key-page census (`census_start`, `census`): where burn-autodiff's node keys lie. A
// node key is an `ArcInner<NodeId>`, a 24-B request of alignment 8; the census counts the
// live 24-B blocks on each 4-KiB page (a static table of pages from the first such block
// on, untouched pages cost no RSS) and the live blocks below glibc's mmap threshold by
// request size, so a row can say how many pages the keys lie on and which blocks the heap
// keeps between them. Only blocks allocated after `census_start` are counted.
const CENSUS_PAGES: usize = 1 << 22;
const CENSUS_SMALL: usize = 128 * 1024;
const CENSUS_KEY: usize = 24;
static CENSUS_ON: AtomicBool = AtomicBool::new(false);
static CENSUS_BASE: AtomicUsize = AtomicUsize::new(0);
static CENSUS_OUT: AtomicU64 = AtomicU64::new(0);
static CENSUS_PAGE: [AtomicU16; CENSUS_PAGES] = [const { AtomicU16::new(0) }; CENSUS_PAGES];
/// live blocks by request size in 8-B classes, below CENSUS_SMALL
static CENSUS_SIZE: [AtomicI64; CENSUS_SMALL / 8] = [const { AtomicI64::new(0) }; CENSUS_SMALL / 8];

#[inline]
fn census(size: usize, align: usize, ptr: *mut u8, add: bool) {
    if !CENSUS_ON.load(Relaxed) || size >= CENSUS_SMALL {
        return;
    }
    CENSUS_SIZE[size / 8].fetch_add(if add { 1 } else { -1 }, Relaxed);
    if size != CENSUS_KEY || align != 8 {
        return;
    }
    let page = ptr as usize >> 12;
    let mut base = CENSUS_BASE.load(Relaxed);
    if base == 0 {
        base = page.saturating_sub(CENSUS_PAGES / 4).max(1);
        CENSUS_BASE.store(base, Relaxed);
    }
    match page.checked_sub(base) {
        Some(i) if i < CENSUS_PAGES => {
            if add {
                CENSUS_PAGE[i].fetch_add(1, Relaxed);
            } else {
                // a block allocated before the census started was never counted
                let _ = CENSUS_PAGE[i].fetch_update(Relaxed, Relaxed, |c| c.checked_sub(1));
            }
        }
        _ => { CENSUS_OUT.fetch_add(1, Relaxed); }
    }
}

/// Start the key-page census (before the measured loop).
pub fn census_start() {
    CENSUS_ON.store(true, Relaxed);
}

/// Print the census now to stderr, without allocating: a line `CENSUS <label> keys <live
/// 24-B blocks> pages <pages holding one or more> span <first to last such page, in pages>
/// out <blocks outside the table>` and a line `CENSUS_SIZES <label>` of `size:count` (live
/// small blocks counted since the start, by 8-B request-size class, where non-zero).
pub fn census_print(label: usize) {
    let (mut blocks, mut pages, mut first, mut last) = (0u64, 0u64, usize::MAX, 0usize);
    for (i, c) in CENSUS_PAGE.iter().enumerate() {
        let c = c.load(Relaxed);
        if c > 0 {
            blocks += c as u64;
            pages += 1;
            first = first.min(i);
            last = i;
        }
    }
    let span = if pages > 0 { last - first + 1 } else { 0 };
    eprintln!("CENSUS {label} keys {blocks} pages {pages} span {span} out {}", CENSUS_OUT.load(Relaxed));
    eprint!("CENSUS_SIZES {label}");
    for (i, c) in CENSUS_SIZE.iter().enumerate() {
        let c = c.load(Relaxed);
        if c != 0 {
            eprint!(" {}:{c}", i * 8);
        }
    }
    eprintln!();
}

#[inline]
fn on_alloc(size: usize) {
    let live = LIVE_BYTES.fetch_add(size as i64, Relaxed) + size as i64;
    LIVE_BLOCKS.fetch_add(1, Relaxed);
    TOTAL_ALLOCS.fetch_add(1, Relaxed);
    PEAK_BYTES.fetch_max(live, Relaxed);
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
            census(layout.size(), layout.align(), p, true);
            record(EventKind::Alloc, layout, p, 0, core::ptr::null_mut());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
            census(layout.size(), layout.align(), p, true);
            record(EventKind::Alloc, layout, p, 0, core::ptr::null_mut());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size() as i64, Relaxed);
        LIVE_BLOCKS.fetch_sub(1, Relaxed);
        census(layout.size(), layout.align(), ptr, false);
        record(EventKind::Free, layout, ptr, 0, core::ptr::null_mut());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            let d = new_size as i64 - layout.size() as i64;
            let live = LIVE_BYTES.fetch_add(d, Relaxed) + d;
            PEAK_BYTES.fetch_max(live, Relaxed);
            TOTAL_REALLOCS.fetch_add(1, Relaxed);
            census(layout.size(), layout.align(), ptr, false);
            census(new_size, layout.align(), p, true);
            let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            record(EventKind::Realloc, new_layout, p, layout.size(), ptr);
        }
        p
    }
}

/// A snapshot of the counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    pub live_bytes: i64,
    pub live_blocks: i64,
    pub peak_bytes: i64,
    pub total_allocs: u64,
    pub total_reallocs: u64,
}

/// The counters now, minus what [`exclude`]d code still holds (peak and reallocs raw).
pub fn snapshot() -> Snapshot {
    Snapshot {
        live_bytes: LIVE_BYTES.load(Relaxed) - EXCLUDED_BYTES.load(Relaxed),
        live_blocks: LIVE_BLOCKS.load(Relaxed) - EXCLUDED_BLOCKS.load(Relaxed),
        peak_bytes: PEAK_BYTES.load(Relaxed),
        total_allocs: TOTAL_ALLOCS.load(Relaxed) - EXCLUDED_ALLOCS.load(Relaxed),
        total_reallocs: TOTAL_REALLOCS.load(Relaxed),
    }
}

/// Run `f` and leave what it allocates (net of what it frees) out of every later
/// [`snapshot`]: for the probe's own bookkeeping done between two snapshots of a
/// measured phase (a CSV row kept in memory, the growth of the row vector).
/// Single-threaded probes only: other threads' allocations during `f` would be
/// excluded too.
pub fn exclude<R>(f: impl FnOnce() -> R) -> R {
    let (b0, n0, a0) = (LIVE_BYTES.load(Relaxed), LIVE_BLOCKS.load(Relaxed), TOTAL_ALLOCS.load(Relaxed));
    let r = f();
    EXCLUDED_BYTES.fetch_add(LIVE_BYTES.load(Relaxed) - b0, Relaxed);
    EXCLUDED_BLOCKS.fetch_add(LIVE_BLOCKS.load(Relaxed) - n0, Relaxed);
    EXCLUDED_ALLOCS.fetch_add(TOTAL_ALLOCS.load(Relaxed) - a0, Relaxed);
    r
}

impl Snapshot {
    pub fn bytes_since(&self, earlier: &Snapshot) -> i64 {
        self.live_bytes - earlier.live_bytes
    }
    pub fn blocks_since(&self, earlier: &Snapshot) -> i64 {
        self.live_blocks - earlier.live_blocks
    }
    pub fn allocs_since(&self, earlier: &Snapshot) -> u64 {
        self.total_allocs - earlier.total_allocs
    }
}

/// Reset the peak to the current live bytes (so a later peak is relative to now).
pub fn reset_peak() {
    PEAK_BYTES.store(LIVE_BYTES.load(Relaxed), Relaxed);
}

/// Start recording this thread's allocations. Clears the buffer.
pub fn trace_start() {
    TRACE_LEN.store(0, Relaxed);
    TRACE_OVERFLOW.store(false, Relaxed);
    TRACING.with(|t| t.set(true));
    ANY_TRACING.store(true, Relaxed);
}

/// Events recorded since [`trace_start`] (capped at the buffer's capacity).
pub fn trace_len() -> usize {
    TRACE_LEN.load(Relaxed).min(TRACE_CAP)
}

/// Stop recording and return the events (the returned Vec is allocated after
/// recording stopped, so it is not part of the trace).
pub fn trace_stop() -> (Vec<Event>, bool) {
    TRACING.with(|t| t.set(false));
    ANY_TRACING.store(false, Relaxed);
    let n = TRACE_LEN.load(Relaxed).min(TRACE_CAP);
    let overflow = TRACE_OVERFLOW.load(Relaxed);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let r = unsafe { (*TRACE.events.get())[i] };
        let kind = match r.kind {
            1 => EventKind::Alloc,
            2 => EventKind::Free,
            _ => EventKind::Realloc,
        };
        out.push(Event {
            kind,
            size: r.size,
            align: 1usize << r.align,
            ptr: r.ptr,
            old_size: r.old_size,
            old_ptr: r.old_ptr,
        });
    }
    (out, overflow)
}

/// Print `events` to stderr, one `TRACE` line each, with `TRACE <word> <label>` before
/// the event index of each mark (`marks`: (label, index into the events)), the marks
/// past the last event after it, and `TRACE overflow` if the buffer filled up.
pub fn print_trace<L: std::fmt::Display>(events: &[Event], overflow: bool, word: &str, marks: &[(L, usize)]) {
    let mut m = 0;
    for (i, e) in events.iter().enumerate() {
        while m < marks.len() && marks[m].1 <= i {
            eprintln!("TRACE {word} {}", marks[m].0);
            m += 1;
        }
        eprintln!("TRACE {:?} {} {} {:#x} {} {:#x}", e.kind, e.size, e.align, e.ptr, e.old_size, e.old_ptr);
    }
    for (label, _) in &marks[m..] {
        eprintln!("TRACE {word} {label}");
    }
    if overflow {
        eprintln!("TRACE overflow");
    }
}

/// Run `f` with tracing on, return its result and the events.
pub fn trace<R>(f: impl FnOnce() -> R) -> (R, Vec<Event>, bool) {
    trace_start();
    let r = f();
    let (ev, of) = trace_stop();
    (r, ev, of)
}
