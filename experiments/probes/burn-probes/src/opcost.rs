//! op-cost: the wall time of one small op, on plain Flex and on Flex with autodiff.
//!
//! Every variant is `<mode>/<op>` and runs in a fresh process. The loop body is
//! `drop(op(x.clone(), ...))` on x = [1, 128] f32 (and w = [128, 128] for matmul,
//! y = [1, 128] for add): the op a single-sample MLP forward is made of. Modes:
//! `plain` (`Device::flex()`), `untracked` (`Device::flex().autodiff()`, nothing
//! requires grad: every op registers an untracked step in a new graph) and `tracked`
//! (x requires grad: every op registers a tracked step in x's graph, which keeps it),
//! and `chain` (plain Flex, the body `y = op(y)`: the operand is moved, not cloned, and
//! the op writes in place into its uniquely owned buffer; add adds `c.clone()`, matmul
//! multiplies by `w.clone()`, reshape swaps [1, 128] and [128, 1]; no `sum`).
//! After `WARMUP` iterations, `BLOCKS` blocks of `n / BLOCKS` iterations are timed;
//! each block's mean is one `ms_per_step` row (ms per iteration) at x = iterations
//! done since the warm-up. The simulator's workload `experiments/op_cost.py` runs the
//! same loop.

use crate::Opts;
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::activation::relu;
use burn_probes::csv::{Sink, f};
use std::hint::black_box;
use burn_probes::clock::Instant;

const EXPERIMENT: &str = "op-cost";
pub const MODES: &[&str] = &["plain", "untracked", "tracked", "chain"];
pub const OPS: &[&str] = &["add", "mul_scalar", "matmul", "relu", "reshape", "sum"];
/// The ops of the `chain` mode (a sum's output cannot feed the next sum).
pub const CHAIN_OPS: &[&str] = &["add", "mul_scalar", "matmul", "relu", "reshape"];
const WARMUP: usize = 1_000;
const BLOCKS: usize = 4;

pub fn variants() -> Vec<String> {
    MODES.iter()
        .flat_map(|m| {
            let ops = if *m == "chain" { CHAIN_OPS } else { OPS };
            ops.iter().map(move |o| format!("{m}/{o}"))
        })
        .collect()
}

/// One iteration: `apply`, or in `chain` mode (`chain` holds the current `y` and whether
/// it is [128, 1]) `chain_step`.
fn iterate(op: &str, chain: &mut Option<(Tensor<2>, bool)>, x: &Tensor<2>, y: &Tensor<2>, w: &Tensor<2>) {
    match chain.take() {
        Some((z, column)) => *chain = Some((black_box(chain_step(op, z, column, y, w)), !column)),
        None => apply(op, x, y, w),
    }
}

/// One iteration of the `chain` mode: the op on the moved `y`, its output the next `y`.
/// (`column`: whether `y` is [128, 1] now: reshape flips it without reading `y.dims()`,
/// which would build a Shape on the heap in every iteration)
fn chain_step(op: &str, y: Tensor<2>, column: bool, c: &Tensor<2>, w: &Tensor<2>) -> Tensor<2> {
    match op {
        "add" => y + c.clone(),
        "mul_scalar" => y.mul_scalar(1.0001),
        "matmul" => y.matmul(w.clone()),
        "relu" => relu(y),
        "reshape" => {
            if column { y.reshape([1, 128]) } else { y.reshape([128, 1]) }
        }
        other => panic!("unknown chain op {other}"),
    }
}

/// One iteration: the op on clones of its operands, its output dropped.
fn apply(op: &str, x: &Tensor<2>, y: &Tensor<2>, w: &Tensor<2>) {
    match op {
        "add" => drop(black_box(x.clone() + y.clone())),
        "mul_scalar" => drop(black_box(x.clone().mul_scalar(2.0))),
        "matmul" => drop(black_box(x.clone().matmul(w.clone()))),
        "relu" => drop(black_box(relu(x.clone()))),
        "reshape" => drop(black_box(x.clone().reshape([128, 1]))),
        "sum" => drop(black_box(x.clone().sum())),
        other => panic!("unknown op {other}"),
    }
}

pub fn run_variant(variant: &str, opts: &Opts, sink: &mut Sink) {
    let (mode, op) = variant.split_once('/').unwrap_or_else(|| panic!("variant {variant}: want MODE/OP"));
    let device = match mode {
        "plain" | "chain" => Device::flex(),
        "untracked" | "tracked" => Device::flex().autodiff(),
        other => panic!("unknown mode {other}"),
    };
    let n: usize = if opts.quick { 2_000 } else { 20_000 };
    let mut x = Tensor::<2>::random([1, 128], Distribution::Default, &device);
    if mode == "tracked" {
        x = x.require_grad();
    }
    let y = Tensor::<2>::random([1, 128], Distribution::Default, &device);
    let w = Tensor::<2>::random([128, 128], Distribution::Default, &device);
    // chain mode: the tensor the next op consumes (its first op reads a clone of x)
    let mut chain = (mode == "chain").then(|| (x.clone(), false));
    for _ in 0..WARMUP {
        iterate(op, &mut chain, &x, &y, &w);
    }
    let block = n / BLOCKS;
    for b in 1..=BLOCKS {
        let t = Instant::now();
        for _ in 0..block {
            iterate(op, &mut chain, &x, &y, &w);
        }
        let ms = t.elapsed().as_secs_f64() * 1e3 / block as f64;
        let note = if b == 1 {
            format!("burn Flex (no simd/rayon); fresh process per variant; {mode}: {}; one iteration = drop(op(x.clone())) with x [1, 128] f32 (w [128, 128] for matmul, y [1, 128] for add); {WARMUP} warm-up iterations, then ms_per_step = mean wall time per iteration over the {block} iterations up to x",
                match mode {
                    "plain" => "Device::flex()",
                    "chain" => "Device::flex(), the iteration is y = op(y) instead (y moved, not cloned; add: y + y0.clone(), matmul: y.matmul(w.clone()), reshape: [1, 128] <-> [128, 1])",
                    "untracked" => "Device::flex().autodiff(), nothing requires grad",
                    _ => "Device::flex().autodiff(), x requires grad",
                })
        } else {
            String::new()
        };
        sink.row(EXPERIMENT, variant, "", b * block, "iterations", "ms_per_step", f(ms, 6), "ms", &note);
    }
}
