//! mechanism-cost `mlp-sample`: train-validate's generation
//! sample against the ops it is made of, each twin differing from the one before by one
//! mechanism. `model.valid()` of an `Mlp(128, 128, 128)` made on `flex.autodiff()` (weights
//! initialised by one forward first), a [1, 128] input on plain `Device::flex()` (train-validate
//! `plain`'s generation; on autodiff the untracked ops of 10^5 samples would pile up graphs
//! no backward frees, which train-validate's 40 samples do not):
//!
//! - `module`: `net.forward(z.clone()).sum().into_scalar()`, the probe's generation sample;
//! - `ops`: the same ops through the public tensor API on the layers' tensors, read once
//!   before the loop (`val()` outside it): matmul, the bias unsqueezed, add, relu, matmul,
//!   unsqueeze, add, sum, into_scalar. `module` less `ops`: the module calls (`Param::val`,
//!   `Linear`/`Relu` forward, `module::linear`'s dispatch) beyond the ops;
//! - `one-weight`: `ops` with the second layer's weight and bias the first layer's (one
//!   64-KiB matrix read twice instead of two matrices: what the second matrix's share of the
//!   working set costs);
//! - `matmul`, `bias-add`, `relu`, `sum-read`: each op of the sample alone in its own loop,
//!   as op-cost times ops (`drop(op(x.clone(), ..))`; `bias-add` is the unsqueeze and the add,
//!   `sum-read` a sum read back), and `parts`: 2 matmul + 2 bias-add + relu + sum-read less
//!   the five extra clones of x (one `clone` row: `drop(x.clone())`): the sample as the sum of
//!   its ops timed alone; `ops` less `parts`: what running them together adds.
//!
//! `SAMPLE_OPS` iterations a block, `SAMPLE_REPS` blocks of each kind alternated after one
//! untimed block of each; `ns_per_op` per iteration, the median of the blocks.

use crate::mlp::Mlp;
use burn::module::Module;
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::activation::relu;
use burn_probes::clock::Instant;
use burn_probes::csv::{Sink, f};
use std::hint::black_box;

const EXPERIMENT: &str = "mechanism-cost";
const SAMPLE_OPS: usize = 250;
const SAMPLE_REPS: usize = 41;
const FEATURES: usize = 128;
const NOTE: &str = "burn Flex (no simd/rayon); fresh process; src/sample.rs; Mlp(128, 128, 128) \
                    made on flex.autodiff, model.valid(), z [1, 128]";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// ns per iteration of a block of `SAMPLE_OPS` calls of `body`
fn block(body: &mut dyn FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..SAMPLE_OPS {
        body();
    }
    t.elapsed().as_secs_f64() * 1e9 / SAMPLE_OPS as f64
}

fn bias(b: &Tensor<1>) -> Tensor<2> {
    b.clone().unsqueeze::<2>()
}

pub fn mlp_sample(sink: &mut Sink) {
    let ad = Device::flex().autodiff();
    let model = Mlp::new(FEATURES, FEATURES, FEATURES, &ad);
    let warm = Tensor::<2>::random([1, FEATURES], Distribution::Default, &ad);
    let _: f32 = model.forward(warm).sum().into_scalar();
    let net = model.valid();
    for (prefix, device) in [("", Device::flex())] {
        let z = Tensor::<2>::random([1, FEATURES], Distribution::Default, &device);
        let (w1, b1) = (net.hidden.weight.val(), net.hidden.bias.as_ref().unwrap().val());
        let (w2, b2) = (net.output.weight.val(), net.output.bias.as_ref().unwrap().val());
        // the layers' tensors copied onto the input's device
        let on = |t: Tensor<2>| Tensor::<2>::from_data(t.into_data(), &device);
        let on1 = |t: Tensor<1>| Tensor::<1>::from_data(t.into_data(), &device);
        let (w1, b1, w2, b2) = (on(w1), on1(b1), on(w2), on1(b2));
        let ops = |w: &Tensor<2>, b: &Tensor<1>, w_: &Tensor<2>, b_: &Tensor<1>| {
            let a = z.clone().matmul(w.clone()) + bias(b);
            let a = relu(a);
            let a = a.matmul(w_.clone()) + bias(b_);
            let v: f32 = a.sum().into_scalar();
            black_box(v);
        };
        let x = z.clone();
        let mut kinds: Vec<(&str, Box<dyn FnMut() + '_>)> = vec![
            ("module", Box::new(|| {
                let v: f32 = net.forward(z.clone()).sum().into_scalar();
                black_box(v);
            })),
            ("ops", Box::new(|| ops(&w1, &b1, &w2, &b2))),
            ("one-weight", Box::new(|| ops(&w1, &b1, &w1, &b1))),
            ("matmul", Box::new(|| drop(black_box(x.clone().matmul(w1.clone()))))),
            ("bias-add", Box::new(|| drop(black_box(x.clone() + bias(&b1))))),
            ("relu", Box::new(|| drop(black_box(relu(x.clone()))))),
            ("sum-read", Box::new(|| {
                let v: f32 = x.clone().sum().into_scalar();
                black_box(v);
            })),
            ("clone", Box::new(|| drop(black_box(x.clone())))),
        ];
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
        for rep in 0..SAMPLE_REPS + 1 {
            for (k, (_, body)) in kinds.iter_mut().enumerate() {
                let ns = block(body.as_mut());
                if rep > 0 {
                    times[k].push(ns);
                }
            }
        }
        let med: Vec<f64> = times.iter().map(|t| median(t.clone())).collect();
        let at = |name: &str| med[kinds.iter().position(|(n, _)| *n == name).unwrap()];
        let parts = 2.0 * at("matmul") + 2.0 * at("bias-add") + at("relu") + at("sum-read")
            - 5.0 * at("clone");
        let input = "z on plain Flex";
        for ((name, _), (m, t)) in kinds.iter().zip(med.iter().zip(&times)) {
            let lo = t.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = t.iter().cloned().fold(0.0, f64::max);
            sink.row(EXPERIMENT, "mlp-sample", &format!("{prefix}{name}"), SAMPLE_OPS,
                     "iterations", "ns_per_op", f(*m, 1), "ns",
                     &format!("{NOTE}; {input}; median of {SAMPLE_REPS} blocks ({} to {} ns)",
                              f(lo, 1), f(hi, 1)));
        }
        for (name, value) in [("parts", parts), ("module-minus-ops", at("module") - at("ops")),
                              ("ops-minus-one-weight", at("ops") - at("one-weight")),
                              ("ops-minus-parts", at("ops") - parts)] {
            sink.row(EXPERIMENT, "mlp-sample", &format!("{prefix}{name}"), SAMPLE_OPS,
                     "iterations", "ns_per_op", f(value, 1), "ns",
                     &format!("{NOTE}; {input}; from the medians (parts: 2 matmul + 2 \
                               bias-add + relu + sum-read - 5 clone)"));
        }
    }
}

/// windows each `report-wake` kind times (after one untimed of each), and the generation
/// samples in a window (train-validate --quick's `report_every`)
const WAKE_WINDOWS: usize = 401;
const WAKE_SAMPLES: usize = 5;

/// mechanism-cost `report-wake` (run only when named; session 58): what train-validate's
/// report costs the generation window after it, beyond the one clock read every window holds.
/// The probe's sample (`module` above, z on plain Flex) timed in windows of `WAKE_SAMPLES`,
/// each window started by `Instant::now()` and ended by `elapsed()` as `tv.rs`'s reporter
/// does, with, untimed before each window: nothing (`bare`); the reporter's reads alone
/// (`statm`: `alloc::snapshot()` and `rss_bytes()`, a `/proc/self/statm` read); the whole
/// report (`report`: the same reads, then its four rows formatted and recorded into a scratch
/// sink that echoes each to stderr, as the probe's sink does). The kinds alternate window by
/// window; `ns_per_op` per window, the median of `WAKE_WINDOWS`, and the differences from
/// `bare` (the clock read cancels).
pub fn report_wake(sink: &mut Sink) {
    let ad = Device::flex().autodiff();
    let model = Mlp::new(FEATURES, FEATURES, FEATURES, &ad);
    let warm = Tensor::<2>::random([1, FEATURES], Distribution::Default, &ad);
    let _: f32 = model.forward(warm).sum().into_scalar();
    let net = model.valid();
    let z = Tensor::<2>::random([1, FEATURES], Distribution::Default, &Device::flex());
    let mut scratch = Sink::new("train-validate", true);
    let heap0 = burn_probes::alloc::snapshot();
    let kinds = ["bare", "statm", "report"];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
    for rep in 0..WAKE_WINDOWS + 1 {
        for (k, kind) in kinds.iter().enumerate() {
            if *kind != "bare" {
                let h = burn_probes::alloc::snapshot();
                let rss = burn_probes::rss::rss_bytes();
                if *kind == "report" {
                    let (kib, ms) = burn_probes::alloc::exclude(|| {
                        (f(h.bytes_since(&heap0) as f64 / 1024.0, 3), f(0.0049 + rep as f64 * 1e-7, 4))
                    });
                    scratch.row("train-validate", "plain", "generate", rep, "samples",
                                "host_heap_delta", kib, "KiB", "");
                    scratch.row("train-validate", "plain", "generate", rep, "samples",
                                "heap_blocks_delta", h.blocks_since(&heap0), "blocks", "");
                    scratch.row("train-validate", "plain", "generate", rep, "samples",
                                "ms_per_step", ms, "ms", "");
                    scratch.row("train-validate", "plain", "generate", rep, "samples",
                                "rss_bytes", rss, "B", "");
                }
                black_box(rss);
            }
            let t = Instant::now();
            for _ in 0..WAKE_SAMPLES {
                let v: f32 = net.forward(z.clone()).sum().into_scalar();
                black_box(v);
            }
            let ns = t.elapsed().as_secs_f64() * 1e9;
            if rep > 0 {
                times[k].push(ns);
            }
        }
    }
    let med: Vec<f64> = times.iter().map(|t| median(t.clone())).collect();
    for (kind, (m, t)) in kinds.iter().zip(med.iter().zip(&times)) {
        let mut s = t.clone();
        s.sort_by(|a, b| a.partial_cmp(b).unwrap());
        sink.row(EXPERIMENT, "report-wake", kind, WAKE_SAMPLES, "samples", "ns_per_op", f(*m, 1),
                 "ns", &format!("{NOTE}; z on plain Flex; a window of {WAKE_SAMPLES} samples, \
                                 median of {WAKE_WINDOWS} (p10 {} ns, p90 {} ns)",
                                f(s[s.len() / 10], 1), f(s[s.len() * 9 / 10], 1)));
    }
    for (k, kind) in kinds.iter().enumerate().skip(1) {
        sink.row(EXPERIMENT, "report-wake", &format!("{kind}-minus-bare"), WAKE_SAMPLES,
                 "samples", "ns_per_op", f(med[k] - med[0], 1), "ns",
                 &format!("{NOTE}; z on plain Flex; from the medians, per window of \
                           {WAKE_SAMPLES} samples"));
    }
    black_box(scratch.rows.len());
}

/// reps of `gen-window` (after one untimed), and windows of `WAKE_SAMPLES` a rep times
/// (train-validate --quick's generation: 40 samples, a report every 5)
const GEN_REPS: usize = 41;
const GEN_WINDOWS: usize = 8;
/// train-validate's three evaluators (tv.rs `VARIANTS`, in the order the kinds alternate)
/// and what `gen-window` times on each
const GEN_EVALUATORS: &[&str] = &["plain", "valid-model", "autodiff"];
const GEN_KINDS: &[&str] = &["module", "linear", "relu", "sum-read", "clone"];
/// the lift's twins: the weight plain (lifted by the op) or already on flex.autodiff
const LIFT_KINDS: &[&str] = &["lifted", "autodiff"];

/// mechanism-cost `gen-window` (run only when named; session 60): train-validate's generation
/// sample on each of its three evaluators, timed in windows of `WAKE_SAMPLES` as tv.rs times
/// them, from the state its generation starts in, without the reports. Per rep, evaluator and
/// kind (all alternated): one training step (train-validate's: forward of the [32, 128] input,
/// `powi_scalar(2).mean()`, backward, SGD 1e-3; its backward's orphan sweep frees what the
/// previous kind's iterations left), the evaluator made (the model itself on `flex.autodiff`
/// for `autodiff`, `model.valid()` for the others) and z [1, 128] on its input's device
/// (`flex.autodiff` but for `plain`), then `GEN_WINDOWS` windows of `WAKE_SAMPLES` iterations,
/// each timed: `module`, the generation sample (`net.forward(z.clone()).sum().into_scalar()`);
/// `linear`, the first layer's `module::linear(z.clone(), w, Some(b))` dropped (its weight and
/// bias read with `val()` once, before the windows); `relu`, `relu(z.clone())` dropped;
/// `sum-read`, `z.clone().sum().into_scalar()`; `clone`, `drop(z.clone())`. Rows: phase
/// `EVALUATOR/KIND`, x = iterations since the evaluator was made (5 ... 40), `ns_per_op` per
/// iteration, the median over `GEN_REPS` reps; and x = 40 at phase `EVALUATOR/KIND/all`, the
/// median of the reps' mean over the 40. Then the lift alone (phase `lift/KIND`, x = 40):
/// `module::linear(z.clone(), w.clone(), None)` with z on `flex.autodiff` and w
/// `model.valid()`'s first weight, plain, which the dispatch lifts onto autodiff for the op
/// (`Autodiff::from_inner`: a fresh node id, node and ref count, dropped with the op), or the
/// same values made on `flex.autodiff` (`autodiff`: nothing lifted), alternated rep by rep,
/// each after a training step; `lift/lifted-minus-autodiff` the median of the reps'
/// difference, and `lift/lift` that plus an autodiff handle's clone less a plain one's
/// (`valid-model/clone/all` less `plain/clone/all`): one lift, the twins' clones made equal.
pub fn gen_window(sink: &mut Sink) {
    use burn::optim::{GradientsParams, SgdConfig};
    use burn::tensor::module::linear;
    let ad = Device::flex().autodiff();
    let plain = Device::flex();
    let mut model = Mlp::new(FEATURES, FEATURES, FEATURES, &ad);
    let x = Tensor::<2>::random([32, FEATURES], Distribution::Default, &ad);
    let mut optim = SgdConfig::new().init();
    let mut times = vec![vec![vec![Vec::new(); GEN_WINDOWS + 1]; GEN_KINDS.len()]; GEN_EVALUATORS.len()];
    for rep in 0..GEN_REPS + 1 {
        for (e, evaluator) in GEN_EVALUATORS.iter().enumerate() {
            for (k, kind) in GEN_KINDS.iter().enumerate() {
                let loss = model.forward(x.clone()).powi_scalar(2).mean();
                let grads = GradientsParams::from_grads(loss.backward(), &model);
                drop(loss);
                model = optim.step(1e-3, model, grads);
                let valid;
                let (net, device): (&Mlp, &Device) = match *evaluator {
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
                let z = Tensor::<2>::random([1, FEATURES], Distribution::Default, device);
                let (w, b) = (net.hidden.weight.val(), net.hidden.bias.as_ref().unwrap().val());
                let mut body: Box<dyn FnMut()> = match *kind {
                    "module" => Box::new(|| {
                        let v: f32 = net.forward(z.clone()).sum().into_scalar();
                        black_box(v);
                    }),
                    "linear" => Box::new(|| drop(black_box(linear(z.clone(), w.clone(), Some(b.clone()))))),
                    "relu" => Box::new(|| drop(black_box(relu(z.clone())))),
                    "sum-read" => Box::new(|| {
                        let v: f32 = z.clone().sum().into_scalar();
                        black_box(v);
                    }),
                    _ => Box::new(|| drop(black_box(z.clone()))),
                };
                let mut total = 0.0;
                for win in 0..GEN_WINDOWS {
                    let t = Instant::now();
                    for _ in 0..WAKE_SAMPLES {
                        body();
                    }
                    let ns = t.elapsed().as_secs_f64() * 1e9 / WAKE_SAMPLES as f64;
                    total += ns;
                    if rep > 0 {
                        times[e][k][win].push(ns);
                    }
                }
                if rep > 0 {
                    times[e][k][GEN_WINDOWS].push(total / GEN_WINDOWS as f64);
                }
            }
        }
    }
    // the lift: valid-model's first matmul (`module::linear` without a bias) with its plain
    // weight, which the dispatch lifts onto autodiff (`from_inner`) for the op, against the
    // same values made on flex.autodiff (untracked: nothing to lift); per rep, the two
    // alternated, each after a training step, 40 iterations in windows of 5 as above
    let mut lift: Vec<Vec<f64>> = vec![Vec::new(); LIFT_KINDS.len()];
    for rep in 0..GEN_REPS + 1 {
        for (k, kind) in LIFT_KINDS.iter().enumerate() {
            let loss = model.forward(x.clone()).powi_scalar(2).mean();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            drop(loss);
            model = optim.step(1e-3, model, grads);
            let valid = model.valid();
            let z = Tensor::<2>::random([1, FEATURES], Distribution::Default, &ad);
            let wp = valid.hidden.weight.val();
            let wa = Tensor::<2>::from_data(wp.clone().into_data(), &ad);
            let w = if *kind == "lifted" { wp } else { wa };
            let mut total = 0.0;
            for _ in 0..GEN_WINDOWS {
                let t = Instant::now();
                for _ in 0..WAKE_SAMPLES {
                    drop(black_box(linear(z.clone(), w.clone(), None)));
                }
                total += t.elapsed().as_secs_f64() * 1e9 / WAKE_SAMPLES as f64;
            }
            if rep > 0 {
                lift[k].push(total / GEN_WINDOWS as f64);
            }
        }
    }
    let diff: Vec<f64> = lift[0].iter().zip(&lift[1]).map(|(a, b)| a - b).collect();
    // the lift alone: the twins' difference with their weights' clones made equal (the
    // lifted twin clones a plain handle, the other an autodiff one): plus an autodiff
    // handle's clone less a plain one's (valid-model's `clone` less plain's, the medians
    // of the reps' means)
    let clone_of = |e: usize| median(times[e][4][GEN_WINDOWS].clone());
    let lift_alone = median(diff.clone()) + clone_of(1) - clone_of(0);
    sink.row(EXPERIMENT, "gen-window", "lift/lift", GEN_WINDOWS * WAKE_SAMPLES, "iterations",
             "ns_per_op", f(lift_alone, 1), "ns",
             "burn Flex+autodiff (no simd/rayon); fresh process; src/sample.rs gen_window; \
              lifted-minus-autodiff + (valid-model/clone/all - plain/clone/all): one plain \
              operand's lift onto autodiff (from_inner), the handles' clones made equal");
    for (name, t) in LIFT_KINDS.iter().copied().zip(&lift).chain([("lifted-minus-autodiff", &diff)]) {
        let mut s = t.clone();
        s.sort_by(|a, b| a.partial_cmp(b).unwrap());
        sink.row(EXPERIMENT, "gen-window", &format!("lift/{name}"), GEN_WINDOWS * WAKE_SAMPLES,
                 "iterations", "ns_per_op", f(median(t.clone()), 1), "ns",
                 &format!("burn Flex+autodiff (no simd/rayon); fresh process; src/sample.rs \
                           gen_window; module::linear(z, w, None), z [1, 128] on flex.autodiff, \
                           w model.valid()'s [128, 128] weight (lifted) or its values on \
                           flex.autodiff (autodiff), after a training step; median of {GEN_REPS} \
                           reps' mean of 40 (p10 {} ns, p90 {} ns)",
                          f(s[s.len() / 10], 1), f(s[s.len() * 9 / 10], 1)));
    }
    for (e, evaluator) in GEN_EVALUATORS.iter().enumerate() {
        for (k, kind) in GEN_KINDS.iter().enumerate() {
            for win in 0..=GEN_WINDOWS {
                let t = &times[e][k][win];
                let mut s = t.clone();
                s.sort_by(|a, b| a.partial_cmp(b).unwrap());
                let (phase, x) = if win == GEN_WINDOWS {
                    (format!("{evaluator}/{kind}/all"), GEN_WINDOWS * WAKE_SAMPLES)
                } else {
                    (format!("{evaluator}/{kind}"), (win + 1) * WAKE_SAMPLES)
                };
                sink.row(EXPERIMENT, "gen-window", &phase, x, "iterations", "ns_per_op",
                         f(median(t.clone()), 1), "ns",
                         &format!("burn Flex+autodiff (no simd/rayon); fresh process; src/sample.rs \
                                   gen_window; train-validate's Mlp(128, 128, 128) after a training \
                                   step; {evaluator} evaluator; median of {GEN_REPS} reps (p10 {} ns, \
                                   p90 {} ns)", f(s[s.len() / 10], 1), f(s[s.len() * 9 / 10], 1)));
            }
        }
    }
}
