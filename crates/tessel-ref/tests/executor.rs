//! Kernel-IR executor tests on hand-built kernels with known results: every op and
//! statement kind, and every fault the executor must report.

use half::{bf16, f16};
use std::sync::atomic::{AtomicU64, Ordering};
use tessel_ir::kernel::{
    BufferDecl, BufferRole, Builder, FCmp, ICmp, Kernel, Launch, LaunchArg, MathFn, Op, Operand,
    Param, Program, RegType, Space, Special, Stmt, Width,
};
use tessel_ir::{BufferId, DType, Reg, TensorType};
use tessel_ref::exec::numerics::CANONICAL_NAN;
use tessel_ref::{run_kernel, run_program, ExecError, ExecOptions, Tensor};
use tessel_testkit::build::{
    close_for, close_if, global_index, kernel, load, load_at, param_gaddr, ptr, r, scalar, store,
    store_at,
};
use tessel_testkit::host::{buf, f32_tensor, poison_f32, words};

/// `c[i] = a[i] + b[i]` for `i < n`, with a tail guard.
fn vector_add(n: u32, block: u32) -> Kernel {
    let grid = n.div_ceil(block);
    let mut k = kernel(
        "vadd",
        vec![
            ptr("a", DType::F32, false),
            ptr("b", DType::F32, false),
            ptr("c", DType::F32, true),
            scalar("n"),
        ],
        block,
        grid,
    );
    let mut b = Builder::new(&mut k);
    let i = global_index(&mut b);
    let n = b.op(RegType::U32, Op::Param(3), &[]);
    let inb = b.op(RegType::Pred, Op::ICmp(ICmp::LtU), &[r(i), r(n)]);
    b.open();
    let pa = param_gaddr(&mut b, 0, i, 4);
    let pb = param_gaddr(&mut b, 1, i, 4);
    let pc = param_gaddr(&mut b, 2, i, 4);
    let x = load(&mut b, RegType::F32, Width::B32, Space::Global, pa)[0];
    let y = load(&mut b, RegType::F32, Width::B32, Space::Global, pb)[0];
    let s = b.op(RegType::F32, Op::FAdd, &[r(x), r(y)]);
    store(&mut b, Width::B32, Space::Global, pc, &[r(s)]);
    close_if(&mut b, inb);
    b.finish();
    k
}

#[test]
fn vector_add_with_tail_guard() {
    let n = 1000u32;
    let k = vector_add(n, 128);
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 11.0).collect();
    let bv: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 1.5)).collect();
    // One element past n: the guard must leave it alone.
    let mut bufs = vec![f32_tensor(&a), f32_tensor(&bv), poison_f32(n as usize + 1)];
    let done = AtomicU64::new(0);
    let progress = |d: u64, total: u64| {
        assert_eq!(total, 8);
        done.fetch_max(d, Ordering::Relaxed);
    };
    let opts = ExecOptions {
        progress: Some(&progress),
    };
    let stats = run_kernel(
        &k,
        &mut bufs,
        &[buf(0), buf(1), buf(2), LaunchArg::U32(n)],
        &opts,
    )
    .unwrap();
    assert_eq!(done.load(Ordering::Relaxed), 8);
    assert_eq!(stats.ctas, 8);
    let c = bufs[2].to_f32_vec();
    for i in 0..n as usize {
        assert_eq!(c[i].to_bits(), (a[i] + bv[i]).to_bits(), "element {i}");
    }
    assert_eq!(words(&bufs[2].data)[n as usize], 0xFFFF_FFFF);
    // 1024 threads run the 7 statements before the guard, 1000 of them the 13 in the arm.
    assert_eq!(stats.lane_instructions, 1024 * 7 + 1000 * 13);
}

/// One CTA per row of `x: f32[rows, cols]`; 64 threads stride the row, then reduce with
/// butterfly shuffles in each warp, then across the two warps through shared memory.
fn row_sum(cols: u32, rows: u32) -> Kernel {
    let mut k = kernel(
        "row_sum",
        vec![ptr("x", DType::F32, false), ptr("out", DType::F32, true)],
        64,
        rows,
    );
    let smem = k.new_shared(8, 4);
    let mut b = Builder::new(&mut k);
    let tid = b.op(RegType::U32, Op::Special(Special::TidX), &[]);
    let row = b.op(RegType::U32, Op::Special(Special::CtaidX), &[]);
    let row0 = b.op(RegType::U32, Op::IMulLo, &[r(row), Operand::U32(cols)]);
    let acc = b.op(RegType::F32, Op::Mov, &[Operand::f32(0.0)]);
    let j = b.kernel.new_reg(RegType::U32);
    b.open();
    let idx = b.op(RegType::U32, Op::IAdd, &[r(row0), r(j)]);
    let a = param_gaddr(&mut b, 0, idx, 4);
    let x = load(&mut b, RegType::F32, Width::B32, Space::Global, a)[0];
    b.assign(acc, Op::FAdd, &[r(acc), r(x)]);
    close_for(&mut b, j, r(tid), Operand::U32(cols), Operand::U32(64));
    for m in [16u32, 8, 4, 2, 1] {
        let o = b.op(RegType::F32, Op::ShflBfly, &[r(acc), Operand::U32(m)]);
        b.assign(acc, Op::FAdd, &[r(acc), r(o)]);
    }
    let lane = b.op(RegType::U32, Op::Special(Special::LaneId), &[]);
    let warp = b.op(RegType::U32, Op::ShrU, &[r(tid), Operand::U32(5)]);
    let is0 = b.op(
        RegType::Pred,
        Op::ICmp(ICmp::Eq),
        &[r(lane), Operand::U32(0)],
    );
    b.open();
    let base = b.op(RegType::U32, Op::SharedAddr(smem), &[]);
    let off = b.op(RegType::U32, Op::Shl, &[r(warp), Operand::U32(2)]);
    let sa = b.op(RegType::U32, Op::IAdd, &[r(base), r(off)]);
    store(&mut b, Width::B32, Space::Shared, sa, &[r(acc)]);
    close_if(&mut b, is0);
    b.push(Stmt::Barrier);
    let t0 = b.op(
        RegType::Pred,
        Op::ICmp(ICmp::Eq),
        &[r(tid), Operand::U32(0)],
    );
    b.open();
    let base = b.op(RegType::U32, Op::SharedAddr(smem), &[]);
    let s = b.kernel.new_reg(RegType::F32);
    let s1 = b.kernel.new_reg(RegType::F32);
    b.push(Stmt::Load {
        dsts: vec![s, s1],
        space: Space::Shared,
        width: Width::V2,
        addr: base,
        offset: 0,
    });
    let tot = b.op(RegType::F32, Op::FAdd, &[r(s), r(s1)]);
    let o = param_gaddr(&mut b, 1, row, 4);
    store(&mut b, Width::B32, Space::Global, o, &[r(tot)]);
    close_if(&mut b, t0);
    b.finish();
    k
}

#[test]
fn row_sum_with_loop_shuffles_shared_and_barrier() {
    let (rows, cols) = (5u32, 300u32);
    let k = row_sum(cols, rows);
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919) % 1000) as f32 * 0.001 - 0.3)
        .collect();
    let mut bufs = vec![f32_tensor(&x), poison_f32(rows as usize)];
    run_kernel(&k, &mut bufs, &[buf(0), buf(1)], &ExecOptions::default()).unwrap();
    let out = bufs[1].to_f32_vec();
    for row in 0..rows as usize {
        // The kernel's exact order: per-thread strided sums, butterfly within each warp,
        // then warp 0 + warp 1.
        let mut acc = [0f32; 64];
        for (t, a) in acc.iter_mut().enumerate() {
            let mut j = t;
            while j < cols as usize {
                *a += x[row * cols as usize + j];
                j += 64;
            }
        }
        for m in [16usize, 8, 4, 2, 1] {
            let prev = acc;
            for t in 0..64 {
                acc[t] = prev[t] + prev[(t & !31) | ((t & 31) ^ m)];
            }
        }
        let want = acc[0] + acc[32];
        assert_eq!(out[row].to_bits(), want.to_bits(), "row {row}");
        let exact: f64 = x[row * cols as usize..][..cols as usize]
            .iter()
            .map(|&v| v as f64)
            .sum();
        assert!((out[row] as f64 - exact).abs() < 1e-4);
    }
}

#[test]
fn divergent_if_uses_the_condition_before_either_arm() {
    // Even threads: x * 2 and clear the condition; odd threads: x + 100. The then-arm's
    // write to the condition must not send even threads into the else-arm.
    let mut k = kernel("diverge", vec![ptr("io", DType::F32, true)], 64, 1);
    let mut b = Builder::new(&mut k);
    let tid = b.op(RegType::U32, Op::Special(Special::TidX), &[]);
    let a = param_gaddr(&mut b, 0, tid, 4);
    let x = load(&mut b, RegType::F32, Width::B32, Space::Global, a)[0];
    let bit = b.op(RegType::U32, Op::And, &[r(tid), Operand::U32(1)]);
    let even = b.op(
        RegType::Pred,
        Op::ICmp(ICmp::Eq),
        &[r(bit), Operand::U32(0)],
    );
    b.open();
    b.assign(x, Op::FMul, &[r(x), Operand::f32(2.0)]);
    b.assign(even, Op::PNot, &[r(even)]);
    let then_body = b.close();
    b.open();
    b.assign(x, Op::FAdd, &[r(x), Operand::f32(100.0)]);
    let else_body = b.close();
    b.push(Stmt::If {
        cond: even,
        then_body,
        else_body,
    });
    store(&mut b, Width::B32, Space::Global, a, &[r(x)]);
    b.finish();
    let v: Vec<f32> = (0..64).map(|i| i as f32 - 10.5).collect();
    let mut bufs = vec![f32_tensor(&v)];
    run_kernel(&k, &mut bufs, &[buf(0)], &ExecOptions::default()).unwrap();
    let out = bufs[0].to_f32_vec();
    for (i, (&o, &x)) in out.iter().zip(&v).enumerate() {
        let want = if i % 2 == 0 { x * 2.0 } else { x + 100.0 };
        assert_eq!(o, want, "thread {i}");
    }
}

#[test]
fn for_loop_with_per_thread_trip_counts() {
    // Thread t counts from t to 10 by 3 (unsigned compare): 1 + (10 - t - 1) / 3 trips
    // for t < 10, none after.
    let mut k = kernel("trips", vec![ptr("out", DType::I32, true)], 32, 1);
    let mut b = Builder::new(&mut k);
    let tid = b.op(RegType::U32, Op::Special(Special::TidX), &[]);
    let cnt = b.op(RegType::U32, Op::Mov, &[Operand::U32(0)]);
    let v = b.kernel.new_reg(RegType::U32);
    b.open();
    b.assign(cnt, Op::IAdd, &[r(cnt), Operand::U32(1)]);
    close_for(&mut b, v, r(tid), Operand::U32(10), Operand::U32(3));
    // After the loop var holds the first value ≥ end (threads that ran) or start.
    let both = b.op(RegType::U32, Op::Shl, &[r(v), Operand::U32(16)]);
    let packed = b.op(RegType::U32, Op::Or, &[r(both), r(cnt)]);
    let a = param_gaddr(&mut b, 0, tid, 4);
    store(&mut b, Width::B32, Space::Global, a, &[r(packed)]);
    b.finish();
    let mut bufs = vec![Tensor::zeros(TensorType::new(DType::I32, vec![32]))];
    run_kernel(&k, &mut bufs, &[buf(0)], &ExecOptions::default()).unwrap();
    let out = bufs[0].to_i32_vec();
    for t in 0..32u32 {
        let trips = if t < 10 { 1 + (9 - t) / 3 } else { 0 };
        let end = t + 3 * trips;
        assert_eq!(out[t as usize] as u32, (end << 16) | trips, "thread {t}");
    }
}

/// Runs a one-statement kernel `out[i] = op(a[i], b[i], c[i])` (as many operands as `op`
/// takes) over a warp or more and returns the 32-bit results. Threads past the inputs
/// load the last element, so that shuffles see a full warp.
fn run_op(op: Op, dst: RegType, args: &[&[u32]]) -> Result<Vec<u32>, ExecError> {
    let n = args[0].len();
    let threads = n.div_ceil(32) as u32 * 32;
    let mut params: Vec<Param> = (0..args.len())
        .map(|i| ptr(&format!("in{i}"), DType::I32, false))
        .collect();
    params.push(ptr("out", DType::I32, true));
    let mut k = kernel("op", params, threads, 1);
    let mut b = Builder::new(&mut k);
    let tid = b.op(RegType::U32, Op::Special(Special::TidX), &[]);
    let lim = b.op(
        RegType::Pred,
        Op::ICmp(ICmp::LtU),
        &[r(tid), Operand::U32(n as u32)],
    );
    // Clamp the index so every thread can load (shuffles need the whole warp).
    let last = b.op(RegType::U32, Op::Mov, &[Operand::U32(n as u32 - 1)]);
    let idx = b.op(RegType::U32, Op::Select, &[r(lim), r(tid), r(last)]);
    let mut ops = Vec::new();
    for i in 0..args.len() {
        let a = param_gaddr(&mut b, i as u32, idx, 4);
        ops.push(r(
            load(&mut b, RegType::U32, Width::B32, Space::Global, a)[0]
        ));
    }
    let d = b.op(dst, op, &ops);
    b.open();
    let a = param_gaddr(&mut b, args.len() as u32, tid, 4);
    store(&mut b, Width::B32, Space::Global, a, &[r(d)]);
    close_if(&mut b, lim);
    b.finish();
    let mut bufs: Vec<Tensor> = args
        .iter()
        .map(|a| {
            let v: Vec<i32> = a.iter().map(|&x| x as i32).collect();
            Tensor::from_i32(vec![n as u64], &v)
        })
        .collect();
    bufs.push(Tensor::poison(TensorType::new(DType::I32, vec![n as u64])));
    let launch: Vec<LaunchArg> = (0..bufs.len()).map(buf).collect();
    run_kernel(&k, &mut bufs, &launch, &ExecOptions::default())?;
    Ok(words(&bufs[args.len()].data))
}

fn fb(x: f32) -> u32 {
    x.to_bits()
}

#[test]
fn float_ops() {
    let nan = f32::NAN.to_bits() | 0x8000_0001; // a negative NaN with a payload
    let a = [
        fb(1.5),
        fb(-0.0),
        fb(3.0),
        fb(1e30),
        nan,
        fb(f32::INFINITY),
        fb(0.1),
    ];
    let b = [
        fb(2.25),
        fb(0.0),
        fb(-7.0),
        fb(1e30),
        fb(1.0),
        fb(f32::INFINITY),
        fb(0.2),
    ];
    let c = [
        fb(0.5),
        fb(-0.0),
        fb(1.0),
        fb(-1e30),
        fb(1.0),
        fb(1.0),
        fb(-0.02),
    ];
    let cases: &[(Op, usize, [u32; 7])] = &[
        (
            Op::FAdd,
            2,
            [
                fb(3.75),
                fb(0.0),
                fb(-4.0),
                fb(2e30),
                CANONICAL_NAN,
                fb(f32::INFINITY),
                fb(0.1 + 0.2),
            ],
        ),
        (
            Op::FSub,
            2,
            [
                fb(-0.75),
                fb(-0.0),
                fb(10.0),
                fb(0.0),
                CANONICAL_NAN,
                CANONICAL_NAN,
                fb(0.1 - 0.2),
            ],
        ),
        (
            Op::FMul,
            2,
            [
                fb(3.375),
                fb(-0.0),
                fb(-21.0),
                fb(f32::INFINITY),
                CANONICAL_NAN,
                fb(f32::INFINITY),
                fb(0.1 * 0.2),
            ],
        ),
        (
            Op::FDiv,
            2,
            [
                fb(1.5 / 2.25),
                CANONICAL_NAN,
                fb(3.0 / -7.0),
                fb(1.0),
                CANONICAL_NAN,
                CANONICAL_NAN,
                fb(0.5),
            ],
        ),
        (
            Op::FFma,
            3,
            [
                fb(3.875),
                fb(-0.0),
                fb(-20.0),
                fb(f32::INFINITY),
                CANONICAL_NAN,
                fb(f32::INFINITY),
                fb(0.1f32.mul_add(0.2, -0.02)),
            ],
        ),
        (
            Op::FMin,
            2,
            [
                fb(1.5),
                fb(-0.0),
                fb(-7.0),
                fb(1e30),
                CANONICAL_NAN,
                fb(f32::INFINITY),
                fb(0.1),
            ],
        ),
        (
            Op::FMax,
            2,
            [
                fb(2.25),
                fb(0.0),
                fb(3.0),
                fb(1e30),
                CANONICAL_NAN,
                fb(f32::INFINITY),
                fb(0.2),
            ],
        ),
        (
            Op::FSqrt,
            1,
            [
                fb(1.5f32.sqrt()),
                fb(-0.0),
                fb(3f32.sqrt()),
                fb(1e30f32.sqrt()),
                CANONICAL_NAN,
                fb(f32::INFINITY),
                fb(0.1f32.sqrt()),
            ],
        ),
        (
            Op::FNeg,
            1,
            [
                fb(-1.5),
                fb(0.0),
                fb(-3.0),
                fb(-1e30),
                nan ^ 0x8000_0000,
                fb(f32::NEG_INFINITY),
                fb(-0.1),
            ],
        ),
        (
            Op::FAbs,
            1,
            [
                fb(1.5),
                fb(0.0),
                fb(3.0),
                fb(1e30),
                nan & 0x7fff_ffff,
                fb(f32::INFINITY),
                fb(0.1),
            ],
        ),
        (
            Op::FRint,
            1,
            [
                fb(2.0),
                fb(-0.0),
                fb(3.0),
                fb(1e30),
                CANONICAL_NAN,
                fb(f32::INFINITY),
                fb(0.0),
            ],
        ),
    ];
    for (op, arity, want) in cases {
        let args: Vec<&[u32]> = [&a[..], &b[..], &c[..]][..*arity].to_vec();
        let got = run_op(*op, RegType::F32, &args).unwrap();
        assert_eq!(
            &got[..],
            &want[..],
            "{op:?}: got {:?}",
            got.iter().map(|&x| f32::from_bits(x)).collect::<Vec<_>>()
        );
    }
    // sqrt of a negative number is NaN, canonical on the GPU.
    assert_eq!(
        run_op(Op::FSqrt, RegType::F32, &[&[fb(-4.0)]]).unwrap(),
        vec![CANONICAL_NAN]
    );
    // FRint ties to even.
    let ties = [
        fb(0.5),
        fb(1.5),
        fb(2.5),
        fb(-2.5),
        fb(-0.5),
        fb(8_388_609.0),
    ];
    let got = run_op(Op::FRint, RegType::F32, &[&ties]).unwrap();
    assert_eq!(
        got,
        vec![
            fb(0.0),
            fb(2.0),
            fb(2.0),
            fb(-2.0),
            fb(-0.0),
            fb(8_388_609.0)
        ]
    );
}

#[test]
fn float_compares() {
    let a = [fb(1.0), fb(2.0), fb(f32::NAN), fb(-0.0), fb(3.0)];
    let b = [fb(2.0), fb(2.0), fb(1.0), fb(0.0), fb(f32::NAN)];
    let cases: &[(FCmp, [u32; 5])] = &[
        (FCmp::Eq, [0, 1, 0, 1, 0]),
        (FCmp::Ne, [1, 0, 1, 0, 1]),
        (FCmp::Lt, [1, 0, 0, 0, 0]),
        (FCmp::Le, [1, 1, 0, 1, 0]),
        (FCmp::Gt, [0, 0, 0, 0, 0]),
        (FCmp::Ge, [0, 1, 0, 1, 0]),
        (FCmp::Nan, [0, 0, 1, 0, 1]),
    ];
    for (c, want) in cases {
        // Predicates are stored through Select to make them 32-bit values.
        let p = run_op(Op::FCmp(*c), RegType::Pred, &[&a, &b]).unwrap();
        assert_eq!(&p[..], &want[..], "{c:?}");
    }
}

#[test]
fn integer_ops() {
    let m = u32::MAX;
    let a = [7, m, 0x8000_0000, 100, 0xdead_beef];
    let b = [3, 2, 31, 7, 4];
    let cases: &[(Op, [u32; 5])] = &[
        (Op::IAdd, [10, 1, 0x8000_001f, 107, 0xdead_bef3]),
        (Op::ISub, [4, m - 2, 0x7fff_ffe1, 93, 0xdead_beeb]),
        (Op::IMulLo, [21, m - 1, 0x8000_0000, 700, 0x7ab6_fbbc]),
        (Op::UMulHi, [0, 1, 15, 0, 3]),
        (Op::UDiv, [2, m / 2, 0x8000_0000 / 31, 14, 0xdead_beef / 4]),
        (Op::URem, [1, 1, 0x8000_0000 % 31, 2, 3]),
        (Op::Shl, [56, m - 3, 0, 12800, 0xead_beef0]),
        (Op::ShrU, [0, m >> 2, 1, 0, 0x0dea_dbee]),
        (Op::ShrS, [0, m, m, 0, 0xfdea_dbee]),
        (Op::And, [3, 2, 0, 4, 4]),
        (Op::Or, [7, m, 0x8000_001f, 103, 0xdead_beef]),
        (Op::Xor, [4, m - 2, 0x8000_001f, 99, 0xdead_beeb]),
    ];
    for (op, want) in cases {
        let got = run_op(*op, RegType::U32, &[&a, &b]).unwrap();
        assert_eq!(&got[..], &want[..], "{op:?}");
    }
    assert_eq!(
        run_op(Op::Not, RegType::U32, &[&a]).unwrap(),
        a.map(|x| !x).to_vec()
    );
    let icmp: &[(ICmp, [u32; 5])] = &[
        (ICmp::Eq, [0, 0, 0, 0, 0]),
        (ICmp::Ne, [1, 1, 1, 1, 1]),
        (ICmp::LtU, [0, 0, 0, 0, 0]),
        (ICmp::GeU, [1, 1, 1, 1, 1]),
        (ICmp::LeU, [0, 0, 0, 0, 0]),
        (ICmp::GtU, [1, 1, 1, 1, 1]),
        (ICmp::LtS, [0, 1, 1, 0, 1]),
        (ICmp::LeS, [0, 1, 1, 0, 1]),
        (ICmp::GtS, [1, 0, 0, 1, 0]),
        (ICmp::GeS, [1, 0, 0, 1, 0]),
    ];
    for (c, want) in icmp {
        let got = run_op(Op::ICmp(*c), RegType::Pred, &[&a, &b]).unwrap();
        assert_eq!(&got[..], &want[..], "{c:?}");
    }
    let p = [0, 1, 0, 1];
    let q = [0, 0, 1, 1];
    assert_eq!(
        run_op(Op::PAnd, RegType::Pred, &[&p, &q]).unwrap(),
        vec![0, 0, 0, 1]
    );
    assert_eq!(
        run_op(Op::POr, RegType::Pred, &[&p, &q]).unwrap(),
        vec![0, 1, 1, 1]
    );
    assert_eq!(
        run_op(Op::PNot, RegType::Pred, &[&p]).unwrap(),
        vec![1, 0, 1, 0]
    );
    assert_eq!(
        run_op(
            Op::Select,
            RegType::U32,
            &[&p, &[10, 11, 12, 13], &[20, 21, 22, 23]]
        )
        .unwrap(),
        vec![20, 11, 22, 13]
    );
}

#[test]
fn conversions() {
    let x = [
        fb(2.5),
        fb(-3.5),
        fb(1e10),
        fb(-1e10),
        fb(f32::NAN),
        fb(-0.7),
        fb(f32::INFINITY),
    ];
    let i = |v: &[i32]| v.iter().map(|&x| x as u32).collect::<Vec<_>>();
    assert_eq!(
        run_op(Op::CvtRniS32F32, RegType::U32, &[&x]).unwrap(),
        i(&[2, -4, i32::MAX, i32::MIN, 0, -1, i32::MAX])
    );
    assert_eq!(
        run_op(Op::CvtRziS32F32, RegType::U32, &[&x]).unwrap(),
        i(&[2, -3, i32::MAX, i32::MIN, 0, 0, i32::MAX])
    );
    // 16777217 and 2^31 - 1 are not f32s: nearest even.
    let n = i(&[16_777_217, -16_777_219, i32::MAX, -5]);
    assert_eq!(
        run_op(Op::CvtF32S32, RegType::F32, &[&n]).unwrap(),
        vec![
            fb(16_777_216.0),
            fb(-16_777_220.0),
            fb(2_147_483_648.0),
            fb(-5.0)
        ]
    );
    assert_eq!(
        run_op(Op::CvtF32U32, RegType::F32, &[&n]).unwrap(),
        vec![
            fb(16_777_216.0),
            fb(4_278_190_080.0),
            fb(2_147_483_648.0),
            fb(4_294_967_296.0)
        ]
    );
    assert_eq!(
        run_op(Op::BitsToF32, RegType::F32, &[&[0x7f80_0001]]).unwrap(),
        vec![0x7f80_0001]
    );
    assert_eq!(
        run_op(Op::F32ToBits, RegType::U32, &[&[0xff80_0001]]).unwrap(),
        vec![0xff80_0001]
    );
    // bf16x2: hi = a, lo = b; ties to even, overflow to inf, denormals kept, NaN -> 0x7fff.
    let hi = [fb(1.0), 0x3f80_8000, 0x7f7f_ffff, 0x0001_8000, fb(f32::NAN)];
    let lo = [fb(-2.0), 0x3f81_8000, 0xff7f_ffff, 0x8000_c000, fb(-1.0)];
    assert_eq!(
        run_op(Op::PackBf16x2, RegType::U32, &[&hi, &lo]).unwrap(),
        vec![
            0x3f80_c000,
            0x3f80_3f82,
            0x7f80_ff80,
            0x0002_8001,
            0x7fff_bf80
        ]
    );
    // f16x2: 65520 ties to inf, 2^-25 ties to zero, 1.5·2^-24 ties to 2·2^-24, NaN.
    let hi = [fb(1.0), fb(65520.0), fb(2f32.powi(-25)), fb(f32::NAN)];
    let lo = [fb(-2.0), fb(65504.0), fb(1.5 * 2f32.powi(-24)), fb(0.1)];
    assert_eq!(
        run_op(Op::PackF16x2, RegType::U32, &[&hi, &lo]).unwrap(),
        vec![
            0x3c00_c000,
            0x7c00_7bff,
            0x0000_0002,
            0x7fff_0000 | f16::from_f32(0.1).to_bits() as u32
        ]
    );
    // F16ToF32 reads bits 15..0 only.
    let h = [0xabcd_3c00, 0x0001, 0xfbff, 0x7c00, 0x7e01];
    assert_eq!(
        run_op(Op::F16ToF32, RegType::F32, &[&h]).unwrap(),
        vec![
            fb(1.0),
            fb(2f32.powi(-24)),
            fb(-65504.0),
            fb(f32::INFINITY),
            CANONICAL_NAN
        ]
    );
}

#[test]
fn wide_ops_and_vector_memory() {
    // Thread t: addr = p + 2^32 + (2^64 - 2^32) + 8t, through MulWideU32, AddU64 (with
    // wraparound) and CvtU64U32; a V2 store of (t, 3t) there; then a B32 store of
    // 0xAAAA_AAAA at Select(t even, addr, addr + 4), over the low or the high word.
    // Thread 0 also copies 16 bytes with V4 and pokes a B16 and a B8 at odd offsets.
    let mut k = kernel(
        "wide",
        vec![ptr("out", DType::I32, true), ptr("tmp", DType::I32, true)],
        32,
        1,
    );
    let mut b = Builder::new(&mut k);
    let tid = b.op(RegType::U32, Op::Special(Special::TidX), &[]);
    let p = b.op(RegType::U64, Op::Param(0), &[]);
    let big = b.op(
        RegType::U64,
        Op::MulWideU32,
        &[Operand::U32(0x8000_0000), Operand::U32(2)],
    );
    let a = b.op(RegType::U64, Op::AddU64, &[r(p), r(big)]);
    let a = b.op(
        RegType::U64,
        Op::AddU64,
        &[r(a), Operand::U64(0u64.wrapping_sub(1 << 32))],
    );
    let t8 = b.op(RegType::U32, Op::Shl, &[r(tid), Operand::U32(3)]);
    let off = b.op(RegType::U64, Op::CvtU64U32, &[r(t8)]);
    let a = b.op(RegType::U64, Op::AddU64, &[r(a), r(off)]);
    let t3 = b.op(RegType::U32, Op::IMulLo, &[r(tid), Operand::U32(3)]);
    store(&mut b, Width::V2, Space::Global, a, &[r(tid), r(t3)]);
    let bit = b.op(RegType::U32, Op::And, &[r(tid), Operand::U32(1)]);
    let even = b.op(
        RegType::Pred,
        Op::ICmp(ICmp::Eq),
        &[r(bit), Operand::U32(0)],
    );
    let a4 = b.op(RegType::U64, Op::AddU64, &[r(a), Operand::U64(4)]);
    let sel = b.op(RegType::U64, Op::Select, &[r(even), r(a), r(a4)]);
    let wide_copy = b.op(RegType::U64, Op::Mov, &[r(sel)]);
    store(
        &mut b,
        Width::B32,
        Space::Global,
        wide_copy,
        &[Operand::U32(0xAAAA_AAAA)],
    );
    let is0 = b.op(
        RegType::Pred,
        Op::ICmp(ICmp::Eq),
        &[r(tid), Operand::U32(0)],
    );
    b.open();
    let src = b.op(RegType::U64, Op::Param(0), &[]);
    let dst = b.op(RegType::U64, Op::Param(1), &[]);
    let regs: Vec<Reg> = (0..4).map(|_| b.kernel.new_reg(RegType::U32)).collect();
    b.push(Stmt::Load {
        dsts: regs.clone(),
        space: Space::Global,
        width: Width::V4,
        addr: src,
        offset: 16,
    });
    b.push(Stmt::Store {
        space: Space::Global,
        width: Width::V4,
        addr: dst,
        offset: 0,
        values: regs.iter().map(|&x| r(x)).collect(),
    });
    store_at(
        &mut b,
        Width::B16,
        Space::Global,
        dst,
        18,
        &[Operand::U32(0xabcd_1234)],
    );
    store_at(
        &mut b,
        Width::B8,
        Space::Global,
        dst,
        17,
        &[Operand::U32(0x77)],
    );
    let bl = load_at(&mut b, RegType::U32, Width::B8, Space::Global, dst, 19)[0];
    store_at(&mut b, Width::B32, Space::Global, dst, 20, &[r(bl)]);
    close_if(&mut b, is0);
    b.finish();
    let mut bufs = vec![
        Tensor::poison(TensorType::new(DType::I32, vec![64])),
        Tensor::zeros(TensorType::new(DType::I32, vec![6])),
    ];
    run_kernel(&k, &mut bufs, &[buf(0), buf(1)], &ExecOptions::default()).unwrap();
    let out = words(&bufs[0].data);
    for t in 0..32u32 {
        let (lo, hi) = if t % 2 == 0 {
            (0xAAAA_AAAA, 3 * t)
        } else {
            (t, 0xAAAA_AAAA)
        };
        assert_eq!(
            (out[2 * t as usize], out[2 * t as usize + 1]),
            (lo, hi),
            "thread {t}"
        );
    }
    let tmp = words(&bufs[1].data);
    assert_eq!(&tmp[..4], &out[4..8]);
    assert_eq!(tmp[4], 0x1234_7700);
    assert_eq!(tmp[5], 0x12);
}

#[test]
fn bf16_load_compute_store() {
    // y = bf16(x * 3 + 1) over bf16 elements, two per thread: B32 load, unpack by shifts,
    // PackBf16x2 back. Checked against half's conversion.
    let n = 256u32;
    let mut k = kernel(
        "bf16_axpb",
        vec![ptr("x", DType::Bf16, false), ptr("y", DType::Bf16, true)],
        64,
        2,
    );
    let mut b = Builder::new(&mut k);
    let i = global_index(&mut b);
    let ax = param_gaddr(&mut b, 0, i, 4);
    let ay = param_gaddr(&mut b, 1, i, 4);
    let w = load(&mut b, RegType::U32, Width::B32, Space::Global, ax)[0];
    let lo_bits = b.op(RegType::U32, Op::Shl, &[r(w), Operand::U32(16)]);
    let hi_bits = b.op(RegType::U32, Op::And, &[r(w), Operand::U32(0xffff_0000)]);
    let mut outs = Vec::new();
    for bits in [hi_bits, lo_bits] {
        let f = b.op(RegType::F32, Op::BitsToF32, &[r(bits)]);
        let y = b.op(
            RegType::F32,
            Op::FFma,
            &[r(f), Operand::f32(3.0), Operand::f32(1.0)],
        );
        outs.push(y);
    }
    let p = b.op(RegType::U32, Op::PackBf16x2, &[r(outs[0]), r(outs[1])]);
    store(&mut b, Width::B32, Space::Global, ay, &[r(p)]);
    b.finish();
    let x = Tensor::random(TensorType::new(DType::Bf16, vec![n as u64]), 42);
    let mut bufs = vec![
        x.clone(),
        Tensor::poison(TensorType::new(DType::Bf16, vec![n as u64])),
    ];
    run_kernel(&k, &mut bufs, &[buf(0), buf(1)], &ExecOptions::default()).unwrap();
    let got = bufs[1].to_bf16_vec();
    for (i, (g, xv)) in got.iter().zip(x.to_bf16_vec()).enumerate() {
        let want = bf16::from_f32(xv.to_f32().mul_add(3.0, 1.0));
        assert_eq!(g.to_bits(), want.to_bits(), "element {i}");
    }
}

#[test]
fn bytes_from_many_ctas_share_words() {
    // Each thread stores one byte; neighbouring bytes of a word come from different CTAs
    // (3 CTAs of 32 threads, element tid * 3 + ctaid).
    let n = 32 * 3;
    let mut k = kernel("bytes", vec![ptr("out", DType::Bool, true)], 32, 3);
    let mut b = Builder::new(&mut k);
    let tid = b.op(RegType::U32, Op::Special(Special::TidX), &[]);
    let cta = b.op(RegType::U32, Op::Special(Special::CtaidX), &[]);
    let t3 = b.op(RegType::U32, Op::IMulLo, &[r(tid), Operand::U32(3)]);
    let i = b.op(RegType::U32, Op::IAdd, &[r(t3), r(cta)]);
    let a = param_gaddr(&mut b, 0, i, 1);
    let v = b.op(RegType::U32, Op::IAdd, &[r(i), Operand::U32(0x100)]);
    store(&mut b, Width::B8, Space::Global, a, &[r(v)]);
    b.finish();
    let mut bufs = vec![Tensor::poison(TensorType::new(DType::Bool, vec![n + 1]))];
    run_kernel(&k, &mut bufs, &[buf(0)], &ExecOptions::default()).unwrap();
    let want: Vec<u8> = (0..n as u8).chain([0xFF]).collect();
    assert_eq!(bufs[0].data, want);
}

fn expect_err(k: &Kernel, mut bufs: Vec<Tensor>, args: &[LaunchArg]) -> ExecError {
    run_kernel(k, &mut bufs, args, &ExecOptions::default()).unwrap_err()
}

#[test]
fn out_of_bounds_store_names_the_buffer() {
    // The vector add without its guard: thread 1000 stores past the end of `c`.
    let mut k = vector_add(1000, 128);
    k.body = vec![];
    let mut b = Builder::new(&mut k);
    let i = global_index(&mut b);
    let pc = param_gaddr(&mut b, 2, i, 4);
    store(&mut b, Width::B32, Space::Global, pc, &[Operand::f32(1.0)]);
    b.finish();
    let bufs = vec![poison_f32(1000), poison_f32(1000), poison_f32(1000)];
    let e = expect_err(&k, bufs, &[buf(0), buf(1), buf(2), LaunchArg::U32(1000)]);
    assert_eq!(
        e,
        ExecError::OutOfBounds {
            kernel: "vadd".into(),
            cta: 7,
            thread: 104,
            access: "store",
            buffer: "buf2".into(),
            offset: 4000,
            bytes: 4,
            size: 4000,
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("`buf2`") && msg.contains("offset 4000"),
        "{msg}"
    );
}

#[test]
fn misaligned_vector_load_faults() {
    let mut k = kernel("mis", vec![ptr("x", DType::F32, false)], 32, 1);
    let mut b = Builder::new(&mut k);
    let p = b.op(RegType::U64, Op::Param(0), &[]);
    let regs: Vec<Reg> = (0..4).map(|_| b.kernel.new_reg(RegType::F32)).collect();
    b.push(Stmt::Load {
        dsts: regs,
        space: Space::Global,
        width: Width::V4,
        addr: p,
        offset: 8,
    });
    b.finish();
    let e = expect_err(&k, vec![poison_f32(64)], &[buf(0)]);
    assert!(
        matches!(e, ExecError::Misaligned { bytes: 16, thread: 0, addr, .. } if addr % 16 == 8),
        "{e}"
    );
}

#[test]
fn wild_and_shared_faults() {
    // A load from a null-based pointer, and a shared store past the shared buffer.
    let mut k = kernel("wild", vec![], 32, 1);
    let mut b = Builder::new(&mut k);
    let a = b.op(RegType::U64, Op::Mov, &[Operand::U64(64)]);
    load(&mut b, RegType::U32, Width::B32, Space::Global, a);
    b.finish();
    assert!(matches!(
        expect_err(&k, vec![], &[]),
        ExecError::WildAddress { addr: 64, .. }
    ));

    let mut k = kernel("smem", vec![], 32, 2);
    let s = k.new_shared(128, 16);
    let mut b = Builder::new(&mut k);
    let tid = b.op(RegType::U32, Op::Special(Special::TidX), &[]);
    let base = b.op(RegType::U32, Op::SharedAddr(s), &[]);
    let off = b.op(RegType::U32, Op::Shl, &[r(tid), Operand::U32(3)]);
    let a = b.op(RegType::U32, Op::IAdd, &[r(base), r(off)]);
    store(&mut b, Width::B32, Space::Shared, a, &[Operand::U32(1)]);
    b.finish();
    let e = expect_err(&k, vec![], &[]);
    assert!(
        matches!(
            e,
            ExecError::SharedOutOfBounds {
                cta: 0,
                thread: 16,
                addr: 128,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn divergent_barrier_faults() {
    let mut k = kernel("bar", vec![], 64, 1);
    let mut b = Builder::new(&mut k);
    let tid = b.op(RegType::U32, Op::Special(Special::TidX), &[]);
    let c = b.op(
        RegType::Pred,
        Op::ICmp(ICmp::LtU),
        &[r(tid), Operand::U32(16)],
    );
    b.open();
    b.push(Stmt::Barrier);
    close_if(&mut b, c);
    b.finish();
    assert_eq!(
        expect_err(&k, vec![], &[]),
        ExecError::DivergentBarrier {
            kernel: "bar".into(),
            cta: 0,
            active: 16,
            threads: 64
        }
    );
}

#[test]
fn shuffle_faults() {
    // Half a warp shuffles.
    let mut k = kernel("shfl", vec![], 32, 1);
    let mut b = Builder::new(&mut k);
    let tid = b.op(RegType::U32, Op::Special(Special::TidX), &[]);
    let c = b.op(
        RegType::Pred,
        Op::ICmp(ICmp::LtU),
        &[r(tid), Operand::U32(16)],
    );
    b.open();
    b.op(RegType::U32, Op::ShflBfly, &[r(tid), Operand::U32(1)]);
    close_if(&mut b, c);
    b.finish();
    assert!(matches!(
        expect_err(&k, vec![], &[]),
        ExecError::ShuffleDivergent {
            inactive: 16,
            warp: 0,
            ..
        }
    ));
    // A lane mask of 32.
    let got = run_op(Op::ShflBfly, RegType::U32, &[&[5; 32], &[32; 32]]);
    assert!(matches!(
        got,
        Err(ExecError::ShuffleOutOfRange { lane_mask: 32, .. })
    ));
    // The butterfly itself: lane i reads lane i ^ 5.
    let vals: Vec<u32> = (0..32).map(|i| 1000 + i).collect();
    let got = run_op(Op::ShflBfly, RegType::U32, &[&vals, &[5; 32]]).unwrap();
    assert_eq!(got, (0..32).map(|i| 1000 + (i ^ 5)).collect::<Vec<u32>>());
}

#[test]
fn arithmetic_faults() {
    let e = run_op(Op::UDiv, RegType::U32, &[&[1, 2, 3], &[1, 0, 1]]).unwrap_err();
    assert!(
        matches!(e, ExecError::DivisionByZero { thread: 1, .. }),
        "{e}"
    );
    let e = run_op(Op::ShrS, RegType::U32, &[&[1, 2, 3], &[1, 2, 40]]).unwrap_err();
    assert!(
        matches!(
            e,
            ExecError::ShiftOutOfRange {
                thread: 2,
                shift: 40,
                ..
            }
        ),
        "{e}"
    );
    // Only active threads fault: division by a zero that only inactive threads see.
    let mut k = kernel("guarded_div", vec![], 32, 1);
    let mut b = Builder::new(&mut k);
    let tid = b.op(RegType::U32, Op::Special(Special::TidX), &[]);
    let c = b.op(
        RegType::Pred,
        Op::ICmp(ICmp::Ne),
        &[r(tid), Operand::U32(0)],
    );
    b.open();
    b.op(RegType::U32, Op::UDiv, &[Operand::U32(7), r(tid)]);
    close_if(&mut b, c);
    b.finish();
    run_kernel(&k, &mut [], &[], &ExecOptions::default()).unwrap();
    // Math placeholders cannot run.
    let mut k = kernel("math", vec![], 32, 1);
    let mut b = Builder::new(&mut k);
    b.op(RegType::F32, Op::Math(MathFn::Exp), &[Operand::f32(1.0)]);
    b.finish();
    assert!(matches!(
        expect_err(&k, vec![], &[]),
        ExecError::UnexpandedMath {
            func: MathFn::Exp,
            ..
        }
    ));
}

#[test]
fn malformed_kernels_and_launches_are_errors() {
    let mut k = kernel("bad", vec![ptr("x", DType::F32, false)], 32, 1);
    let mut b = Builder::new(&mut k);
    let p = b.op(RegType::U64, Op::Param(0), &[]);
    b.op(RegType::F32, Op::FAdd, &[r(p), Operand::f32(1.0)]);
    b.finish();
    assert!(matches!(
        expect_err(&k, vec![poison_f32(1)], &[buf(0)]),
        ExecError::Malformed { .. }
    ));
    let k = vector_add(10, 32);
    let e = expect_err(
        &k,
        vec![poison_f32(10)],
        &[buf(0), buf(0), LaunchArg::U32(3), LaunchArg::U32(1)],
    );
    assert!(matches!(e, ExecError::BadLaunch { .. }), "{e}");
}

/// Two kernels through a temporary: `t = f32(x) * 2` then `y = bf16(t + 1)`, with `y`
/// one element longer than what the kernels write.
fn two_kernel_program(n: u32) -> Program {
    let mut p = Program {
        name: "two".into(),
        ..Default::default()
    };
    let x = p.buffers.push(BufferDecl {
        name: "x".into(),
        ty: TensorType::new(DType::Bf16, vec![n as u64]),
        role: BufferRole::Input(0),
    });
    let t = p.buffers.push(BufferDecl {
        name: "t".into(),
        ty: TensorType::new(DType::F32, vec![n as u64]),
        role: BufferRole::Temp,
    });
    let y = p.buffers.push(BufferDecl {
        name: "y".into(),
        ty: TensorType::new(DType::Bf16, vec![n as u64 + 1]),
        role: BufferRole::Output,
    });
    p.inputs.push(("x".into(), x));
    p.outputs.push(("y".into(), y));

    let mut k1 = kernel(
        "scale",
        vec![ptr("x", DType::Bf16, false), ptr("t", DType::F32, true)],
        32,
        n.div_ceil(32),
    );
    let mut b = Builder::new(&mut k1);
    let i = global_index(&mut b);
    let ax = param_gaddr(&mut b, 0, i, 2);
    let h = load(&mut b, RegType::U32, Width::B16, Space::Global, ax)[0];
    let hb = b.op(RegType::U32, Op::Shl, &[r(h), Operand::U32(16)]);
    let v = b.op(RegType::F32, Op::BitsToF32, &[r(hb)]);
    let v2 = b.op(RegType::F32, Op::FMul, &[r(v), Operand::f32(2.0)]);
    let at = param_gaddr(&mut b, 1, i, 4);
    store(&mut b, Width::B32, Space::Global, at, &[r(v2)]);
    b.finish();
    let k1 = p.kernels.push(k1);

    let mut k2 = kernel(
        "shift",
        vec![ptr("t", DType::F32, false), ptr("y", DType::Bf16, true)],
        32,
        n.div_ceil(32),
    );
    let mut b = Builder::new(&mut k2);
    let i = global_index(&mut b);
    let at = param_gaddr(&mut b, 0, i, 4);
    let v = load(&mut b, RegType::F32, Width::B32, Space::Global, at)[0];
    let w = b.op(RegType::F32, Op::FAdd, &[r(v), Operand::f32(1.0)]);
    let pk = b.op(RegType::U32, Op::PackBf16x2, &[Operand::f32(0.0), r(w)]);
    let ay = param_gaddr(&mut b, 1, i, 2);
    store(&mut b, Width::B16, Space::Global, ay, &[r(pk)]);
    b.finish();
    let k2 = p.kernels.push(k2);
    p.launches.push(Launch {
        kernel: k1,
        args: vec![LaunchArg::Buffer(x), LaunchArg::Buffer(t)],
    });
    p.launches.push(Launch {
        kernel: k2,
        args: vec![LaunchArg::Buffer(t), LaunchArg::Buffer(y)],
    });
    p
}

#[test]
fn program_through_a_temporary() {
    let n = 64;
    let p = two_kernel_program(n);
    let x = Tensor::random(TensorType::new(DType::Bf16, vec![n as u64]), 3);
    let out = run_program(&p, std::slice::from_ref(&x)).unwrap();
    assert_eq!(out.len(), 1);
    let y = out[0].to_bf16_vec();
    for (i, xv) in x.to_bf16_vec().iter().enumerate() {
        let want = bf16::from_f32(xv.to_f32() * 2.0 + 1.0);
        assert_eq!(y[i].to_bits(), want.to_bits(), "element {i}");
    }
    // The element no kernel writes is poison: a bf16 NaN.
    assert_eq!(y[n as usize].to_bits(), 0xFFFF);
    assert!(y[n as usize].is_nan());
    // Deterministic across runs (CTAs run in parallel).
    assert_eq!(run_program(&p, std::slice::from_ref(&x)).unwrap(), out);
    // Wrong input type.
    let bad = Tensor::zeros(TensorType::new(DType::F32, vec![n as u64]));
    assert!(matches!(
        run_program(&p, &[bad]),
        Err(ExecError::BadInputs(_))
    ));
}

#[test]
fn stores_to_inputs_fault() {
    let mut p = two_kernel_program(32);
    // Make the first kernel write into its input.
    p.launches[0].args[1] = LaunchArg::Buffer(BufferId::from_u32(0));
    let x = Tensor::random(TensorType::new(DType::Bf16, vec![32]), 3);
    let e = run_program(&p, &[x]).unwrap_err();
    assert_eq!(
        e,
        ExecError::StoreToInput {
            kernel: "scale".into(),
            cta: 0,
            thread: 0,
            buffer: "x".into()
        }
    );
}

#[test]
fn griddepcontrol_runs_and_l2_prefetch_is_bounds_checked() {
    // copy_kernel (32 f32 elements) with the programmatic dependent launch's statements:
    // an L2 prefetch of the source from its base (r1), the trigger, the wait.
    let with_prefetch = |bytes: u32| {
        let mut k = tessel_testkit::ir::copy_kernel("griddep");
        k.body.splice(
            5..5,
            [
                Stmt::PrefetchL2 {
                    addr: Reg::from_u32(1),
                    bytes: Operand::U32(bytes),
                },
                Stmt::GridDepLaunch,
                Stmt::GridDepWait,
            ],
        );
        k
    };
    let src: Vec<f32> = (0..32).map(|i| i as f32 * 0.5 - 3.0).collect();
    let mut bufs = vec![f32_tensor(&src), poison_f32(32)];
    let args = [buf(0), buf(1)];
    run_kernel(
        &with_prefetch(128),
        &mut bufs,
        &args,
        &ExecOptions::default(),
    )
    .unwrap();
    assert_eq!(bufs[1].data, bufs[0].data);
    // 144 bytes run past the 128 of the source.
    let bufs = vec![f32_tensor(&src), poison_f32(32)];
    match expect_err(&with_prefetch(144), bufs, &args) {
        ExecError::OutOfBounds {
            access,
            buffer,
            bytes,
            ..
        } => assert_eq!(
            (access, buffer.as_str(), bytes),
            ("prefetch.l2", "buf0", 144)
        ),
        e => panic!("{e}"),
    }
    // The size is a nonzero multiple of 16.
    let bufs = vec![f32_tensor(&src), poison_f32(32)];
    let e = expect_err(&with_prefetch(24), bufs, &args);
    assert!(matches!(e, ExecError::Malformed { .. }), "{e}");
}
