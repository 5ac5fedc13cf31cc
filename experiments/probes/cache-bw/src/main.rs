//! Elementwise bandwidth on this machine, L2-resident vs not, with burn-flex 0.22.1's
//! kernels written out (no `simd` feature, as the burn probes are built):
//!
//! * `scalar_op_typed` in place on a unique tensor: `for x in s { *x = op(*x, c) }`;
//! * its allocating path: `s.iter().map(|&x| op(x, c)).collect::<Vec<f32>>()`;
//! * `binary_op_typed` in place on a unique lhs: `for (l, &r) in l.zip(r) { *l = op(*l, r) }`;
//! * its allocating path (`a.clone() + b.clone()`): `a.zip(b).map(op).collect()`.
//!
//! Patterns (n = f32 elements per tensor):
//!
//! * `scale-inplace`: `x = x * 0.99` on one buffer, repeated (working set 4n B);
//! * `ema`: p10-ema's ema-only step without autodiff: `ema = ema*0.99` (in place),
//!   `t = w*0.01` (allocating), `ema = ema + t` (in place), `drop(t)` (working set 12n B);
//! * `add-alloc`: adleak's `c = a.clone() + b.clone(); drop(c)` (working set 12n B).
//!
//! Bytes are counted as the simulator counts them (sim/platform/timing.py
//! `flops_and_bytes`: 4 B per output and per input element), so GB/s here are the
//! simulator's `gbps`. Output: CSV `pattern,n_elems,tensor_bytes,ns_per_iter,gbps`.
use std::hint::black_box;
use std::time::Instant;

#[inline(never)]
fn scale_inplace(s: &mut [f32], c: f32) {
    for x in s.iter_mut() {
        *x = *x * c;
    }
}

#[inline(never)]
fn scale_alloc(s: &[f32], c: f32) -> Vec<f32> {
    s.iter().map(|&x| x * c).collect()
}

#[inline(never)]
fn add_inplace(l: &mut [f32], r: &[f32]) {
    for (l, &r) in l.iter_mut().zip(r) {
        *l = *l + r;
    }
}

#[inline(never)]
fn add_alloc(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(&a, &b)| a + b).collect()
}

fn time<F: FnMut()>(iters: usize, mut f: F) -> f64 {
    for _ in 0..(iters / 10).max(3) {
        f();
    }
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed().as_nanos() as f64 / iters as f64
}

fn main() {
    let sizes_kib: Vec<usize> = std::env::args()
        .nth(1)
        .map(|s| s.split(',').map(|v| v.parse().unwrap()).collect())
        .unwrap_or_else(|| vec![64, 128, 256, 512, 1024, 2048, 4096, 16384]);
    println!("pattern,n_elems,tensor_bytes,ns_per_iter,gbps");
    for kib in sizes_kib {
        let n = kib * 1024 / 4;
        let iters = (200 * 1024 * 1024 / (kib * 1024)).clamp(50, 20000);
        let mut x = vec![1.0f32; n];
        let ns = time(iters, || scale_inplace(black_box(&mut x), 0.99));
        println!("scale-inplace,{n},{},{ns:.1},{:.2}", 4 * n, 8.0 * n as f64 / ns);

        let mut ema = vec![1.0f32; n];
        let w = vec![0.5f32; n];
        let ns = time(iters, || {
            scale_inplace(black_box(&mut ema), 0.99);
            let t = scale_alloc(black_box(&w), 0.01);
            add_inplace(black_box(&mut ema), &t);
            drop(black_box(t));
        });
        // bytes as the simulator counts them: 8n + 8n + 12n
        println!("ema,{n},{},{ns:.1},{:.2}", 4 * n, 28.0 * n as f64 / ns);

        let a = vec![1.0f32; n];
        let b = vec![2.0f32; n];
        let ns = time(iters, || {
            let c = add_alloc(black_box(&a), black_box(&b));
            drop(black_box(c));
        });
        println!("add-alloc,{n},{},{ns:.1},{:.2}", 4 * n, 12.0 * n as f64 / ns);
    }
}
