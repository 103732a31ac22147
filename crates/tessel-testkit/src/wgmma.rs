//! A hand-built kernel for the warpgroup statements (`wgmma.mma_async` with its fence,
//! commit and wait, shared-memory matrix descriptors over the 128-byte swizzle, and
//! `fence.proxy.async`), so that one IR is run on the executor (`tessel-ref/tests/wgmma.rs`),
//! assembled by ptxas (`tessel-ptx/tests/mma.rs`) and run on the GPU
//! (`tessel/tests/gpu_mma.rs`). Host inputs: `crate::host::wgmma_case`.

use tessel_ir::kernel::{
    Builder, CpAsyncCache, Kernel, Op, Operand, RegType, SmemDesc, Space, Special, Stmt, WgmmaA,
    WgmmaInput, WgmmaMajor, WgmmaShape, WgmmaSwizzle, Width,
};
use tessel_ir::{DType, Reg};

use crate::build::{close_for, gaddr, kernel, ptr, r, scalar, store, u};
use RegType::{F32, U32, U64};

/// Bytes of one K slice of a row: one 128-byte swizzle span.
const SLICE_BYTES: u32 = 128;

/// The element dtype of an input type's buffers.
fn dtype(input: WgmmaInput) -> DType {
    match input {
        WgmmaInput::Bf16 => DType::Bf16,
        WgmmaInput::F16 => DType::F16,
        WgmmaInput::Tf32 => DType::F32,
    }
}

/// Elements of one K slice (64 16-bit, 32 f32).
pub fn slice_k(input: WgmmaInput) -> u32 {
    SLICE_BYTES / input.bytes()
}

/// `D[64g × n] = A[64g × K] · B[n × K]ᵀ` in one CTA of `g` warpgroups, f32 accumulation:
/// warpgroup `w` computes rows `64w .. 64w + 64` with `wgmma.m64nNk{16,8}`. K (a multiple
/// of [`slice_k`]) runs in slices of 128 bytes per row: every thread copies 16-byte chunks
/// of both operands with `cp.async.cg` into one stage, row `r`'s chunk `c` at chunk
/// `c ^ (r mod 8)` (the 128-byte swizzle), waits, `fence.proxy.async`, barrier; then
/// `wgmma.fence`, one wgmma per 32 bytes of K (the descriptors' start advanced by 32
/// bytes), commit, `wait_group 0`, barrier. The epilogue stores each thread's accumulators
/// at [`WgmmaShape::d_pos`]. Parameters: `a: [64g, K]`, `b: [n, K]` (bf16, f16, or f32 read
/// as tf32), `d: [64g, n]` f32 (written), `k` u32.
pub fn wgmma_gemm(input: WgmmaInput, n: u32, warpgroups: u32) -> Kernel {
    let shape = WgmmaShape { n, input };
    assert!(shape.is_valid(), "wgmma n = {n}");
    let m = 64 * warpgroups;
    let threads = 128 * warpgroups;
    let esz = input.bytes();
    let mut k = Kernel {
        schedule: format!(
            "wgmma GEMM {m}x{n} per CTA, {warpgroups} warpgroups of m64n{n}k{}, K slices of \
             {SLICE_BYTES} bytes with the 128-byte swizzle; per output: wgmma k-steps in order",
            shape.k()
        ),
        ..kernel(
            &format!("wgmma_{}_n{n}_wg{warpgroups}", input.name()),
            vec![
                ptr("a", dtype(input), false),
                ptr("b", dtype(input), false),
                ptr("d", DType::F32, true),
                scalar("k"),
            ],
            threads,
            1,
        )
    };
    let a_bytes = m * SLICE_BYTES;
    let sa = k.new_shared(a_bytes, 1024);
    let sb = k.new_shared(n * SLICE_BYTES, 1024);
    let mut b = Builder::new(&mut k);
    let pa = b.op(U64, Op::Param(0), &[]);
    let pb = b.op(U64, Op::Param(1), &[]);
    let pd = b.op(U64, Op::Param(2), &[]);
    let kk = b.op(U32, Op::Param(3), &[]);
    let tid = b.op(U32, Op::Special(Special::TidX), &[]);
    let sa0 = b.op(U32, Op::SharedAddr(sa), &[]);
    let sb0 = b.op(U32, Op::SharedAddr(sb), &[]);
    let row_bytes = b.op(U32, Op::IMulLo, &[r(kk), u(esz)]);

    // The descriptors of the stage at k = 0: start >> 4 plus the fixed fields.
    let desc = |b: &mut Builder, base: Reg| {
        let fixed = SmemDesc {
            start: 0,
            lbo: 16,
            sbo: 8 * SLICE_BYTES,
            swizzle: WgmmaSwizzle::B128,
        }
        .fixed_bits();
        let s = b.op(U32, Op::ShrU, &[r(base), u(4)]);
        let s = b.op(U64, Op::CvtU64U32, &[r(s)]);
        b.op(U64, Op::AddU64, &[r(s), Operand::U64(fixed)])
    };
    // Warpgroup w reads A from row 64w: 8 groups of 8 rows, 1024 bytes each, on.
    let wg = b.op(U32, Op::ShrU, &[r(tid), u(7)]);
    let a_rows = b.op(U32, Op::IMulLo, &[r(wg), u(64 * SLICE_BYTES)]);
    let a_base = b.op(U32, Op::IAdd, &[r(sa0), r(a_rows)]);
    let a_desc0 = desc(&mut b, a_base);
    let b_desc0 = desc(&mut b, sb0);

    let acc: Vec<Reg> = (0..shape.d_regs())
        .map(|_| b.op(F32, Op::Mov, &[Operand::f32(0.0)]))
        .collect();

    // Copies chunk e (row e / 8, chunk e mod 8) of a `rows`-row operand's slice at k0.
    let copy = |b: &mut Builder, src: Reg, smem: Reg, rows: u32, k0: Reg| {
        let e = b.kernel.new_reg(U32);
        b.open();
        let row = b.op(U32, Op::ShrU, &[r(e), u(3)]);
        let c = b.op(U32, Op::And, &[r(e), u(7)]);
        // Global: row · K·esz + k0·esz + 16c.
        let g = b.op(U32, Op::IMulLo, &[r(row), r(row_bytes)]);
        let k0b = b.op(U32, Op::IMulLo, &[r(k0), u(esz)]);
        let g = b.op(U32, Op::IAdd, &[r(g), r(k0b)]);
        let c16 = b.op(U32, Op::Shl, &[r(c), u(4)]);
        let g = b.op(U32, Op::IAdd, &[r(g), r(c16)]);
        let src = gaddr(b, src, g, 1);
        // Shared: row · 128 + 16 (c ^ (row mod 8)).
        let r8 = b.op(U32, Op::And, &[r(row), u(7)]);
        let sw = b.op(U32, Op::Xor, &[r(c), r(r8)]);
        let sw = b.op(U32, Op::Shl, &[r(sw), u(4)]);
        let dst = b.op(U32, Op::IMulLo, &[r(row), u(SLICE_BYTES)]);
        let dst = b.op(U32, Op::IAdd, &[r(dst), r(sw)]);
        let dst = b.op(U32, Op::IAdd, &[r(dst), r(smem)]);
        b.push(Stmt::CpAsync {
            cache: CpAsyncCache::Cg,
            bytes: 16,
            dst,
            dst_offset: 0,
            src,
            src_offset: 0,
            src_bytes: None,
        });
        close_for(b, e, r(tid), u(rows * 8), u(threads));
    };

    let k0 = b.kernel.new_reg(U32);
    b.open();
    {
        copy(&mut b, pa, sa0, m, k0);
        copy(&mut b, pb, sb0, n, k0);
        b.push(Stmt::CpAsyncWaitAll);
        b.push(Stmt::FenceProxyAsync);
        b.push(Stmt::Barrier);
        b.push(Stmt::WgmmaFence);
        for step in 0..SLICE_BYTES / 32 {
            // 32 bytes of K on: the start field moves by 2.
            let da = b.op(
                U64,
                Op::AddU64,
                &[r(a_desc0), Operand::U64(2 * step as u64)],
            );
            let db = b.op(
                U64,
                Op::AddU64,
                &[r(b_desc0), Operand::U64(2 * step as u64)],
            );
            b.push(Stmt::Wgmma {
                shape,
                d: acc.clone(),
                a: WgmmaA::Desc(da),
                b_desc: db,
                b_major: WgmmaMajor::K,
            });
        }
        b.push(Stmt::WgmmaCommit);
        b.push(Stmt::WgmmaWait(0));
        // The stage is refilled next slice.
        b.push(Stmt::Barrier);
    }
    close_for(&mut b, k0, u(0), r(kk), u(slice_k(input)));

    store_acc(&mut b, (tid, wg), pd, n, &acc);
    b.finish();
    k
}

/// `D[64g × n] = A[64g × K] · B[K × n]` with A in registers and B MN-major — the form of
/// attention's `P·V` (P an accumulator repacked in registers, V stored `[keys, d]`), in one
/// CTA of `g` warpgroups, `n` a multiple of 64. K runs in slices of 64: every thread
/// copies 16-byte chunks of B's 64 rows into one stage of `n / 64` column panels of
/// `64 × 128` bytes (panel `p` holds columns `64p ..`, row `k`'s chunk `c` at chunk
/// `c ^ (k mod 8)`: the 128-byte swizzle), waits, `fence.proxy.async`, barrier; then per
/// 16 rows of the slice each thread loads its A fragment from global memory (four 32-bit
/// words at [`WgmmaA::reg_pos`]), `wgmma.fence` and one wgmma with `trans_b` (B's
/// descriptor: start the slice's row `16s`, 1024 bytes between 8-row groups, the panel
/// stride between 64-column panels); commit, `wait_group 0`, barrier. Parameters: `a:
/// [64g, K]`, `b: [K, n]` (bf16 or f16), `d: [64g, n]` f32 (written), `k` u32, a multiple
/// of 64.
pub fn wgmma_rs_mn(input: WgmmaInput, n: u32, warpgroups: u32) -> Kernel {
    let shape = WgmmaShape { n, input };
    assert!(shape.is_valid() && n % 64 == 0 && input != WgmmaInput::Tf32);
    let m = 64 * warpgroups;
    let threads = 128 * warpgroups;
    let esz = input.bytes();
    let slice = 64u32;
    let panels = n / 64;
    let panel_bytes = slice * SLICE_BYTES;
    let mut k = Kernel {
        schedule: format!(
            "wgmma {m}x{n} per CTA, A from registers, B MN-major in {panels} panels of 128 \
             bytes with the 128-byte swizzle; per output: wgmma k-steps in order"
        ),
        ..kernel(
            &format!("wgmma_rs_mn_{}_n{n}_wg{warpgroups}", input.name()),
            vec![
                ptr("a", dtype(input), false),
                ptr("b", dtype(input), false),
                ptr("d", DType::F32, true),
                scalar("k"),
            ],
            threads,
            1,
        )
    };
    let sb = k.new_shared(panels * panel_bytes, 1024);
    let mut b = Builder::new(&mut k);
    let pa = b.op(U64, Op::Param(0), &[]);
    let pb = b.op(U64, Op::Param(1), &[]);
    let pd = b.op(U64, Op::Param(2), &[]);
    let kk = b.op(U32, Op::Param(3), &[]);
    let tid = b.op(U32, Op::Special(Special::TidX), &[]);
    let sb0 = b.op(U32, Op::SharedAddr(sb), &[]);
    let fixed = SmemDesc {
        start: 0,
        lbo: panel_bytes,
        sbo: 8 * SLICE_BYTES,
        swizzle: WgmmaSwizzle::B128,
    }
    .fixed_bits();
    let s = b.op(U32, Op::ShrU, &[r(sb0), u(4)]);
    let s = b.op(U64, Op::CvtU64U32, &[r(s)]);
    let b_desc0 = b.op(U64, Op::AddU64, &[r(s), Operand::U64(fixed)]);
    let wg = b.op(U32, Op::ShrU, &[r(tid), u(7)]);
    let tl = b.op(U32, Op::And, &[r(tid), u(127)]);
    let acc: Vec<Reg> = (0..shape.d_regs())
        .map(|_| b.op(F32, Op::Mov, &[Operand::f32(0.0)]))
        .collect();

    let k0 = b.kernel.new_reg(U32);
    b.open();
    {
        // Chunk e of the slice: row e / (8 panels), panel and chunk from e's rest.
        let e = b.kernel.new_reg(U32);
        b.open();
        let per_row = 8 * panels;
        let row = b.op(U32, Op::UDiv, &[r(e), u(per_row)]);
        let rest = b.op(U32, Op::URem, &[r(e), u(per_row)]);
        let p = b.op(U32, Op::ShrU, &[r(rest), u(3)]);
        let c = b.op(U32, Op::And, &[r(rest), u(7)]);
        // Global: (k0 + row) · n · esz + 16 · rest.
        let gr = b.op(U32, Op::IAdd, &[r(k0), r(row)]);
        let g = b.op(U32, Op::IMulLo, &[r(gr), u(n * esz)]);
        let c16 = b.op(U32, Op::Shl, &[r(rest), u(4)]);
        let g = b.op(U32, Op::IAdd, &[r(g), r(c16)]);
        let src = gaddr(&mut b, pb, g, 1);
        // Shared: p · panel + row · 128 + 16 (c ^ (row mod 8)).
        let r8 = b.op(U32, Op::And, &[r(row), u(7)]);
        let sw = b.op(U32, Op::Xor, &[r(c), r(r8)]);
        let sw = b.op(U32, Op::Shl, &[r(sw), u(4)]);
        let dst = b.op(U32, Op::IMulLo, &[r(row), u(SLICE_BYTES)]);
        let dst = b.op(U32, Op::IAdd, &[r(dst), r(sw)]);
        let po = b.op(U32, Op::IMulLo, &[r(p), u(panel_bytes)]);
        let dst = b.op(U32, Op::IAdd, &[r(dst), r(po)]);
        let dst = b.op(U32, Op::IAdd, &[r(dst), r(sb0)]);
        b.push(Stmt::CpAsync {
            cache: CpAsyncCache::Cg,
            bytes: 16,
            dst,
            dst_offset: 0,
            src,
            src_offset: 0,
            src_bytes: None,
        });
        close_for(&mut b, e, r(tid), u(slice * per_row), u(threads));
        b.push(Stmt::CpAsyncWaitAll);
        b.push(Stmt::FenceProxyAsync);
        b.push(Stmt::Barrier);
        for step in 0..slice / 16 {
            // A's fragment of rows 64·wg .., columns k0 + 16·step ..: four 32-bit words.
            let a_regs: Vec<Reg> = (0..WgmmaA::REGS)
                .map(|i| {
                    let (dr, dc) = WgmmaA::reg_pos(0, i);
                    let lane = b.op(U32, Op::And, &[r(tl), u(31)]);
                    let w = b.op(U32, Op::ShrU, &[r(tl), u(5)]);
                    let g = b.op(U32, Op::ShrU, &[r(lane), u(2)]);
                    let t = b.op(U32, Op::And, &[r(lane), u(3)]);
                    let row = b.op(U32, Op::Shl, &[r(wg), u(6)]);
                    let w16 = b.op(U32, Op::Shl, &[r(w), u(4)]);
                    let row = b.op(U32, Op::IAdd, &[r(row), r(w16)]);
                    let row = b.op(U32, Op::IAdd, &[r(row), r(g)]);
                    let row = b.op(U32, Op::IAdd, &[r(row), u(dr as u32)]);
                    let col = b.op(U32, Op::Shl, &[r(t), u(1)]);
                    let col = b.op(U32, Op::IAdd, &[r(col), r(k0)]);
                    let col = b.op(U32, Op::IAdd, &[r(col), u(16 * step + dc as u32)]);
                    let idx = b.op(U32, Op::IMulLo, &[r(row), r(kk)]);
                    let idx = b.op(U32, Op::IAdd, &[r(idx), r(col)]);
                    let addr = gaddr(&mut b, pa, idx, esz);
                    let x = b.kernel.new_reg(U32);
                    b.push(Stmt::Load {
                        dsts: vec![x],
                        space: Space::Global,
                        width: Width::B32,
                        addr,
                        offset: 0,
                    });
                    x
                })
                .collect();
            // 16 K rows on: the start moves 16 · 128 bytes, 128 in the field.
            let db = b.op(
                U64,
                Op::AddU64,
                &[
                    r(b_desc0),
                    Operand::U64((16 * SLICE_BYTES as u64 * step as u64) >> 4),
                ],
            );
            b.push(Stmt::WgmmaFence);
            b.push(Stmt::Wgmma {
                shape,
                d: acc.clone(),
                a: WgmmaA::Regs(a_regs),
                b_desc: db,
                b_major: WgmmaMajor::Mn,
            });
            b.push(Stmt::WgmmaCommit);
            b.push(Stmt::WgmmaWait(0));
        }
        // The stage is refilled next slice.
        b.push(Stmt::Barrier);
    }
    close_for(&mut b, k0, u(0), r(kk), u(slice));
    store_acc(&mut b, (tid, wg), pd, n, &acc);
    b.finish();
    k
}

/// The epilogue of both kernels: accumulators 2j, 2j + 1 are two adjacent columns of one
/// row of `d: [64g, n]`, stored together.
fn store_acc(b: &mut Builder, (tid, wg): (Reg, Reg), pd: Reg, n: u32, acc: &[Reg]) {
    let tl = b.op(U32, Op::And, &[r(tid), u(127)]);
    let w = b.op(U32, Op::ShrU, &[r(tl), u(5)]);
    let lane = b.op(U32, Op::And, &[r(tl), u(31)]);
    let g = b.op(U32, Op::ShrU, &[r(lane), u(2)]);
    let t = b.op(U32, Op::And, &[r(lane), u(3)]);
    let row = b.op(U32, Op::Shl, &[r(w), u(4)]);
    let row = b.op(U32, Op::IAdd, &[r(row), r(g)]);
    let wrow = b.op(U32, Op::Shl, &[r(wg), u(6)]);
    let row = b.op(U32, Op::IAdd, &[r(row), r(wrow)]);
    let col = b.op(U32, Op::Shl, &[r(t), u(1)]);
    for j in 0..acc.len() / 2 {
        // Register 2j is (row + 8·(j mod 2), col + 8·(j / 2)).
        let (dr, dc) = WgmmaShape::d_pos(0, 2 * j);
        let rr = b.op(U32, Op::IAdd, &[r(row), u(dr as u32)]);
        let cc = b.op(U32, Op::IAdd, &[r(col), u(dc as u32)]);
        let idx = b.op(U32, Op::IMulLo, &[r(rr), u(n)]);
        let idx = b.op(U32, Op::IAdd, &[r(idx), r(cc)]);
        let addr = gaddr(b, pd, idx, 4);
        store(b, Width::V2, Space::Global, addr, &acc[2 * j..2 * j + 2]);
    }
}

/// The kernels the tests run: every input type, the narrowest and widest n, two
/// warpgroups.
pub fn all() -> Vec<Kernel> {
    vec![
        wgmma_gemm(WgmmaInput::Bf16, 64, 1),
        wgmma_gemm(WgmmaInput::F16, 8, 1),
        wgmma_gemm(WgmmaInput::Tf32, 32, 1),
        wgmma_gemm(WgmmaInput::Bf16, 256, 2),
        wgmma_rs_mn(WgmmaInput::Bf16, 128, 1),
        wgmma_rs_mn(WgmmaInput::F16, 64, 2),
    ]
}
