//! train-validate: the program of the simulator's workload `experiments/train_validate.py`
//! on real burn: a training loop (MLP 128-128-128, SGD lr 1e-3, 200 steps) with a
//! validation every 50 steps, then 400 single-sample generations, all on one
//! `Device::flex().autodiff()`. Validation and generation use the trainable model
//! (`autodiff`), `model.valid()` with an autodiff input (`valid-model`) or `model.valid()`
//! with an input on plain `Device::flex()` (`plain`). One fresh process per variant.
//!
//! Differences from the workload forced by burn's API (semantics kept):
//! - `Mlp::forward` takes `&self`; the workload's evaluator "is the model itself" for
//!   `autodiff`: here a borrow of the model (the workload's `del net` drops a reference;
//!   here the borrow ends), and an owned `model.valid()` for the other variants, dropped
//!   where the workload deletes it.
//! - `optim.step` takes the model by value and returns it (`model = optim.step(..)`);
//!   the workload mutates in place. `loss` is dropped before the step, as the workload's
//!   `del loss`.
//! - the workload fast-forwards identical training steps (`sim.repeat`); here every step runs.

use crate::Opts;
use crate::mlp::Mlp;
use burn::module::Module;
use burn::nn::Linear;
use burn::optim::{GradientsParams, SgdConfig};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn_probes::alloc;
use burn_probes::csv::{Sink, f};
use burn_probes::rss::rss_bytes;
use burn_probes::clock::Instant;

const EXPERIMENT: &str = "train-validate";
pub const VARIANTS: &[&str] = &["autodiff", "valid-model", "plain"];

fn variant_note(variant: &str) -> &'static str {
    match variant {
        "autodiff" => "validation and generation with the trainable model itself and inputs on flex.autodiff",
        "valid-model" => "validation and generation with model.valid() and inputs on flex.autodiff",
        "plain" => "validation and generation with model.valid() and inputs on plain Device::flex()",
        _ => "",
    }
}

/// Reporting state: the reference point (heap, blocks) and the time and count of the
/// previous report (the workload's `last`).
struct Reporter<'a> {
    variant: &'a str,
    heap0: alloc::Snapshot,
    last_t: Instant,
    last_count: usize,
    first: bool,
}

impl Reporter<'_> {
    fn report(&mut self, sink: &mut Sink, phase: &str, x: usize, x_unit: &str, count: usize) {
        let el = self.last_t.elapsed().as_secs_f64();
        let h = alloc::snapshot();
        let rss = rss_bytes();
        let ms = el * 1e3 / (count.saturating_sub(self.last_count)).max(1) as f64;
        let v = self.variant;
        let first = self.first;
        // the values' strings and the notes are the probe's own: kept out of the heap counts
        let (kib, ms_s, note) = alloc::exclude(|| {
            let note = if first {
                format!(
                    "burn Flex+autodiff (no simd/rayon); fresh process per variant; {}; host_heap_delta = live heap now minus after the model, input and optimizer were created (counting allocator, KiB = 1024 B; tensor data is host heap on Flex); ms_per_step = wall time since the previous report / steps or samples since it (the first generate report's time runs from the last train report)",
                    variant_note(v)
                )
            } else {
                String::new()
            };
            (f(h.bytes_since(&self.heap0) as f64 / 1024.0, 3), f(ms, 4), note)
        });
        sink.row(EXPERIMENT, v, phase, x, x_unit, "host_heap_delta", kib, "KiB", &note);
        sink.row(EXPERIMENT, v, phase, x, x_unit, "heap_blocks_delta", h.blocks_since(&self.heap0), "blocks", "");
        sink.row(EXPERIMENT, v, phase, x, x_unit, "ms_per_step", ms_s, "ms", "");
        sink.row(EXPERIMENT, v, phase, x, x_unit, "rss_bytes", rss, "B", if first { "process RSS" } else { "" });
        self.first = false;
        self.last_count = count;
        // the report's own work (rows, RSS read) stays out of the next interval's time
        self.last_t = Instant::now();
    }
}

pub fn run_variant(variant: &str, opts: &Opts, sink: &mut Sink) {
    if !VARIANTS.contains(&variant) {
        eprintln!("error: unknown train-validate variant {variant:?} (valid: {})", VARIANTS.join(", "));
        std::process::exit(2);
    }
    // the workload's PARAMS; quick divides every count by 10
    let q = if opts.quick { 10 } else { 1 };
    let steps = opts.steps.unwrap_or(200 / q);
    let (validate_every, val_batches, samples, report_every) = (50 / q, 20 / q, 400 / q, 50 / q);
    let (batch, features) = (32, 128);

    // PROBE_PARTS=1 (diagnostics, stderr only): after each part of the set-up, of step 1, of
    // the first validation and of the first generation sample: RSS (statm), resident text of
    // the binary (smaps), live heap, the program break and glibc's mallinfo2, recorded
    // without allocating into a buffer reserved here and printed at the end (PART lines);
    // PROBE_SMAPS=1 also prints the resident mappings at the end.
    let parts_on = std::env::var("PROBE_PARTS").is_ok();
    let mut parts: Vec<(&'static str, [u64; 10], [u64; 5])> = Vec::with_capacity(if parts_on { 64 } else { 0 });
    let brk0 = burn_probes::rss::program_break() as u64;
    let mut part = |name: &'static str| {
        if parts_on {
            let m = burn_probes::rss::malloc_info().unwrap_or_default();
            let r = burn_probes::rss::rss_bytes_noalloc();
            let c = burn_probes::rss::smaps_classes_noalloc();
            let t = c[0];
            let h = alloc::snapshot();
            let b = burn_probes::rss::program_break() as u64;
            parts.push((name, [r, t, h.live_bytes as u64, b.wrapping_sub(brk0), m.arena as u64,
                m.uordblks as u64, m.fordblks as u64, m.keepcost as u64, m.hblks as u64, m.hblkhd as u64], c));
        }
    };
    part("start");
    let ad = Device::flex().autodiff();
    let plain = Device::flex();
    part("device");
    let mut model = Mlp::new(features, features, features, &ad);
    part("model");
    let x = Tensor::<2>::random([batch, features], Distribution::Default, &ad);
    let mut optim = SgdConfig::new().init();
    part("setup");
    let mut rep = Reporter { variant, heap0: alloc::snapshot(), last_t: Instant::now(), last_count: 0, first: true };
    // PROBE_TRACE_KEPT=train|start (diagnostics, stderr only): the blocks allocated and still
    // live (KEPT lines: size align) in the window from the reference snapshot to the first
    // train report (train), or from the last train report to the first generate sample
    // (start: model.valid() and z)
    let trace_kept = std::env::var("PROBE_TRACE_KEPT").unwrap_or_default();
    if trace_kept == "train" {
        alloc::trace_start();
    }

    for step in 1..=steps {
        let out = model.forward(x.clone());
        if step == 1 { part("1 forward"); }
        let loss = out.powi_scalar(2).mean();
        if step == 1 { part("1 loss"); }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        if step == 1 { part("1 backward"); }
        drop(loss);
        model = optim.step(1e-3, model, grads);
        if step == 1 { part("1 sgd"); }
        if step == 2 { part("2 sgd"); }
        if step == validate_every { part("val train"); }
        if step % validate_every == 0 {
            let valid;
            let (net, input_device): (&Mlp, &Device) = match variant {
                "autodiff" => (&model, &ad),
                "valid-model" => {
                    valid = model.valid();
                    (&valid, &ad)
                }
                _ => {
                    valid = model.valid();
                    (&valid, &plain)
                }
            };
            let xv = Tensor::<2>::random([batch, features], Distribution::Default, input_device);
            for vb in 0..val_batches {
                let s: f32 = net.forward(xv.clone()).sum().into_scalar();
                std::hint::black_box(s);
                if step == validate_every && vb == 0 { part("val batch 1"); }
            }
            drop(xv);
            if step == validate_every { part("val done"); }
            // (drop net: `valid` goes out of scope here)
        }
        if step % report_every == 0 {
            if trace_kept == "train" && step == report_every {
                print_kept("train");
            }
            if trace_kept == "start" && step == steps {
                rep.report(sink, "train", step, "step", step);
                alloc::trace_start();
                continue;
            }
            rep.report(sink, "train", step, "step", step);
        }
    }

    // generation: the timer is not reset (the first report's time runs from the last
    // train report), the count is (the workload's `last[1] = 0`)
    rep.last_count = 0;
    let valid;
    let (net, input_device): (&Mlp, &Device) = match variant {
        "autodiff" => (&model, &ad),
        "valid-model" => {
            valid = model.valid();
            (&valid, &ad)
        }
        _ => {
            valid = model.valid();
            (&valid, &plain)
        }
    };
    let z = Tensor::<2>::random([1, features], Distribution::Default, input_device);
    // PROBE_TRACE_GEN=N (diagnostics, stderr only): generate sample N is traced with a mark
    // after each layer of the real `Mlp::forward`, sample N+1 as the same ops issued one by
    // one through the public API (matmul, bias reshape, add, relu, ..., sum, into_scalar),
    // a mark after each; every alloc/free/realloc is printed (TRACE lines) after sample N+1.
    if trace_kept == "start" {
        print_kept("start");
    }
    let trace_gen: Option<usize> = std::env::var("PROBE_TRACE_GEN").ok().and_then(|v| v.parse().ok());
    let mut marks: Vec<(&'static str, usize)> = Vec::with_capacity(if trace_gen.is_some() { 64 } else { 0 });
    for i in 1..=samples {
        if trace_gen == Some(i) {
            alloc::trace_start();
            marks.push(("sample-forward", alloc::trace_len()));
            let x = net.hidden.forward(z.clone());
            marks.push(("after hidden", alloc::trace_len()));
            let x = net.activation.forward(x);
            marks.push(("after relu", alloc::trace_len()));
            let x = net.output.forward(x);
            marks.push(("after output", alloc::trace_len()));
            let x = x.sum();
            marks.push(("after sum", alloc::trace_len()));
            let s: f32 = x.into_scalar();
            marks.push(("after into_scalar", alloc::trace_len()));
            std::hint::black_box(s);
            continue;
        }
        if trace_gen.map(|n| n + 1) == Some(i) {
            marks.push(("sample-ops", alloc::trace_len()));
            let zc = z.clone();
            marks.push(("z.clone", alloc::trace_len()));
            let a = linear_ops(zc, &net.hidden, features, ["w1.val", "matmul1", "b1.val", "reshape b1", "add1"], &mut marks);
            let a = burn::tensor::activation::relu(a);
            marks.push(("relu", alloc::trace_len()));
            let a = linear_ops(a, &net.output, features, ["w2.val", "matmul2", "b2.val", "reshape b2", "add2"], &mut marks);
            let s = a.sum();
            marks.push(("sum", alloc::trace_len()));
            let v: f32 = s.into_scalar();
            marks.push(("into_scalar", alloc::trace_len()));
            std::hint::black_box(v);
            let (events, overflow) = alloc::trace_stop();
            alloc::print_trace(&events, overflow, "mark", &marks);
            continue;
        }
        let s: f32 = net.forward(z.clone()).sum().into_scalar();
        std::hint::black_box(s);
        if i == 1 { part("gen 1"); }
        if i == samples { part("gen last"); }
        if i % report_every == 0 {
            rep.report(sink, "generate", i, "samples", i);
        }
    }
    if parts_on {
        let r0 = parts[0].1[0] as i64;
        let t0 = parts[0].1[1] as i64;
        let h0 = parts[0].1[2] as i64;
        for (name, _, c) in &parts {
            eprintln!("CLS  {name:<12} exe-x {:>7.1} exe-other {:>7.1} libs {:>7.1} heap {:>7.1} anon {:>7.1} KiB",
                c[0] as f64 / 1024.0, c[1] as f64 / 1024.0, c[2] as f64 / 1024.0, c[3] as f64 / 1024.0, c[4] as f64 / 1024.0);
        }
        for (name, v, _) in &parts {
            eprintln!("PART {name:<12} rss {:>9.1} d {:>8.1} text {:>7.1} d {:>7.1} live {:>8.1} brk {:>7.1} arena {:>7.1} inuse {:>7.1} free {:>7.1} top {:>6.1} mmap {} {:>7.1} KiB",
                v[0] as f64 / 1024.0, (v[0] as i64 - r0) as f64 / 1024.0, v[1] as f64 / 1024.0,
                (v[1] as i64 - t0) as f64 / 1024.0, (v[2] as i64 - h0) as f64 / 1024.0,
                v[3] as f64 / 1024.0, v[4] as f64 / 1024.0, v[5] as f64 / 1024.0, v[6] as f64 / 1024.0,
                v[7] as f64 / 1024.0, v[8], v[9] as f64 / 1024.0);
        }
        let (anon, file) = burn_probes::rss::rss_split();
        eprintln!("PART end RssAnon {} KiB RssFile {} KiB", anon / 1024, file / 1024);
        if std::env::var("PROBE_SMAPS").is_ok() { eprint!("{}", burn_probes::rss::smaps_summary()); }
    }
}

/// `Linear::forward` of a rank-2 input as burn's dispatch issues it (the weight's `val`,
/// matmul, the bias's `val`, its reshape to [1, d], add), one public op at a time, a
/// trace mark after each (`names`, in that order).
fn linear_ops(x: Tensor<2>, layer: &Linear, features: usize, names: [&'static str; 5],
    marks: &mut Vec<(&'static str, usize)>) -> Tensor<2> {
    let w = layer.weight.val();
    marks.push((names[0], alloc::trace_len()));
    let a = x.matmul(w);
    marks.push((names[1], alloc::trace_len()));
    let b = layer.bias.as_ref().unwrap().val();
    marks.push((names[2], alloc::trace_len()));
    let b = b.reshape([1, features]);
    marks.push((names[3], alloc::trace_len()));
    let a = a + b;
    marks.push((names[4], alloc::trace_len()));
    a
}

/// Stop the trace and print the blocks allocated in it and still live (size, align), and
/// the pre-existing blocks it freed.
fn print_kept(label: &str) {
    let (events, overflow) = alloc::trace_stop();
    let mut live: std::collections::BTreeMap<usize, (usize, usize, usize)> = Default::default();
    let mut pre = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match e.kind {
            alloc::EventKind::Alloc => {
                live.insert(e.ptr, (i, e.size, e.align));
            }
            alloc::EventKind::Free => {
                if live.remove(&e.ptr).is_none() {
                    pre.push((e.size, e.align));
                }
            }
            alloc::EventKind::Realloc => {
                if live.remove(&e.old_ptr).is_none() {
                    pre.push((e.old_size, e.align));
                }
                live.insert(e.ptr, (i, e.size, e.align));
            }
        }
    }
    // PROBE_TRACE_FROM=i: every event from index i on (EV lines)
    if let Some(from) = std::env::var("PROBE_TRACE_FROM").ok().and_then(|v| v.parse::<usize>().ok()) {
        for (i, e) in events.iter().enumerate().skip(from) {
            eprintln!("EV {i} {:?} {} {} {:#x} {} {:#x}", e.kind, e.size, e.align, e.ptr, e.old_size, e.old_ptr);
        }
    }
    let mut kept: Vec<_> = live.values().collect();
    kept.sort();
    eprintln!("KEPT {label}: {} events, {} kept blocks, {} B; overflow {overflow}", events.len(), kept.len(), kept.iter().map(|k| k.1).sum::<usize>());
    for (i, size, align) in kept {
        eprintln!("KEPT {i} {size} {align}");
    }
    for (size, align) in pre {
        eprintln!("KEPT pre-existing-free {size} {align}");
    }
}
