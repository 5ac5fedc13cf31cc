//! alloc-trace: the exact sequence of allocation sizes (and frees) made by single
//! operations on flex.autodiff, recorded by the trace mode of the counting allocator.
//!
//! Rows: experiment=alloc-trace-events (own file), variant=<case>, phase=op<k> (k-th traced repetition),
//! x=<event index within the case>, metric=alloc_bytes | free_bytes, value=size (B).
//! note: for an alloc "kept" (still live when the op's trace window closed) or
//! "transient"; for a free "pre-existing" (block allocated before the window) or
//! "in-window". A realloc is written as free_bytes(old) + alloc_bytes(new) with
//! "realloc" in the note. align is noted when it is not 8.
//! Per op, summary rows (experiment=alloc-trace, phase=summary, x=k, x_unit=op): kept_bytes, kept_blocks,
//! alloc_calls, free_calls, freed_preexisting_bytes.

use crate::Opts;
use crate::adleak::tiny_backward;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, SgdConfig};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::activation::relu;
use burn_probes::alloc::{self, Event, EventKind};
use burn_probes::csv::Sink;
use std::collections::{HashMap, HashSet};
use std::hint::black_box;

pub const CASES: &[&str] = &[
    "first-tensor-creation",
    "first-op-ever",
    "untracked-add",
    "tracked-add",
    "require-grad",
    "detach-leaf",
    "tracked-matmul",
    "tracked-relu",
    "tracked-sum",
    "tracked-mean",
    "tracked-mul_scalar",
    "tracked-powi_scalar",
    "unrelated-backward-first",
    "unrelated-backward-second",
    "unrelated-backward-after-100-untracked",
    "unrelated-backward-after-10000-untracked",
    "sgd-step",
    "train-step",
];

/// Per-event rows go to their own experiment (and file, see main.rs `TRACE_EXPERIMENTS`):
/// they are a raw trace, several events per op; the per-op `summary` rows stay `alloc-trace`.
pub const EVENTS: &str = "alloc-trace-events";

const REPS: usize = 12;
const WARMUP: usize = 1000;

struct Emitter<'a> {
    sink: &'a mut Sink,
    case: String,
    idx: usize,
    op: usize,
    /// Only write kept allocations and pre-existing frees (for very long traces).
    kept_only: bool,
}

impl Emitter<'_> {
    fn emit(&mut self, events: &[Event], overflow: bool, note0: &str) {
        self.op += 1;
        let phase = format!("op{}", self.op);
        // Which allocations in the window are freed within it? Key by address, in order.
        let mut live: HashMap<usize, usize> = HashMap::new(); // ptr -> event index
        let mut freed_in_window: HashSet<usize> = HashSet::new(); // alloc event indices freed
        let mut free_pre: HashSet<usize> = HashSet::new(); // free event indices of pre-existing blocks
        for (i, e) in events.iter().enumerate() {
            match e.kind {
                EventKind::Alloc => {
                    live.insert(e.ptr, i);
                }
                EventKind::Free => match live.remove(&e.ptr) {
                    Some(j) => {
                        freed_in_window.insert(j);
                    }
                    None => {
                        free_pre.insert(i);
                    }
                },
                EventKind::Realloc => {
                    match live.remove(&e.old_ptr) {
                        Some(j) => {
                            freed_in_window.insert(j);
                        }
                        None => {
                            free_pre.insert(i);
                        }
                    }
                    live.insert(e.ptr, i);
                }
            }
        }
        let (mut kept_b, mut kept_n, mut allocs, mut frees, mut pre_b) = (0i64, 0i64, 0, 0, 0i64);
        let mut first = true;
        for (i, e) in events.iter().enumerate() {
            let al = if e.align != 8 { format!("; align={}", e.align) } else { String::new() };
            let mut note = |s: &str| {
                let mut n = String::new();
                if first && !note0.is_empty() {
                    n.push_str(note0);
                    n.push_str("; ");
                }
                first = false;
                n.push_str(s);
                n.push_str(&al);
                if overflow {
                    n.push_str("; TRACE OVERFLOW");
                }
                n
            };
            match e.kind {
                EventKind::Alloc | EventKind::Realloc => {
                    if e.kind == EventKind::Realloc {
                        let pre = free_pre.contains(&i);
                        let nn = note(if pre { "realloc; pre-existing" } else { "realloc; in-window" });
                        self.sink.row(EVENTS, &self.case, &phase, self.idx, "event", "free_bytes", e.old_size, "B", &nn);
                        self.idx += 1;
                        frees += 1;
                        if pre {
                            pre_b += e.old_size as i64;
                        }
                    }
                    let kept = !freed_in_window.contains(&i);
                    if self.kept_only && !kept {
                        allocs += 1;
                        self.idx += 1;
                        continue;
                    }
                    let nn = note(match (e.kind, kept) {
                        (EventKind::Realloc, true) => "realloc; kept",
                        (EventKind::Realloc, false) => "realloc; transient",
                        (_, true) => "kept",
                        (_, false) => "transient",
                    });
                    self.sink.row(EVENTS, &self.case, &phase, self.idx, "event", "alloc_bytes", e.size, "B", &nn);
                    self.idx += 1;
                    allocs += 1;
                    if kept {
                        kept_b += e.size as i64;
                        kept_n += 1;
                    }
                }
                EventKind::Free => {
                    let pre = free_pre.contains(&i);
                    if self.kept_only {
                        frees += 1;
                        if pre {
                            pre_b += e.size as i64;
                        }
                        self.idx += 1;
                        continue;
                    }
                    let nn = note(if pre { "pre-existing" } else { "in-window" });
                    self.sink.row(EVENTS, &self.case, &phase, self.idx, "event", "free_bytes", e.size, "B", &nn);
                    self.idx += 1;
                    frees += 1;
                    if pre {
                        pre_b += e.size as i64;
                    }
                }
            }
        }
        // kept_bytes counts blocks allocated in the window and still live at its end
        // (a realloc'd block counts with its new size); freed_preexisting_bytes the
        // blocks from before the window that it freed (old size for a realloc).
        let k = self.op;
        let c = self.case.clone();
        self.sink.row("alloc-trace", &c, "summary", k, "op", "kept_bytes", kept_b, "B", "");
        self.sink.row("alloc-trace", &c, "summary", k, "op", "kept_blocks", kept_n, "blocks", "");
        self.sink.row("alloc-trace", &c, "summary", k, "op", "alloc_calls", allocs, "calls", "");
        self.sink.row("alloc-trace", &c, "summary", k, "op", "free_calls", frees, "calls", "");
        self.sink.row("alloc-trace", &c, "summary", k, "op", "freed_preexisting_bytes", pre_b, "B", "");
    }
}

fn t16(v: f32, d: &Device) -> Tensor<1> {
    Tensor::<1>::from_floats([v; 16], d)
}
fn m44(v: f32, d: &Device) -> Tensor<2> {
    Tensor::<2>::from_data(TensorData::new(vec![v; 16], [4, 4]), d)
}

/// Trace `op` REPS times (after `warm` untraced calls); outputs are kept until after the
/// trace window closes and dropped then (drop not traced) unless `drop_in_window`.
fn rep<R>(em: &mut Emitter, warm: usize, note: &str, drop_in_window: bool, mut op: impl FnMut() -> R) {
    let mut keep = Vec::new();
    for _ in 0..warm {
        drop(black_box(op()));
    }
    for k in 0..REPS {
        let (r, ev, of) = if drop_in_window {
            let (_, ev, of) = alloc::trace(|| drop(black_box(op())));
            (None, ev, of)
        } else {
            let (r, ev, of) = alloc::trace(&mut op);
            (Some(r), ev, of)
        };
        keep.push(r);
        em.emit(&ev, of, if k == 0 { note } else { "" });
    }
    drop(keep);
}

pub fn run_case(case: &str, _opts: &Opts, sink: &mut Sink) {
    sink.echo = false;
    let mut em = Emitter { sink, case: case.to_string(), idx: 0, op: 0, kept_only: false };
    let ad = Device::flex().autodiff();
    match case {
        "first-tensor-creation" => {
            let (t, ev, of) = alloc::trace(|| t16(1.0, &ad));
            em.emit(&ev, of, "fresh process: the first Tensor::from_floats([1.0; 16]) on flex.autodiff");
            drop(t);
        }
        "first-op-ever" => {
            let a = t16(1.0, &ad);
            let b = t16(2.0, &ad);
            let (_, ev, of) = alloc::trace(|| drop(black_box(a.clone() + b.clone())));
            em.emit(&ev, of, "fresh process: a and b created (untraced) then the first add ever, c dropped in the window");
            // and the second one, for comparison
            let (_, ev, of) = alloc::trace(|| drop(black_box(a.clone() + b.clone())));
            em.emit(&ev, of, "the second add");
        }
        "untracked-add" => {
            let a = t16(1.0, &ad);
            let b = t16(2.0, &ad);
            rep(&mut em, WARMUP, "c = a.clone() + b.clone(); drop(c) on flex.autodiff, nothing requires grad, after 1000 warm-up adds; 12 consecutive ops traced one by one", true,
                || a.clone() + b.clone());
        }
        "tracked-add" => {
            let a = t16(1.0, &ad).require_grad();
            let b = t16(2.0, &ad);
            rep(&mut em, WARMUP, "c = a.clone() + b.clone(); drop(c), a requires grad, after 1000 warm-up adds; 12 consecutive ops", true,
                || a.clone() + b.clone());
        }
        "require-grad" => {
            let mut fresh: Vec<Tensor<1>> = (0..WARMUP + REPS).map(|i| t16(i as f32, &ad)).collect();
            let mut kept = Vec::new();
            for _ in 0..WARMUP {
                kept.push(fresh.pop().unwrap().require_grad());
            }
            for k in 0..REPS {
                let t = fresh.pop().unwrap();
                let (r, ev, of) = alloc::trace(|| t.require_grad());
                kept.push(r);
                em.emit(&ev, of, if k == 0 { "t.require_grad() on a fresh 16-element flex.autodiff tensor (created untraced), result kept; after 1000 warm-ups" } else { "" });
            }
        }
        "detach-leaf" => {
            let p = t16(1.0, &ad).require_grad();
            rep(&mut em, WARMUP, "p.clone().detach() of a require-grad leaf p; result kept alive (dropped after the window)", false,
                || p.clone().detach());
        }
        "tracked-matmul" | "tracked-relu" | "tracked-sum" | "tracked-mean" | "tracked-mul_scalar" | "tracked-powi_scalar" => {
            let m = m44(0.5, &ad).require_grad();
            let b = m44(0.25, &ad);
            let note = format!("{} on a [4,4] require-grad leaf m (matmul: m x b, b untracked), output dropped in the window, after 1000 warm-ups", &case[8..]);
            match case {
                "tracked-matmul" => rep(&mut em, WARMUP, &note, true, || m.clone().matmul(b.clone())),
                "tracked-relu" => rep(&mut em, WARMUP, &note, true, || relu(m.clone())),
                "tracked-sum" => rep(&mut em, WARMUP, &note, true, || m.clone().sum().reshape([1, 1])),
                "tracked-mean" => rep(&mut em, WARMUP, &note, true, || m.clone().mean().reshape([1, 1])),
                "tracked-mul_scalar" => rep(&mut em, WARMUP, &note, true, || m.clone().mul_scalar(2.0)),
                _ => rep(&mut em, WARMUP, &note, true, || m.clone().powi_scalar(2)),
            }
        }
        "unrelated-backward-first" | "unrelated-backward-second" => {
            if case.ends_with("second") {
                tiny_backward();
            }
            let (_, ev, of) = alloc::trace(tiny_backward);
            em.emit(&ev, of, "fresh process; the whole tiny_backward(): x = from_floats([1.0]).require_grad(); (x*2).sum().backward(), grads dropped");
        }
        "unrelated-backward-after-100-untracked" => {
            let a = t16(1.0, &ad);
            let b = t16(2.0, &ad);
            tiny_backward();
            for _ in 0..100 {
                drop(black_box(a.clone() + b.clone()));
            }
            let (_, ev, of) = alloc::trace(tiny_backward);
            em.emit(&ev, of, "fresh process; one tiny_backward() (untraced), 100 untracked adds, then a traced tiny_backward() that sweeps the 100 orphan graphs");
        }
        "unrelated-backward-after-10000-untracked" => {
            let a = t16(1.0, &ad);
            let b = t16(2.0, &ad);
            tiny_backward();
            for _ in 0..10_000 {
                drop(black_box(a.clone() + b.clone()));
            }
            em.kept_only = true;
            let (_, ev, of) = alloc::trace(tiny_backward);
            em.emit(&ev, of, "fresh process; one tiny_backward() (untraced), 10000 untracked adds, then a traced tiny_backward(); ONLY kept allocations are listed (x still counts every event; free rows are omitted, see the summary rows)");
            let (_, ev, of) = alloc::trace(tiny_backward);
            em.emit(&ev, of, "a second traced tiny_backward() right after (kept allocations only)");
        }
        "sgd-step" | "train-step" => {
            let mut model: Option<Linear> = Some(LinearConfig::new(512, 512).init(&ad));
            let x = Tensor::<2>::random([64, 512], Distribution::Default, &ad);
            let mut optim = SgdConfig::new().init();
            let full = case == "train-step";
            for k in 0..(3 + REPS) {
                let m = model.take().unwrap();
                let traced = k >= 3;
                if full {
                    let step = |m: Linear, optim: &mut burn::optim::ModuleOptimizer| {
                        let loss = m.forward(x.clone()).powi_scalar(2).mean();
                        let grads = GradientsParams::from_grads(loss.backward(), &m);
                        optim.step(1e-3, m, grads)
                    };
                    if traced {
                        let (m2, ev, of) = alloc::trace(|| step(m, &mut optim));
                        em.emit(&ev, of, if k == 3 { "Linear(512,512) on flex.autodiff, x [64,512]: forward, powi_scalar(2).mean(), backward, GradientsParams::from_grads, SGD(lr 1e-3) step; after 3 warm-up steps" } else { "" });
                        model = Some(m2);
                    } else {
                        model = Some(step(m, &mut optim));
                    }
                } else {
                    let loss = m.forward(x.clone()).powi_scalar(2).mean();
                    let grads = GradientsParams::from_grads(loss.backward(), &m);
                    if traced {
                        let (m2, ev, of) = alloc::trace(|| optim.step(1e-3, m, grads));
                        em.emit(&ev, of, if k == 3 { "only optim.step(1e-3, model, grads) of SgdConfig::new().init() on Linear(512,512); grads computed untraced; after 3 warm-up steps" } else { "" });
                        model = Some(m2);
                    } else {
                        model = Some(optim.step(1e-3, m, grads));
                    }
                }
            }
        }
        other => panic!("unknown alloc-trace case {other}"),
    }
}
