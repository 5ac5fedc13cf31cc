//! `script`: run one straight-line tensor program on `Device::flex().autodiff()` and
//! print the live heap after every statement (the counting allocator's bytes and
//! blocks since the program's first statement).
//!
//! It is the real side of the simulator's differential conformance test: the
//! simulator runs the same program (`experiments/probe_programs.py`) and must end
//! every statement with the same live bytes and blocks. The program comes from a file
//! (`--program FILE`), one statement per line, over 16 tensor slots of shape [n, n]:
//!
//! ```text
//! shape N                 every leaf is [N, N] (first line; default 4)
//! leaf I G                slot I = ones([N, N]), requiring grad if G is 1
//! pleaf I                 slot I = ones([N, N]) on the plain device `Device::flex()`
//! bin I OP J K            slot I = slot J.clone() OP slot K.clone()   (add sub mul div matmul)
//! binm I OP J K           slot I = slot J (moved) OP slot K.clone()
//! un I OP J               slot I = OP(slot J.clone())   (mul_scalar add_scalar div_scalar
//!                         exp log sqrt relu powi2 detach without require_grad)
//! unm I OP J              slot I = OP(slot J (moved))
//! red I OP J              slot I = slot J.clone().OP().reshape([1, 1])   (sum mean)
//! drop I                  slot I = None
//! bw I                    slot I.clone().sum().backward(), gradients dropped at once
//! bwk I                   the same, gradients kept (replacing the kept ones)
//! grad I J                slot I = slot J.grad(kept gradients), or where there is none
//!                         a plain tensor of ones of slot J's shape
//! dropg                   drop the kept gradients
//! lin M O                 module M = LinearConfig::new(N, N).init() (bias, lazy params),
//!                         with its own optimizer O (sgd: SgdConfig, adam: AdamConfig)
//! fwd I M J               slot I = module M.forward(slot J.clone())
//! val I M                 slot I = module M.weight.val()
//! step M J                grads = GradientsParams::from_grads(slot J.clone().sum().backward(),
//!                         &module M); module M = optimizer M.step(1e-3, module M, grads)
//! dropm M                 module M and its optimizer dropped
//! ```
//!
//! A new value replaces the slot's old one after it is computed (Rust's assignment:
//! the old value drops last). Output, one line per statement: `INDEX BYTES BLOCKS`,
//! or `INDEX panic` when the statement panicked (the program stops there). With
//! `PROBE_SCRIPT_TRACE=I` the allocations and frees of statement I go to stderr (size,
//! address), to name what a differing statement allocates. With `PROBE_SCRIPT_MARKS=1`
//! (only under `malloc-log`'s LD_PRELOAD library, which takes these calls for marks and
//! does not pass them on to glibc) a `malloc` of `MARK_BASE + I` before statement I and
//! of `MARK_BASE + len` after the last one marks the statements in the log.
//! With `PROBE_SCRIPT_VALUES=1` the lines that follow are `V INDEX val SLOT GRAD BITS`
//! after every statement for every filled slot (whether it requires grad, and its values'
//! f32 bits in hex) and `V INDEX grad SLOT BITS` for every slot that a `bw`/`bwk`
//! statement gave a gradient: what a fix must leave bit for bit unchanged (the reads
//! allocate, so the heap columns are not comparable in this mode).

use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer, SgdConfig};
use burn::prelude::*;
use burn::tensor::activation;
use burn_probes::alloc::{self, Snapshot};
use std::panic::{AssertUnwindSafe, catch_unwind};

const SLOTS: usize = 16;
/// Request sizes from here on are statement marks for malloc-log (`PROBE_SCRIPT_MARKS`).
const MARK_BASE: usize = 1 << 46;

unsafe extern "C" {
    fn malloc(size: usize) -> *mut u8;
}

/// A mark in malloc-log's record (the library answers it without allocating).
fn mark(on: bool, index: usize) {
    if on {
        // through a pointer the optimizer cannot see through: a plain malloc call whose
        // result is only tested may be elided as a known builtin
        let call: unsafe extern "C" fn(usize) -> *mut u8 = std::hint::black_box(malloc);
        let p = unsafe { call(MARK_BASE + index) };
        assert!(p.is_null(), "PROBE_SCRIPT_MARKS needs malloc-log's LD_PRELOAD library");
    }
}

#[derive(Clone, Copy)]
enum Stmt {
    Leaf(usize, bool),
    PlainLeaf(usize),
    Bin(usize, u8, usize, usize, bool),
    Un(usize, u8, usize, bool),
    Drop(usize),
    Backward(usize, bool),
    Reduce(usize, bool, usize),
    Grad(usize, usize),
    DropGrads,
    Lin(usize, bool),
    Forward(usize, usize, usize),
    Val(usize, usize),
    Step(usize, usize),
    DropModule(usize),
}

const BIN_OPS: &[&str] = &["add", "sub", "mul", "div", "matmul"];
const UN_OPS: &[&str] = &[
    "mul_scalar", "add_scalar", "div_scalar", "exp", "log", "sqrt", "relu", "powi2", "detach",
    "without", "require_grad",
];

fn parse(text: &str) -> Result<(usize, Vec<Stmt>), String> {
    let mut n = 4usize;
    let mut prog = Vec::new();
    for (lineno, line) in text.lines().enumerate() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.is_empty() || w[0].starts_with('#') {
            continue;
        }
        let bad = || format!("line {}: cannot parse {line:?}", lineno + 1);
        let num = |s: &str| -> Result<usize, String> {
            let v: usize = s.parse().map_err(|_| bad())?;
            Ok(v)
        };
        let slot = |s: &str| -> Result<usize, String> {
            let v = num(s)?;
            if v >= SLOTS { Err(bad()) } else { Ok(v) }
        };
        let op = |s: &str, table: &[&str]| -> Result<u8, String> {
            table.iter().position(|o| *o == s).map(|p| p as u8).ok_or_else(bad)
        };
        let stmt = match (w[0], w.len()) {
            ("shape", 2) => {
                n = num(w[1])?;
                continue;
            }
            ("leaf", 3) => Stmt::Leaf(slot(w[1])?, w[2] == "1"),
            ("pleaf", 2) => Stmt::PlainLeaf(slot(w[1])?),
            ("bin" | "binm", 5) => {
                Stmt::Bin(slot(w[1])?, op(w[2], BIN_OPS)?, slot(w[3])?, slot(w[4])?, w[0] == "binm")
            }
            ("un" | "unm", 4) => Stmt::Un(slot(w[1])?, op(w[2], UN_OPS)?, slot(w[3])?, w[0] == "unm"),
            ("drop", 2) => Stmt::Drop(slot(w[1])?),
            ("bw" | "bwk", 2) => Stmt::Backward(slot(w[1])?, w[0] == "bwk"),
            ("red", 4) => match w[2] {
                "sum" | "mean" => Stmt::Reduce(slot(w[1])?, w[2] == "mean", slot(w[3])?),
                _ => return Err(bad()),
            },
            ("grad", 3) => Stmt::Grad(slot(w[1])?, slot(w[2])?),
            ("dropg", 1) => Stmt::DropGrads,
            ("lin", 3) => match w[2] {
                "sgd" | "adam" => Stmt::Lin(slot(w[1])?, w[2] == "adam"),
                _ => return Err(bad()),
            },
            ("fwd", 4) => Stmt::Forward(slot(w[1])?, slot(w[2])?, slot(w[3])?),
            ("val", 3) => Stmt::Val(slot(w[1])?, slot(w[2])?),
            ("step", 3) => Stmt::Step(slot(w[1])?, slot(w[2])?),
            ("dropm", 2) => Stmt::DropModule(slot(w[1])?),
            _ => return Err(bad()),
        };
        prog.push(stmt);
    }
    Ok((n, prog))
}

fn binary(op: u8, a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    match op {
        0 => a + b,
        1 => a - b,
        2 => a * b,
        3 => a / b,
        _ => a.matmul(b),
    }
}

fn unary(op: u8, a: Tensor<2>) -> Tensor<2> {
    match op {
        0 => a.mul_scalar(0.5),
        1 => a.add_scalar(1.0),
        2 => a.div_scalar(2.0),
        3 => a.exp(),
        4 => a.log(),
        5 => a.sqrt(),
        6 => activation::relu(a),
        7 => a.powi_scalar(2),
        8 => a.detach(),
        9 => a.without_autodiff(),
        _ => a.require_grad(),
    }
}

fn bits(data: TensorData) -> String {
    let values: Vec<f32> = data.try_to_vec().expect("f32 data");
    values.iter().map(|v| format!("{:08x}", v.to_bits())).collect::<Vec<_>>().join(",")
}

fn take(slots: &mut [Option<Tensor<2>>], i: usize, moved: bool) -> Tensor<2> {
    let t = if moved { slots[i].take() } else { slots[i].clone() };
    t.unwrap_or_else(|| panic!("script: slot {i} is empty"))
}

/// Run the program in `path`; prints one line per statement on stdout.
pub fn run(path: &str) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        eprintln!("script: cannot read {path}: {e}");
        std::process::exit(2);
    });
    let (n, prog) = parse(&text).unwrap_or_else(|e| {
        eprintln!("script: {path}: {e}");
        std::process::exit(2);
    });
    // everything the probe itself keeps is allocated before the reference snapshot
    let plain = Device::flex();
    let ad = plain.clone().autodiff();
    let mut slots: Vec<Option<Tensor<2>>> = (0..SLOTS).map(|_| None).collect();
    let mut grads: Option<burn::tensor::Gradients> = None;
    let mut modules: Vec<Option<(Linear, ModuleOptimizer)>> = (0..SLOTS).map(|_| None).collect();
    let mut out: Vec<(i64, i64, bool)> = Vec::with_capacity(prog.len());
    let traced: Option<usize> =
        std::env::var("PROBE_SCRIPT_TRACE").ok().and_then(|v| v.parse().ok());
    let marks = std::env::var("PROBE_SCRIPT_MARKS").is_ok();
    let values = std::env::var("PROBE_SCRIPT_VALUES").is_ok();
    let mut value_lines: Vec<String> = Vec::new();
    let before: Snapshot = alloc::snapshot();
    for (index, stmt) in prog.iter().copied().enumerate() {
        mark(marks, index);
        if traced == Some(index) {
            alloc::trace_start();
        }
        let res = catch_unwind(AssertUnwindSafe(|| match stmt {
            Stmt::Leaf(i, grad) => {
                let data = TensorData::new(vec![1.0f32; n * n], [n, n]);
                let t = Tensor::<2>::from_data(data, &ad);
                slots[i] = Some(if grad { t.require_grad() } else { t });
            }
            Stmt::PlainLeaf(i) => {
                let data = TensorData::new(vec![1.0f32; n * n], [n, n]);
                slots[i] = Some(Tensor::<2>::from_data(data, &plain));
            }
            Stmt::Bin(i, op, j, k, moved) => {
                let a = take(&mut slots, j, moved);
                let b = take(&mut slots, k, false);
                slots[i] = Some(binary(op, a, b));
            }
            Stmt::Un(i, op, j, moved) => {
                let a = take(&mut slots, j, moved);
                slots[i] = Some(unary(op, a));
            }
            Stmt::Drop(i) => slots[i] = None,
            Stmt::Backward(i, keep) => {
                let loss = take(&mut slots, i, false).sum();
                let g = loss.backward();
                drop(loss);
                if values {
                    for (j, slot) in slots.iter().enumerate() {
                        if let Some(grad) = slot.as_ref().and_then(|t| t.grad(&g)) {
                            value_lines.push(format!("V {index} grad {j} {}", bits(grad.into_data())));
                        }
                    }
                }
                if keep {
                    grads = Some(g);
                } else {
                    drop(g);
                }
            }
            Stmt::Reduce(i, mean, j) => {
                let a = take(&mut slots, j, false);
                let r = if mean { a.mean() } else { a.sum() };
                slots[i] = Some(r.reshape([1, 1]));
            }
            Stmt::Grad(i, j) => {
                let t = slots[j].as_ref().unwrap_or_else(|| panic!("script: slot {j} is empty"));
                let g = grads.as_ref().and_then(|g| t.grad(g));
                slots[i] = Some(g.unwrap_or_else(|| {
                    let [r, c] = t.dims();
                    Tensor::<2>::from_data(TensorData::new(vec![1.0f32; r * c], [r, c]), &plain)
                }));
            }
            Stmt::DropGrads => grads = None,
            Stmt::Lin(m, adam) => {
                let module = LinearConfig::new(n, n).init(&ad);
                let optim = if adam { AdamConfig::new().init() } else { SgdConfig::new().init() };
                modules[m] = Some((module, optim));
            }
            Stmt::Forward(i, m, j) => {
                let x = take(&mut slots, j, false);
                let (module, _) = modules[m].as_ref().unwrap_or_else(|| panic!("script: module {m} is empty"));
                slots[i] = Some(module.forward(x));
            }
            Stmt::Val(i, m) => {
                let (module, _) = modules[m].as_ref().unwrap_or_else(|| panic!("script: module {m} is empty"));
                slots[i] = Some(module.weight.val());
            }
            Stmt::Step(m, j) => {
                let loss = take(&mut slots, j, false).sum();
                let (module, mut optim) =
                    modules[m].take().unwrap_or_else(|| panic!("script: module {m} is empty"));
                let g = GradientsParams::from_grads(loss.backward(), &module);
                drop(loss);
                let module = optim.step(1e-3, module, g);
                modules[m] = Some((module, optim));
            }
            Stmt::DropModule(m) => modules[m] = None,
        }));
        if traced == Some(index) {
            let (events, overflow) = alloc::trace_stop();
            alloc::print_trace::<&str>(&events, overflow, "statement", &[]);
        }
        let now = alloc::snapshot();
        out.push((now.bytes_since(&before), now.blocks_since(&before), res.is_err()));
        if values && res.is_ok() {
            for (j, slot) in slots.iter().enumerate() {
                if let Some(t) = slot {
                    let grad = u8::from(t.is_require_grad());
                    value_lines.push(format!("V {index} val {j} {grad} {}", bits(t.to_data())));
                }
            }
        }
        if res.is_err() {
            break;
        }
    }
    mark(marks, out.len());
    for (i, (bytes, blocks, panicked)) in out.iter().enumerate() {
        if *panicked {
            println!("{i} panic");
        } else {
            println!("{i} {bytes} {blocks}");
        }
    }
    for line in value_lines {
        println!("{line}");
    }
}
