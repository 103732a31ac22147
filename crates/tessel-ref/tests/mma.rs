//! The executor on the tensor-core and async-copy statements: `mma` (bf16, f16, tf32) against
//! the documented model (bit for bit) and an f64 reference (within the f32 accumulation
//! bound), `cvt.rna.tf32`, the `ldmatrix` lane mapping, `cp.async` zero-fill and wait-group
//! bookkeeping, and a complete tiled GEMM. The kernels and their inputs are
//! `tessel_testkit`'s (shared with the PTX and GPU tests).

use tessel_ir::kernel::{
    Builder, CpAsyncCache, ICmp, Kernel, LaunchArg, MmaShape, Op, Operand, RegType, Space, Special,
    Stmt, Width,
};
use tessel_ir::DType;
use tessel_ref::tensor::SplitMix64;
use tessel_ref::{run_kernel, ExecError, ExecOptions, Tensor};
use tessel_testkit::build::{kernel, load_at, ptr, r, u};
use tessel_testkit::host::{
    buf, f32_tensor, gemm_bf16_case, mma_single_case, poison_f32, raw, MatmulCase,
};
use tessel_testkit::mma as mk;

fn verified(k: Kernel) -> Kernel {
    if let Err(e) = tessel_ir::verify::verify_kernel(&k, true) {
        panic!("{e:?}\n{}", tessel_ir::text::write_kernel(&k));
    }
    k
}

fn run(k: &Kernel, bufs: &mut [Tensor], args: &[LaunchArg]) -> Result<(), ExecError> {
    run_kernel(k, bufs, args, &ExecOptions::default()).map(|_| ())
}

/// The model of `Stmt::Mma`'s docs for one output: `acc = c; acc = fma(a_k, b_k, acc)` in
/// order, f32.
fn model(a: &[f32], b: &[f32], c: f32) -> f32 {
    a.iter().zip(b).fold(c, |acc, (&x, &y)| x.mul_add(y, acc))
}

/// `|d - exact| ≤ γ · (|c| + Σ|a_k b_k|)` with `γ = (K + 1)·2^-24`: products exact, at most K
/// f32 roundings of the running sum.
fn within_bound(d: f32, a: &[f32], b: &[f32], c: f32) -> (f64, f64) {
    let exact: f64 = c as f64
        + a.iter()
            .zip(b)
            .map(|(&x, &y)| x as f64 * y as f64)
            .sum::<f64>();
    let mag: f64 = c.abs() as f64
        + a.iter()
            .zip(b)
            .map(|(&x, &y)| (x as f64 * y as f64).abs())
            .sum::<f64>();
    let gamma = (a.len() as f64 + 1.0) * 2f64.powi(-24);
    ((d as f64 - exact).abs(), gamma * mag)
}

/// Runs `mma_single(shape)` on random inputs and checks D (and, for tf32, the converted A).
fn check_mma_single(shape: MmaShape, seed: u64) {
    let k = verified(mk::mma_single(shape));
    let kk = shape.k();
    let MatmulCase {
        a: a_vals,
        b: b_vals,
        c,
        mut bufs,
        args,
    } = mma_single_case(shape, seed);
    run(&k, &mut bufs, &args).unwrap();
    let d = bufs[3].to_f32_vec();
    let mut worst = 0f64;
    for i in 0..16 {
        for j in 0..8 {
            let arow = &a_vals[i * kk..(i + 1) * kk];
            let bcol: Vec<f32> = (0..kk).map(|kx| b_vals[kx * 8 + j]).collect();
            let got = d[i * 8 + j];
            let want = model(arow, &bcol, c[i * 8 + j]);
            assert_eq!(got.to_bits(), want.to_bits(), "{shape:?} D[{i}][{j}]");
            let (err, bound) = within_bound(got, arow, &bcol, c[i * 8 + j]);
            assert!(
                err <= bound,
                "{shape:?} D[{i}][{j}]: error {err:e} > bound {bound:e}"
            );
            worst = worst.max(err);
        }
    }
    eprintln!("{shape:?}: max |D - f64| = {worst:e}");
    if shape == MmaShape::M16N8K8Tf32 {
        let at = bufs[4].to_f32_vec();
        for lane in 0..32 {
            for i in 0..4 {
                let (row, col) = shape.a_pos(lane, i);
                let got = at[mk::tf32_cvt_index(lane, i)];
                assert_eq!(
                    got.to_bits(),
                    a_vals[row * kk + col].to_bits(),
                    "lane {lane} a{i}"
                );
            }
        }
    }
}

#[test]
fn mma_bf16_single_warp() {
    check_mma_single(MmaShape::M16N8K16Bf16, 1);
}

#[test]
fn mma_f16_single_warp() {
    check_mma_single(MmaShape::M16N8K16F16, 2);
}

#[test]
fn mma_tf32_single_warp_and_cvt_rna() {
    check_mma_single(MmaShape::M16N8K8Tf32, 3);
}

#[test]
fn mma_accumulates_in_place_and_fragment_positions_cover_the_tiles() {
    // Every element of A, B and C/D is held by exactly one (lane, register, half).
    for shape in MmaShape::ALL {
        let per = if shape == MmaShape::M16N8K8Tf32 { 1 } else { 2 };
        let mut a = vec![0; 16 * shape.k()];
        let mut b = vec![0; shape.k() * 8];
        let mut cd = vec![0; 16 * 8];
        for lane in 0..32 {
            for i in 0..shape.a_regs() {
                let (row, col) = shape.a_pos(lane, i);
                for h in 0..per {
                    a[row * shape.k() + col + h] += 1;
                }
            }
            for i in 0..shape.b_regs() {
                let (kx, col) = shape.b_pos(lane, i);
                for h in 0..per {
                    b[(kx + h) * 8 + col] += 1;
                }
            }
            for i in 0..4 {
                let (row, col) = MmaShape::cd_pos(lane, i);
                cd[row * 8 + col] += 1;
            }
        }
        assert!(a.iter().chain(&b).chain(&cd).all(|&x| x == 1), "{shape:?}");
    }
}

#[test]
fn ldmatrix_lane_mapping() {
    let k = verified(mk::ldmatrix_all());
    let mut rng = SplitMix64::new(7);
    let rows: Vec<[u16; 8]> = (0..32)
        .map(|_| std::array::from_fn(|_| rng.next_u64() as u16))
        .collect();
    let src: Vec<u8> = rows
        .iter()
        .flatten()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let mut bufs = vec![
        raw(DType::I32, 128, src),
        raw(
            DType::I32,
            32 * mk::LDMATRIX_REGS,
            vec![0xFF; 4 * 32 * mk::LDMATRIX_REGS],
        ),
    ];
    run(&k, &mut bufs, &[buf(0), buf(1)]).unwrap();
    let out: Vec<u32> = bufs[1].to_i32_vec().into_iter().map(|x| x as u32).collect();
    // Row r of matrix m is the row slot that lane 8m + r points at (+1 slot for the x2, whose
    // address has 16 bytes of offset; slot 32 is zeros).
    let row = |slot: usize| if slot < 32 { rows[slot] } else { [0; 8] };
    let mat = |m: usize, extra: usize| -> [[u16; 8]; 8] {
        std::array::from_fn(|r| row(mk::ldmatrix_slot(8 * m + r) + extra))
    };
    for lane in 0..32 {
        let (g, t) = (lane / 4, 2 * (lane % 4));
        let mut want = Vec::new();
        for m in 0..4 {
            let x = mat(m, 0);
            want.push(x[g][t] as u32 | (x[g][t + 1] as u32) << 16);
        }
        for m in 0..4 {
            let x = mat(m, 0);
            want.push(x[t][g] as u32 | (x[t + 1][g] as u32) << 16);
        }
        for m in 0..2 {
            let x = mat(m, 1);
            want.push(x[g][t] as u32 | (x[g][t + 1] as u32) << 16);
        }
        let x = mat(0, 0);
        want.push(x[t][g] as u32 | (x[t + 1][g] as u32) << 16);
        let got = &out[lane * mk::LDMATRIX_REGS..][..mk::LDMATRIX_REGS];
        assert_eq!(got, &want[..], "lane {lane}");
    }
}

#[test]
fn cp_async_zero_fills_the_tail() {
    let k = verified(mk::cp_async_tail());
    for n in [0usize, 1, 2, 3, 37, 64, 126, 128] {
        let x: Vec<f32> = (0..n).map(|i| i as f32 + 0.5).collect();
        let mut bufs = vec![f32_tensor(&x), poison_f32(256)];
        run(&k, &mut bufs, &[buf(0), buf(1), LaunchArg::U32(n as u32)]).unwrap();
        let y = bufs[1].to_f32_vec();
        for half in 0..2 {
            for i in 0..128 {
                let want = if i < n { x[i] } else { 0.0 };
                assert_eq!(
                    y[128 * half + i].to_bits(),
                    want.to_bits(),
                    "n {n}, tile {half}, {i}"
                );
            }
        }
    }
}

/// One warp: a 16-byte `cp.async` of `x[4·lane..]` into shared, then the statements `tail`
/// and a shared load of the destination.
fn cp_then(tail: &[Stmt]) -> Kernel {
    use RegType::{U32, U64};
    let params = vec![ptr("x", DType::F32, false), ptr("y", DType::F32, true)];
    let mut k = kernel("cp_then", params, 32, 1);
    let sm = k.new_shared(512, 16);
    let mut b = Builder::new(&mut k);
    let x = b.op(U64, Op::Param(0), &[]);
    let lane = b.op(U32, Op::Special(Special::LaneId), &[]);
    let off = b.op(U32, Op::IMulLo, &[r(lane), u(16)]);
    let off64 = b.op(U64, Op::CvtU64U32, &[r(off)]);
    let src = b.op(U64, Op::AddU64, &[r(x), r(off64)]);
    let s0 = b.op(U32, Op::SharedAddr(sm), &[]);
    let dst = b.op(U32, Op::IAdd, &[r(s0), r(off)]);
    b.push(Stmt::CpAsync {
        cache: CpAsyncCache::Cg,
        bytes: 16,
        dst,
        dst_offset: 0,
        src,
        src_offset: 0,
        src_bytes: None,
    });
    for s in tail {
        b.push(s.clone());
    }
    load_at(&mut b, RegType::F32, Width::B32, Space::Shared, dst, 4);
    b.finish();
    verified(k)
}

#[test]
fn cp_async_wait_group_bookkeeping() {
    let run_tail = |tail: &[Stmt]| {
        let k = cp_then(tail);
        let mut bufs = vec![f32_tensor(&[1.0; 128]), poison_f32(128)];
        run(&k, &mut bufs, &[buf(0), buf(1)])
    };
    // Completed: wait_all; commit + wait 0; commit, empty commit, wait 1.
    for ok in [
        vec![Stmt::CpAsyncWaitAll],
        vec![Stmt::CpAsyncCommit, Stmt::CpAsyncWait(0)],
        vec![
            Stmt::CpAsyncCommit,
            Stmt::CpAsyncCommit,
            Stmt::CpAsyncWait(1),
        ],
    ] {
        run_tail(&ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
    }
    // Not completed: no wait; wait without commit (uncommitted copies are not waited
    // for); the copy's group is the newest and wait 1 keeps it pending.
    for bad in [
        vec![],
        vec![Stmt::CpAsyncWait(0)],
        vec![Stmt::CpAsyncCommit, Stmt::CpAsyncWait(1)],
        vec![Stmt::CpAsyncCommit, Stmt::Barrier],
    ] {
        match run_tail(&bad) {
            Err(ExecError::CpAsync { thread, msg, .. }) => {
                assert_eq!(thread, 0, "{bad:?}");
                assert!(msg.contains("no cp.async.wait"), "{msg}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

#[test]
fn cp_async_faults() {
    // src_bytes above the size is caught at run time (the verifier catches immediates).
    let mut k = cp_then(&[Stmt::CpAsyncWaitAll]);
    let Stmt::CpAsync { src_bytes, .. } = &mut k.body[7] else {
        panic!("{:?}", k.body[7]);
    };
    let big = k.regs.push(RegType::U32);
    *src_bytes = Some(Operand::Reg(big));
    k.body.insert(
        0,
        Stmt::Op {
            dst: big,
            op: Op::Mov,
            args: vec![Operand::U32(17)],
        },
    );
    let mut bufs = vec![f32_tensor(&[1.0; 128]), poison_f32(128)];
    let e = run(&k, &mut bufs, &[buf(0), buf(1)]).unwrap_err();
    assert!(matches!(e, ExecError::CpAsync { .. }), "{e}");
    // A source past the end of the buffer is out of bounds.
    let k = cp_then(&[Stmt::CpAsyncWaitAll]);
    let mut bufs = vec![f32_tensor(&[1.0; 127]), poison_f32(128)];
    let e = run(&k, &mut bufs, &[buf(0), buf(1)]).unwrap_err();
    assert!(
        matches!(e, ExecError::OutOfBounds { thread: 31, .. }),
        "{e}"
    );
}

#[test]
fn warp_wide_statements_need_the_whole_warp() {
    // The mma of `mma_single` under `if laneid < 16`.
    let mut k = mk::mma_single(MmaShape::M16N8K16Bf16);
    let pos = k
        .body
        .iter()
        .position(|s| matches!(s, Stmt::Mma { .. }))
        .unwrap();
    let mma = k.body.remove(pos);
    let lane = k.regs.push(RegType::U32);
    let p = k.regs.push(RegType::Pred);
    k.body.insert(
        pos,
        Stmt::If {
            cond: p,
            then_body: vec![mma],
            else_body: vec![],
        },
    );
    k.body.insert(
        pos,
        Stmt::Op {
            dst: p,
            op: Op::ICmp(ICmp::LtU),
            args: vec![Operand::Reg(lane), Operand::U32(16)],
        },
    );
    k.body.insert(
        pos,
        Stmt::Op {
            dst: lane,
            op: Op::Special(Special::LaneId),
            args: vec![],
        },
    );
    let k = verified(k);
    let mut bufs = vec![
        raw(DType::Bf16, 256, vec![0; 512]),
        raw(DType::Bf16, 128, vec![0; 256]),
        f32_tensor(&[0.0; 128]),
        poison_f32(128),
    ];
    let e = run(&k, &mut bufs, &[buf(0), buf(1), buf(2), buf(3)]).unwrap_err();
    assert!(
        matches!(
            e,
            ExecError::WarpDivergent {
                op: "mma",
                inactive: 16,
                ..
            }
        ),
        "{e}"
    );
}

/// Runs `gemm_bf16` with reduction length `kk` and checks C against the model (bit for bit)
/// and the f64 product (within the bound).
fn check_gemm(kk: usize, seed: u64) {
    let (m, n) = (mk::GEMM_M as usize, mk::GEMM_N as usize);
    let k = verified(mk::gemm_bf16());
    let MatmulCase {
        a,
        b,
        mut bufs,
        args,
        ..
    } = gemm_bf16_case(kk, seed);
    run(&k, &mut bufs, &args).unwrap();
    let c = bufs[2].to_f32_vec();
    let mut worst = 0f64;
    for i in 0..m {
        let arow = &a[i * kk..(i + 1) * kk];
        for j in 0..n {
            let bcol: Vec<f32> = (0..kk).map(|x| b[x * n + j]).collect();
            let got = c[i * n + j];
            // k-tiles in order, each mma's k in order, zero-filled k past K adding 0·0.
            assert_eq!(
                got.to_bits(),
                model(arow, &bcol, 0.0).to_bits(),
                "K {kk} C[{i}][{j}]"
            );
            let (err, bound) = within_bound(got, arow, &bcol, 0.0);
            assert!(err <= bound, "K {kk} C[{i}][{j}]: {err:e} > {bound:e}");
            worst = worst.max(err);
        }
    }
    eprintln!("gemm_bf16 K = {kk}: max |C - f64| = {worst:e}");
}

#[test]
fn gemm_bf16_tiled_cp_async_ldmatrix_mma() {
    check_gemm(32, 11);
    check_gemm(64, 12);
}

#[test]
fn gemm_bf16_k_tail_is_zero_filled() {
    check_gemm(24, 13);
    check_gemm(8, 14);
}
