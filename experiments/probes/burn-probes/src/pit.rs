//! pit-infer: 2-layer MLP inference on flex.autodiff, groups A, B, C (seed pb-pit `mem`).
//! Host heap replaces the GPU pool: on Flex the tensor data is host heap too.

use crate::Opts;
use crate::mlp::Mlp;
use burn::prelude::*;
use burn::tensor::Distribution;
use burn_probes::alloc;
use burn_probes::csv::{Sink, f};
use burn_probes::rss::rss_bytes;
use burn_probes::clock::Instant;

/// The seed's `pit-infer` ran on Metal (GPU pool); this one runs on Flex (host heap),
/// so its rows carry their own experiment name.
const EXPERIMENT: &str = "pit-infer-flex";

fn kib(b: i64) -> String {
    f(b as f64 / 1024.0, 1)
}

fn infer(label: &str, note: &str, model: &Mlp, input_device: &Device, n: usize, sink: &mut Sink) {
    let x = Tensor::<2>::random([256, 512], Distribution::Default, input_device);
    let heap0 = alloc::snapshot();
    let mut t0 = Instant::now();
    let mut prev = 0;
    for i in 1..=n {
        let y = model.forward(x.clone());
        let _: f32 = y.sum().into_scalar();
        if i % (n / 2) == 0 {
            let el = t0.elapsed().as_secs_f64();
            let h = alloc::snapshot();
            let d = h.bytes_since(&heap0);
            let rss = rss_bytes();
            let first = i == n / 2;
            let nn = if first {
                format!("host heap growth relative to the start of group {} (after its input was created); {note}", &label[..1])
            } else {
                String::new()
            };
            sink.row(EXPERIMENT, label, "", i, "forwards", "host_heap_delta", kib(d), "KiB", &nn);
            sink.row(EXPERIMENT, label, "", i, "forwards", "heap_blocks_delta", h.blocks_since(&heap0), "blocks", "");
            sink.row(EXPERIMENT, label, "", i, "forwards", "rss", f(rss as f64 / 1e6, 3), "MB",
                if first { "process RSS, MB = bytes/1e6" } else { "" });
            sink.row(EXPERIMENT, label, "", i, "forwards", "rss_bytes", rss, "B", "");
            sink.row(EXPERIMENT, label, "", i, "forwards", "ms_per_step", f(el * 1e3 / (i - prev) as f64, 3), "ms",
                if first { "mean per forward since the previous row" } else { "" });
            prev = i;
            t0 = Instant::now();
        }
    }
}

pub fn run(opts: &Opts, sink: &mut Sink) {
    let n = if opts.quick { 10 } else { 100 };
    let ad = Device::flex().autodiff();
    let plain = Device::flex();
    let h0 = alloc::snapshot();
    let model = Mlp::new(512, 512, 512, &ad);
    let h1 = alloc::snapshot();
    sink.row(EXPERIMENT, "build", "", 0, "forwards", "host_heap_delta", kib(h1.bytes_since(&h0)), "KiB",
        "host heap growth from building the model on Device::flex().autodiff() (weights lazily initialised); on Flex tensor data is host heap, there is no GPU pool");
    sink.row(EXPERIMENT, "build", "", 0, "forwards", "heap_blocks_delta", h1.blocks_since(&h0), "blocks", "");
    infer("A-model-and-input-autodiff", "model and input on flex.autodiff; includes saved activations (tensor data lives on the host heap on Flex)", &model, &ad, n, sink);
    let valid = model.valid();
    infer("B-valid-model-input-autodiff", "model.valid() (params off autodiff), input still on flex.autodiff", &valid, &ad, n, sink);
    infer("C-valid-model-input-plain", "valid model, input on plain Device::flex()", &valid, &plain, n, sink);
    drop(model);
}
