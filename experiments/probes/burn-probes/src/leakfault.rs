//! mechanism-cost `leak-fault` (run only when named): what a page fault costs inside burn's
//! own op, and whether unpatched burn's leak costs more than its faults there.
//!
//! leak-replay (src/leak.rs) replays an op's allocations without burn's code: its leak
//! costs the faults (timed in a tight loop) plus ~480 ns a page of first writes. In burn's
//! own op the same leak reads ~60-120 ns an op more (op-cost `tracked/mul_scalar` beside
//! register-size, session 59). This variant times op-cost's iteration of each case in
//! `CASES` on the build it runs, in blocks of `OPS` iterations, each block after `GROWN`
//! untimed iterations of the same op from fresh inputs (the graph, for a tracked case, at
//! op-cost's size), then everything dropped and an unrelated backward (unpatched burn's
//! sweep frees the leaked nodes). glibc's trim threshold is raised (`mallopt`) so that a
//! free never trims the heap's top. Three kinds of block, alternated, `REPS` of each after
//! one untimed round:
//!
//! - `reused`: the heap's top is resident (an earlier block grew it): unpatched burn's
//!   leaked nodes land on pages resident already, no fault;
//! - `fresh`: `malloc_trim(0)` after the untimed iterations: the top is given back, and
//!   the leaked nodes land on fresh pages (the faults op-cost's unpatched rows pay);
//! - `injected`: as `reused`, and one byte written to the next page of a fresh private
//!   anonymous mapping before every `every`-th op (`every` from the first `fresh` block's
//!   faults per iteration, so that both fault as often): an unrelated page fault between
//!   two ops, no leak on fresh pages.
//!
//! And `bare`: the injected writes alone, no op (a fault's cost in a tight loop, this
//! process). Rows per case (x = `OPS` iterations): each kind's ns per iteration (median of
//! the blocks), `CASE-fresh-minus-reused` and `CASE-injected-minus-reused` (median of the
//! rounds' differences), and per fault (`ns_per_op` rows whose unit is a fault):
//! `CASE-fresh-minus-reused-per-fault`, `CASE-injected-minus-reused-per-fault` (each
//! round's difference over its faults per iteration beyond reused's, the median) and
//! `CASE-bare-per-fault`.

use burn::prelude::*;
use burn::tensor::Distribution;
use burn_probes::clock::Instant;
use burn_probes::csv::{Sink, f};
use burn_probes::rss::minor_faults;
use crate::adleak::tiny_backward;
use crate::mech::median;
use std::hint::black_box;

const EXPERIMENT: &str = "mechanism-cost";
const CASES: &[&str] = &["tracked-mul_scalar", "untracked-add"];
const GROWN: usize = 2_000;
const OPS: usize = 1_000;
const REPS: usize = 15;
const PAGE: usize = 4096;
/// bytes of the mapping the injected faults touch (never all of it)
const REGION: usize = 1 << 30;
const NOTE: &str = "burn Flex (no simd/rayon); fresh process per variant; src/leakfault.rs";

unsafe extern "C" {
    fn mallopt(param: i32, value: i32) -> i32;
    fn malloc_trim(pad: usize) -> i32;
    fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut u8;
    fn munmap(addr: *mut u8, len: usize) -> i32;
}
const M_TRIM_THRESHOLD: i32 = -1;
const PROT_READ_WRITE: i32 = 0x1 | 0x2;
const MAP_PRIVATE_ANONYMOUS_NORESERVE: i32 = 0x02 | 0x20 | 0x4000;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Reused,
    Fresh,
    Injected,
    Bare,
}

/// A private anonymous mapping whose pages are touched one by one, each for the first time.
struct Region {
    base: *mut u8,
    next: usize,
}

impl Region {
    fn new() -> Region {
        let base = unsafe { mmap(std::ptr::null_mut(), REGION, PROT_READ_WRITE,
                                 MAP_PRIVATE_ANONYMOUS_NORESERVE, -1, 0) };
        assert!(!base.is_null() && base as isize != -1, "mmap failed");
        Region { base, next: 0 }
    }

    #[inline(always)]
    fn touch(&mut self) {
        assert!(self.next + PAGE <= REGION, "leak-fault: region used up");
        unsafe { std::ptr::write_volatile(self.base.add(self.next), 1u8) };
        self.next += PAGE;
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        unsafe { munmap(self.base, REGION) };
    }
}

fn iterate(case: &str, x: &Tensor<2>, y: &Tensor<2>) {
    match case {
        "untracked-add" => drop(black_box(x.clone() + y.clone())),
        "tracked-mul_scalar" => drop(black_box(x.clone().mul_scalar(2.0))),
        other => panic!("unknown case {other}"),
    }
}

/// One block: ns per iteration and minor faults per iteration of `OPS` timed iterations.
fn block(case: &str, kind: Kind, device: &Device, region: &mut Region, every: usize) -> (f64, f64) {
    let mut x = Tensor::<2>::random([1, 128], Distribution::Default, device);
    if case.starts_with("tracked") {
        x = x.require_grad();
    }
    let y = Tensor::<2>::random([1, 128], Distribution::Default, device);
    if kind != Kind::Bare {
        for _ in 0..GROWN {
            iterate(case, &x, &y);
        }
    }
    if kind == Kind::Fresh {
        unsafe { malloc_trim(0) };
    }
    let f0 = minor_faults();
    let t = Instant::now();
    match kind {
        Kind::Reused | Kind::Fresh => {
            for _ in 0..OPS {
                iterate(case, &x, &y);
            }
        }
        Kind::Injected => {
            for i in 0..OPS {
                if i % every == 0 {
                    region.touch();
                }
                iterate(case, &x, &y);
            }
        }
        Kind::Bare => {
            for i in 0..OPS {
                if i % every == 0 {
                    region.touch();
                }
                black_box(i);
            }
        }
    }
    let ns = t.elapsed().as_secs_f64() * 1e9 / OPS as f64;
    let faults = (minor_faults() - f0) as f64 / OPS as f64;
    drop(x);
    drop(y);
    tiny_backward();
    (ns, faults)
}

fn spread(v: &[f64], d: usize) -> String {
    v.iter().map(|x| f(*x, d)).collect::<Vec<_>>().join(", ")
}

pub fn leak_fault(sink: &mut Sink) {
    unsafe { mallopt(M_TRIM_THRESHOLD, 1 << 30) };
    let device = Device::flex().autodiff();
    let mut region = Region::new();
    tiny_backward();
    for case in CASES {
        // untimed: grow the heap's top once, then one fresh block sets how often to inject
        block(case, Kind::Reused, &device, &mut region, 1);
        let (_, rate) = block(case, Kind::Fresh, &device, &mut region, 1);
        let every = if rate > 0.0 { ((1.0 / rate).round() as usize).max(1) } else { OPS };
        block(case, Kind::Injected, &device, &mut region, every);
        block(case, Kind::Bare, &device, &mut region, every);
        let mut ns: [Vec<f64>; 4] = Default::default();
        let mut faults: [Vec<f64>; 4] = Default::default();
        let kinds = [Kind::Reused, Kind::Fresh, Kind::Injected, Kind::Bare];
        for _ in 0..REPS {
            for (k, kind) in kinds.iter().enumerate() {
                let (t, fl) = block(case, *kind, &device, &mut region, every);
                ns[k].push(t);
                faults[k].push(fl);
            }
        }
        let diff = |k: usize| -> Vec<f64> { (0..REPS).map(|r| ns[k][r] - ns[0][r]).collect() };
        let per_fault = |k: usize| -> Vec<f64> {
            (0..REPS)
                .filter(|&r| faults[k][r] - faults[0][r] > 0.0)
                .map(|r| (ns[k][r] - ns[0][r]) / (faults[k][r] - faults[0][r]))
                .collect()
        };
        let bare: Vec<f64> = (0..REPS).filter(|&r| faults[3][r] > 0.0)
            .map(|r| ns[3][r] / faults[3][r]).collect();
        let note = format!(
            "{NOTE}; flex.autodiff, op-cost's {case} iteration ({}) on [1, 128]; blocks of \
             {OPS} iterations, each after {GROWN} untimed from fresh inputs, then everything \
             dropped and an unrelated backward; reused: the heap's top resident; fresh: \
             malloc_trim(0) before the timed iterations; injected: as reused and one byte \
             written to a fresh page of an anonymous mapping before every {every}-th op; bare: \
             those writes alone; glibc trim threshold 1 GiB; {REPS} rounds after one, medians",
            if case.starts_with("tracked") { "x requires grad" } else { "nothing requires grad" });
        let names = ["reused", "fresh", "injected", "bare"];
        for k in 0..4 {
            sink.row(EXPERIMENT, "leak-fault", &format!("{case}-{}", names[k]), OPS, "iterations",
                     "ns_per_op", f(median(ns[k].clone()), 3), "ns",
                     &format!("{}runs: {} ns; minor faults per iteration: {}",
                              if k == 0 { format!("{note}; ") } else { String::new() },
                              spread(&ns[k], 1), spread(&faults[k], 4)));
        }
        for k in [1, 2] {
            sink.row(EXPERIMENT, "leak-fault", &format!("{case}-{}-minus-reused", names[k]), OPS,
                     "iterations", "ns_per_op", f(median(diff(k)), 3), "ns",
                     &format!("rounds: {} ns", spread(&diff(k), 1)));
        }
        for k in [1, 2] {
            let v = per_fault(k);
            if !v.is_empty() {
                sink.row(EXPERIMENT, "leak-fault", &format!("{case}-{}-minus-reused-per-fault", names[k]),
                         OPS, "iterations", "ns_per_op", f(median(v.clone()), 1), "ns",
                         &format!("rounds: {} ns per fault beyond reused", spread(&v, 0)));
            }
        }
        if !bare.is_empty() {
            sink.row(EXPERIMENT, "leak-fault", &format!("{case}-bare-per-fault"), OPS,
                     "iterations", "ns_per_op", f(median(bare.clone()), 1), "ns",
                     &format!("rounds: {} ns per fault, no op", spread(&bare, 0)));
        }
        // what a fault costs burn's op beyond the same fault in a tight loop: each round's
        // injected per-fault cost less its own bare one
        let beyond: Vec<f64> = (0..REPS)
            .filter(|&r| faults[2][r] - faults[0][r] > 0.0 && faults[3][r] > 0.0)
            .map(|r| (ns[2][r] - ns[0][r]) / (faults[2][r] - faults[0][r]) - ns[3][r] / faults[3][r])
            .collect();
        if !beyond.is_empty() {
            sink.row(EXPERIMENT, "leak-fault", &format!("{case}-injected-minus-bare-per-fault"),
                     OPS, "iterations", "ns_per_op", f(median(beyond.clone()), 1), "ns",
                     &format!("rounds: {} ns per fault: injected's less bare's", spread(&beyond, 0)));
        }
    }
}
