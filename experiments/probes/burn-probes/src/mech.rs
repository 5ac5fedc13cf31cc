//! mechanism-cost: the time of one mechanism at a time, each against a twin that differs
//! from it by that mechanism only.
//!
//! Every variant runs in a fresh process (the first-call costs are per process); the
//! first-call variants `first-gemm` and `param-init` run their program (`VARIANT/once`)
//! in `FRESH` fresh processes and write each row's median over them, with the runs'
//! values in the note. The simulator's workload `experiments/mechanism_cost.py` runs
//! the same programs.
//!
//! - `page-fault`: a fresh 16-MiB block (glibc maps it: above the mmap threshold), one
//!   byte written per 4-KiB page; `ns_per_op` = ns per page made resident (median of
//!   `REPS` fresh blocks). No burn code runs.
//! - `text-fault`: the first `TEXT_BYTES` of the probe's own executable mapped read-only
//!   (`mmap`, MAP_PRIVATE: file pages already in the page cache, as a running binary's text
//!   is), one byte read per 4-KiB page; `ns_per_op` = ns per 64 KiB made resident (one
//!   fault maps the pages of its 64-KiB fault-around window; median of `REPS` fresh
//!   mappings). No burn code runs.
//! - `first-gemm`: plain Flex, lhs [64, 512] and rhs [512, 512] (p10-ema's forward)
//!   made first; then `drop(lhs.clone().matmul(rhs.clone()))` five times, each timed
//!   (`ms_per_step`, x = call): the first is the thread's first gemm call.
//! - `param-init`: on `flex.autodiff()`, `Tensor::random([512, 512], Uniform(-a, a))` (the
//!   call a Linear(512, 512)'s lazy weight init makes) five times, each timed and dropped
//!   (`ms_per_step`, x = call): the process's first random fill is call 1.
//! - `sweep-free`: for N in `SWEEP_NODES`, `REPS` pairs of unrelated backwards (a
//!   one-element leaf, `(x * 2).sum().backward()`) after N untracked adds on
//!   `flex.autodiff()`: `live`, the N outputs kept (the sweep visits N single-node graphs
//!   with a live handle and frees none), and `dead`, each output dropped (the sweep visits
//!   N dead graphs, reads each node once more and frees it). Rows per N: `backward_ms` of
//!   each (median) and `ns_per_op` at phase `dead-minus-live` (median of the pairs'
//!   difference / N): what freeing one dead node costs the sweep beyond visiting it.
//!   One unrelated backward before the first pair (the first backward's lazy set-up), one
//!   after each `live` run (untimed: frees the kept outputs once dropped).
//! - `merge`: blocks of `MERGE_OPS` iterations, `REPS` of each kind, alternated; every
//!   iteration makes two fresh leaves requiring grad, `x = a.clone().detach().require_grad()`
//!   and `y` likewise from b (two new graphs): `merge` adds `x + y` (the add's parents are
//!   in two graphs: y's graph is merged into x's), `twin` adds `x.clone() + x` and drops y
//!   (one graph; the extra clone is a modelled cost). An untimed unrelated backward after
//!   each block frees what it left. Rows: `ns_per_op` of each (median) and at phase
//!   `merge-minus-twin` the median of the block pairs' difference.
//! - `release`: blocks of `RELEASE_OPS` iterations, `RELEASE_REPS` of each kind,
//!   alternated; an iteration makes `c = a.clone() + b.clone()` (16 elements) untimed and
//!   times `drop(c)` alone: `release` on `flex.autodiff()` (the untracked output's last
//!   handle: under a patch that releases on drop, the release of a node made just before;
//!   unpatched, the handle's reference counts only), `plain` on plain Flex (the same
//!   buffers freed, no autodiff). An untimed unrelated backward after each `release`
//!   block. Rows: `ns_per_op` of each (median) and at phase `release-minus-plain` the
//!   median of the block pairs' difference: what dropping an autodiff output costs beyond
//!   its buffers (the clock's own cost is in both and cancels).
//! - `register-growth` (run only when named): what a tracked op's registration costs in a
//!   graph that grows against one that stays small. `x` a [16] leaf requiring grad;
//!   blocks of `GROWTH_OPS` iterations `c = x.clone().mul_scalar(2.0)`, alternated,
//!   `GROWTH_REPS` of each after one untimed `kept` block: `steady` drops `c` at once
//!   (under a patch that releases on drop the graph stays at x and one node; unpatched it
//!   grows either way), `kept` pushes `c` on a Vec dropped after the block, untimed (the
//!   graph and the locator grow by `GROWTH_OPS` nodes in the block, and, released, shrink
//!   after it; the tables keep their size). Rows: `ns_per_op` of each (median) and
//!   `kept-minus-steady` (median of the pairs). Run with a large glibc trim threshold
//!   (`GLIBC_TUNABLES=glibc.malloc.trim_threshold=...`) so that a block's blocks come back
//!   from the heap, not from fresh pages.
//! - `register-size` (run only when named): what a tracked op's registration costs by the
//!   size of the graph it registers into. For N in `SIZE_NODES`, `SIZE_REPS` blocks of each
//!   kind, alternated; each block starts from a fresh leaf `x` ([16], requiring grad) whose
//!   graph is grown untimed to N nodes (N outputs `x.clone().mul_scalar(2.0)` kept), then
//!   times `SIZE_OPS` iterations of the same op: `steady` drops each output (under a patch
//!   that releases on drop the graph stays at N nodes; unpatched it grows by the block),
//!   `kept` keeps them to the block's end (both builds register into the same graph and
//!   keep the same blocks); then everything is dropped and an unrelated backward sweeps
//!   the dead graph (untimed). Rows: `ns_per_op` per kind and N (median), the block's
//!   minor faults per iteration in the note.
//! - `unrelated-backward` (diagnostic, run only when named): adleak-count-params' unrelated
//!   backward after a loop, repeated: `--steps N` (default 1,000) untracked adds
//!   `drop(a.clone() + b.clone())` on `flex.autodiff()` (16 elements), untimed, then
//!   `BACKWARDS` unrelated backwards (a fresh one-element leaf, `(x * 2).sum().backward()`),
//!   each timed: `backward_ms` at phase `backward-K` (x = N), its minor faults in the note.
//!   No backward runs before the first (as in the params probe). `PROBE_GAP=spin:MS` or
//!   `sleep:MS` puts that much wall time between the loop and the backwards (the core kept
//!   spinning, or given up), to tell the loop's work from the time it takes.
//! - `leak-replay` (run only when named): unpatched burn's leak at burn's own block sizes
//!   and order (op-cost's untracked add and tracked mul_scalar traced, then replayed with
//!   the kept blocks leaked against the same blocks freed): what the leak costs beyond its
//!   page faults (src/leak.rs).
//! - `leak-fault` (run only when named): op-cost's iterations with the heap's top resident,
//!   with it trimmed (unpatched burn's leak faults fresh pages) and with unrelated page
//!   faults injected as often: what a fault costs inside burn's own op (src/leakfault.rs).
//! - `read-scalar`: blocks of `RELEASE_OPS` iterations, `RELEASE_REPS` of each kind,
//!   alternated; an iteration makes `s = x.clone().sum()` (x [1, 128]) untimed and times
//!   either `s.into_scalar()` (`read`: burn-flex's `into_data`, the `TensorData` built and
//!   its first element read) or `drop(s)` (`drop`: the same buffers freed, nothing read),
//!   on plain Flex and, as `autodiff-*`, on `flex.autodiff()` (s untracked). Rows:
//!   `ns_per_op` of each (median) and at `read-minus-drop` / `autodiff-read-minus-drop`
//!   the median of the block pairs' difference: what reading a scalar back costs beyond
//!   dropping the tensor (the clock's own cost is in both and cancels).
//! - `train-step`: train-validate's training step alone (sim/burn/nn.py's `Mlp`,
//!   Linear(d, d) -> Relu -> Linear(d, d) on `flex.autodiff()`, loss = out.powi_scalar(2)
//!   .mean(), `GradientsParams::from_grads(loss.backward(), &model)`, SGD's `optim.step`):
//!   d = 4 with a [1, 4] input (phase `d4`: the kernels cost next to nothing, the step's
//!   bookkeeping is all that is left) and d = 128 with [32, 128] (phase `d128`: the
//!   program's own shapes); `TRAIN_WARM` steps untimed, then `TRAIN_REPS` blocks of
//!   `TRAIN_STEPS`: `ms_per_step` (median of the blocks; x = d).
//! - `gemm-shape` (diagnostic, not run by `all`): plain Flex, the gemm of several shapes
//!   (contiguous, and with a transposed lhs view as a matmul's weight gradient has),
//!   `drop(lhs.clone().matmul(rhs.clone()))`, median of `GEMM_CALLS` calls after
//!   `GEMM_WARM` untimed ones: `ms_per_step` per shape (phase `MxKxN`, `-lhsT` for the
//!   transposed lhs; x = k), GFLOP/s in the note.
//! - `tv-timeline` (diagnostic, stderr only, not run by `all`): train-validate's training
//!   step (`train-step`'s d128) in a fresh process, `TV_STEPS` steps (60) each timed
//!   alone, and between every 5 steps (untimed) what `TV_MODE` names: nothing (`alone`),
//!   train-validate's validation (`val`: `model.valid()`, a plain [32, 128] input, two
//!   forwards read back), its report's reads (`report`: statm, the heap counters, a
//!   formatted string) or both (`both`). Prints each step's us, the time between, and per
//!   step the thread's involuntary context switches and minor faults (getrusage).
//! - `rehash`: what a hash table's doubling costs per item it moves, on stand-ins of
//!   burn-autodiff's five graph tables (src/rehash.rs).
//! - `heap-refault` (diagnostic, not run by `all`): a page the heap's top gave back,
//!   faulted in again, against a twin whose pages stay resident (src/rehash.rs).
//! - `mlp-sample`: train-validate's generation sample (plain Flex) against the ops it is
//!   made of, run together and each alone (src/sample.rs): `module-minus-ops`, what
//!   `Linear::forward`'s module path costs beyond its ops, twice.
//! - `gen-window` (run only when named; session 60): train-validate's generation sample on
//!   each of its three evaluators (plain, valid-model, autodiff) and the sample's parts, in
//!   windows of 5 after a training step, and the lift of a plain operand onto autodiff
//!   (`lift/lift`: a matmul with `model.valid()`'s plain weight on an autodiff input less the
//!   same with the weight on autodiff, the handles' clones made equal) (src/sample.rs).

use crate::Opts;
use burn::prelude::*;
use burn::tensor::Distribution;
use burn_probes::csv::{Sink, f};
use std::hint::black_box;
use burn_probes::clock::Instant;
use burn_probes::rss::{minor_faults, thread_rusage};

use crate::adleak::tiny_backward;

const EXPERIMENT: &str = "mechanism-cost";
pub const VARIANTS: &[&str] = &["page-fault", "text-fault", "first-gemm", "param-init", "sweep-free",
                                 "merge", "release", "read-scalar", "train-step", "rehash",
                                 "mlp-sample", "clock-read"];
const GEMM_CALLS: usize = 15;
const TRAIN_WARM: usize = 20;
const TRAIN_STEPS: usize = 50;
const TRAIN_REPS: usize = 11;
const GEMM_WARM: usize = 3;
const REPS: usize = 5;
/// fresh processes of a first-call variant (its rows are the medians over them)
const FRESH: usize = 9;
const MERGE_REPS: usize = 41;
const FAULT_BYTES: usize = 16 << 20;
const PAGE: usize = 4096;
/// bytes of the executable `text-fault` maps, and Linux's default fault-around window
/// (mm/memory.c fault_around_pages: 64 KiB)
const TEXT_BYTES: usize = 4 << 20;
const FAULT_AROUND: usize = 64 << 10;
const CALLS: usize = 5;
pub const SWEEP_NODES: &[usize] = &[100, 300, 1_000, 3_000, 10_000];
const MERGE_OPS: usize = 250;
const RELEASE_OPS: usize = 250;
const RELEASE_REPS: usize = 41;
/// iterations of a `register-growth` block, and blocks of each kind
const GROWTH_OPS: usize = 2_000;
const GROWTH_REPS: usize = 11;
/// nodes a `register-size` graph holds before its timed block, iterations of a block, and
/// blocks of each kind per size
const SIZE_NODES: &[usize] = &[0, 1_000, 2_000, 3_000, 5_000, 10_000, 30_000, 60_000];
const SIZE_OPS: usize = 1_000;
const SIZE_REPS: usize = 7;
const NOTE: &str = "burn Flex (no simd/rayon); fresh process per variant; src/mech.rs";

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn spread(v: &[f64], d: usize) -> String {
    v.iter().map(|x| f(*x, d)).collect::<Vec<_>>().join(", ")
}

pub fn run_variant(variant: &str, opts: &Opts, sink: &mut Sink) {
    match variant {
        "page-fault" => page_fault(sink),
        "text-fault" => text_fault(sink),
        "first-gemm" | "param-init" => fresh_medians(variant, sink),
        "first-gemm/once" => first_gemm(sink),
        "param-init/once" => param_init(sink),
        "sweep-free" => sweep_free(opts, sink),
        "merge" => merge(opts, sink),
        "release" => release(opts, sink),
        "register-growth" => register_growth(sink),
        "register-size" => register_size(sink),
        "unrelated-backward" => unrelated_backward(opts, sink),
        "leak-replay" => crate::leak::leak_replay(sink),
        "leak-fault" => crate::leakfault::leak_fault(sink),
        "read-scalar" => read_scalar(sink),
        "train-step" => train_step(sink),
        "gemm-shape" => gemm_shape(sink),
        "tv-timeline" => tv_timeline(),
        "rehash" => crate::rehash::rehash(sink),
        "heap-refault" => crate::rehash::heap_refault(sink),
        "mlp-sample" => crate::sample::mlp_sample(sink),
        "clock-read" => clock_read(sink),
        "report-wake" => crate::sample::report_wake(sink),
        "gen-window" => crate::sample::gen_window(sink),
        other => panic!("unknown variant {other}"),
    }
}

/// reads of the probes' clock a `clock-read` block times, and blocks
const CLOCK_PAIRS: usize = 20_001;

/// `clock-read`: what one read of the probes' own clock costs inside a timed window. Every
/// window of a probe runs from one read of `clock::Instant` (`now`) to the next (`elapsed`):
/// it holds the end of the first read and the start of the second, one read in all. Timed
/// the same way, a window with nothing in it: `Instant::now()` then `elapsed()`, back to
/// back; the median of `CLOCK_PAIRS` such windows (after 1,000 untimed reads). Wall time:
/// a vDSO read of CLOCK_MONOTONIC; with `PROBE_CPU_TIME`, `clock_gettime(
/// CLOCK_THREAD_CPUTIME_ID)`, a system call (no vDSO path for a thread's clock).
fn clock_read(sink: &mut Sink) {
    for _ in 0..1_000 {
        black_box(Instant::now());
    }
    let mut ns = Vec::with_capacity(CLOCK_PAIRS);
    for _ in 0..CLOCK_PAIRS {
        let t = Instant::now();
        ns.push(t.elapsed().as_secs_f64() * 1e9);
    }
    let (lo, hi) = {
        let mut s = ns.clone();
        s.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (s[s.len() / 10], s[s.len() * 9 / 10])
    };
    let clock = if burn_probes::clock::cpu_time() {
        "the thread's CPU clock (PROBE_CPU_TIME: clock_gettime(CLOCK_THREAD_CPUTIME_ID))"
    } else {
        "wall time (std::time::Instant: clock_gettime(CLOCK_MONOTONIC))"
    };
    sink.row(EXPERIMENT, "clock-read", "window", 1, "reads", "ns_per_op", f(median(ns), 1), "ns",
             &format!("{NOTE}; an empty timed window (Instant::now() then elapsed()) on {clock}: \
                       one read; median of {CLOCK_PAIRS} windows (p10 {} ns, p90 {} ns)",
                      f(lo, 1), f(hi, 1)));
}

/// ns per 4-KiB page made resident, one value per block: `blocks` fresh 16-MiB blocks
/// (mmapped by glibc), each written one byte per page (`page-fault`'s rows, and
/// `leak-replay`'s fault in its own process).
pub(crate) fn fault_ns_per_page(blocks: usize) -> Vec<f64> {
    let layout = std::alloc::Layout::from_size_align(FAULT_BYTES, PAGE).unwrap();
    let pages = FAULT_BYTES / PAGE;
    let mut per_page = Vec::new();
    for _ in 0..blocks {
        unsafe {
            let p = std::alloc::alloc(layout);
            assert!(!p.is_null());
            let t = Instant::now();
            for i in 0..pages {
                std::ptr::write_volatile(p.add(i * PAGE), 1u8);
            }
            per_page.push(t.elapsed().as_secs_f64() * 1e9 / pages as f64);
            std::alloc::dealloc(p, layout);
        }
    }
    per_page
}

fn page_fault(sink: &mut Sink) {
    let pages = FAULT_BYTES / PAGE;
    let per_page = fault_ns_per_page(REPS);
    let note = format!("{NOTE}; a fresh 16-MiB block (mmapped by glibc), one byte written per \
                        4-KiB page; ns per page, median of {REPS} blocks ({} ns)",
                       spread(&per_page, 1));
    sink.row(EXPERIMENT, "page-fault", "first-touch", pages, "pages", "ns_per_op",
             f(median(per_page), 3), "ns", &note);
}

unsafe extern "C" {
    fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, offset: i64) -> *mut u8;
    fn munmap(addr: *mut u8, len: usize) -> i32;
}

fn text_fault(sink: &mut Sink) {
    use std::os::unix::io::AsRawFd;
    const PROT_READ: i32 = 1;
    const MAP_PRIVATE: i32 = 2;
    let exe = std::env::current_exe().expect("current_exe");
    // read once: every page of the file is in the page cache, as a running binary's are
    let bytes = std::fs::read(&exe).expect("read the executable");
    assert!(bytes.len() >= TEXT_BYTES, "the executable is smaller than {TEXT_BYTES} B");
    drop(bytes);
    let file = std::fs::File::open(&exe).expect("open the executable");
    let windows = TEXT_BYTES / FAULT_AROUND;
    let mut per_window = Vec::new();
    for _ in 0..REPS {
        unsafe {
            let p = mmap(std::ptr::null_mut(), TEXT_BYTES, PROT_READ, MAP_PRIVATE,
                         file.as_raw_fd(), 0);
            assert!(p as isize != -1, "mmap failed");
            let t = Instant::now();
            for i in 0..TEXT_BYTES / PAGE {
                black_box(std::ptr::read_volatile(p.add(i * PAGE)));
            }
            per_window.push(t.elapsed().as_secs_f64() * 1e9 / windows as f64);
            munmap(p, TEXT_BYTES);
        }
    }
    let note = format!("{NOTE}; the first 4 MiB of the probe's executable mapped read-only \
                        (MAP_PRIVATE, pages in the page cache), one byte read per 4-KiB page; \
                        ns per 64 KiB, median of {REPS} mappings ({} ns)",
                       spread(&per_window, 1));
    sink.row(EXPERIMENT, "text-fault", "fault-around", windows, "windows", "ns_per_op",
             f(median(per_window), 3), "ns", &note);
}

/// Runs `VARIANT/once` in `FRESH` fresh processes and writes each row's median over them
/// (the runs' values in its note): a first call happens once per process, and a single
/// one on a shared machine is often stretched by a wait for the CPU.
fn fresh_medians(variant: &str, sink: &mut Sink) {
    let exe = std::env::current_exe().expect("current_exe");
    let mut keys: Vec<Vec<String>> = Vec::new();
    let mut values: Vec<Vec<f64>> = Vec::new();
    for _ in 0..FRESH {
        let out = std::process::Command::new(&exe)
            .args(["mechanism-cost", "--variant", &format!("{variant}/once"), "--child"])
            .stderr(std::process::Stdio::null())
            .output()
            .expect("run a fresh child");
        assert!(out.status.success(), "{variant}/once failed");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        for (i, line) in text.lines().filter(|l| l.starts_with(EXPERIMENT)).enumerate() {
            // experiment,variant,phase,x,x_unit,metric,value,unit,note... (value: field 6)
            let fields: Vec<String> = line.splitn(9, ',').map(|s| s.to_string()).collect();
            if keys.len() <= i {
                keys.push(fields.clone());
                values.push(Vec::new());
            }
            values[i].push(fields[6].parse().expect("a number"));
        }
    }
    for (i, (k, v)) in keys.iter().zip(values).enumerate() {
        let note = if i == 0 {
            format!("{NOTE}; {}; median of {FRESH} fresh processes ({} ms)", describe(variant),
                    spread(&v, 4))
        } else {
            format!("median of {FRESH} fresh processes ({} ms)", spread(&v, 4))
        };
        sink.row(EXPERIMENT, variant, &k[2], &k[3], &k[4], &k[5], f(median(v), 6), &k[7],
                 &note);
    }
}

fn describe(variant: &str) -> &'static str {
    match variant {
        "first-gemm" => "plain Flex, lhs [64, 512] x rhs [512, 512] made first; \
                         drop(lhs.clone().matmul(rhs.clone())) timed per call: call 1 is the \
                         thread's first gemm",
        _ => "flex.autodiff, Tensor::random([512, 512], Uniform) timed per call and dropped: \
              a Linear(512, 512)'s lazy weight init; call 1 is the process's first random fill",
    }
}

fn first_gemm(sink: &mut Sink) {
    let device = Device::flex();
    let lhs = Tensor::<2>::random([64, 512], Distribution::Default, &device);
    let rhs = Tensor::<2>::random([512, 512], Distribution::Default, &device);
    for call in 1..=CALLS {
        let t = Instant::now();
        drop(black_box(lhs.clone().matmul(rhs.clone())));
        let ms = t.elapsed().as_secs_f64() * 1e3;
        sink.row(EXPERIMENT, "first-gemm", "call", call, "call", "ms_per_step", f(ms, 6), "ms", "");
    }
}

fn param_init(sink: &mut Sink) {
    let device = Device::flex().autodiff();
    // KaimingUniform of a Linear(512, 512) weight: bound = sqrt(3) * sqrt(2 / fan_in)... the
    // bound's value does not change the cost of the draw
    let bound = 0.1082f64;
    for call in 1..=CALLS {
        let t = Instant::now();
        let w = Tensor::<2>::random([512, 512], Distribution::Uniform(-bound, bound), &device);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        drop(black_box(w));
        sink.row(EXPERIMENT, "param-init", "call", call, "call", "ms_per_step", f(ms, 6), "ms", "");
    }
}

fn pair(device: &Device) -> (Tensor<1>, Tensor<1>) {
    let a = Tensor::<1>::from_data(TensorData::new(vec![1.0f32; 16], [16]), device);
    let b = Tensor::<1>::from_data(TensorData::new(vec![2.0f32; 16], [16]), device);
    (a, b)
}

fn timed_backward() -> f64 {
    let t = Instant::now();
    tiny_backward();
    t.elapsed().as_secs_f64() * 1e3
}

fn sweep_free(_opts: &Opts, sink: &mut Sink) {
    let device = Device::flex().autodiff();
    let (a, b) = pair(&device);
    tiny_backward();
    for (i, &n) in SWEEP_NODES.iter().enumerate() {
        let (mut live, mut dead, mut diff) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..REPS {
            let mut kept = Vec::with_capacity(n);
            for _ in 0..n {
                kept.push(a.clone() + b.clone());
            }
            let l = timed_backward();
            drop(kept);
            tiny_backward();
            for _ in 0..n {
                drop(black_box(a.clone() + b.clone()));
            }
            let d = timed_backward();
            live.push(l);
            dead.push(d);
            diff.push((d - l) * 1e6 / n as f64);
        }
        let note = if i == 0 {
            format!("{NOTE}; flex.autodiff, N untracked adds c = a + b (16 elements), then an \
                     unrelated backward: live = the N outputs kept, dead = each dropped; \
                     one backward first; medians of {REPS} pairs")
        } else {
            String::new()
        };
        sink.row(EXPERIMENT, "sweep-free", "live", n, "nodes", "backward_ms",
                 f(median(live.clone()), 6), "ms", &format!("{note}{}runs: {} ms",
                 if note.is_empty() { "" } else { "; " }, spread(&live, 4)));
        sink.row(EXPERIMENT, "sweep-free", "dead", n, "nodes", "backward_ms",
                 f(median(dead.clone()), 6), "ms", &format!("runs: {} ms", spread(&dead, 4)));
        sink.row(EXPERIMENT, "sweep-free", "dead-minus-live", n, "nodes", "ns_per_op",
                 f(median(diff.clone()), 3), "ns",
                 &format!("(dead - live) / N per pair: {} ns", spread(&diff, 1)));
    }
}

fn merge(_opts: &Opts, sink: &mut Sink) {
    let device = Device::flex().autodiff();
    let (a, b) = pair(&device);
    tiny_backward();
    let block = |merging: bool| -> f64 {
        let t = Instant::now();
        for _ in 0..MERGE_OPS {
            let x = a.clone().detach().require_grad();
            let y = b.clone().detach().require_grad();
            let c = if merging {
                x + y
            } else {
                drop(y);
                x.clone() + x
            };
            drop(black_box(c));
        }
        let ns = t.elapsed().as_secs_f64() * 1e9 / MERGE_OPS as f64;
        tiny_backward();
        ns
    };
    let (mut merged, mut twin, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..MERGE_REPS {
        let m = block(true);
        let t = block(false);
        merged.push(m);
        twin.push(t);
        diff.push(m - t);
    }
    let note = format!("{NOTE}; flex.autodiff; blocks of {MERGE_OPS} iterations: x = \
                        a.clone().detach().require_grad(), y likewise from b (two new graphs); \
                        merge: c = x + y (y's graph merged into x's); twin: drop(y), c = \
                        x.clone() + x; an unrelated backward after each block; medians of \
                        {MERGE_REPS} blocks each");
    sink.row(EXPERIMENT, "merge", "merge", MERGE_OPS, "iterations", "ns_per_op",
             f(median(merged.clone()), 3), "ns", &format!("{note}; runs: {} ns", spread(&merged, 1)));
    sink.row(EXPERIMENT, "merge", "twin", MERGE_OPS, "iterations", "ns_per_op",
             f(median(twin.clone()), 3), "ns", &format!("runs: {} ns", spread(&twin, 1)));
    sink.row(EXPERIMENT, "merge", "merge-minus-twin", MERGE_OPS, "iterations", "ns_per_op",
             f(median(diff.clone()), 3), "ns", &format!("per block pair: {} ns", spread(&diff, 1)));
}

/// Mean ns of `drop(c)` alone over `RELEASE_OPS` outputs `c = a + b` made untimed.
fn timed_drops(a: &Tensor<1>, b: &Tensor<1>) -> f64 {
    let mut ns = 0.0;
    for _ in 0..RELEASE_OPS {
        let c = black_box(a.clone() + b.clone());
        let t = Instant::now();
        drop(c);
        ns += t.elapsed().as_secs_f64() * 1e9;
    }
    ns / RELEASE_OPS as f64
}

fn release(_opts: &Opts, sink: &mut Sink) {
    let (a, b) = pair(&Device::flex().autodiff());
    let (pa, pb) = pair(&Device::flex());
    tiny_backward();
    let (mut released, mut plain, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RELEASE_REPS {
        let r = timed_drops(&a, &b);
        tiny_backward();
        let p = timed_drops(&pa, &pb);
        released.push(r);
        plain.push(p);
        diff.push(r - p);
    }
    let note = format!("{NOTE}; blocks of {RELEASE_OPS} iterations: c = a.clone() + b.clone() \
                        (16 elements) made untimed, drop(c) timed alone; release: \
                        flex.autodiff (an untracked output), plain: Flex; an unrelated \
                        backward after each release block; medians of {RELEASE_REPS} blocks \
                        each");
    sink.row(EXPERIMENT, "release", "release", RELEASE_OPS, "iterations", "ns_per_op",
             f(median(released.clone()), 3), "ns",
             &format!("{note}; runs: {} ns", spread(&released, 1)));
    sink.row(EXPERIMENT, "release", "plain", RELEASE_OPS, "iterations", "ns_per_op",
             f(median(plain.clone()), 3), "ns", &format!("runs: {} ns", spread(&plain, 1)));
    sink.row(EXPERIMENT, "release", "release-minus-plain", RELEASE_OPS, "iterations",
             "ns_per_op", f(median(diff.clone()), 3), "ns",
             &format!("per block pair: {} ns", spread(&diff, 1)));
}

/// Mean ns per iteration of a `register-growth` block (`keep`: the outputs kept in a Vec
/// dropped after the timed loop).
fn growth_block(x: &Tensor<1>, keep: bool) -> f64 {
    let mut kept = Vec::with_capacity(if keep { GROWTH_OPS } else { 0 });
    let t = Instant::now();
    for _ in 0..GROWTH_OPS {
        let c = black_box(x.clone().mul_scalar(2.0));
        if keep {
            kept.push(c);
        } else {
            drop(c);
        }
    }
    let ns = t.elapsed().as_secs_f64() * 1e9 / GROWTH_OPS as f64;
    drop(black_box(kept));
    ns
}

fn register_growth(sink: &mut Sink) {
    let device = Device::flex().autodiff();
    let (a, _) = pair(&device);
    let x = a.detach().require_grad();
    growth_block(&x, true);
    let (mut steady, mut kept, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..GROWTH_REPS {
        let s = growth_block(&x, false);
        let k = growth_block(&x, true);
        steady.push(s);
        kept.push(k);
        diff.push(k - s);
    }
    let note = format!("{NOTE}; flex.autodiff; x [16] requiring grad; blocks of {GROWTH_OPS} \
                        iterations c = x.clone().mul_scalar(2.0): steady drops c, kept keeps \
                        it until the block ends (dropped untimed); one kept block first, \
                        untimed; medians of {GROWTH_REPS} blocks each");
    sink.row(EXPERIMENT, "register-growth", "steady", GROWTH_OPS, "iterations", "ns_per_op",
             f(median(steady.clone()), 3), "ns",
             &format!("{note}; runs: {} ns", spread(&steady, 1)));
    sink.row(EXPERIMENT, "register-growth", "kept", GROWTH_OPS, "iterations", "ns_per_op",
             f(median(kept.clone()), 3), "ns", &format!("runs: {} ns", spread(&kept, 1)));
    sink.row(EXPERIMENT, "register-growth", "kept-minus-steady", GROWTH_OPS, "iterations",
             "ns_per_op", f(median(diff.clone()), 3), "ns",
             &format!("per block pair: {} ns", spread(&diff, 1)));
}

/// unrelated backwards `unrelated-backward` times after its loop
const BACKWARDS: usize = 5;

fn unrelated_backward(opts: &Opts, sink: &mut Sink) {
    let n = opts.steps.unwrap_or(1_000);
    let device = Device::flex().autodiff();
    let (a, b) = pair(&device);
    for _ in 0..n {
        drop(black_box(a.clone() + b.clone()));
    }
    // `PROBE_GAP=spin:MS` or `sleep:MS`: that long between the loop and the backwards,
    // spinning on the clock (the core kept) or asleep (the core given up)
    let gap = std::env::var("PROBE_GAP").unwrap_or_default();
    if let Some((how, ms)) = gap.split_once(':') {
        let ms: u64 = ms.parse().expect("PROBE_GAP: spin:MS or sleep:MS");
        let until = std::time::Instant::now() + std::time::Duration::from_millis(ms);
        match how {
            "spin" => while std::time::Instant::now() < until { std::hint::spin_loop() },
            "sleep" => std::thread::sleep(std::time::Duration::from_millis(ms)),
            other => panic!("PROBE_GAP: unknown {other}"),
        }
    }
    for k in 1..=BACKWARDS {
        let f0 = minor_faults();
        let ms = timed_backward();
        let faults = minor_faults() - f0;
        let note = if k == 1 {
            format!("{NOTE}; flex.autodiff; {n} untracked adds of 16 elements dropped, \
                     untimed, then {BACKWARDS} unrelated backwards each timed (no backward \
                     before the first); PROBE_GAP {gap:?}; minor faults: {faults}")
        } else {
            format!("minor faults: {faults}")
        };
        sink.row(EXPERIMENT, "unrelated-backward", &format!("backward-{k}"), n, "iterations",
                 "backward_ms", f(ms, 6), "ms", &note);
    }
}

/// One `register-size` block: ns per iteration and minor faults per iteration of
/// `SIZE_OPS` iterations into a fresh graph grown to `nodes` nodes first (untimed).
fn size_block(device: &Device, nodes: usize, keep: bool) -> (f64, f64) {
    let (a, _) = pair(device);
    let x = a.detach().require_grad();
    let grown: Vec<Tensor<1>> = (0..nodes).map(|_| x.clone().mul_scalar(2.0)).collect();
    let mut kept = Vec::with_capacity(if keep { SIZE_OPS } else { 0 });
    let f0 = minor_faults();
    let t = Instant::now();
    for _ in 0..SIZE_OPS {
        let c = black_box(x.clone().mul_scalar(2.0));
        if keep {
            kept.push(c);
        } else {
            drop(c);
        }
    }
    let ns = t.elapsed().as_secs_f64() * 1e9 / SIZE_OPS as f64;
    let faults = (minor_faults() - f0) as f64 / SIZE_OPS as f64;
    drop(black_box(kept));
    drop(black_box(grown));
    drop(x);
    tiny_backward();
    (ns, faults)
}

fn register_size(sink: &mut Sink) {
    let device = Device::flex().autodiff();
    tiny_backward();
    size_block(&device, SIZE_NODES[SIZE_NODES.len() - 1], true);
    for &nodes in SIZE_NODES {
        let (mut steady, mut kept) = (Vec::new(), Vec::new());
        let (mut steady_faults, mut kept_faults) = (Vec::new(), Vec::new());
        for _ in 0..SIZE_REPS {
            let (s, sf) = size_block(&device, nodes, false);
            let (k, kf) = size_block(&device, nodes, true);
            steady.push(s);
            kept.push(k);
            steady_faults.push(sf);
            kept_faults.push(kf);
        }
        let note = format!("{NOTE}; flex.autodiff; x [16] requiring grad, its graph grown \
                            untimed to x nodes (outputs of x.clone().mul_scalar(2.0) kept); \
                            blocks of {SIZE_OPS} iterations of the same op: steady drops \
                            each output, kept keeps them to the block's end; a fresh graph \
                            per block, the last swept by an unrelated backward; medians \
                            of {SIZE_REPS} blocks each");
        sink.row(EXPERIMENT, "register-size", "steady", nodes, "nodes", "ns_per_op",
                 f(median(steady.clone()), 3), "ns",
                 &format!("{note}; runs: {} ns; minor faults per iteration: {}",
                          spread(&steady, 1), spread(&steady_faults, 3)));
        sink.row(EXPERIMENT, "register-size", "kept", nodes, "nodes", "ns_per_op",
                 f(median(kept.clone()), 3), "ns",
                 &format!("runs: {} ns; minor faults per iteration: {}", spread(&kept, 1),
                          spread(&kept_faults, 3)));
    }
}

/// Mean ns of `s.into_scalar()` (`read`) or `drop(s)` over `RELEASE_OPS` sums
/// `s = x.clone().sum()` made untimed.
fn timed_reads(x: &Tensor<2>, read: bool) -> f64 {
    let mut ns = 0.0;
    for _ in 0..RELEASE_OPS {
        let s = black_box(x.clone().sum());
        let t = Instant::now();
        if read {
            let v: f32 = s.into_scalar();
            black_box(v);
        } else {
            drop(s);
        }
        ns += t.elapsed().as_secs_f64() * 1e9;
    }
    ns / RELEASE_OPS as f64
}

fn read_scalar(sink: &mut Sink) {
    tiny_backward();
    for (prefix, device) in [("", Device::flex()), ("autodiff-", Device::flex().autodiff())] {
        let x = Tensor::<2>::from_data(TensorData::new(vec![1.0f32; 128], [1, 128]), &device);
        let (mut read, mut dropped, mut diff) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..RELEASE_REPS {
            let r = timed_reads(&x, true);
            let d = timed_reads(&x, false);
            read.push(r);
            dropped.push(d);
            diff.push(r - d);
        }
        let note = format!("{NOTE}; {}; blocks of {RELEASE_OPS} iterations: s = \
                            x.clone().sum() (x [1, 128]) made untimed; read: s.into_scalar() \
                            timed alone, drop: drop(s) timed alone; medians of {RELEASE_REPS} \
                            blocks each", if prefix.is_empty() { "plain Flex" }
                           else { "flex.autodiff (s untracked)" });
        sink.row(EXPERIMENT, "read-scalar", &format!("{prefix}read"), RELEASE_OPS, "iterations",
                 "ns_per_op", f(median(read.clone()), 3), "ns",
                 &format!("{note}; runs: {} ns", spread(&read, 1)));
        sink.row(EXPERIMENT, "read-scalar", &format!("{prefix}drop"), RELEASE_OPS, "iterations",
                 "ns_per_op", f(median(dropped.clone()), 3), "ns",
                 &format!("runs: {} ns", spread(&dropped, 1)));
        sink.row(EXPERIMENT, "read-scalar", &format!("{prefix}read-minus-drop"), RELEASE_OPS,
                 "iterations", "ns_per_op", f(median(diff.clone()), 3), "ns",
                 &format!("per block pair: {} ns", spread(&diff, 1)));
    }
}

fn gemm_shape(sink: &mut Sink) {
    let device = Device::flex();
    // (m, k, n, lhs transposed): out[m, n] = lhs[m, k] @ rhs[k, n]
    let shapes: &[(usize, usize, usize, bool)] = &[
        (64, 512, 512, false), (512, 64, 512, true), (512, 64, 512, false),
        (32, 128, 128, false), (128, 32, 128, true), (128, 32, 128, false),
        (32, 128, 128, true)];
    for &(m, k, n, lhs_t) in shapes {
        let lhs = if lhs_t {
            Tensor::<2>::random([k, m], Distribution::Default, &device).transpose()
        } else {
            Tensor::<2>::random([m, k], Distribution::Default, &device)
        };
        let rhs = Tensor::<2>::random([k, n], Distribution::Default, &device);
        let mut ms = Vec::new();
        for call in 0..GEMM_WARM + GEMM_CALLS {
            let t = Instant::now();
            drop(black_box(lhs.clone().matmul(rhs.clone())));
            if call >= GEMM_WARM {
                ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        let med = median(ms.clone());
        let gflops = 2.0 * (m * k * n) as f64 / (med * 1e6);
        let phase = format!("{m}x{k}x{n}{}", if lhs_t { "-lhsT" } else { "" });
        sink.row(EXPERIMENT, "gemm-shape", &phase, k, "k", "ms_per_step", f(med, 6), "ms",
                 &format!("{NOTE}; plain Flex, lhs [{m}, {k}]{} x rhs [{k}, {n}]; median of \
                           {GEMM_CALLS} calls after {GEMM_WARM}: {gflops:.1} GFLOP/s ({} ms)",
                          if lhs_t { " (a transposed view)" } else { "" }, spread(&ms, 4)));
    }
}

fn train_step(sink: &mut Sink) {
    use burn::optim::{GradientsParams, SgdConfig};
    use crate::mlp::Mlp;
    let device = Device::flex().autodiff();
    for (d, batch) in [(4usize, 1usize), (128, 32)] {
        let mut model = Mlp::new(d, d, d, &device);
        let x = Tensor::<2>::random([batch, d], Distribution::Default, &device);
        let mut optim = SgdConfig::new().init();
        let mut blocks = Vec::new();
        for block in 0..=TRAIN_REPS {
            let n = if block == 0 { TRAIN_WARM } else { TRAIN_STEPS };
            let t = Instant::now();
            for _ in 0..n {
                let loss = model.forward(x.clone()).powi_scalar(2).mean();
                let grads = GradientsParams::from_grads(loss.backward(), &model);
                drop(loss);
                model = optim.step(1e-3, model, grads);
            }
            if block > 0 {
                blocks.push(t.elapsed().as_secs_f64() * 1e3 / n as f64);
            }
        }
        let note = format!("{NOTE}; flex.autodiff, Mlp(d, d, d) (Linear, Relu, Linear), input \
                            [{batch}, {d}], loss = out.powi_scalar(2).mean(), from_grads(loss.\
                            backward()), SGD step; {TRAIN_WARM} steps untimed, then the median \
                            of {TRAIN_REPS} blocks of {TRAIN_STEPS} steps ({} ms)",
                           spread(&blocks, 5));
        sink.row(EXPERIMENT, "train-step", &format!("d{d}"), d, "features", "ms_per_step",
                 f(median(blocks), 6), "ms", &note);
    }
}

/// Diagnostic (stderr only): train-validate's training step, each step timed alone, with
/// `TV_MODE` = alone | val | report | both between every 5 steps (untimed).
fn tv_timeline() {
    use burn::optim::{GradientsParams, SgdConfig};
    use burn::module::Module;
    use crate::mlp::Mlp;
    let mode = std::env::var("TV_MODE").unwrap_or_else(|_| "alone".into());
    let steps: usize = std::env::var("TV_STEPS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let device = Device::flex().autodiff();
    let plain = Device::flex();
    let d = 128;
    let mut model = Mlp::new(d, d, d, &device);
    let x = Tensor::<2>::random([32, d], Distribution::Default, &device);
    let mut optim = SgdConfig::new().init();
    let mut times = Vec::new();
    let mut between = Vec::new();
    let mut csw = Vec::new();
    for step in 1..=steps {
        let r0 = thread_rusage();
        let t = Instant::now();
        let loss = model.forward(x.clone()).powi_scalar(2).mean();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        drop(loss);
        model = optim.step(1e-3, model, grads);
        times.push(t.elapsed().as_secs_f64() * 1e6);
        let r1 = thread_rusage();
        csw.push(format!("{}/{}", r1[17] - r0[17], r1[8] - r0[8]));
        if step % 5 == 0 {
            let t = Instant::now();
            if mode == "val" || mode == "both" {
                let valid = model.valid();
                let xv = Tensor::<2>::random([32, d], Distribution::Default, &plain);
                for _ in 0..2 {
                    let s: f32 = valid.forward(xv.clone()).sum().into_scalar();
                    black_box(s);
                }
            }
            if mode == "report" || mode == "both" {
                let r = burn_probes::rss::rss_bytes();
                let h = burn_probes::alloc::snapshot();
                let s = format!("{} {} {}", r, h.live_bytes, f(r as f64 / 3.0, 4));
                black_box(s);
            }
            between.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    let line: Vec<String> = times.iter().map(|v| format!("{v:.0}")).collect();
    eprintln!("TV {mode} steps {}", line.join(" "));
    let line: Vec<String> = between.iter().map(|v| format!("{v:.0}")).collect();
    eprintln!("TV {mode} between {}", line.join(" "));
    eprintln!("TV {mode} nivcsw/minflt {}", csw.join(" "));
}
