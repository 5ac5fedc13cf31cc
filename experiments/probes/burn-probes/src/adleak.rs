//! adleak-rss, adleak-count and the params probe (pb-adleak of the seed write-up).

use crate::Opts;
use crate::ema;
use burn::prelude::*;
use burn_probes::alloc::{self, Snapshot};
use burn_probes::csv::{Sink, f};
use burn_probes::rss::{page_size, rss_bytes};
use std::hint::black_box;
use burn_probes::clock::Instant;

pub const RSS_VARIANTS: &[&str] = &[
    "flex",
    "flex.autodiff",
    "a-tracked",
    "autodiff-backward-each-round",
    "without_autodiff",
];
pub const COUNT_VARIANTS: &[&str] = &["flex", "flex.autodiff", "a-tracked", "sequential"];

/// One backward of an unrelated 1-element graph on its own autodiff device.
pub fn tiny_backward() {
    let ad = Device::flex().autodiff();
    let x = Tensor::<1>::from_floats([1.0f32], &ad).require_grad();
    let grads = (x.clone() * 2.0).sum().backward();
    drop(black_box(grads));
}

/// a, b (n elements each) for a variant of the seed loop.
fn pair(variant: &str, n: usize) -> (Tensor<1>, Tensor<1>) {
    let va: Vec<f32> = vec![1.0; n];
    let vb: Vec<f32> = vec![2.0; n];
    let ad = Device::flex().autodiff();
    let mk = |v: Vec<f32>, d: &Device| Tensor::<1>::from_data(TensorData::new(v, [n]), d);
    match variant {
        "flex" => {
            let d = Device::flex();
            (mk(va, &d), mk(vb, &d))
        }
        "flex.autodiff" | "autodiff-backward-each-round" => (mk(va, &ad), mk(vb, &ad)),
        "a-tracked" => (mk(va, &ad).require_grad(), mk(vb, &ad)),
        "without_autodiff" => (mk(va, &ad).without_autodiff(), mk(vb, &ad).without_autodiff()),
        other => panic!("unknown variant {other}"),
    }
}

fn rss_note(variant: &str) -> &'static str {
    match variant {
        "flex" => "plain Device::flex()",
        "flex.autodiff" => "Device::flex().autodiff(); no tensor requires grad",
        "a-tracked" => "a requires grad",
        "autodiff-backward-each-round" => {
            "after each round one backward() of an unrelated 1-element graph"
        }
        "without_autodiff" => "a and b created on flex.autodiff then moved off with without_autodiff()",
        "chain-dead" => "x = a.detach().require_grad() (a fresh leaf, no handle kept); each iteration x = x + b: a chain of ops nodes in one graph, no live handle at the backward, so every sweep visit scans all remaining nodes (maybe_useful) and free_unused_roots frees the chain's root: deterministic work of ~ops^2/2 node reads in each of the two passes (not in the default point list: run with --variant count/chain-dead/OPS/16)",
        _ => "",
    }
}

pub fn rss_variant(variant: &str, opts: &Opts, sink: &mut Sink) {
    let round: usize = if opts.quick { 10_000 } else { 100_000 };
    // text_rss_delta: resident text of this binary (KiB) relative to before the device and tensors
    let text0 = burn_probes::rss::text_rss_bytes();
    let (a, b) = pair(variant, 16);
    let backward_each = variant == "autodiff-backward-each-round";
    for step in 0..=4usize {
        if step > 0 {
            for _ in 0..round {
                let c = a.clone() + b.clone();
                drop(black_box(c));
            }
            if backward_each {
                tiny_backward();
            }
        }
        let r = rss_bytes();
        let x = step * round / 1000;
        let note = if step == 0 {
            format!(
                "process RSS = /proc/self/statm resident pages x page size ({} B); rss in MB = bytes/1e6; fresh process per variant; one iteration = c = a.clone() + b.clone(); drop(c) on 16-element f32 tensors; {}",
                page_size(),
                rss_note(variant)
            )
        } else {
            String::new()
        };
        sink.row("adleak-rss", variant, "", x, "k_iterations", "rss", f(r as f64 / 1e6, 3), "MB", &note);
        sink.row("adleak-rss", variant, "", x, "k_iterations", "rss_bytes", r, "B", "");
        let t = (burn_probes::rss::text_rss_bytes() as f64 - text0 as f64) / 1024.0;
        sink.row("adleak-rss", variant, "", x, "k_iterations", "text_rss_delta", f(t, 1), "KiB",
            if step == 0 { "resident KiB of the probe binary's executable mappings (/proc/self/smaps Rss) now minus before the variant's tensors were created" } else { "" });
    }
}

struct CountResult {
    rows: Vec<(&'static str, i64, i64, u64, Option<f64>, &'static str)>,
}

/// The counted loop. Returns per-phase (phase, bytes, blocks, alloc calls, time, time metric).
fn count_loop(mode: &str, n_ops: usize, size: usize) -> CountResult {
    // Allocated up front (and phases are &'static str) so that recording a phase does
    // not allocate between the snapshots.
    let mut rows = Vec::with_capacity(4);
    let vals = |x: f32| TensorData::new(vec![x; size], [size]);
    let ad = Device::flex().autodiff();
    // Set up tensors for the mode. `keep` holds tracked leaves for the backward-through-a phase.
    let mut tracked: Vec<Tensor<1>> = Vec::new();
    let (a, b): (Tensor<1>, Tensor<1>);
    match mode {
        "flex" | "flex.autodiff" | "a-tracked" => {
            let (x, y) = pair(mode, size);
            if mode == "a-tracked" {
                tracked.push(x.clone());
            }
            a = x;
            b = y;
        }
        "untracked" => {
            let (x, y) = pair("flex.autodiff", size);
            a = x;
            b = y;
        }
        "tracked" => {
            let (x, y) = pair("a-tracked", size);
            tracked.push(x.clone());
            a = x;
            b = y;
        }
        "interleaved" | "merge-persistent" => {
            a = Tensor::<1>::from_data(vals(1.0), &ad).require_grad();
            b = if mode == "merge-persistent" {
                Tensor::<1>::from_data(vals(2.0), &ad).require_grad()
            } else {
                Tensor::<1>::from_data(vals(2.0), &ad)
            };
            tracked.push(a.clone());
            if mode == "merge-persistent" {
                tracked.push(b.clone());
            }
        }
        "independent4" => {
            for k in 0..4 {
                tracked.push(Tensor::<1>::from_data(vals(1.0 + k as f32), &ad).require_grad());
            }
            a = tracked[0].clone();
            b = Tensor::<1>::from_data(vals(2.0), &ad);
        }
        "merge-fresh" => {
            a = Tensor::<1>::from_data(vals(1.0), &ad);
            b = Tensor::<1>::from_data(vals(2.0), &ad);
        }
        "chain-dead" => {
            // the chain's leaf is made from a in the loop phase (a itself stays off the
            // graph), so that after the loop no handle of the chain is live and the
            // unrelated backward's sweep scans the whole graph on every visit
            // (deterministic scan length, see mode_note)
            a = Tensor::<1>::from_data(vals(1.0), &ad);
            b = Tensor::<1>::from_data(vals(2.0), &ad);
        }
        other => panic!("unknown mode {other}"),
    }
    let indep: Vec<Tensor<1>> = if mode == "independent4" { tracked.clone() } else { Vec::new() };

    let before: Snapshot = alloc::snapshot();
    let t = Instant::now();
    match mode {
        "interleaved" => {
            for i in 0..n_ops {
                let c = if i % 2 == 0 { a.clone() + b.clone() } else { b.clone() + b.clone() };
                drop(black_box(c));
            }
        }
        "independent4" => {
            for i in 0..n_ops {
                let c = indep[i % 4].clone() + b.clone();
                drop(black_box(c));
            }
        }
        "chain-dead" => {
            // x = x + b: a chain of n_ops nodes in one graph; its last handle dropped
            let mut x = a.clone().detach().require_grad();
            for _ in 0..n_ops {
                x = black_box(x + b.clone());
            }
            drop(x);
        }
        "merge-fresh" => {
            // Two fresh require-grad leaves (each a new graph), merged by the add.
            // Leaf creation + require_grad are part of the iteration.
            for _ in 0..n_ops {
                let x = a.clone().detach().require_grad();
                let y = b.clone().detach().require_grad();
                let c = x + y;
                drop(black_box(c));
            }
        }
        _ => {
            for _ in 0..n_ops {
                let c = a.clone() + b.clone();
                drop(black_box(c));
            }
        }
    }
    let el = t.elapsed().as_secs_f64();
    let after = alloc::snapshot();
    rows.push((
        "after-loop",
        after.bytes_since(&before),
        after.blocks_since(&before),
        after.allocs_since(&before),
        Some(el * 1e9 / n_ops as f64),
        "ns_per_op",
    ));

    let s0 = alloc::snapshot();
    let t = Instant::now();
    tiny_backward();
    let el = t.elapsed().as_secs_f64();
    let after = alloc::snapshot();
    rows.push((
        "after-unrelated-backward",
        after.bytes_since(&before),
        after.blocks_since(&before),
        after.allocs_since(&s0),
        Some(el * 1e3),
        "backward_ms",
    ));

    if !tracked.is_empty() {
        let s0 = alloc::snapshot();
        let t = Instant::now();
        // One backward through every tracked leaf (a single loss summing them).
        let mut loss = tracked[0].clone().sum();
        for x in tracked.iter().skip(1) {
            loss = loss + x.clone().sum();
        }
        let grads = (loss * 2.0).backward();
        drop(black_box(grads));
        let el = t.elapsed().as_secs_f64();
        let after = alloc::snapshot();
        rows.push((
            "after-backward-through-a",
            after.bytes_since(&before),
            after.blocks_since(&before),
            after.allocs_since(&s0),
            Some(el * 1e3),
            "backward_ms",
        ));
    }
    drop((a, b, tracked, indep));
    CountResult { rows }
}

pub fn count_variant(variant: &str, opts: &Opts, sink: &mut Sink) {
    if variant == "sequential" {
        // The seed's count binary most likely ran its three variants one after the other
        // in ONE process; this replays that order so its backward rows can be compared.
        for v in ["flex", "flex.autodiff", "a-tracked"] {
            count_variant_exp("adleak-count-sequential", v, opts, sink);
        }
    } else {
        // "-fresh": the seed's adleak-count has another protocol (one process, one
        // warm-up add before the reference point), so the names must differ.
        count_variant_exp("adleak-count-fresh", variant, opts, sink);
    }
}

fn count_variant_exp(exp: &str, variant: &str, opts: &Opts, sink: &mut Sink) {
    let n = if opts.quick { 1_000 } else { 10_000 };
    let res = count_loop(variant, n, 16);
    for (i, (phase, bytes, blocks, _calls, _t, _tm)) in res.rows.iter().enumerate() {
        let note = match (i, *phase) {
            (0, _) => format!(
                "counting global allocator; live bytes after {n} dropped adds minus before the loop ({}); {:.1} B and {:.2} blocks per op",
                if exp == "adleak-count-fresh" { "fresh process and no warm-up iteration" } else { "variants flex, flex.autodiff, a-tracked run in this order in one process" },
                *bytes as f64 / n as f64,
                *blocks as f64 / n as f64
            ),
            (_, "after-unrelated-backward") => {
                "vs before the loop; unrelated = (x*2).sum().backward() of a fresh 1-element require-grad x".to_string()
            }
            (_, "after-backward-through-a") => "vs before the loop; backward of (a.sum()*2)".to_string(),
            _ => String::new(),
        };
        sink.row(exp, variant, phase, n, "iterations", "heap_bytes_delta", bytes, "B", &note);
        sink.row(exp, variant, phase, n, "iterations", "heap_blocks_delta", blocks, "blocks", "");
    }
}

// ---------------------------------------------------------------- params

pub fn param_points(quick: bool) -> Vec<String> {
    let div = if quick { 10 } else { 1 };
    let mut v = Vec::new();
    for ops in [1_000usize, 3_000, 10_000, 30_000, 100_000] {
        for mode in ["untracked", "tracked"] {
            v.push(format!("count/{mode}/{}/16", ops / div));
        }
    }
    for size in [1024usize, 65536] {
        for mode in ["untracked", "tracked"] {
            v.push(format!("count/{mode}/{}/{size}", 10_000 / div));
        }
    }
    for ops in [10_000usize, 100_000] {
        for mode in ["interleaved", "independent4", "merge-persistent", "merge-fresh"] {
            v.push(format!("count/{mode}/{}/16", ops / div));
        }
    }
    for steps in [200usize, 1000, 4000] {
        v.push(format!("ema/{}", if quick { steps / 10 } else { steps }));
    }
    v
}

fn mode_note(mode: &str) -> &'static str {
    match mode {
        "untracked" => "c = a + b, nothing requires grad (as adleak flex.autodiff)",
        "tracked" => "c = a + b, a requires grad (as adleak a-tracked)",
        "interleaved" => "even iterations c = a + b with a tracked, odd c = b + b untracked",
        "independent4" => "4 independent require-grad leaves a0..a3 (4 graphs); iteration i: c = a[i%4] + b",
        "merge-persistent" => "a and b both require grad (two graphs merged at the first add); c = a + b",
        "merge-fresh" => "each iteration: x = a.detach().require_grad(), y = b.detach().require_grad() (two new graphs), c = x + y merges them; drop all",
        "chain-dead" => "x = a.detach().require_grad() (a fresh leaf, no handle kept); each iteration x = x + b: a chain of ops nodes in one graph, no live handle at the backward, so every sweep visit scans all remaining nodes (maybe_useful) and free_unused_roots frees the chain's root: deterministic work of ~ops^2/2 node reads in each of the two passes (not in the default point list: run with --variant count/chain-dead/OPS/16)",
        _ => "",
    }
}

pub fn param_point(variant: &str, opts: &Opts, sink: &mut Sink) {
    let parts: Vec<&str> = variant.split('/').collect();
    match parts.as_slice() {
        ["count", mode, ops, size] => {
            let ops: usize = ops.parse().expect("ops");
            let size: usize = size.parse().expect("size");
            let res = count_loop(mode, ops, size);
            let var = format!("{mode}/size={size}");
            for (i, (phase, bytes, blocks, calls, t, tm)) in res.rows.iter().enumerate() {
                let note = if i == 0 {
                    format!(
                        "{}; {size}-element f32 tensors; fresh process; {:.1} B and {:.3} blocks per op kept; alloc_calls_delta = allocation calls during the phase",
                        mode_note(mode),
                        *bytes as f64 / ops as f64,
                        *blocks as f64 / ops as f64
                    )
                } else {
                    String::new()
                };
                let e = "adleak-count-params";
                sink.row(e, &var, phase, ops, "iterations", "heap_bytes_delta", bytes, "B", &note);
                sink.row(e, &var, phase, ops, "iterations", "heap_blocks_delta", blocks, "blocks", "");
                sink.row(e, &var, phase, ops, "iterations", "alloc_calls_delta", calls, "calls", "");
                if let Some(t) = t {
                    let (unit, d) = if *tm == "ns_per_op" { ("ns", 1) } else { ("ms", 3) };
                    sink.row(e, &var, phase, ops, "iterations", tm, f(*t, d), unit, "");
                }
            }
        }
        [kind @ ("ema" | "ema-balanced"), steps] => {
            // ema-balanced/<steps>: the same detach run on a device with Balanced gradient
            // checkpointing (experiment ema-balanced-params; not in the default point list)
            let steps: usize = steps.parse().expect("steps");
            let o = Opts { steps: Some(steps), ..opts.clone() };
            let mut tmp = Sink::new(&sink.probe, false);
            let (experiment, balanced) =
                if *kind == "ema" { ("p10-ema-params", false) } else { ("ema-balanced-params", true) };
            ema::run_mode(experiment, "detach", ema::Optim::Sgd, &o, &mut tmp, false, balanced);
            for mut r in tmp.rows {
                r.variant = format!("detach/steps={steps}");
                sink.row(&r.experiment, &r.variant, &r.phase, &r.x, &r.x_unit, &r.metric, &r.value, &r.unit, &r.note);
            }
        }
        _ => panic!("bad params variant {variant}"),
    }
}
