//! The warpgroup main loop of the tensor-core tile (`TileConfig::Mma` with `wgmma`): the
//! ring of `ring/` (stages of 128-byte K-major rows in the 128-byte swizzle, filled by the
//! `cp.async` loader) read by `wgmma.mma_async` through shared-memory matrix descriptors
//! instead of `ldmatrix` + `mma.sync`. What comes before (the CTA's tile, the copy plans)
//! and after (the epilogues) is `mma.rs`'s.
//!
//! The layouts: a stage of A is `bm` rows of 128 bytes, chunk `c` of row `r` at chunk
//! `c ^ (r mod 8)` ([`StageLayout`](super::ring::StageLayout)'s rows swizzle, which for
//! 128-byte rows is wgmma's 128-byte swizzle: `layout.rs`'s tests check it), so the
//! descriptor of warpgroup `g`'s 64 rows starts at `stage + 64g · 128`, 8-row groups 1024
//! bytes apart (the stride-dimension offset); one k step of 16 moves the start by 32
//! bytes inside the span (PTX ISA §9.7.15.5.1.2, "Shared Memory Matrix Layout"). B's stage
//! is `bn` such rows, or, for a 16-bit B stored `[K, N]` (`x @ w`, the backward's
//! `dy · W`), its 64 K rows of `bn` elements in column panels of 128 bytes ([`wgmma_stage`]),
//! read MN-major ([`WgmmaB`]: `imm-trans-b` 1; panels `64 · 128` bytes apart — the
//! leading-dimension offset —, 8-row groups 1024 apart, a k step `16 · 128` bytes).
//!
//! The pipeline, with `P = stages - 2` slices in flight ahead of the one multiplied and
//! one wgmma group kept in flight behind it. Slice `kt`:
//!
//! 1. `cp.async.wait_group P - 1` (slice `kt` has landed, for this thread's copies),
//!    `fence.proxy.async` (its generic-proxy writes made visible to wgmma's async-proxy
//!    reads), `bar.sync` (everyone's copies; and every warpgroup has waited for slice
//!    `kt - 2`'s wgmma group, step 3 of the iteration before);
//! 2. the copies of slice `kt + P` into the stage slice `kt - 2` was read from, committed;
//! 3. `wgmma.fence`, one wgmma per 16 of K, `commit_group`, `wait_group 1` (slice `kt - 1`'s
//!    group done; slice `kt`'s runs on while the next iteration waits for its copies).
//!
//! After the last slice, `wait_group 0` and `cp.async.wait_all`, and the epilogue reuses
//! the ring. Each output element is one accumulation over k in order, slice after slice,
//! in the tensor core's order within an instruction — as `mma.sync`'s, by tolerance.

use super::ring::cp_async::CopyPlan;
use super::ring::{Ring, StageLayout};
use super::{Gen, Ix, LowerError};
use tessel_ir::kernel::{
    MmaShape, Op, Operand, RegType, SmemDesc, Stmt, WgmmaA, WgmmaInput, WgmmaMajor, WgmmaShape,
    WgmmaSwizzle,
};
use tessel_ir::Reg;

/// The fixed bits of the shared-memory descriptors of a stage in `ring`'s layout
/// ([`StageLayout::wgmma_k_major`](super::ring::StageLayout::wgmma_k_major): the 128-byte
/// swizzle, its 8-row group stride; [`SmemDesc::fixed_bits`]), for A's and B's stages alike
/// (they share the layout's row width).
pub(super) fn wgmma_fixed_bits(ring: &Ring) -> u64 {
    let k_major = ring
        .layout
        .wgmma_k_major()
        .filter(|k| k.swizzle_bytes == WgmmaSwizzle::B128.span())
        .expect("a 128-byte swizzled K-major stage");
    SmemDesc {
        start: 0,
        lbo: 16,
        sbo: k_major.stride_byte_offset,
        swizzle: WgmmaSwizzle::B128,
    }
    .fixed_bits()
}

/// The stage layout of a wgmma tile's operand with `outer` rows or columns (M or N: `bm`,
/// `bn`) and K slices of `bk` elements of `esz` bytes (one 128-byte span): K-major
/// (`k_contiguous`), `outer` rows of 128 bytes ([`StageLayout::rows`], whose 128-byte rows
/// are wgmma's 128-byte swizzle); MN-major, `bk` K rows in column panels of 128 bytes
/// ([`StageLayout::panels_128`]).
pub(super) fn wgmma_stage(k_contiguous: bool, outer: u32, bk: u32, esz: u32) -> StageLayout {
    if k_contiguous {
        StageLayout::rows(outer, bk, esz)
    } else {
        StageLayout::panels_128(bk, outer, esz)
    }
}

/// How a wgmma main loop reads its B operand from a ring stage: the descriptor's fixed
/// bits ([`SmemDesc::fixed_bits`]), how far one k step of 16 (8 for TF32) moves the
/// descriptor's start, in its units of 16 bytes, and the major-ness the instruction
/// names.
#[derive(Copy, Clone, Debug)]
pub(super) struct WgmmaB {
    pub(super) fixed: u64,
    pub(super) k_step: u32,
    pub(super) major: WgmmaMajor,
}

/// B's [`WgmmaB`] for a stage of `ring` read `major`. K-major: the same descriptor bits as
/// A's ([`wgmma_fixed_bits`]), 32 bytes a k step inside the 128-byte span. MN-major (a
/// `[K, N]` B stored N-contiguous, 16-bit: `imm-trans-b` 1, PTX ISA §9.7.15.5.1.2; the
/// stage in 128-byte panels, [`wgmma_stage`]): the leading-dimension offset the bytes
/// between panels along N, the stride-dimension offset 1024 (8 K rows of 128 bytes), and a
/// k step of 16 K rows moves the start `16 · 128` bytes, 128 units
/// ([`StageLayout::wgmma_mn_major`](super::ring::StageLayout::wgmma_mn_major)).
pub(super) fn wgmma_b(ring: &Ring, major: WgmmaMajor) -> WgmmaB {
    match major {
        WgmmaMajor::K => WgmmaB {
            fixed: wgmma_fixed_bits(ring),
            k_step: 2,
            major,
        },
        WgmmaMajor::Mn => {
            let mn = ring
                .layout
                .wgmma_mn_major()
                .filter(|m| m.swizzle_bytes == WgmmaSwizzle::B128.span())
                .expect("an MN-major stage in 128-byte panels");
            WgmmaB {
                fixed: SmemDesc {
                    start: 0,
                    lbo: mn.leading_byte_offset,
                    sbo: mn.stride_byte_offset,
                    swizzle: WgmmaSwizzle::B128,
                }
                .fixed_bits(),
                k_step: 16 * mn.k_row_bytes / 16,
                major,
            }
        }
    }
}

/// The major-ness wgmma reads an operand in: K-major where its stored tensor is contiguous
/// along K, else MN-major.
pub(super) fn major_of(k_contiguous: bool) -> WgmmaMajor {
    if k_contiguous {
        WgmmaMajor::K
    } else {
        WgmmaMajor::Mn
    }
}

impl Gen<'_> {
    /// The main loop of a wgmma tile over K range `k_start .. k_end` in slices of `bk`
    /// (64 16-bit elements, one 128-byte span), through `stages` ring stages of `ra`/`rb`
    /// filled by the copy plans `ca`/`cb`. The CTA's warps are `bm / 64` warpgroups, each
    /// computing 64 rows × `bn` with `m64n{bn}k16`; returns each thread's accumulators as
    /// the `bn / 8` fragments of its warp's `16 × bn` rows (register `4j + i` of the
    /// wgmma is element `i` of fragment `j`, [`WgmmaShape::d_pos`]).
    pub(super) fn wgmma_slices(
        &mut self,
        (ra, rb, b_major): (&Ring, &Ring, WgmmaMajor),
        (ca, cb): (&CopyPlan, &CopyPlan),
        (stages, bk, bn): (u32, u32, u32),
        (k_start, k_end, k_whole): (Operand, Operand, bool),
        tid: Ix,
        shape: MmaShape,
    ) -> Result<Vec<[Reg; 4]>, LowerError> {
        let input = match shape {
            MmaShape::M16N8K16Bf16 => WgmmaInput::Bf16,
            MmaShape::M16N8K16F16 => WgmmaInput::F16,
            MmaShape::M16N8K8Tf32 => WgmmaInput::Tf32,
        };
        let wshape = WgmmaShape { n: bn, input };
        let span = WgmmaSwizzle::B128.span();
        debug_assert_eq!(bk * input.bytes(), span, "one swizzle span of K per slice");
        let ahead = stages - 2;
        let (d, fixed, a_rows) = self.wgmma_setup(ra, tid, wshape);
        let b = wgmma_b(rb, b_major);

        // Prologue: slices 0 .. P - 1 in flight.
        let (rd, wr) =
            self.ring_prologue((ra, rb), (ca, cb), ahead, bk, (k_start, k_end, k_whole))?;

        let kt = self.b.kernel.new_reg(RegType::U32);
        self.open();
        self.b.push(Stmt::CpAsyncWait(ahead - 1));
        self.b.push(Stmt::FenceProxyAsync);
        self.b.push(Stmt::Barrier);
        let k_ahead = self.iadd(Ix::R(kt), Ix::C((ahead * bk) as u64));
        let wra = self.imul_c(Ix::R(wr), ra.stage_bytes() as u64);
        let wrb = self.imul_c(Ix::R(wr), rb.stage_bytes() as u64);
        self.issue_copies(ca, ra, wra, k_ahead, k_end, k_whole)?;
        self.issue_copies(cb, rb, wrb, k_ahead, k_end, k_whole)?;
        self.b.push(Stmt::CpAsyncCommit);
        // The descriptors' start fields (address / 16) of this stage; a k step of 32
        // bytes adds 2.
        let rda = self.imul_c(Ix::R(rd), ra.stage_bytes() as u64);
        let rda = self.iadd(rda, a_rows);
        let rdb = self.imul_c(Ix::R(rd), rb.stage_bytes() as u64);
        let start_a = self.shared_addr(ra.base, rda);
        let start_b = self.shared_addr(rb.base, rdb);
        self.wgmma_slice(wshape, &d, (start_a, start_b), (fixed, b));
        self.b.push(Stmt::WgmmaCommit);
        self.b.push(Stmt::WgmmaWait(1));
        self.advance_stages(&[rd, wr], stages);
        self.close_for(kt, k_start, k_end, Operand::U32(bk));
        self.b.push(Stmt::WgmmaWait(0));
        // Copies past the end (zero-filled, never read) must land before the ring is
        // reused and the CTA exits.
        self.b.push(Stmt::CpAsyncWaitAll);
        Ok(d.chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect())
    }

    /// What every wgmma main loop starts with: the thread's accumulators (`wshape`'s,
    /// zeroed), the fixed bits of the operands' descriptors from the stage layout of
    /// `ring_a` ([`StageLayout::wgmma_k_major`](super::ring::StageLayout::wgmma_k_major):
    /// the 128-byte swizzle, its 8-row group stride; B's stages share the layout's row
    /// width), and the byte offset in a stage of this warpgroup's first row of A (64 rows
    /// per warpgroup of the threads numbered from `ctid`).
    pub(super) fn wgmma_setup(
        &mut self,
        ring_a: &Ring,
        ctid: Ix,
        wshape: WgmmaShape,
    ) -> (Vec<Reg>, u64, Ix) {
        let d: Vec<Reg> = (0..wshape.d_regs())
            .map(|_| {
                let r = self.b.kernel.new_reg(RegType::F32);
                self.b.assign(r, Op::Mov, &[Operand::f32(0.0)]);
                r
            })
            .collect();
        let fixed = wgmma_fixed_bits(ring_a);
        let wg = self.idiv_c(ctid, 128);
        let a_rows = self.imul_c(wg, 64 * ring_a.layout.row_pitch() as u64);
        (d, fixed, a_rows)
    }

    /// One slice's wgmma of the accumulators `d`: `wgmma.fence`, then one `wshape` wgmma
    /// per 16 of K of the 128-byte span, A's 64 rows at shared address `start_a`
    /// (128-byte-swizzled K-major, a 1024-aligned pattern) through descriptors of
    /// `fixed_a` bits ([`SmemDesc::fixed_bits`]) whose start field (address / 16) moves by
    /// 2 per k step of 32 bytes, and B's stage at `start_b` read as `b` says. Not
    /// committed.
    pub(super) fn wgmma_slice(
        &mut self,
        wshape: WgmmaShape,
        d: &[Reg],
        (start_a, start_b): (Reg, Reg),
        (fixed_a, b): (u64, WgmmaB),
    ) {
        self.wgmma_slice_blocks(wshape, &[(d, start_a)], start_b, (fixed_a, b));
    }

    /// [`Gen::wgmma_slice`] for several blocks of 64 rows of A against the same B, each
    /// block `(d, start_a)` its accumulators and its rows' shared address: one
    /// `wgmma.fence`, then per k step one wgmma per block, in block order (each element
    /// still sums its k in order). Not committed.
    pub(super) fn wgmma_slice_blocks(
        &mut self,
        wshape: WgmmaShape,
        blocks: &[(&[Reg], Reg)],
        start_b: Reg,
        (fixed_a, b): (u64, WgmmaB),
    ) {
        let span = WgmmaSwizzle::B128.span();
        let field = |g: &mut Self, addr: Reg| {
            g.b.op(RegType::U32, Op::ShrU, &[addr.into(), Operand::U32(4)])
        };
        let fas: Vec<Reg> = blocks.iter().map(|&(_, a)| field(self, a)).collect();
        let fb = field(self, start_b);
        self.b.push(Stmt::WgmmaFence);
        for step in 0..span / 32 {
            let desc = |g: &mut Self, f: Reg, (units, fixed): (u32, u64)| {
                let f = if step == 0 {
                    f
                } else {
                    g.b.op(
                        RegType::U32,
                        Op::IAdd,
                        &[f.into(), Operand::U32(units * step)],
                    )
                };
                let wide = g.b.op(RegType::U64, Op::CvtU64U32, &[f.into()]);
                g.b.op(
                    RegType::U64,
                    Op::AddU64,
                    &[wide.into(), Operand::U64(fixed)],
                )
            };
            let mut b_desc = None;
            for (&(d, _), &fa) in blocks.iter().zip(&fas) {
                let a_desc = desc(self, fa, (2, fixed_a));
                let b_desc = match b_desc {
                    Some(r) => r,
                    None => *b_desc.insert(desc(self, fb, (b.k_step, b.fixed))),
                };
                self.b.push(Stmt::Wgmma {
                    shape: wshape,
                    d: d.to_vec(),
                    a: WgmmaA::Desc(a_desc),
                    b_desc,
                    b_major: b.major,
                });
            }
        }
    }
}
