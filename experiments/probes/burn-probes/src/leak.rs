//! mechanism-cost `leak-replay` (run only when named): what unpatched burn's leak costs
//! beyond its page faults, at burn's own block sizes and order.
//!
//! Unpatched burn 0.22.1 keeps the node of every op whose output is dropped (the graph, its
//! step, the locator's entries) until a backward's sweep; drop-release frees them at the
//! drop. So every unpatched op's bookkeeping lands on fresh heap carved from glibc's top
//! (the heap grows, new pages faulted in), every patched one on chunks freed the iteration
//! before. This variant replays the same allocations without burn's code around them:
//!
//! 1. *record*: on `flex.autodiff()` (the build the probe runs), op-cost's iteration of
//!    each case in `CASES` (`untracked-add`: `drop(x.clone() + y.clone())`, nothing
//!    requires grad; `tracked-mul_scalar`: `drop(x.clone().mul_scalar(2.0))` with x
//!    requiring grad) runs `WARM` times, then `RECORDED` iterations are traced one by one
//!    (the counting allocator's per-thread trace: every alloc, free and realloc with its
//!    size, alignment and address);
//! 2. *replay*: each recorded iteration becomes a list of allocations, frees and reallocs
//!    of slots (a free of a block allocated before the iteration is left out: counted in
//!    the note); the blocks an iteration allocates and does not free are its *kept* blocks
//!    (on unpatched burn: the node's; on drop-release's build none). Every block is written
//!    in full when allocated (burn writes what it allocates). `leak` replays the iterations
//!    in a loop and never frees the kept blocks; `freed` replays the same and frees each
//!    iteration's kept blocks at its end (newest first), as drop-release's release does.
//!    Blocks of `REPLAY_OPS` iterations, alternated, `REPLAY_REPS` of each after one untimed
//!    pair; glibc's trim threshold is raised (`mallopt`) so that no block trims the top
//!    (trims are a mechanism of their own).
//!
//! Rows per case (x = iterations per block): `CASE-leak` and `CASE-freed` (ns per iteration,
//! median of the blocks), `CASE-leak-minus-freed` (median of the pairs' difference) and
//! `CASE-beyond-faults`: each pair's difference less the leak block's minor faults per
//! iteration times the page fault's cost (`page-fault`'s mechanism, measured in the same
//! process: a fresh 16-MiB block written one byte per page, median of 5), median of the
//! pairs: what the leak costs beyond the faults. The note gives the kept bytes and blocks
//! per iteration, both modes' faults per iteration and the fault's cost.

use burn::prelude::*;
use burn::tensor::Distribution;
use burn_probes::alloc::{EventKind, trace};
use burn_probes::clock::Instant;
use burn_probes::csv::{Sink, f};
use burn_probes::rss::minor_faults;
use crate::mech::{fault_ns_per_page, median};
use std::alloc::{Layout, alloc, dealloc, realloc};
use std::hint::black_box;

const EXPERIMENT: &str = "mechanism-cost";
const CASES: &[&str] = &["untracked-add", "tracked-mul_scalar"];
const WARM: usize = 1_000;
const RECORDED: usize = 64;
const REPLAY_OPS: usize = 2_000;
const REPLAY_REPS: usize = 11;
const NOTE: &str = "burn Flex (no simd/rayon); fresh process per variant; src/leak.rs";

unsafe extern "C" {
    fn mallopt(param: i32, value: i32) -> i32;
}
const M_TRIM_THRESHOLD: i32 = -1;

#[derive(Clone, Copy)]
enum Op {
    Alloc { slot: usize, size: usize, align: usize },
    Free { slot: usize },
    Realloc { slot: usize, size: usize },
}

/// One recorded iteration: its operations, its kept slots (allocated, never freed in it)
/// and the frees of blocks from before it (left out of the replay).
struct Iteration {
    ops: Vec<Op>,
    kept: Vec<usize>,
    outside_frees: usize,
}

fn iterate(case: &str, x: &Tensor<2>, y: &Tensor<2>) {
    match case {
        "untracked-add" => drop(black_box(x.clone() + y.clone())),
        "tracked-mul_scalar" => drop(black_box(x.clone().mul_scalar(2.0))),
        other => panic!("unknown case {other}"),
    }
}

/// The events of one traced iteration as operations on slots.
fn compile(events: &[burn_probes::alloc::Event]) -> Iteration {
    let mut live: Vec<(usize, usize)> = Vec::new(); // (address, slot)
    let mut sizes: Vec<(usize, usize)> = Vec::new(); // slot -> (size, align)
    let (mut ops, mut outside_frees) = (Vec::new(), 0);
    let find = |live: &Vec<(usize, usize)>, ptr: usize| live.iter().position(|&(p, _)| p == ptr);
    for e in events {
        match e.kind {
            EventKind::Alloc => {
                let slot = sizes.len();
                sizes.push((e.size, e.align));
                live.push((e.ptr, slot));
                ops.push(Op::Alloc { slot, size: e.size, align: e.align });
            }
            EventKind::Free => match find(&live, e.ptr) {
                Some(i) => ops.push(Op::Free { slot: live.swap_remove(i).1 }),
                None => outside_frees += 1,
            },
            EventKind::Realloc => match find(&live, e.old_ptr) {
                Some(i) => {
                    let slot = live[i].1;
                    live[i].0 = e.ptr;
                    sizes[slot].0 = e.size;
                    ops.push(Op::Realloc { slot, size: e.size });
                }
                None => {
                    // a block from before the iteration grew: its new block is this one's
                    let slot = sizes.len();
                    sizes.push((e.size, e.align));
                    live.push((e.ptr, slot));
                    ops.push(Op::Alloc { slot, size: e.size, align: e.align });
                }
            },
        }
    }
    let mut kept: Vec<usize> = live.iter().map(|&(_, s)| s).collect();
    kept.sort();
    Iteration { ops, kept, outside_frees }
}

fn record(case: &str) -> Vec<Iteration> {
    let device = Device::flex().autodiff();
    let mut x = Tensor::<2>::random([1, 128], Distribution::Default, &device);
    if case.starts_with("tracked") {
        x = x.require_grad();
    }
    let y = Tensor::<2>::random([1, 128], Distribution::Default, &device);
    for _ in 0..WARM {
        iterate(case, &x, &y);
    }
    let mut out = Vec::with_capacity(RECORDED);
    for _ in 0..RECORDED {
        let ((), events, overflow) = trace(|| iterate(case, &x, &y));
        assert!(!overflow, "trace overflow");
        out.push(compile(&events));
    }
    out
}

/// Replays `REPLAY_OPS` iterations; `free_kept`: each iteration's kept blocks freed at its
/// end. Returns (ns per iteration, minor faults per iteration).
fn replay(iters: &[Iteration], layouts: &mut Vec<(*mut u8, Layout)>, free_kept: bool) -> (f64, f64) {
    let f0 = minor_faults();
    let t = Instant::now();
    for i in 0..REPLAY_OPS {
        let it = &iters[i % iters.len()];
        for op in &it.ops {
            unsafe {
                match *op {
                    Op::Alloc { slot, size, align } => {
                        let l = Layout::from_size_align(size.max(1), align).unwrap();
                        let p = alloc(l);
                        std::ptr::write_bytes(p, 0x5a, size);
                        layouts[slot] = (p, l);
                    }
                    Op::Free { slot } => {
                        let (p, l) = layouts[slot];
                        dealloc(p, l);
                    }
                    Op::Realloc { slot, size } => {
                        let (p, l) = layouts[slot];
                        let q = realloc(p, l, size.max(1));
                        if size > l.size() {
                            std::ptr::write_bytes(q.add(l.size()), 0x5a, size - l.size());
                        }
                        layouts[slot] = (q, Layout::from_size_align(size.max(1), l.align()).unwrap());
                    }
                }
            }
        }
        if free_kept {
            for &slot in it.kept.iter().rev() {
                let (p, l) = layouts[slot];
                unsafe { dealloc(p, l) };
            }
        }
    }
    let ns = t.elapsed().as_secs_f64() * 1e9 / REPLAY_OPS as f64;
    (ns, (minor_faults() - f0) as f64 / REPLAY_OPS as f64)
}

/// ns per 4-KiB page made resident: a fresh 16-MiB block (mmapped by glibc) written one
/// byte per page, median of 5 blocks (mechanism-cost `page-fault`'s loop).
fn fault_ns() -> f64 {
    median(fault_ns_per_page(5))
}

pub fn leak_replay(sink: &mut Sink) {
    unsafe { mallopt(M_TRIM_THRESHOLD, 1 << 30) };
    let fault = fault_ns();
    for case in CASES {
        let iters = record(case);
        let slots = iters.iter().map(|it| it.ops.len()).max().unwrap_or(0);
        let mut layouts = vec![(std::ptr::null_mut::<u8>(), Layout::new::<u8>()); slots.max(1)];
        let kept_blocks: usize = iters.iter().map(|it| it.kept.len()).sum();
        let kept_bytes: usize = iters.iter()
            .map(|it| it.ops.iter().filter_map(|op| match *op {
                Op::Alloc { slot, size, .. } if it.kept.contains(&slot) => Some(size),
                _ => None,
            }).sum::<usize>())
            .sum();
        let allocs: usize = iters.iter()
            .map(|it| it.ops.iter().filter(|op| matches!(op, Op::Alloc { .. })).count())
            .sum();
        let outside: usize = iters.iter().map(|it| it.outside_frees).sum();
        replay(&iters, &mut layouts, true);
        replay(&iters, &mut layouts, false);
        let (mut leak, mut freed, mut diff, mut beyond) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut leak_faults, mut freed_faults) = (0.0, 0.0);
        for _ in 0..REPLAY_REPS {
            let (l, lf) = replay(&iters, &mut layouts, false);
            let (r, rf) = replay(&iters, &mut layouts, true);
            leak.push(l);
            freed.push(r);
            diff.push(l - r);
            beyond.push(l - r - (lf - rf) * fault);
            leak_faults += lf / REPLAY_REPS as f64;
            freed_faults += rf / REPLAY_REPS as f64;
        }
        let n = RECORDED as f64;
        let note = format!(
            "{NOTE}; flex.autodiff, op-cost's {case} iteration ({}); {RECORDED} iterations \
             traced after {WARM} and replayed with the global allocator, every block written: \
             per iteration {} allocations, kept {} blocks of {} B, {} frees of older blocks \
             left out; leak never frees the kept blocks, freed frees them at the iteration's \
             end; blocks of {REPLAY_OPS} iterations alternated, {REPLAY_REPS} pairs after one; \
             glibc trim threshold 1 GiB; minor faults per iteration: leak {}, freed {}; a page \
             fault {} ns (fresh 16-MiB block, median of 5)",
            if case.starts_with("tracked") { "x requires grad" } else { "nothing requires grad" },
            f(allocs as f64 / n, 2), f(kept_blocks as f64 / n, 2), f(kept_bytes as f64 / n, 1),
            f(outside as f64 / n, 2), f(leak_faults, 4), f(freed_faults, 4), f(fault, 1));
        let spread = |v: &[f64]| v.iter().map(|x| f(*x, 1)).collect::<Vec<_>>().join(", ");
        let rows = [("leak", &leak), ("freed", &freed), ("leak-minus-freed", &diff),
                    ("beyond-faults", &beyond)];
        for (k, (name, values)) in rows.iter().enumerate() {
            let text = if k == 0 { format!("{note}; runs: {} ns", spread(values)) }
                       else { format!("runs: {} ns", spread(values)) };
            sink.row(EXPERIMENT, "leak-replay", &format!("{case}-{name}"), REPLAY_OPS,
                     "iterations", "ns_per_op", f(median((*values).clone()), 3), "ns", &text);
        }
    }
}
