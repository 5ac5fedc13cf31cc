//! backward-cost: the time of a backward per step, by the kind of op the steps are.
//!
//! Every variant is an op and runs in a fresh process: a chain of `n` tracked ops of that
//! kind from a leaf x = [1, 128] f32 requiring grad (`y = op(y)`: add of a constant
//! [1, 128], mul_scalar, relu, matmul by a constant [128, 128]), then `y.sum().backward()`.
//! Three rounds, each from a fresh leaf; per round two `ms_per_step` rows: phase
//! `forward` (building the chain, per op) and `backward` (the backward, per chain op; it
//! includes the sum's step, the tape build and the orphan sweep after it). The
//! simulator's workload `experiments/backward_cost.py` runs the same program.

use crate::Opts;
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::activation::relu;
use burn_probes::csv::{Sink, f};
use std::hint::black_box;
use burn_probes::clock::Instant;

const EXPERIMENT: &str = "backward-cost";
pub const OPS: &[&str] = &["add", "mul_scalar", "relu", "matmul"];
const ROUNDS: usize = 3;

fn step(op: &str, y: Tensor<2>, c: &Tensor<2>, w: &Tensor<2>) -> Tensor<2> {
    match op {
        "add" => y + c.clone(),
        "mul_scalar" => y.mul_scalar(1.0001),
        "relu" => relu(y),
        "matmul" => y.matmul(w.clone()),
        other => panic!("unknown op {other}"),
    }
}

pub fn run_variant(op: &str, opts: &Opts, sink: &mut Sink) {
    let device = Device::flex().autodiff();
    let n: usize = if opts.quick { 200 } else { 2_000 };
    let c = Tensor::<2>::random([1, 128], Distribution::Default, &device);
    let w = Tensor::<2>::random([128, 128], Distribution::Default, &device);
    for round in 1..=ROUNDS {
        let x = Tensor::<2>::random([1, 128], Distribution::Default, &device).require_grad();
        let t = Instant::now();
        let mut y = x.clone();
        for _ in 0..n {
            y = step(op, y, &c, &w);
        }
        let forward = t.elapsed().as_secs_f64() * 1e3 / n as f64;
        let t = Instant::now();
        let grads = y.sum().backward();
        let backward = t.elapsed().as_secs_f64() * 1e3 / n as f64;
        drop(black_box(grads));
        drop(x);
        let note = if round == 1 {
            format!("burn Flex+autodiff (no simd/rayon); fresh process per variant; a chain of {n} tracked {op} ops from a fresh [1, 128] leaf requiring grad (add: + a constant [1, 128]; matmul: by a constant [128, 128]), then y.sum().backward(); ms_per_step = the chain's build time / {n} (phase forward) or the backward's time / {n} (phase backward: tape build, every step's backward, the orphan sweep); x = round, each from a fresh leaf")
        } else {
            String::new()
        };
        sink.row(EXPERIMENT, op, "forward", round, "round", "ms_per_step", f(forward, 6), "ms", &note);
        sink.row(EXPERIMENT, op, "backward", round, "round", "ms_per_step", f(backward, 6), "ms", "");
    }
}
