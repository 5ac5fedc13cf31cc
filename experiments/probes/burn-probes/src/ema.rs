//! p10-ema: Linear(512,512), input [64,512], SGD lr 1e-3, EMA of the weight after each step.
//! p10-ema-adam: the same with Adam (burn's default config) instead of SGD.

use crate::Opts;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer, SgdConfig};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn_probes::alloc;
use burn_probes::csv::{Sink, f};
use burn_probes::rss::rss_bytes;
use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::time::Instant;

pub const MODES: &[&str] = &["detach", "target", "without", "target-without", "log-no-ema", "ema-only"];
// `log-no-ema`: the seed's `log` mode most likely kept the ema created before its loop
// (its program creates `ema` for every mode); this probe creates none, so the variant
// has its own name.
/// p10-ema-adam's modes: `target` is left out (it panics at step 3 before the optimizer
/// matters), `ema-only` (no optimizer) and the seed's `log` too.
pub const ADAM_MODES: &[&str] = &["detach", "without", "target-without", "log-no-ema"];

/// The optimizer a p10-ema run trains with; both `init()` give the same `ModuleOptimizer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Optim {
    /// `SgdConfig::new().init()` (p10-ema, p10-ema-params)
    Sgd,
    /// `AdamConfig::new().init()`: beta_1 0.9, beta_2 0.999, epsilon 1e-5, no AMSGrad,
    /// no weight decay, no clipping (p10-ema-adam)
    Adam,
}

impl Optim {
    fn init(self) -> ModuleOptimizer {
        match self {
            Optim::Sgd => SgdConfig::new().init(),
            Optim::Adam => AdamConfig::new().init(),
        }
    }

    /// Every row's note with the optimizer appended (Adam only: p10-ema's and
    /// p10-ema-params' notes stay as they were); built outside the heap counts.
    fn note(self, note: &str) -> Cow<'_, str> {
        const ADAM: &str = "optimizer Adam with burn's default config (AdamConfig::new().init(): beta_1 0.9, beta_2 0.999, epsilon 1e-5, no amsgrad, weight decay or clipping), lr 1e-3";
        match self {
            Optim::Sgd => Cow::Borrowed(note),
            Optim::Adam if note.is_empty() => Cow::Borrowed(ADAM),
            Optim::Adam => Cow::Owned(alloc::exclude(|| format!("{note}; {ADAM}"))),
        }
    }
}

/// Printed steps (those <= the run's length, and its last step); 6000 and 8000 only in a
/// run of that length or longer (the params probe's `ema/8000`, `ema-balanced/8000`)
const POINTS: &[usize] = &[1, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 6000, 8000];

static PANIC_MSG: Mutex<Option<String>> = Mutex::new(None);

fn install_panic_capture() {
    std::panic::set_hook(Box::new(|info| {
        let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
            s.to_string()
        } else if let Some(s) = info.payload().downcast_ref::<String>() {
            s.clone()
        } else {
            "<non-string panic payload>".to_string()
        };
        let loc = info
            .location()
            .map(|l| {
                // Strip the registry prefix: keep "burn-autodiff-0.22.1/src/..."
                let file = l.file();
                let short = file.find("burn-").map(|i| &file[i..]).unwrap_or(file);
                format!("{short}:{}:{}", l.line(), l.column())
            })
            .unwrap_or_default();
        eprintln!("panicked at {loc}: {msg}");
        *PANIC_MSG.lock().unwrap() = Some(format!("panicked at {loc}: {msg}"));
    }));
}

fn mode_note(mode: &str) -> &'static str {
    match mode {
        "detach" => "ema = ema*0.99 + w.detach()*0.01 kept across steps",
        "target" => "ema (w.detach() snapshots) enters the loss as a target network: (out - x.matmul(ema))^2 mean",
        "without" => "snapshot = w.without_autodiff()",
        "target-without" => "snapshot = w.without_autodiff(); ema enters the loss as a target network",
        "log-no-ema" => "each step the norm of w.detach() is read with into_scalar() and not kept; no ema",
        "ema-only" => "the detach EMA update alone without forward/backward/optimizer",
        _ => "",
    }
}

/// `balanced`: the autodiff device uses burn's Balanced gradient checkpointing
/// (`Device::flex().autodiff().gradient_checkpointing()`: memory-bound ops keep a
/// retro-forward and back up their tracked parents), as the simulator's ema-balanced.
pub fn run_mode(experiment: &str, mode: &str, opt: Optim, opts: &Opts, sink: &mut Sink, with_rss: bool,
    balanced: bool) {
    install_panic_capture();
    let steps = opts.steps.unwrap_or(if opts.quick { 200 } else { 2000 });
    let mut points: Vec<usize> = POINTS.iter().copied().filter(|&p| p <= steps).collect();
    if points.last() != Some(&steps) {
        points.push(steps);
    }
    let use_without = mode.ends_with("without");
    let is_target = mode.starts_with("target");
    let has_ema = mode != "log-no-ema";
    let train = mode != "ema-only";

    let rss0 = rss_bytes();
    // text_rss_delta rows (KiB): resident text of this binary now minus at the mode's start,
    // after each phase of the set-up (x = 0) and of step 1 (x = 1), and at each printed step
    // every text_rss_delta row only with PROBE_TEXT=1 (text-rss.csv comes from such runs): a
    // smaps read walks the page tables and leaves the caches colder, and the first step's
    // time is a graded point (reads at the set-up alone made it ~0.4 ms slower, median of 8 runs)
    let text_on = with_rss && std::env::var("PROBE_TEXT").is_ok();
    let text0 = if text_on { burn_probes::rss::text_rss_bytes() } else { 0 };
    // reading smaps takes ~0.1-1 ms: its time is kept out of ms_per_step (text_secs)
    let text_secs = std::cell::Cell::new(0.0f64);
    let text_kib = || {
        let t = Instant::now();
        let v = (burn_probes::rss::text_rss_bytes() as f64 - text0 as f64) / 1024.0;
        text_secs.set(text_secs.get() + t.elapsed().as_secs_f64());
        v
    };
    let mut text_rows: Vec<(&'static str, usize, f64)> = Vec::with_capacity(8);
    // the heap's reference point comes after the probe's own buffers: heap_bytes_delta is
    // burn's and the program's only
    let heap0 = alloc::snapshot();
    let phases = std::env::var("PROBE_PHASES").is_ok();
    let ph = |name: &str| {
        if phases {
            let h = alloc::snapshot();
            eprintln!("PHASE {name:<24} rss {:>9.3} KiB  live {:>9.3} KiB  peak {:>9.3} KiB",
                (rss_bytes() as f64 - rss0 as f64) / 1024.0,
                (h.live_bytes - heap0.live_bytes) as f64 / 1024.0,
                (h.peak_bytes - heap0.live_bytes) as f64 / 1024.0);
            let (anon, file) = burn_probes::rss::rss_split();
            if let Some(m) = burn_probes::rss::malloc_info() {
                eprintln!("      anon {:>6} KiB file {:>6} KiB | arena {:>6} KiB inuse {:>6} KiB free {:>6} KiB top {:>6} KiB mmap {} blks {:>6} KiB",
                    anon / 1024, file / 1024, m.arena / 1024, m.uordblks / 1024, m.fordblks / 1024,
                    m.keepcost / 1024, m.hblks, m.hblkhd / 1024);
            }
            if std::env::var("PROBE_SMAPS").is_ok() { eprint!("{}", burn_probes::rss::smaps_summary()); }
        }
    };
    ph("start");
    let ad = if balanced { Device::flex().autodiff().gradient_checkpointing() } else { Device::flex().autodiff() };
    ph("device");
    if text_on { text_rows.push(("device", 0, text_kib())); }
    let mut model: Option<Linear> = Some(LinearConfig::new(512, 512).init(&ad));
    ph("model");
    if text_on { text_rows.push(("model", 0, text_kib())); }
    let x = Tensor::<2>::random([64, 512], Distribution::Default, &ad);
    ph("x");
    let mut optim = opt.init();
    let snapshot = |m: &Linear| {
        if use_without { m.weight.val().without_autodiff() } else { m.weight.val().detach() }
    };
    let mut ema: Option<Tensor<2>> = if has_ema { Some(snapshot(model.as_ref().unwrap())) } else { None };
    if text_on { text_rows.push(("setup", 0, text_kib())); }
    for (phase, x, v) in text_rows.drain(..) {
        // (the value's string is kept with the rows: formatted where the heap counts exclude it)
        sink.row(experiment, mode, phase, x, "step", "text_rss_delta", alloc::exclude(|| f(v, 1)), "KiB",
            &opt.note(if phase == "device" { "resident KiB of the probe binary's executable mappings (/proc/self/smaps Rss) now minus at the mode's start; phases: device = after Device::flex().autodiff(), model = after LinearConfig::init, setup = after the input and the initial ema snapshot, forward/backward/sgd/ema = after that part of step 1" } else { "" }));
    }
    // PROBE_STEPLOG=N (diagnostics, stderr only): after the forward, backward, SGD and
    // EMA of each of the first N steps, RSS (statm, read without allocating), the program
    // break and glibc's mallinfo2 (arena = sbrk'd bytes, keepcost = top chunk, hblkhd =
    // mmapped bytes), recorded into a buffer reserved here and printed after the loop.
    let steplog: usize = std::env::var("PROBE_STEPLOG").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut slog: Vec<[u64; 10]> = Vec::with_capacity(steplog * 4);
    let brk0 = burn_probes::rss::program_break() as u64;
    let sl = |step: usize, part: u64, slog: &mut Vec<[u64; 10]>| {
        if step <= steplog {
            let m = burn_probes::rss::malloc_info().unwrap_or_default();
            let r = burn_probes::rss::rss_bytes_noalloc();
            let b = burn_probes::rss::program_break() as u64;
            slog.push([step as u64, part, r.wrapping_sub(rss0), b.wrapping_sub(brk0), m.arena as u64,
                m.uordblks as u64, m.fordblks as u64, m.keepcost as u64, m.hblks as u64, m.hblkhd as u64]);
        }
    };
    // PROBE_TRACE=A-B (diagnostics, stderr only): every allocation and free of steps A..=B
    // with its address (the counting allocator's trace mode), printed after the loop.
    let trace_range: Option<(usize, usize)> = std::env::var("PROBE_TRACE").ok().and_then(|v| {
        let (a, b) = v.split_once('-')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    });
    let mut trace_marks: Vec<(usize, usize)> = Vec::with_capacity(if trace_range.is_some() { 64 } else { 0 });
    // PROBE_CPU_TIME=1: ms_per_step is the thread's CPU time (rss::thread_cpu_secs) instead
    // of wall time, each row's note giving the wall time too: on a machine shared with other
    // jobs a step's wall time includes the time it waited for a CPU
    let cpu_time = std::env::var("PROBE_CPU_TIME").is_ok();
    // PROBE_CENSUS=N (diagnostics, stderr only; not for timing runs): the counting
    // allocator's key-page census (alloc::census_print) at the end of every Nth step: the
    // pages the live node keys (24-B blocks) lie on, and the live small blocks by size
    let census_every: usize = std::env::var("PROBE_CENSUS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    if census_every > 0 { alloc::census_start(); }
    let mut t0 = Instant::now();
    let mut c0 = burn_probes::rss::thread_cpu_secs();
    text_secs.set(0.0);
    let mut prev_step = 0usize;
    let mut rss_step1 = 0u64;
    let mut heap_step1 = 0i64;
    let mut first_row = true;
    for step in 1..=steps {
        if let Some((a, b)) = trace_range {
            if step == a { alloc::trace_start(); }
            if step >= a && step <= b { trace_marks.push((step, alloc::trace_len())); }
        }
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut m = model.take().unwrap();
            let show = step <= 3 || step == 50;
            if train {
                let out = m.forward(x.clone());
                sl(step, 1, &mut slog);
                if show { ph(&format!("{step} forward")); }
                if step == 1 && text_on { text_rows.push(("forward", 1, text_kib())); }
                let loss = if is_target {
                    let e = ema.as_ref().unwrap().clone();
                    (out - x.clone().matmul(e)).powi_scalar(2).mean()
                } else {
                    out.powi_scalar(2).mean()
                };
                let grads = GradientsParams::from_grads(loss.backward(), &m);
                sl(step, 2, &mut slog);
                if show { ph(&format!("{step} backward")); }
                if step == 1 && text_on { text_rows.push(("backward", 1, text_kib())); }
                m = optim.step(1e-3, m, grads);
                sl(step, 3, &mut slog);
                if show { ph(&format!("{step} sgd")); }
                if step == 1 && text_on { text_rows.push(("sgd", 1, text_kib())); }
            }
            if mode == "log-no-ema" {
                let n: f32 = m.weight.val().detach().powi_scalar(2).sum().sqrt().into_scalar();
                std::hint::black_box(n);
            }
            if has_ema {
                let e = ema.take().unwrap();
                ema = Some(e * 0.99 + snapshot(&m) * 0.01);
                if show { ph(&format!("{step} ema")); }
                if step == 1 && text_on { text_rows.push(("ema", 1, text_kib())); }
            }
            model = Some(m);
            sl(step, 4, &mut slog);
        }));
        if census_every > 0 && step % census_every == 0 {
            alloc::census_print(step);
        }
        if let Some((_, b)) = trace_range {
            if step == b {
                let (events, overflow) = alloc::trace_stop();
                alloc::print_trace(&events, overflow, "step", &trace_marks);
            }
        }
        for (phase, x, v) in text_rows.drain(..) {
            sink.row(experiment, mode, phase, x, "step", "text_rss_delta", alloc::exclude(|| f(v, 1)), "KiB", &opt.note(""));
        }
        if r.is_err() {
            let el = t0.elapsed().as_secs_f64();
            let msg = PANIC_MSG.lock().unwrap().clone().unwrap_or_default();
            sink.row(experiment, mode, "", step, "step", "panic", 1, "event", &opt.note(&msg));
            eprintln!("  (panic at step {step} after {:.3} ms)", el * 1e3);
            break;
        }
        if points.contains(&step) {
            let el = t0.elapsed().as_secs_f64() - text_secs.get();
            let wall_ms = el * 1e3 / (step - prev_step) as f64;
            let ms = if cpu_time {
                (burn_probes::rss::thread_cpu_secs() - c0 - text_secs.get()) * 1e3 / (step - prev_step) as f64
            } else {
                wall_ms
            };
            let rss = rss_bytes();
            let heap = alloc::snapshot();
            let note = if first_row {
                let e = ema.as_ref();
                format!(
                    "burn Flex+autodiff{} (no simd/rayon); fresh process per mode; ms_per_step = mean over the steps since the previous row; rss_delta = RSS now minus RSS at mode start (MiB = 2^20 B); {}; ema.is_tracked={} is_require_grad={}",
                    if balanced { " with Balanced gradient checkpointing" } else { "" },
                    mode_note(mode),
                    e.map(|t| t.is_tracked()).unwrap_or(false),
                    e.map(|t| t.is_require_grad()).unwrap_or(false)
                )
            } else {
                String::new()
            };
            let note = if cpu_time {
                alloc::exclude(|| format!("{note}{}ms_per_step = the thread's CPU time (PROBE_CPU_TIME); wall {wall_ms:.4} ms",
                    if note.is_empty() { "" } else { "; " }))
            } else {
                note
            };
            sink.row(experiment, mode, "", step, "step", "ms_per_step", f(ms, 4), "ms", &opt.note(&note));
            if with_rss {
                let d = rss as f64 - rss0 as f64;
                sink.row(experiment, mode, "", step, "step", "rss_delta", f(d / 1048576.0, 3), "MiB", &opt.note(""));
                sink.row(experiment, mode, "", step, "step", "rss_bytes", rss, "B", &opt.note(""));
                if text_on {
                    sink.row(experiment, mode, "", step, "step", "text_rss_delta", alloc::exclude(|| f(text_kib(), 1)), "KiB", &opt.note(""));
                }
                let hd = heap.live_bytes - heap0.live_bytes;
                sink.row(experiment, mode, "", step, "step", "heap_bytes_delta", hd, "B",
                    &opt.note(if first_row { "live heap now minus at mode start (counting allocator)" } else { "" }));
                if step == 1 {
                    rss_step1 = rss;
                    heap_step1 = heap.live_bytes;
                } else {
                    let g = (rss as f64 - rss_step1 as f64) / (step - 1) as f64 / 1e3;
                    sink.row(experiment, mode, "", step, "step", "rss_growth_per_step", f(g, 3), "KB",
                        &opt.note(if prev_step == 1 { "(RSS now - RSS after step 1)/(steps - 1), KB = 1e3 B" } else { "" }));
                    let hg = (heap.live_bytes - heap_step1) as f64 / (step - 1) as f64;
                    sink.row(experiment, mode, "", step, "step", "heap_growth_per_step", f(hg, 1), "B",
                        &opt.note(if prev_step == 1 { "(live heap now - after step 1)/(steps - 1)" } else { "" }));
                }
            }
            first_row = false;
            prev_step = step;
            t0 = Instant::now();
            c0 = burn_probes::rss::thread_cpu_secs();
            text_secs.set(0.0);
        }
    }
    if steplog > 0 {
        eprintln!("STEPLOG step part rss_delta_KiB brk_delta_KiB arena_KiB inuse_KiB free_KiB top_KiB mmap_blks mmap_KiB (part 1 forward 2 backward 3 sgd 4 end)");
        for e in &slog {
            eprintln!("STEPLOG {} {} {} {} {} {} {} {} {} {}", e[0], e[1], e[2] as i64 / 1024, e[3] as i64 / 1024,
                e[4] / 1024, e[5] / 1024, e[6] / 1024, e[7] / 1024, e[8], e[9] / 1024);
        }
    }
}
