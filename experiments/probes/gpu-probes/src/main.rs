//! gpu-probes: cubecl's memory pool measured through burn 0.22.1's wgpu backend.
//!
//! One process per run (a wgpu runtime cannot be re-initialised): the device is
//! selected with `Device::wgpu_options().init_with_setup()`, whose setup hands back
//! the adapter, so its name and the limits cubecl reads (cubecl-wgpu 0.11.3
//! runtime.rs) are printed as `adapter` rows. Every probe then reads, after
//! `device.sync()`, `memory_pool_usage()` (allocations, bytes in use, padding,
//! reserved) and `memory_pool_report()` (each page-carving pool: page size, pages).
//!
//! Usage: gpu-probes <probe|all> [--out FILE]
//! Probes: adapter, pit-infer, adleak, train-step, large-forward, cleanup.
//! Rows follow the measured schema of ../burn-probes (csv.rs), with the adapter
//! named in every note.

use std::fmt::Write as _;

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::prelude::*;
use burn::tensor::Distribution;

const HEADER: &str =
    "experiment,variant,phase,x,x_unit,metric,value,unit,note,platform,burn_version,probe";
const MIB: f64 = 1024.0 * 1024.0;

#[derive(Module, Debug)]
struct Mlp {
    hidden: Linear,
    activation: Relu,
    output: Linear,
}

impl Mlp {
    fn new(d: usize, device: &Device) -> Self {
        Self {
            hidden: LinearConfig::new(d, d).init(device),
            activation: Relu::new(),
            output: LinearConfig::new(d, d).init(device),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.output.forward(self.activation.forward(self.hidden.forward(x)))
    }
}

struct Sink {
    lines: Vec<String>,
    adapter: String,
    probe: String,
}

fn field(out: &mut String, s: &str) {
    if s.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&s.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(s);
    }
}

impl Sink {
    #[allow(clippy::too_many_arguments)]
    fn row(&mut self, experiment: &str, variant: &str, phase: &str, x: u64, x_unit: &str,
           metric: &str, value: String, unit: &str) {
        let note = format!("adapter: {}", self.adapter);
        let platform = format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH);
        let fields = [experiment, variant, phase, &x.to_string(), x_unit, metric, &value, unit,
                      &note, &platform, "0.22.1", &self.probe];
        let mut line = String::new();
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            field(&mut line, f);
        }
        eprintln!("{line}");
        self.lines.push(line);
    }

    /// Every pool figure after a sync: usage, then each page-carving pool.
    fn pool(&mut self, device: &Device, experiment: &str, variant: &str, phase: &str, x: u64,
            x_unit: &str) {
        device.sync().expect("sync");
        let usage = device.memory_pool_usage().expect("a cubecl device reports its pools");
        let report = device.memory_pool_report().expect("a cubecl device reports its pools");
        let mut r = |metric: &str, value: String, unit: &str| {
            self.row(experiment, variant, phase, x, x_unit, metric, value, unit)
        };
        r("gpu_in_use", format!("{}", usage.bytes_in_use as f64 / MIB), "MiB");
        r("gpu_reserved", format!("{}", usage.bytes_reserved as f64 / MIB), "MiB");
        r("gpu_in_use_bytes", usage.bytes_in_use.to_string(), "B");
        r("gpu_reserved_bytes", usage.bytes_reserved.to_string(), "B");
        r("gpu_padding_bytes", usage.bytes_padding.to_string(), "B");
        r("gpu_allocs", usage.number_allocs.to_string(), "allocs");
        // routing order (cubecl-server dynamic/adaptive.rs report): the small pool,
        // the arena's current pool, then the pools a growth left behind
        let mut sliced = 0u64;
        let (mut outdated_pages, mut outdated_bytes) = (0u64, 0u64);
        for (i, pool) in report.iter().enumerate() {
            sliced += pool.pages * pool.page_size;
            match i {
                0 | 1 => {
                    let name = if i == 0 { "small" } else { "arena" };
                    r(&format!("gpu_pages_{name}"), pool.pages.to_string(), "pages");
                    r(&format!("gpu_page_bytes_{name}"), pool.page_size.to_string(), "B");
                }
                _ => {
                    outdated_pages += pool.pages;
                    outdated_bytes += pool.pages * pool.page_size;
                }
            }
        }
        r("gpu_pages_outdated", outdated_pages.to_string(), "pages");
        r("gpu_outdated_reserved_bytes", outdated_bytes.to_string(), "B");
        r("gpu_other_reserved_bytes", (usage.bytes_reserved as i64 - sliced as i64).to_string(), "B");
    }
}

/// The seed's pit-infer (seeds/000 `mem`): groups A, B, C in one process, each with its
/// own input made at the group's start and dropped at its end; `model.valid()` taken
/// after A (its parameters initialised by then).
fn infer(model: &Mlp, input_device: &Device, group: &str, device: &Device, sink: &mut Sink) {
    let e = "gpu-pit-infer";
    let x = Tensor::<2>::random([256, 512], Distribution::Default, input_device);
    sink.pool(device, e, group, "start", 0, "forwards");
    for i in 1..=100u64 {
        let y = model.forward(x.clone());
        let _: f32 = y.sum().into_scalar();
        if i <= 3 || i % 50 == 0 {
            sink.pool(device, e, group, "after-forward", i, "forwards");
        }
    }
}

fn pit_infer(device: &Device, sink: &mut Sink) {
    let ad = device.clone().autodiff();
    let model = Mlp::new(512, &ad);
    sink.pool(device, "gpu-pit-infer", "build", "after-build", 0, "forwards");
    infer(&model, &ad, "A-model-and-input-autodiff", device, sink);
    let valid = model.valid();
    infer(&valid, &ad, "B-valid-model-input-autodiff", device, sink);
    infer(&valid, device, "C-valid-model-input-plain", device, sink);
    device.memory_cleanup();
    sink.pool(device, "gpu-pit-infer", "C-valid-model-input-plain", "after-memory-cleanup", 100,
              "forwards");
}

fn adleak(device: &Device, sink: &mut Sink) {
    let e = "gpu-adleak";
    let ad = device.clone().autodiff();
    let a = Tensor::<1>::random([16], Distribution::Default, &ad);
    let b = Tensor::<1>::random([16], Distribution::Default, &ad);
    sink.pool(device, e, "autodiff-no-grad", "start", 0, "iterations");
    for i in 1..=1000u64 {
        let c = a.clone() + b.clone();
        drop(c);
        if i == 1 || i == 10 || i % 500 == 0 {
            sink.pool(device, e, "autodiff-no-grad", "after-loop", i, "iterations");
        }
    }
}

fn train_step(device: &Device, sink: &mut Sink) {
    let e = "gpu-train-step";
    let ad = device.clone().autodiff();
    let model = Mlp::new(512, &ad);
    let x = Tensor::<2>::random([64, 512], Distribution::Default, &ad);
    sink.pool(device, e, "mlp-64x512", "start", 0, "steps");
    for step in 1..=3u64 {
        let loss = model.forward(x.clone()).sum();
        sink.pool(device, e, "mlp-64x512", "after-forward", step, "steps");
        let grads = loss.backward();
        sink.pool(device, e, "mlp-64x512", "after-backward", step, "steps");
        drop(grads);
        sink.pool(device, e, "mlp-64x512", "after-grads-dropped", step, "steps");
    }
}

fn large_forward(device: &Device, sink: &mut Sink) {
    // [1024, 2048] f32 activations are 8 MiB: past the arena's 2 MiB first pages
    let e = "gpu-large-forward";
    let ad = device.clone().autodiff();
    let model = Mlp::new(2048, &ad);
    let x = Tensor::<2>::random([1024, 2048], Distribution::Default, &ad);
    sink.pool(device, e, "mlp-2048-batch-1024", "start", 0, "forwards");
    for i in 1..=3u64 {
        let y = model.forward(x.clone());
        let _: f32 = y.sum().into_scalar();
        sink.pool(device, e, "mlp-2048-batch-1024", "after-forward", i, "forwards");
    }
    device.memory_cleanup();
    sink.pool(device, e, "mlp-2048-batch-1024", "after-memory-cleanup", 3, "forwards");
    drop(x);
    drop(model);
    device.memory_cleanup();
    sink.pool(device, e, "mlp-2048-batch-1024", "after-drop-and-cleanup", 3, "forwards");
}

fn cleanup(device: &Device, sink: &mut Sink) {
    let e = "gpu-cleanup";
    let x = Tensor::<2>::random([256, 512], Distribution::Default, device);
    sink.pool(device, e, "plain", "start", 0, "reads");
    let _: f32 = x.clone().sum().into_scalar();
    sink.pool(device, e, "plain", "after-read", 1, "reads");
    device.memory_cleanup();
    sink.pool(device, e, "plain", "after-memory-cleanup", 1, "reads");
    drop(x);
    device.memory_cleanup();
    sink.pool(device, e, "plain", "after-drop-and-cleanup", 1, "reads");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let probe = args.get(1).cloned().unwrap_or_else(|| {
        eprintln!("usage: gpu-probes <adapter|pit-infer|adleak|train-step|large-forward|cleanup|all> [--out FILE]");
        std::process::exit(2)
    });
    let out = args.iter().position(|a| a == "--out").and_then(|i| args.get(i + 1)).cloned();
    let known = ["adapter", "pit-infer", "adleak", "train-step", "large-forward", "cleanup"];
    if probe != "all" && !known.contains(&probe.as_str()) {
        eprintln!("gpu-probes: unknown probe {probe}");
        std::process::exit(2)
    }
    let (device, setup) = match Device::wgpu_options().init_with_setup() {
        Ok(pair) => pair,
        Err(err) => {
            eprintln!("gpu-probes: no wgpu device: {err}");
            std::process::exit(3)
        }
    };
    let info = setup.adapter.get_info();
    let limits = setup.device.limits();
    let adapter = format!("{} ({:?}, {})", info.name, info.backend, info.driver_info);
    let mut sink = Sink { lines: Vec::new(), adapter, probe: format!("gpu-probes {probe}") };
    let page = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size);
    let align = limits.min_uniform_buffer_offset_alignment
        .max(limits.min_storage_buffer_offset_alignment) as u64;
    let limit_rows = [
        ("max_storage_buffer_binding_size", limits.max_storage_buffer_binding_size),
        ("max_buffer_size", limits.max_buffer_size),
        ("min_uniform_buffer_offset_alignment", limits.min_uniform_buffer_offset_alignment as u64),
        ("min_storage_buffer_offset_alignment", limits.min_storage_buffer_offset_alignment as u64),
        ("max_page_size", page),
        ("alignment", align),
    ];
    if probe == "adapter" || probe == "all" {
        for (metric, value) in limit_rows {
            sink.row("gpu-adapter", "limits", "init", 0, "none", metric, value.to_string(), "B");
        }
    }
    let run = |name: &str| probe == "all" || probe == name;
    if run("pit-infer") { pit_infer(&device, &mut sink); }
    if run("adleak") { adleak(&device, &mut sink); }
    if run("train-step") { train_step(&device, &mut sink); }
    if run("large-forward") { large_forward(&device, &mut sink); }
    if run("cleanup") { cleanup(&device, &mut sink); }
    let mut text = String::new();
    writeln!(text, "{HEADER}").unwrap();
    for line in &sink.lines {
        writeln!(text, "{line}").unwrap();
    }
    match out {
        Some(path) => {
            let tmp = format!("{path}.tmp");
            std::fs::write(&tmp, text).expect("write the CSV");
            std::fs::rename(&tmp, &path).expect("rename the CSV");
        }
        None => print!("{text}"),
    }
}
