//! Hand-built kernels for the tensor-core and async-copy statements (`mma`, `cvt.rna.tf32`,
//! `ldmatrix`, `cp.async`), so that the same IR is run on the executor
//! (`tessel-ref/tests/mma.rs`), assembled by ptxas (`tessel-ptx/tests/mma.rs`) and run on the
//! GPU (`tessel/tests/gpu_mma.rs`). The kernels need `tessel_ir` only; their host-side
//! inputs and references are in `crate::host` (feature `exec`).
//!
//! Buffers are plain row-major arrays; each kernel's doc lists its parameters in order.

use tessel_ir::kernel::{
    Builder, CpAsyncCache, ICmp, Kernel, MmaShape, Op, Operand, Param, RegType, Space, Special,
    Stmt, Width,
};
use tessel_ir::{DType, Reg};

use crate::build::{close_for, close_if, gaddr, kernel, load, ptr, r, scalar, store, u};
use RegType::{Pred, F32, U32, U64};

/// A one-CTA kernel of `threads` threads whose PTX comment names `schedule`.
fn one_cta(name: &str, params: Vec<Param>, threads: u32, schedule: &str) -> Kernel {
    Kernel {
        schedule: schedule.to_owned(),
        ..kernel(name, params, threads, 1)
    }
}

/// `row·cols + col` for immediate `row_add`, `col_add` added to register `row`, `col`.
fn index(b: &mut Builder, row: Reg, row_add: u32, cols: u32, col: Reg, col_add: u32) -> Reg {
    let row = b.op(U32, Op::IAdd, &[r(row), u(row_add)]);
    let col = b.op(U32, Op::IAdd, &[r(col), u(col_add)]);
    let base = b.op(U32, Op::IMulLo, &[r(row), u(cols)]);
    b.op(U32, Op::IAdd, &[r(base), r(col)])
}

/// Lane `l` as `(l / 4, l % 4)`: the `groupID` and `threadID_in_group` of the PTX layouts.
fn group_and_thread(b: &mut Builder) -> (Reg, Reg, Reg) {
    let lane = b.op(U32, Op::Special(Special::LaneId), &[]);
    let g = b.op(U32, Op::ShrU, &[r(lane), u(2)]);
    let t = b.op(U32, Op::And, &[r(lane), u(3)]);
    (lane, g, t)
}

/// `lo | hi << 16`.
fn pack(b: &mut Builder, lo: Reg, hi: Reg) -> Reg {
    let h = b.op(U32, Op::Shl, &[r(hi), u(16)]);
    b.op(U32, Op::Or, &[r(lo), r(h)])
}

/// One warp computes `D[16×8] = A[16×K]·B[K×8] + C` with one `mma` of `shape`, loading each
/// lane's fragments straight from global memory with the PTX layouts. Parameters:
/// `a: [16, K]`, `b: [K, 8]` (row-major, bf16/f16, or f32 for tf32, which the kernel rounds
/// with `cvt.rna.tf32.f32`), `c: [16, 8]` f32, `d: [16, 8]` f32 (written), and for tf32 only
/// `at: [128]` f32 (written): A register `i` of lane `l` after `cvt.rna.tf32` at
/// `at[`[`tf32_cvt_index`]`(l, i)]`, to compare the conversion bit for bit.
pub fn mma_single(shape: MmaShape) -> Kernel {
    let (name, dtype) = match shape {
        MmaShape::M16N8K16Bf16 => ("mma_bf16", DType::Bf16),
        MmaShape::M16N8K16F16 => ("mma_f16", DType::F16),
        MmaShape::M16N8K8Tf32 => ("mma_tf32", DType::F32),
    };
    let mut params = vec![
        ptr("a", dtype, false),
        ptr("b", dtype, false),
        ptr("c", DType::F32, false),
        ptr("d", DType::F32, true),
    ];
    if shape == MmaShape::M16N8K8Tf32 {
        params.push(ptr("at", DType::F32, true));
    }
    let kk = shape.k() as u32;
    let mut k = one_cta(
        name,
        params,
        32,
        &format!(
            "one warp, one mma.{}, fragments loaded from global",
            shape.name()
        ),
    );
    let mut b = Builder::new(&mut k);
    let pa = b.op(U64, Op::Param(0), &[]);
    let pb = b.op(U64, Op::Param(1), &[]);
    let pc = b.op(U64, Op::Param(2), &[]);
    let pd = b.op(U64, Op::Param(3), &[]);
    let (lane, g, t) = group_and_thread(&mut b);
    let mut a_regs = Vec::new();
    let mut b_regs = Vec::new();
    if shape == MmaShape::M16N8K8Tf32 {
        let pat = b.op(U64, Op::Param(4), &[]);
        // a_i at (g + 8·(i & 1), t + 4·(i >> 1)).
        for i in 0..4u32 {
            let idx = index(&mut b, g, 8 * (i & 1), kk, t, 4 * (i >> 1));
            let addr = gaddr(&mut b, pa, idx, 4);
            let x = load(&mut b, F32, Width::B32, Space::Global, addr)[0];
            let v = b.op(U32, Op::CvtRnaTf32F32, &[r(x)]);
            let out = b.op(U32, Op::IMulLo, &[r(lane), u(4)]);
            let out = b.op(U32, Op::IAdd, &[r(out), u(i)]);
            let oaddr = gaddr(&mut b, pat, out, 4);
            store(&mut b, Width::B32, Space::Global, oaddr, &[v]);
            a_regs.push(v);
        }
        // b_i at (t + 4i, g).
        for i in 0..2u32 {
            let idx = index(&mut b, t, 4 * i, 8, g, 0);
            let addr = gaddr(&mut b, pb, idx, 4);
            let x = load(&mut b, F32, Width::B32, Space::Global, addr)[0];
            b_regs.push(b.op(U32, Op::CvtRnaTf32F32, &[r(x)]));
        }
    } else {
        // a_i: (g + 8·(i & 1), 2t + 8·(i >> 1)) and the next column, adjacent in memory.
        let t2 = b.op(U32, Op::Shl, &[r(t), u(1)]);
        for i in 0..4u32 {
            let idx = index(&mut b, g, 8 * (i & 1), kk, t2, 8 * (i >> 1));
            let addr = gaddr(&mut b, pa, idx, 2);
            a_regs.push(load(&mut b, U32, Width::B32, Space::Global, addr)[0]);
        }
        // b_i: (2t + 8i, g) low, (2t + 8i + 1, g) high: two rows apart in memory.
        for i in 0..2u32 {
            let idx = index(&mut b, t2, 8 * i, 8, g, 0);
            let addr = gaddr(&mut b, pb, idx, 2);
            let lo = load(&mut b, U32, Width::B16, Space::Global, addr)[0];
            let idx1 = b.op(U32, Op::IAdd, &[r(idx), u(8)]);
            let addr1 = gaddr(&mut b, pb, idx1, 2);
            let hi = load(&mut b, U32, Width::B16, Space::Global, addr1)[0];
            b_regs.push(pack(&mut b, lo, hi));
        }
    }
    // c_i at (g + 8·(i >> 1), 2t + (i & 1)): pairs adjacent, so two v2 accesses.
    let t2 = b.op(U32, Op::Shl, &[r(t), u(1)]);
    let mut c_regs = Vec::new();
    let mut d_addrs = Vec::new();
    for half in 0..2u32 {
        let idx = index(&mut b, g, 8 * half, 8, t2, 0);
        let addr = gaddr(&mut b, pc, idx, 4);
        c_regs.extend(load(&mut b, F32, Width::V2, Space::Global, addr));
        d_addrs.push(gaddr(&mut b, pd, idx, 4));
    }
    let d_regs: Vec<Reg> = (0..4).map(|_| b.kernel.new_reg(F32)).collect();
    b.push(Stmt::Mma {
        shape,
        d: [d_regs[0], d_regs[1], d_regs[2], d_regs[3]],
        a: a_regs,
        b: b_regs,
        c: [c_regs[0], c_regs[1], c_regs[2], c_regs[3]],
    });
    store(&mut b, Width::V2, Space::Global, d_addrs[0], &d_regs[..2]);
    store(&mut b, Width::V2, Space::Global, d_addrs[1], &d_regs[2..]);
    b.finish();
    k
}

/// Where `mma_single(Tf32)` stores A register `i` of lane `lane`: `at[4·lane + i]`.
pub fn tf32_cvt_index(lane: usize, i: usize) -> usize {
    4 * lane + i
}

/// The row slot that lane `l` points its `ldmatrix` at in [`ldmatrix_all`]: a permutation
/// of 0..32, so addresses are not simply the lane order.
pub fn ldmatrix_slot(lane: usize) -> usize {
    (lane * 5 + 3) % 32
}

/// Registers each lane of [`ldmatrix_all`] stores: x4, x4.trans, x2, x1.trans.
pub const LDMATRIX_REGS: usize = 11;

/// One warp copies `src` (512 bytes: 32 rows of eight 16-bit values, `i32` dtype as raw
/// bits) into shared memory with plain stores, then runs `ldmatrix.x4`, `.x4.trans`, `.x2`
/// and `.x1.trans` with lane `l` pointing at row slot [`ldmatrix_slot`]`(l)` (plus 16 bytes
/// of offset in the IR for the x2, whose rows start one slot later), and stores the 11
/// registers of lane `l` at `out[11·l ..]` (`i32` dtype, raw bits). Parameters:
/// `src: [128]` i32, `out: [352]` i32.
pub fn ldmatrix_all() -> Kernel {
    let mut k = one_cta(
        "ldmatrix_all",
        vec![ptr("src", DType::I32, false), ptr("out", DType::I32, true)],
        32,
        "one warp: shared tile by st.shared, then ldmatrix x4, x4.trans, x2 (+16 bytes), x1.trans",
    );
    // One slot more than the 32 rows, for the x2 read at offset 16.
    let smem = k.new_shared(33 * 16, 16);
    let mut b = Builder::new(&mut k);
    let src = b.op(U64, Op::Param(0), &[]);
    let out = b.op(U64, Op::Param(1), &[]);
    let lane = b.op(U32, Op::Special(Special::LaneId), &[]);
    let base = b.op(U32, Op::SharedAddr(smem), &[]);
    // Each lane copies row `lane` (16 bytes).
    let words = b.op(U32, Op::IMulLo, &[r(lane), u(4)]);
    let ga = gaddr(&mut b, src, words, 4);
    let row = load(&mut b, U32, Width::V4, Space::Global, ga);
    let off = b.op(U32, Op::IMulLo, &[r(lane), u(16)]);
    let sa = b.op(U32, Op::IAdd, &[r(base), r(off)]);
    store(&mut b, Width::V4, Space::Shared, sa, &row);
    // The row slot after it is zeros, so the x2 read at +16 stays inside the buffer.
    let zero = b.op(U32, Op::Mov, &[u(0)]);
    let is0 = b.op(Pred, Op::ICmp(ICmp::Eq), &[r(lane), u(0)]);
    b.open();
    let last = b.op(U32, Op::IAdd, &[r(base), u(32 * 16)]);
    store(
        &mut b,
        Width::V4,
        Space::Shared,
        last,
        &[zero, zero, zero, zero],
    );
    close_if(&mut b, is0);
    b.push(Stmt::Barrier);
    // slot = (5·lane + 3) % 32
    let s5 = b.op(U32, Op::IMulLo, &[r(lane), u(5)]);
    let s5 = b.op(U32, Op::IAdd, &[r(s5), u(3)]);
    let slot = b.op(U32, Op::And, &[r(s5), u(31)]);
    let soff = b.op(U32, Op::IMulLo, &[r(slot), u(16)]);
    let addr = b.op(U32, Op::IAdd, &[r(base), r(soff)]);
    let mut regs = Vec::new();
    for (count, trans, offset) in [(4, false, 0), (4, true, 0), (2, false, 16), (1, true, 0)] {
        let dsts: Vec<Reg> = (0..count).map(|_| b.kernel.new_reg(U32)).collect();
        b.push(Stmt::Ldmatrix {
            dsts: dsts.clone(),
            trans,
            addr,
            offset,
        });
        regs.extend(dsts);
    }
    let o = b.op(U32, Op::IMulLo, &[r(lane), u(LDMATRIX_REGS as u32)]);
    for (j, &v) in regs.iter().enumerate() {
        let idx = b.op(U32, Op::IAdd, &[r(o), u(j as u32)]);
        let a = gaddr(&mut b, out, idx, 4);
        store(&mut b, Width::B32, Space::Global, a, &[v]);
    }
    b.finish();
    k
}

/// `min(avail, 16)` where `avail = total > start ? total - start : 0` (u32 bytes), and the
/// source address clamped to `base` when nothing is read: the zero-fill guard of a tile
/// edge.
fn guarded_src(b: &mut Builder, base: Reg, total: Reg, start: Reg, chunk: u32) -> (Reg, Reg) {
    let inside = b.op(Pred, Op::ICmp(ICmp::GtU), &[r(total), r(start)]);
    let rest = b.op(U32, Op::ISub, &[r(total), r(start)]);
    let rest = b.op(U32, Op::Select, &[r(inside), r(rest), u(0)]);
    let big = b.op(Pred, Op::ICmp(ICmp::GtU), &[r(rest), u(chunk)]);
    let n = b.op(U32, Op::Select, &[r(big), u(chunk), r(rest)]);
    let start_or_0 = b.op(U32, Op::Select, &[r(inside), r(start), u(0)]);
    let wide = b.op(U64, Op::CvtU64U32, &[r(start_or_0)]);
    let addr = b.op(U64, Op::AddU64, &[r(base), r(wide)]);
    (n, addr)
}

/// One warp copies the `n` f32 values of `x` (parameter 2; `x` holds exactly `n`) into two
/// shared tiles of 128 floats with `cp.async`, zero-filling everything past `n`:
/// tile 1 with one `cp.async.cg` of 16 bytes per lane (group 1), tile 2 with a
/// `cp.async.ca` of 8 bytes and two of 4 per lane (group 2). `wait_group 1` completes tile
/// 1, which is stored to `y[0..128]`; then `wait_all` and tile 2 goes to `y[128..256]`.
/// Parameters: `x: [n]` f32, `y: [256]` f32 (written), `n` u32 (at most 128).
pub fn cp_async_tail() -> Kernel {
    let mut k = one_cta(
        "cp_async_tail",
        vec![
            ptr("x", DType::F32, false),
            ptr("y", DType::F32, true),
            scalar("n"),
        ],
        32,
        "one warp: cp.async with zero-fill of the tail, two groups",
    );
    let t1 = k.new_shared(512, 16);
    let t2 = k.new_shared(512, 16);
    let mut b = Builder::new(&mut k);
    let x = b.op(U64, Op::Param(0), &[]);
    let y = b.op(U64, Op::Param(1), &[]);
    let n = b.op(U32, Op::Param(2), &[]);
    let lane = b.op(U32, Op::Special(Special::LaneId), &[]);
    let total = b.op(U32, Op::IMulLo, &[r(n), u(4)]);
    let start = b.op(U32, Op::IMulLo, &[r(lane), u(16)]);
    let s1 = b.op(U32, Op::SharedAddr(t1), &[]);
    let s1 = b.op(U32, Op::IAdd, &[r(s1), r(start)]);
    let s2 = b.op(U32, Op::SharedAddr(t2), &[]);
    let s2 = b.op(U32, Op::IAdd, &[r(s2), r(start)]);
    let (nb, src) = guarded_src(&mut b, x, total, start, 16);
    b.push(Stmt::CpAsync {
        cache: CpAsyncCache::Cg,
        bytes: 16,
        dst: s1,
        dst_offset: 0,
        src,
        src_offset: 0,
        src_bytes: Some(r(nb)),
    });
    b.push(Stmt::CpAsyncCommit);
    for (off, size) in [(0u32, 8u32), (8, 4), (12, 4)] {
        let st = b.op(U32, Op::IAdd, &[r(start), u(off)]);
        let (nb, src) = guarded_src(&mut b, x, total, st, size);
        b.push(Stmt::CpAsync {
            cache: CpAsyncCache::Ca,
            bytes: size,
            dst: s2,
            dst_offset: off as i32,
            src,
            src_offset: 0,
            src_bytes: Some(r(nb)),
        });
    }
    b.push(Stmt::CpAsyncCommit);
    b.push(Stmt::CpAsyncWait(1));
    b.push(Stmt::Barrier);
    let four = b.op(U32, Op::IMulLo, &[r(lane), u(4)]);
    let v = load(&mut b, F32, Width::V4, Space::Shared, s1);
    let ya = gaddr(&mut b, y, four, 4);
    store(&mut b, Width::V4, Space::Global, ya, &v);
    b.push(Stmt::CpAsyncWaitAll);
    b.push(Stmt::Barrier);
    let v = load(&mut b, F32, Width::V4, Space::Shared, s2);
    let i2 = b.op(U32, Op::IAdd, &[r(four), u(128)]);
    let ya = gaddr(&mut b, y, i2, 4);
    store(&mut b, Width::V4, Space::Global, ya, &v);
    b.finish();
    k
}

/// Rows of [`gemm_bf16`]'s A and C.
pub const GEMM_M: u32 = 32;
/// Columns of [`gemm_bf16`]'s B and C.
pub const GEMM_N: u32 = 16;
/// The k-tile of [`gemm_bf16`].
pub const GEMM_BK: u32 = 16;

/// A complete tiled tensor-core GEMM, `C[32×16] = A[32×K]·B[K×16]` in bf16 with f32
/// accumulation, one CTA of four warps (warp `w` owns the 16×8 tile at rows `16·(w / 2)`,
/// columns `8·(w % 2)`). K runs in tiles of 16 through a two-stage shared-memory pipeline:
/// `cp.async.cg` 16-byte chunks (zero-filled past K, so K need only be a multiple of 8)
/// → `commit` / `wait_group 1` → `ldmatrix.x4` (A) and `ldmatrix.x2.trans` (B) → `mma`.
/// Parameters: `a: [32, K]` bf16, `b: [K, 16]` bf16, `c: [32, 16]` f32 (written), `k` u32.
pub fn gemm_bf16() -> Kernel {
    let mut k = one_cta(
        "gemm_bf16",
        vec![
            ptr("a", DType::Bf16, false),
            ptr("b", DType::Bf16, false),
            ptr("c", DType::F32, true),
            scalar("k"),
        ],
        128,
        "tensor-core GEMM 32x16 per CTA, 4 warps of 16x8, BK 16, 2-stage cp.async pipeline; \
         per output: mma k-steps in order, f32 accumulation",
    );
    let a_tile = GEMM_M * GEMM_BK * 2; // bytes per stage
    let b_tile = GEMM_BK * GEMM_N * 2;
    let sa = k.new_shared(2 * a_tile, 128);
    let sb = k.new_shared(2 * b_tile, 128);
    let mut b = Builder::new(&mut k);
    let pa = b.op(U64, Op::Param(0), &[]);
    let pb = b.op(U64, Op::Param(1), &[]);
    let pc = b.op(U64, Op::Param(2), &[]);
    let kk = b.op(U32, Op::Param(3), &[]);
    let tid = b.op(U32, Op::Special(Special::TidX), &[]);
    let lane = b.op(U32, Op::Special(Special::LaneId), &[]);
    let warp = b.op(U32, Op::ShrU, &[r(tid), u(5)]);
    let wm = b.op(U32, Op::ShrU, &[r(warp), u(1)]);
    let wn = b.op(U32, Op::And, &[r(warp), u(1)]);
    let sa0 = b.op(U32, Op::SharedAddr(sa), &[]);
    let sb0 = b.op(U32, Op::SharedAddr(sb), &[]);
    let k_bytes_a = b.op(U32, Op::IMulLo, &[r(kk), u(2)]);
    let tiles = b.op(U32, Op::IAdd, &[r(kk), u(GEMM_BK - 1)]);
    let tiles = b.op(U32, Op::ShrU, &[r(tiles), u(4)]);

    // This thread's copy chunk: threads 0..64 copy A (row t / 2, 8 columns at 8·(t % 2)),
    // threads 64..96 copy B (row u / 2, 8 columns at 8·(u % 2)), the rest none.
    let half = b.op(U32, Op::And, &[r(tid), u(1)]);
    let col8 = b.op(U32, Op::Shl, &[r(half), u(3)]);
    let crow = b.op(U32, Op::ShrU, &[r(tid), u(1)]);
    let crow = b.op(U32, Op::And, &[r(crow), u(31)]);
    let is_a = b.op(Pred, Op::ICmp(ICmp::LtU), &[r(tid), u(64)]);
    let ge64 = b.op(Pred, Op::PNot, &[r(is_a)]);
    let lt96 = b.op(Pred, Op::ICmp(ICmp::LtU), &[r(tid), u(96)]);
    let is_b = b.op(Pred, Op::PAnd, &[r(ge64), r(lt96)]);
    // Destination offset within a stage: row · 32 bytes + half · 16 (both tiles have
    // 16-element, 32-byte rows).
    let drow = b.op(U32, Op::IMulLo, &[r(crow), u(32)]);
    let hoff = b.op(U32, Op::Shl, &[r(half), u(4)]);
    let doff = b.op(U32, Op::IAdd, &[r(drow), r(hoff)]);

    // One 16-byte `cp.async.cg` of `nb` bytes from `src` to this thread's chunk of `stage`
    // in the two-stage buffer at `smem0` of `tile` bytes per stage.
    let copy_chunk = |b: &mut Builder, (nb, src): (Reg, Reg), smem0: Reg, stage: Reg, tile: u32| {
        let so = b.op(U32, Op::IMulLo, &[r(stage), u(tile)]);
        let d = b.op(U32, Op::IAdd, &[r(smem0), r(so)]);
        let d = b.op(U32, Op::IAdd, &[r(d), r(doff)]);
        b.push(Stmt::CpAsync {
            cache: CpAsyncCache::Cg,
            bytes: 16,
            dst: d,
            dst_offset: 0,
            src,
            src_offset: 0,
            src_bytes: Some(r(nb)),
        });
    };
    // Issues the copies of k-tile `kt` into stage `kt & 1`.
    let issue = |b: &mut Builder, kt: Reg| {
        let stage = b.op(U32, Op::And, &[r(kt), u(1)]);
        let k0 = b.op(U32, Op::Shl, &[r(kt), u(4)]);
        // A: element (crow, k0 + col8), guarded by K.
        b.open();
        {
            let kcol = b.op(U32, Op::IAdd, &[r(k0), r(col8)]);
            let rowbase = b.op(U32, Op::IMulLo, &[r(crow), r(k_bytes_a)]);
            let abase = gaddr(b, pa, rowbase, 1);
            let start = b.op(U32, Op::Shl, &[r(kcol), u(1)]);
            let (nb, src) = guarded_src(b, abase, k_bytes_a, start, 16);
            copy_chunk(b, (nb, src), sa0, stage, a_tile);
        }
        close_if(b, is_a);
        // B: element (k0 + crow, col8) (crow is 0..16 for threads 64..96), zero past K.
        b.open();
        {
            let krow = b.op(U32, Op::IAdd, &[r(k0), r(crow)]);
            let idx = b.op(U32, Op::IMulLo, &[r(krow), u(GEMM_N)]);
            let idx = b.op(U32, Op::IAdd, &[r(idx), r(col8)]);
            let start = b.op(U32, Op::Shl, &[r(idx), u(1)]);
            let total = b.op(U32, Op::IMulLo, &[r(kk), u(GEMM_N * 2)]);
            let (nb, src) = guarded_src(b, pb, total, start, 16);
            copy_chunk(b, (nb, src), sb0, stage, b_tile);
        }
        close_if(b, is_b);
    };

    let acc: Vec<Reg> = (0..4)
        .map(|_| b.op(F32, Op::Mov, &[Operand::f32(0.0)]))
        .collect();
    let zero = b.op(U32, Op::Mov, &[u(0)]);
    issue(&mut b, zero);
    b.push(Stmt::CpAsyncCommit);

    // ldmatrix addresses within a stage. A (x4): lane l → row 16·wm + l % 16, column
    // 8·(l / 16). B (x2.trans): lane l → k row l % 16, column 8·wn.
    let l16 = b.op(U32, Op::And, &[r(lane), u(15)]);
    let lhi = b.op(U32, Op::ShrU, &[r(lane), u(4)]);
    let arow = b.op(U32, Op::Shl, &[r(wm), u(4)]);
    let arow = b.op(U32, Op::IAdd, &[r(arow), r(l16)]);
    let aoff = b.op(U32, Op::IMulLo, &[r(arow), u(32)]);
    let acol = b.op(U32, Op::Shl, &[r(lhi), u(4)]);
    let aoff = b.op(U32, Op::IAdd, &[r(aoff), r(acol)]);
    let boff = b.op(U32, Op::IMulLo, &[r(l16), u(32)]);
    let bcol = b.op(U32, Op::Shl, &[r(wn), u(4)]);
    let boff = b.op(U32, Op::IAdd, &[r(boff), r(bcol)]);

    let kt = b.kernel.new_reg(U32);
    b.open();
    {
        let next = b.op(U32, Op::IAdd, &[r(kt), u(1)]);
        let more = b.op(Pred, Op::ICmp(ICmp::LtU), &[r(next), r(tiles)]);
        b.open();
        issue(&mut b, next);
        close_if(&mut b, more);
        // Always commit (an empty group past the last tile) so that `wait_group 1` always
        // means "all but the newest": tile kt is complete.
        b.push(Stmt::CpAsyncCommit);
        b.push(Stmt::CpAsyncWait(1));
        b.push(Stmt::Barrier);
        let stage = b.op(U32, Op::And, &[r(kt), u(1)]);
        let so = b.op(U32, Op::IMulLo, &[r(stage), u(a_tile)]);
        let a_addr = b.op(U32, Op::IAdd, &[r(sa0), r(so)]);
        let a_addr = b.op(U32, Op::IAdd, &[r(a_addr), r(aoff)]);
        let so = b.op(U32, Op::IMulLo, &[r(stage), u(b_tile)]);
        let b_addr = b.op(U32, Op::IAdd, &[r(sb0), r(so)]);
        let b_addr = b.op(U32, Op::IAdd, &[r(b_addr), r(boff)]);
        let af: Vec<Reg> = (0..4).map(|_| b.kernel.new_reg(U32)).collect();
        b.push(Stmt::Ldmatrix {
            dsts: af.clone(),
            trans: false,
            addr: a_addr,
            offset: 0,
        });
        let bf: Vec<Reg> = (0..2).map(|_| b.kernel.new_reg(U32)).collect();
        b.push(Stmt::Ldmatrix {
            dsts: bf.clone(),
            trans: true,
            addr: b_addr,
            offset: 0,
        });
        let acc4 = [acc[0], acc[1], acc[2], acc[3]];
        b.push(Stmt::Mma {
            shape: MmaShape::M16N8K16Bf16,
            d: acc4,
            a: af,
            b: bf,
            c: acc4,
        });
        // The stage read here is overwritten by the copies issued next iteration.
        b.push(Stmt::Barrier);
    }
    close_for(&mut b, kt, u(0), r(tiles), u(1));

    // Epilogue: c_i at (16·wm + g + 8·(i >> 1), 8·wn + 2t + (i & 1)).
    let g = b.op(U32, Op::ShrU, &[r(lane), u(2)]);
    let t = b.op(U32, Op::And, &[r(lane), u(3)]);
    let row = b.op(U32, Op::Shl, &[r(wm), u(4)]);
    let row = b.op(U32, Op::IAdd, &[r(row), r(g)]);
    let col = b.op(U32, Op::Shl, &[r(wn), u(3)]);
    let t2 = b.op(U32, Op::Shl, &[r(t), u(1)]);
    let col = b.op(U32, Op::IAdd, &[r(col), r(t2)]);
    for half in 0..2u32 {
        let idx = index(&mut b, row, 8 * half, GEMM_N, col, 0);
        let addr = gaddr(&mut b, pc, idx, 4);
        let h = half as usize;
        store(
            &mut b,
            Width::V2,
            Space::Global,
            addr,
            &acc[2 * h..2 * h + 2],
        );
    }
    b.finish();
    k
}

/// Every kernel of this file.
pub fn all() -> Vec<Kernel> {
    vec![
        mma_single(MmaShape::M16N8K16Bf16),
        mma_single(MmaShape::M16N8K16F16),
        mma_single(MmaShape::M16N8K8Tf32),
        ldmatrix_all(),
        cp_async_tail(),
        gemm_bf16(),
    ]
}
